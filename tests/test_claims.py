"""The claims registry: complete, consistent in every language, and verified by current records."""
import json
from pathlib import Path

import pytest

from guide import claims, project, records
from tests.helpers import ROOT


def test_registry_texts_and_pages_agree():
    problems = claims.check()
    assert not problems, "\n".join(problems)


def test_every_claim_is_verified_and_current(records_in_use):
    """The gate: no claim fails anywhere or is stale on the CPU, and every claim passed somewhere
    or waits for a GPU run (its badge then says so); the GPU runs that are due are reported."""
    import warnings

    problems, due = claims.gate(records.all_records())
    assert not problems, "\n".join(problems)
    if due:
        warnings.warn(f"{len(due)} claims are not verified for the current code on a GPU: " + "; ".join(due))


def test_the_gate_fails_on_failures_and_cpu_staleness_and_reports_gpu_runs_due(monkeypatch):
    A = "tests/test_doctor.py::test_doctor_on_this_machine"
    good = {"outcome": "passed", "gpu": False, "source_sha256": records.source_hash(A)}
    old = {**good, "source_sha256": "0" * 16}
    monkeypatch.setattr(claims, "registry", lambda: [{"id": "x", "tests": [A]}])

    def run(cpu, gpu):
        return claims.gate({"cpu": {"environment": {}, "tests": cpu, "outputs": {}},
                            "h100": {"environment": {"compute_capability": "9.0"}, "tests": gpu, "outputs": {}}})

    assert run({A: good}, {A: good}) == ([], [])
    assert run({}, {A: old}) == ([], ["claim 'x': re-run `make verify-gpu` on h100"])
    assert run({A: old}, {A: good})[0] == ["claim 'x' is stale on the CPU: {'cpu': 'stale', 'h100': 'passed'}. Fix: make record"]
    assert run({A: good}, {A: {**good, "outcome": "failed"}})[0][0].startswith("claim 'x' fails")
    assert run({}, {})[0][0].startswith("claim 'x' is verified nowhere")
    assert run({A: {**good, "outcome": "skipped"}}, {})[0][0].startswith("claim 'x' is verified nowhere")


def test_every_seed_statement_has_a_verdict():
    seeds = [c for c in claims.registry() if c.get("seed")]
    assert {c["seed"] for c in seeds} == set(claims.SEEDS)
    for lang in project.languages():
        said = " ".join(claims.texts(lang)[c["id"]]["said"] for c in seeds)
        # The statements the guide corrects are quoted from the older guide itself.
        assert "build_flex_attention_kernels" in said and "~/.cache/torch/kernels" in said, lang


@pytest.fixture
def copy_of_snippets(checkout):
    """snippets/ of a copy of the checkout, which a test may change."""
    return checkout / "snippets"


TEST = "tests/test_troubleshooting.py::test_no_backward_on_cpu"


def current_record():
    """A record made now: one test and its output, with the hashes of the current snippets."""
    return {"environment": {"name": "cpu"},
            "tests": {TEST: {"outcome": "passed", "gpu": False, "source_sha256": records.source_hash(TEST)}},
            "outputs": {"troubleshooting.cpu_backward": {
                "text": "NotImplementedError: ...", "test": TEST,
                "source_sha256": records.source_hash(TEST)}}}


def test_a_changed_snippet_makes_its_entries_and_claims_stale(copy_of_snippets):
    record = current_record()
    claim = {"id": "cpu-forward-only", "tests": [TEST]}
    assert not records.stale(record) and claims.verdict(claim, record["tests"]) == "passed"

    path = copy_of_snippets / "troubleshooting.py"
    path.write_text(path.read_text() + "\n# changed\n")

    assert sorted(records.stale(record)) == [TEST, "troubleshooting.cpu_backward"]
    assert claims.verdict(claim, record["tests"]) == "stale"
    assert claims.overall({"cpu": "stale", "nvidia-h100": "passed"}) == "stale"


def test_a_changed_shell_snippet_counts_too(copy_of_snippets):
    record = current_record()
    assert records.topic_of(TEST) == "troubleshooting"
    kernels_entry = "kernels.where"
    before = records.source_hash(kernels_entry)
    path = copy_of_snippets / "shell" / "kernels.sh"
    path.write_text(path.read_text() + "\n# changed\n")
    assert records.source_hash(kernels_entry) != before
    assert not records.stale(record), "another topic's change leaves this record current"


