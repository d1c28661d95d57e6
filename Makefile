# The guide's two everyday commands: `make serve` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of PyTorch; a CUDA machine runs `make verify-gpu` with its own (GPU_PYTHON).
TORCH ?= torch==2.13.0
VENV_FLAGS ?=
PIP_FLAGS ?= -q --disable-pip-version-check

.PHONY: setup browsers upstream serve test test-page site site-zensical record gpu-wheels gpu-setup verify-gpu bench bench-quick build-bench clean mutate mutate-prepare mutate-report

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(if $(TORCH),$(PY) -m pip install $(PIP_FLAGS) "$(TORCH)")
	$(PY) -m pip install $(PIP_FLAGS) -r requirements.txt -c constraints.txt
	$(PY) -m pip install $(PIP_FLAGS) --no-deps -e .
	$(PY) -m guide setup
	touch $@

# Debian's Chromium and the Noto fonts (Latin, CJK, Devanagari) for the browser tests;
# installed when missing, which needs root.
BROWSER_PACKAGES := chromium chromium-driver fonts-noto-core fonts-noto-cjk
browsers:
	@dpkg -s $(BROWSER_PACKAGES) >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(BROWSER_PACKAGES); \
	  else \
	    echo "error: the browser tests need Debian's $(BROWSER_PACKAGES). Fix: sudo apt-get install $(BROWSER_PACKAGES)"; \
	    exit 1; \
	  fi; }

# Released wheels read as oracles, never installed: SimpleTuner's (the configuration tests) and
# flash-attn-4's (the GPUs the FLASH backend serves).
SIMPLETUNER_WHEEL := build/upstream/simpletuner-4.10.1-py3-none-any.whl
FLASH_ATTN_4_WHEEL := build/upstream/flash_attn_4-4.0.0b36-py3-none-any.whl
upstream: $(SIMPLETUNER_WHEEL) $(FLASH_ATTN_4_WHEEL)
$(SIMPLETUNER_WHEEL):
	$(PYTHON) -m pip download $(PIP_FLAGS) --no-deps --only-binary=:all: --python-version 3.12 \
	  --dest build/upstream simpletuner==4.10.1
$(FLASH_ATTN_4_WHEEL):
	$(PYTHON) -m pip download $(PIP_FLAGS) --no-deps --only-binary=:all: --python-version 3.12 \
	  --dest build/upstream flash-attn-4==4.0.0b36

# The build prints only what an author acts on: the guide's plugin keeps MkDocs' warnings and errors on
# the console (INFO goes; --quiet would also hide the warnings that --strict counts, and pass), and
# NO_MKDOCS_2_WARNING=1 drops the theme's banner; serve keeps its INFO lines (the address, each rebuild).
SITE ?= site
serve: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve -a 127.0.0.1:8000

# The builder of `make site`: mkdocs, the default, or zensical (`make site BUILDER=zensical`, the same as
# `make site-zensical` but into $(SITE)); to make Zensical the default, change this line.
BUILDER ?= mkdocs
site: setup
ifeq ($(BUILDER),mkdocs)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict -d $(SITE)
else ifeq ($(BUILDER),zensical)
	$(PY) -m guide.site zensical $(SITE)
else
	$(error BUILDER=$(BUILDER) is no builder of this site. Fix: make site BUILDER=mkdocs or BUILDER=zensical)
endif

# The same site built with Zensical, one build per language from the pages guide/site/stage.py finishes.
site-zensical: setup
	$(PY) -m guide.site zensical $(SITE)-zensical

test: setup browsers upstream
	$(PY) -m pytest

# One page's loop for its author: the translations' check, the page's own tests, its program and
# notebook, and its built code in every language (`make test-page PAGE=masks`); `make test` still runs everything.
test-page: setup
	@test -n "$(PAGE)" -a -f "docs/en/$(PAGE).md" || { echo "error: no page docs/en/$(PAGE).md. Fix: make \
	test-page PAGE=NAME, NAME one of: $$(ls docs/en | sed -n 's/\.md$$//p' | paste -sd ' ')" >&2; exit 1; }
	$(PY) -m guide i18n check
	$(PY) -m pytest -q -n 2 $(wildcard tests/test_$(PAGE).py) tests/test_pages.py -k "$(PAGE).md or not test_pages"

# Re-record the outputs the pages show from CPU runs (records/cpu.json).
record: setup browsers upstream
	$(PY) -m pytest --record cpu

# The GPU tier's packages (requirements-gpu.txt) for a CUDA machine: `make gpu-setup` installs them into
# GPU_PYTHON from the index, or from GPU_WHEELS where that folder holds wheels, which `make gpu-wheels`
# fills on a machine with a network, for GPU_PYTHON_VERSION on x86-64 Linux (with the upstream wheels the GPU
# tier reads, build/upstream/: `make verify-gpu` downloads nothing).
GPU_WHEELS ?= build/gpu-wheels
GPU_PYTHON_VERSION ?= 3.12
gpu-wheels: upstream
	$(PYTHON) -m pip download $(PIP_FLAGS) --no-deps --only-binary=:all: --implementation cp \
	  --python-version $(GPU_PYTHON_VERSION) --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 --platform any --dest $(GPU_WHEELS) -r requirements-gpu.txt