def test_a_topic_depends_on_the_snippet_modules_its_code_imports(copy_of_snippets):
    """The oracle: the standard library's ModuleFinder, which reads each module's bytecode for the imports it
    makes (functions' own imports too). troubleshooting.py imports decoding.py: a change there stales it."""
    from modulefinder import ModuleFinder

    checkout = copy_of_snippets.parent
    for path in sorted(copy_of_snippets.glob("[!_]*.py")):
        finder = ModuleFinder(path=[str(checkout)])
        finder.run_script(str(path))
        imported = {Path(m.__file__).relative_to(checkout).as_posix() for name, m in finder.modules.items()
                    if name.startswith("snippets") and m.__file__} - {"snippets/__init__.py"}
        assert imported <= {f.relative_to(checkout).as_posix() for f in records.sources(path.stem)}, path.stem
    record = current_record()
    path = copy_of_snippets / "decoding.py"
    path.write_text(path.read_text() + "\n# changed\n")
    assert sorted(records.stale(record)) == [TEST, "troubleshooting.cpu_backward"]


def test_a_changed_snippet_is_flagged_on_the_page(copy_of_snippets):
    from guide.site import observed, snapshot

    record = current_record()
    (copy_of_snippets.parent / "records/cpu.json").write_text(json.dumps(record))
    for other in copy_of_snippets.parent.glob("records/nvidia-*.json"):
        other.unlink()
    before = snapshot.load(copy_of_snippets.parent)
    assert "Not verified" not in observed.render(before, "troubleshooting.cpu_backward", "en")
    path = copy_of_snippets / "troubleshooting.py"
    path.write_text(path.read_text() + "\n# changed\n")
    after = snapshot.load(copy_of_snippets.parent)
    assert after is not before, "a changed snippet makes a new snapshot"
    assert "Not verified for the current code" in observed.render(after, "troubleshooting.cpu_backward", "en")
    assert "尚未针对当前代码验证" in observed.render(after, "troubleshooting.cpu_backward", "zh")
    assert snapshot.load(copy_of_snippets.parent) is after, "unchanged files: the same snapshot"


def entry(nodeid, outcome="passed"):
    """A fabricated record entry for a test, current for today's sources."""
    return {"outcome": outcome, "gpu": False, "source_sha256": records.source_hash(nodeid)}


A = "tests/test_doctor.py::test_doctor_on_this_machine"
B = "tests/test_doctor.py::test_lang_gives_the_fix_and_link_in_that_language"


def test_failed_skipped_and_missing_outcomes():
    claim = {"id": "x", "tests": [A]}
    assert claims.verdict(claim, {A: entry(A)}) == "passed"
    assert claims.verdict(claim, {}) == "not-run"
    for outcome, verdict in (("failed", "failed"), ("error", "failed"), ("skipped", "skipped")):
        assert claims.verdict(claim, {A: entry(A, outcome)}) == verdict
    assert claims.overall({"cpu": "skipped"}) == "pending"


def test_verified_only_when_every_test_passed_there():
    """Rule 1: one skipped, missing, failed or stale test of a claim makes it not verified there."""
    claim = {"id": "x", "tests": [A, B]}
    assert claims.verdict(claim, {A: entry(A), B: entry(B)}) == "passed"
    assert claims.verdict(claim, {A: entry(A)}) == "skipped", "B did not run"
    assert claims.verdict(claim, {A: entry(A), B: entry(B, "skipped")}) == "skipped"
    assert claims.verdict(claim, {A: entry(A), B: entry(B, "failed")}) == "failed"
    assert claims.verdict(claim, {A: entry(A), B: {**entry(B), "source_sha256": "0" * 16}}) == "stale"
    cases = {f"{A}[1]": entry(A), f"{A}[2]": entry(A, "skipped"), B: entry(B)}
    assert claims.verdict(claim, cases) == "skipped", "every parametrized case counts"
    both = {"cpu": {"environment": {}, "tests": {A: entry(A)}, "outputs": {}},
            "gpu": {"environment": {}, "tests": {B: entry(B)}, "outputs": {}}}
    assert claims.verdicts(claim, both) == {"cpu": "skipped", "gpu": "skipped"}
    assert claims.overall(claims.verdicts(claim, both)) == "pending", "not verified in one place"


def test_editing_the_test_code_makes_its_outcomes_stale(copy_of_snippets):
    """Rule 2: the recorded hash covers the test function, the rest of its module but the other test
    functions, conftest.py and the helpers it imports."""
    root = copy_of_snippets.parent
    module, helpers, conftest = (root / "tests" / name for name in ("test_troubleshooting.py", "helpers.py", "conftest.py"))
    stale = [TEST, "troubleshooting.cpu_backward"]
    assert "tests.helpers" in module.read_text()
    record = current_record()
    helpers.write_text(helpers.read_text() + "\n# changed\n")
    assert sorted(records.stale(record)) == stale, "a helper the module imports"
    module.write_text(module.read_text().replace("tests.helpers", "tests.elsewhere"))
    record = current_record()
    helpers.write_text(helpers.read_text() + "\n# changed again\n")
    assert not records.stale(record), "a helper the module does not import changes nothing"
    module.write_text(module.read_text() + "\n# changed\n")
    assert sorted(records.stale(record)) == stale
    assert claims.verdict({"id": "x", "tests": [TEST]}, record["tests"]) == "stale"
    record = current_record()
    neighbour = "def test_eager_flex_attention_warns_that_it_is_unfused(observe):\n"
    assert neighbour in module.read_text()
    module.write_text(module.read_text().replace(neighbour, neighbour + "    pass  # changed\n"))
    assert not records.stale(record), "another test function of the module changes nothing"
    own = "def test_no_backward_on_cpu(observe):\n"
    module.write_text(module.read_text().replace(own, own + "    pass  # changed\n"))
    assert sorted(records.stale(record)) == stale, "its own function"
    record = current_record()
    module.write_text(module.read_text().replace("import pytest\n", "import pytest  # changed\n", 1))
    assert sorted(records.stale(record)) == stale, "the module's imports and helpers"
    record = current_record()
    conftest.write_text(conftest.read_text() + "\n# changed\n")
    assert sorted(records.stale(record)) == stale


def test_adding_or_removing_a_test_function_leaves_its_neighbours_current(copy_of_snippets):
    """A test function added at the end or between two others, or removed, changes no other test's hash;
    a change to the code the test sees does."""
    module = copy_of_snippets.parent / "tests" / "test_troubleshooting.py"
    text = module.read_text()
    before = records.source_hash(TEST)
    added = "\n\n@pytest.mark.parametrize('x', [1])\ndef test_added(x):\n    assert x\n"
    neighbour = "def test_eager_flex_attention_warns_that_it_is_unfused(observe):\n"
    assert neighbour in text
    for changed in (text + added, text.replace(neighbour, added.lstrip("\n") + "\n\n" + neighbour)):
        module.write_text(changed)
        assert records.source_hash(TEST) == before
    start = text.index(neighbour)
    end = text.index("\ndef ", start + 1) if "\ndef " in text[start + 1:] else len(text)
    module.write_text(text[:start].rstrip("\n") + "\n" + text[end:])  # the neighbour and its blank lines gone
    assert records.source_hash(TEST) == before
    module.write_text(text)
    assert records.current(before, TEST)
    module.write_text(text.replace("import pytest\n", "import pytest  # changed\n", 1))
    assert not records.current(before, TEST)


def test_a_check_of_a_gpu_benchmark_record_counts_for_that_gpu_only(copy_of_snippets):
    """Rule 3: a test parametrized with a GPU record's name is a verdict for that GPU, not for the
    CPU machine it ran on; and it is stale when that benchmark record changes."""
    root = copy_of_snippets.parent
    gpu = sorted(p.stem for p in (root / "records/bench").glob("*.json") if not p.stem.endswith("-quick"))[0]
    check = "tests/test_bench.py::test_training_flex_is_between_flash_and_cudnn"
    all_records = {"cpu": {"environment": {}, "tests": {f"{check}[{gpu}]": entry(f"{check}[{gpu}]")}, "outputs": {}},
                   gpu: {"environment": {"compute_capability": "9.0"}, "tests": {}, "outputs": {}}}
    claim = {"id": "perf-training", "tests": [check]}
    assert claims.verdicts(claim, all_records) == {"cpu": "not-run", gpu: "passed"}
    bench = root / "records/bench" / f"{gpu}.json"
    bench.write_text(bench.read_text() + "\n")
    assert claims.verdicts(claim, all_records) == {"cpu": "not-run", gpu: "stale"}