gpu-setup:
	$(GPU_PYTHON) -m pip install $(PIP_FLAGS) $(if $(wildcard $(GPU_WHEELS)/*.whl),--no-index --find-links $(GPU_WHEELS)) \
	  -r requirements-gpu.txt

# On a CUDA machine, with the Python that has its CUDA build of torch (and pytest, pytest-xdist,
# diffusers, flash-attn-4):
# run the GPU tier (the GPU tests, and the other tests of claims that have one) and record each
# test's outcome and outputs in records/<gpu>.json. The tests run on GPU_WORKERS pytest-xdist
# workers, longest first (guide/pytest_plugin.py, longest_first); the part of a test in
# `with alone():` (it measures time or memory, or exhausts the GPU's memory) runs when no other test
# runs; such tests come first, so that their compiles run beside the others, and that part waits for
# the others to end. pytest checks the machine first (guide setup --gpu). The workers are the
# parallelism: each compiles in its own process (TORCHINDUCTOR_COMPILE_THREADS=1, no pool of compile
# processes per worker, nor in the pages' programs), and flash-attn-4 keeps its compiled kernels on
# disk (/tmp/<user>/flash_attention_cute_dsl_cache), where the tests and pages that run the same
# FLASH kernels find them, as Inductor's and Triton's caches already are.
GPU_PYTHON ?= python3
GPU_WORKERS ?= 16
verify-gpu:
	@missing="error: %s is missing, and the GPU tier downloads nothing. Fix: run 'make upstream' on a machine"; \
	  for wheel in $(SIMPLETUNER_WHEEL) $(FLASH_ATTN_4_WHEEL); do test -f $$wheel || { \
	  printf "$$missing with a network and copy build/upstream/ to this checkout\n" $$wheel >&2; exit 1; }; done
	TORCHINDUCTOR_COMPILE_THREADS=1 FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 \
	  $(GPU_PYTHON) -m pytest --gpu-tier --record auto -p no:cacheprovider -n $(GPU_WORKERS) --maxschedchunk 2

# On a CUDA machine: the benchmark suite (records/bench/<gpu>.json); bench-quick: one shape per group.
bench:
	$(GPU_PYTHON) -m guide setup --gpu
	$(GPU_PYTHON) -m guide bench record

bench-quick:
	$(GPU_PYTHON) -m guide setup --gpu
	$(GPU_PYTHON) -m guide bench record --quick

build-bench: setup
	$(PY) -m guide build-bench

clean:
	rm -rf $(VENV) site

# Mutation testing with cosmic-ray, not part of `make test`: cosmic-ray makes the mutants of each module in
# MUTATE (configs: mutation/<module>.toml; the functions a config's [guide] gpu-only list names need a GPU,
# and their lines are not mutated), and tests/test_<module>.py judges each. A mutant first meets only the
# tests that ran its lines (coverage, `python -m guide.mutate cover`), then, if it survives them, the whole
# file. MUTATE_JOBS mutants run at once, each in its own copy of the checkout (build/mutation/workers/).
# `make mutate MUTATE=masks MUTATE_SAMPLE=0.5` runs one module on a seeded half of its mutants.
# The steps apart: mutate-prepare (the mutants, exported to build/mutation/<module>.jobs.json, and the
# coverage), `python -m guide.mutate run MODULE... --jobs N` (standard library and the tests' packages only:
# it runs wherever the tests run, and resumes from build/mutation/results.jsonl), mutate-report.
MUTATE ?= backend_config doctor masks troubleshooting kernels dispatch decoding paged quickstart accuracy flash gallery maskcheck merging huggingface biases blockmask kernel_options unsupported head_dims compiled
MUTATE_SAMPLE ?= 1
MUTATE_JOBS ?= 2
COSMIC_RAY ?= cosmic-ray==8.7.0
mutate: mutate-prepare
	$(PY) -m guide.mutate run $(MUTATE) --jobs $(MUTATE_JOBS)
	@$(MAKE) -s mutate-report

mutate-prepare: setup
	$(PY) -m pip install $(PIP_FLAGS) "$(COSMIC_RAY)"
	@mkdir -p build/mutation
	@rm -f build/mutation/results.jsonl
	@set -e; for m in $(MUTATE); do \
	  db=build/mutation/$$m.sqlite; cfg=build/mutation/$$m.toml; \
	  $(PY) -m guide.mutate config mutation/$$m.toml $$cfg; \
	  $(VENV)/bin/cosmic-ray init $$cfg $$db --force; \
	  $(VENV)/bin/cr-filter-operators $$db $$cfg; \
	  if grep -q '^\[cosmic-ray.filters.line-filter' $$cfg; then \
	    $(VENV)/bin/cr-filter-lines --config $$cfg $$db; fi; \
	  $(PY) -m guide.mutate sample $$db $(MUTATE_SAMPLE); \
	  $(PY) -m guide.mutate export $$m; \
	done
	$(PY) -m guide.mutate cover $(MUTATE) --jobs $(MUTATE_JOBS)

mutate-report:
	@set -e; for m in $(MUTATE); do \
	  $(PY) -m guide.mutate import $$m; \
	  $(VENV)/bin/cr-report --surviving-only --show-diff build/mutation/$$m.sqlite > build/mutation/$$m.txt; \
	done