def test_confirmed_needs_the_same_quantity(monkeypatch):
    """Rule 4: a seed verdict on a benchmark names both quantities; confirmed needs them equal."""
    bench_test = "tests/test_bench.py::test_block_masks_beat_dense_masks_and_padding"
    same = {"id": "a", "seed": "confirmed", "tests": [bench_test],
            "quantity": {"said": "attention time", "measured": "attention time"}}
    other = {**same, "id": "b", "quantity": {"said": "end-to-end throughput", "measured": "attention time"}}
    bare = {"id": "c", "seed": "confirmed", "tests": [bench_test]}
    assert claims.quantity_problems(same) == []
    assert claims.quantity_problems(other) == [
        "claim 'b': seed confirmed, but the older text's quantity (end-to-end throughput) is not the one measured "
        "(attention time). Fix: seed: other-quantity, and say what was measured"]
    assert claims.quantity_problems({**other, "seed": "other-quantity"}) == []
    assert "needs `quantity" in claims.quantity_problems(bare)[0]
    registry = claims.registry()
    monkeypatch.setattr(claims, "registry", lambda: [*registry, other])
    assert any(p.startswith("claim 'b': seed confirmed, but") for p in claims.check())


def test_check_names_each_problem_in_one_line(monkeypatch):
    registry = claims.registry()
    broken = [*registry, registry[0], {"id": "new-claim", "page": "index.md", "section": "nowhere",
                                       "tests": ["tests/test_doctor.py::test_missing"], "seed": "maybe"},
              {"id": "paged-claim", "page": "nowhere.md", "section": "anywhere", "tests": registry[0]["tests"]}]
    monkeypatch.setattr(claims, "registry", lambda: broken)
    problems = claims.check()
    assert f"claim {registry[0]['id']!r} is listed twice" in problems
    assert "claim 'new-claim': seed 'maybe' is not one of confirmed, corrected, other-quantity, not-verified" in problems
    assert "claim 'new-claim': test tests/test_doctor.py::test_missing does not exist" in problems
    assert "claim 'new-claim': docs/zh/index.md has no section #nowhere" in problems
    assert "claim 'paged-claim': docs/hi/nowhere.md is missing" in problems
    assert not any(p.startswith("claim 'paged-claim': docs/hi/nowhere.md has no section") for p in problems)
    assert "claims/pt.yaml: 'new-claim' has no 'claim'" in problems
    assert all("\n" not in p for p in problems)


def test_a_claims_figures_stand_next_to_it_on_its_page(checkout):
    """A claim's `figures` are the performance page's sentences next to its marker, in every language."""
    assert claims.check() == []
    page = checkout / "docs/pt/performance.md"
    page.write_text(page.read_text(encoding="utf-8").replace("<!-- bench: seed-fa2 -->", ""), encoding="utf-8")
    assert claims.check() == ["claim 'perf-fa2': docs/pt/performance.md#seed-claims does not show its figures "
                              "<!-- bench: seed-fa2 -->"]


def test_cli_check_and_status(records_in_use):
    from tests.helpers import python

    check = python("-m guide claims check", cwd=ROOT)
    assert check.returncode == 0 and check.stdout.strip().endswith("0 problems"), check.stdout
    status = python("-m guide claims status", cwd=ROOT)
    assert status.returncode == 0 and "cpu-forward-only" in status.stdout
    wrong = python("-m guide claims frobnicate", cwd=ROOT)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1


# Scopes: where a claim holds, no wider than what its tests ran (guide/scope.py).

H100 = {"name": "nvidia-h100", "gpu": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "torch": "2.11.0+cu130"}
CPU = {"name": "cpu", "gpu": "none (CPU)", "torch": "2.13.0+cpu", "diffusers": "0.42.1"}


def scoped(monkeypatch, scope, cpu_ran=None, gpu_ran=None, gpu_outcome="passed"):
    """claims.scope_problems for one claim with tests A (run on the CPU) and B (on an H100), in
    fabricated records in which each test ran what `cpu_ran` / `gpu_ran` say (gpu_outcome None: B has no
    entry in the H100 record)."""
    A = "tests/test_doctor.py::test_doctor_on_this_machine"
    B = "tests/test_doctor.py::test_doctor_on_a_gpu"
    monkeypatch.setattr(claims, "registry", lambda: [{"id": "x", "tests": [A, B], "scope": scope}])

    def test_entry(nodeid, outcome, found):
        return {**entry(nodeid, outcome), **({"ran": found} if found else {})}

    return claims.scope_problems({
        "cpu": {"environment": CPU, "tests": {A: test_entry(A, "passed", cpu_ran), B: test_entry(B, "skipped", None)},
                "outputs": {}},
        "nvidia-h100": {"environment": H100, "outputs": {},
                        "tests": {A: test_entry(A, "passed", cpu_ran),
                                  **({B: test_entry(B, gpu_outcome, gpu_ran)} if gpu_outcome else {})}}})


def test_a_scope_no_wider_than_what_its_tests_ran_passes(monkeypatch):
    ran = {"dtypes": ["bfloat16", "float16"], "head_dims": [64, 128], "lengths": [1, 512, 4096]}
    scope = {"devices": ["H100"], "torch": ["2.11"], "dtypes": ["bfloat16", "float16"], "head_dims": [64, 128],
             "lengths": {"from": 1, "to": 4096}}
    assert scoped(monkeypatch, scope, gpu_ran=ran) == []
    assert scoped(monkeypatch, {**scope, "dtypes": ["bfloat16"]}, gpu_ran=ran) == [], "narrower is fine"


def test_a_scope_wider_than_its_tests_fails_naming_what_was_not_run(monkeypatch):
    ran = {"dtypes": ["bfloat16"], "head_dims": [64], "lengths": [128, 1024]}
    base = {"devices": ["H100"], "torch": ["2.11"], "dtypes": ["bfloat16"], "head_dims": [64]}
    assert scoped(monkeypatch, base, gpu_ran=ran) == []
    wider = {
        "dtypes": ["bfloat16", "float16"],      # a dtype no test ran
        "head_dims": [64, 128],                 # a head dimension no test ran
        "lengths": {"from": 1, "to": 1024},     # a range whose lower end no test reached
        "devices": ["H100", "H200"],            # a GPU with no record
        "torch": ["2.11", "2.13"],              # 2.13 ran only on the CPU, where the claim did not pass
        "backends": ["flash"],                  # recorded by no test
    }
    for key, value in wider.items():
        problems = scoped(monkeypatch, {**base, key: value}, gpu_ran=ran)
        assert len(problems) == 1 and problems[0].startswith(f"claim 'x': scope {key} "), (key, problems)
        assert "Fix: narrow the scope and the sentence" in problems[0]
    for low, high in ((127, 1024), (128, 1025)):  # one token past either end of what ran (128 to 1024)
        problems = scoped(monkeypatch, {**base, "lengths": {"from": low, "to": high}}, gpu_ran=ran)
        assert len(problems) == 1 and "is wider than its tests ran (128 to 1024)" in problems[0], (low, high)
    assert scoped(monkeypatch, {**base, "lengths": {"from": 128, "to": 1024}}, gpu_ran=ran) == []
    assert scoped(monkeypatch, base, gpu_ran=ran, gpu_outcome="failed") != [], "a failed run covers nothing"
    assert scoped(monkeypatch, base, gpu_ran=ran, gpu_outcome=None) != [], "nor one of the claim's tests missing"
    assert scoped(monkeypatch, base, gpu_ran=None) != [], "a record without what its tests ran covers nothing"


@pytest.mark.parametrize("package", ["diffusers", "transformers"])
def test_a_library_version_in_a_scope_is_one_a_passing_record_stamped(monkeypatch, package):
    """The H100 record's stamp names the package's version: a scope may name that version, not another."""
    monkeypatch.setitem(H100, package, "5.17.0")
    base = {"devices": ["H100"], "torch": ["2.11"]}
    assert scoped(monkeypatch, {**base, package: ["5.17.0"]}, gpu_ran={"dtypes": ["bfloat16"]}) == []
    problems = scoped(monkeypatch, {**base, package: ["5.23.0"]}, gpu_ran={"dtypes": ["bfloat16"]})
    assert len(problems) == 1 and problems[0].startswith(f"claim 'x': scope {package} names 5.23.0"), problems


def test_a_scope_is_written_with_known_keys_and_values(monkeypatch):
    from guide import scope

    base = {"devices": ["H100"], "torch": ["2.11"]}
    assert scope.form_problems("x", base) == []
    assert scope.form_problems("x", {})[0].startswith("claim 'x' has no scope")
    for bad, says in ((({"dtype": ["bfloat16"]}), "scope key 'dtype' is not one of"),
                      ({"dtypes": ["bf16"]}, "scope dtypes 'bf16' is not one of"),
                      ({"head_dims": ["64"]}, "scope head_dims '64' is not a whole number"),
                      ({"torch": [2.11]}, "scope torch 2.11 is not a version in quotes"),
                      ({"dtypes": {"from": 1, "to": 2}}, "scope dtypes is a range")):
        assert any(says in p for p in scope.form_problems("x", {**base, **bad})), bad
    assert "names no devices" in scope.form_problems("x", {"torch": ["2.11"]})[0]
    registry = claims.registry()
    monkeypatch.setattr(claims, "registry", lambda: [{**c, "scope": {**c["scope"], "dtypes": ["bf16"]}}
                                                     if c["id"] == "tf32" else c for c in registry])
    assert "claim 'tf32': scope dtypes 'bf16' is not one of float64, float32, bfloat16, float16" in claims.check()
    assert scoped(monkeypatch, {}, gpu_ran={"dtypes": ["bfloat16"]}) == [], "named by check(), not twice"


def test_what_a_test_ran_is_recorded_beside_its_outcome(tmp_path):
    """The `ran` fixture's values reach the record, normalised (torch.bfloat16 -> 'bfloat16'), and an
    unknown key stops the test."""
    import subprocess
    import sys

    (tmp_path / "test_x.py").write_text(
        "import torch\n"
        "def test_one(ran):\n    ran(dtypes=[torch.bfloat16, torch.float16], head_dims=64)\n    ran(head_dims=128)\n"
        "def test_bad(ran):\n    ran(dtype=torch.bfloat16)\n", encoding="utf-8")
    (tmp_path / "conftest.py").write_text(
        "import json, pytest\n"
        "@pytest.hookimpl(trylast=True)\n"
        "def pytest_sessionfinish(session):\n"
        "    rec = session.config.pluginmanager.get_plugin('guide-recorder')\n"
        "    print('RAN=' + json.dumps({k.split('::')[1]: v for k, v in rec.seen.items()}))\n", encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "guide.pytest_plugin",
                             "-p", "no:cacheprovider", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path)
    seen = json.loads(result.stdout.split("RAN=", 1)[1].splitlines()[0])
    assert seen["test_one"] == {"dtypes": ["bfloat16", "float16"], "head_dims": [64, 128]}
    assert "test_bad" not in seen and "ran() takes" in result.stdout


def test_a_gpu_record_lacking_what_the_pages_show_from_a_gpu_is_reported_missing():
    """records.missing: a GPU record with no entries lacks each GPU output a page marks `gpu` and the GPU tier's
    page tests (a GPU page's script and notebook, a CPU page's GPU outputs); the CPU record lacks none of
    them; an entry present is not listed."""
    gpu = {"environment": {"gpu": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}, "tests": {}, "outputs": {}}
    lacking = records.missing(gpu)
    assert "compiled.ways" in lacking and "kernel_options.gpu" in lacking  # <!-- observed: ... gpu --> on those pages
    assert "kernel_options.cpu" not in lacking and "masks.picture_causal" not in lacking
    assert "tests/test_pages.py::test_gpu_page_runs_as_one_script[compiled.md]" in lacking
    assert "tests/test_pages.py::test_gpu_notebook_runs[compiled.md]" in lacking
    assert "tests/test_pages.py::test_cpu_page_prints_its_gpu_outputs_on_a_gpu[kernel_options.md]" in lacking
    assert not any(key.endswith("[masks.md]") for key in lacking)  # a CPU page with no GPU output
    assert not any("[kernel_options.md]" in key and "gpu_page" in key for key in lacking)
    gpu["outputs"]["compiled.ways"] = {}
    gpu["tests"]["tests/test_pages.py::test_gpu_notebook_runs[compiled.md]"] = {}
    assert set(records.missing(gpu)) == set(lacking) - {"compiled.ways", "tests/test_pages.py::test_gpu_notebook_runs[compiled.md]"}
    assert records.missing({**gpu, "environment": {"gpu": "none (CPU)"}}) == []
