"""The guide's own package: its command line, its layers, its install, and bad data in the build."""
import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.helpers import ROOT, python


def imports(path: Path) -> set:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_page_code_never_imports_the_guide():
    for path in sorted((ROOT / "snippets").rglob("*.py")):
        assert not imports(path) & {"guide", "scripts", "tests"}, path


def test_no_import_path_edits():
    """No module edits the import path (sys dot path): everything is importable because it is installed."""
    edit = "sys." + "path"
    offenders = [p for folder in ("guide", "snippets", "tests") for p in sorted((ROOT / folder).rglob("*.py"))
                 if edit in p.read_text(encoding="utf-8")]
    assert not offenders, offenders


def test_guide_layers_point_down():
    """guide/site may import guide; the rest of guide never imports guide/site (or the tests)."""
    for path in sorted((ROOT / "guide").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not any(m.startswith(("guide.site", "tests")) for m in modules), path


def test_help_and_bad_commands():
    assert python("-m guide --help").returncode == 0
    for args in ("frobnicate", "claims frobnicate", "i18n status extra"):
        result = python(f"-m guide {args}", cwd=ROOT)
        assert result.returncode == 2 and result.stderr.count("\n") == 1 and result.stderr.startswith("error:"), args


def test_a_listing_its_reader_stopped_reading_ends_quietly():
    """`... | head`: the command stops writing when the reader has stopped reading (here, a reader that
    reads nothing and is gone before the first line), with no traceback."""
    result = subprocess.run(f"{sys.executable} -m guide i18n status | true; exit ${{PIPESTATUS[0]}}",
                            shell=True, executable="/bin/bash", cwd=ROOT, capture_output=True, text=True)
    assert (result.returncode, result.stderr) == (0, "")


def test_outside_a_checkout_the_command_says_where_to_run(tmp_path):
    result = python("-m guide claims check", cwd=tmp_path, env={"GUIDE_ROOT": ""})
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(f"error: no guide checkout at or above {tmp_path}. Fix: ")
    assert result.stderr.count("\n") == 1


def test_installed_without_the_checkout(tmp_path):
    """pip install . (not editable), then the commands from a folder outside the repository."""
    target, source = tmp_path / "site-packages", tmp_path / "source"
    for name in ("pyproject.toml", "snippets", "guide"):  # a copy: pip builds in the source folder
        source.mkdir(exist_ok=True)
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, source / name)
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                              "--target", str(target), str(source)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr
    assert not (target / "tests").exists() and (target / "guide" / "site" / "plugin.py").exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PYTHONPATH": str(target)}
    for args in ("-m snippets.bench --help", "-m guide --help"):
        result = subprocess.run([sys.executable, *args.split()], cwd=elsewhere, capture_output=True, text=True,
                                env={**env, "PATH": "/usr/bin:/bin"}, timeout=120)
        assert result.returncode == 0 and "usage:" in result.stdout, (args, result.stderr)
    doctor = subprocess.run([sys.executable, "-m", "snippets", "doctor", "--json"], cwd=elsewhere,
                            capture_output=True, text=True, env={**env, "PATH": "/usr/bin:/bin"}, timeout=300)
    assert doctor.returncode == 0, doctor.stderr
    assert {c["check"] for c in json.loads(doctor.stdout)["checks"]} >= {"torch", "flex_attention"}
    where = subprocess.run([sys.executable, "-c", "import snippets, guide; print(snippets.__file__, guide.__file__)"],
                           cwd=elsewhere, capture_output=True, text=True, env=env, timeout=60)
    assert all(Path(f).is_relative_to(target) for f in where.stdout.split()), where.stdout


@pytest.mark.parametrize("path, text, message", [
    ("records/cpu.json", "{ not json", "records/cpu.json is not valid"),
    ("records/cpu.json", "[1, 2]", "records/cpu.json is not a verification record"),
    ("records/bench/nvidia-h200.json", "{}", "records/bench/nvidia-h200.json is not a benchmark record"),
    ("claims/registry.yaml", "- id: [unclosed", "claims/registry.yaml is not valid YAML"),
    ("words/pt.yaml", "observed: {}\n", "words/pt.yaml: observed.seen is missing"),
])
def test_bad_data_stops_the_build_with_one_line(checkout, path, text, message):
    from mkdocs.exceptions import PluginError

    from guide.site.plugin import GuidePlugin

    (checkout / path).write_text(text, encoding="utf-8")
    config = SimpleNamespace(config_file_path=str(checkout / "mkdocs.yml"))
    with pytest.raises(PluginError) as error:
        GuidePlugin().on_config(config)
    assert message in str(error.value) and "Fix:" in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("change, message", [
    ("page", "claims/registry.yaml places merging-lse, merging-cpu-compiled, merging-parts, merging-dtype, "
             "merging-one-graph, merging-gradients, merging-gpu on docs/pt/merging.md, which does not exist. Fix: "),
    ("section", "claim 'merging-lse': docs/pt/merging.md has no section {#lse}. Fix: "),
])
def test_a_claims_page_or_section_that_is_missing_stops_the_build_with_one_line(checkout, change, message):
    from guide.project import GuideError
    from guide.site import snapshot
    from guide.site.claims_page import claims_page

    page = checkout / "docs/pt/merging.md"
    if change == "page":
        page.unlink()
    else:
        page.write_text(page.read_text(encoding="utf-8").replace("{#lse}", "{#lse-renamed}"), encoding="utf-8")
    with pytest.raises(GuideError) as error:  # the plugin turns it into a PluginError, the build stops
        claims_page(snapshot.load(checkout), "pt")
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_a_recording_run_replaces_every_case_of_the_functions_it_ran(checkout):
    from guide import records

    old, other = "tests/test_bench.py::test_there_are_benchmark_records", "tests/test_doctor.py::test_doctor_on_this_machine"
    entry = {"outcome": "passed", "gpu": False, "source_sha256": "0"}
    (checkout / "records/x.json").write_text(json.dumps({"environment": {}, "tests": {old: entry, other: entry},
                                                         "outputs": {}}))
    records.save("x", {f"{old}[a]": entry}, {})
    assert set(records.load("x")["tests"]) == {f"{old}[a]", other}


def test_a_recording_run_keeps_the_cases_it_deselected_or_did_not_name(checkout):
    """-k deselects one case of a function whose other case runs, or the command line names the other case
    alone: the case that did not run keeps its record, in one process and when pytest-xdist workers
    collect and the controller records."""
    from guide import records

    shutil.copy(ROOT / "pyproject.toml", checkout)
    function = "tests/test_merging.py::test_large_scores_merge_without_overflow"
    kept, run = f"{function}[dtype0-300.0]", f"{function}[dtype1-30.0]"
    old = {"outcome": "passed", "gpu": False, "source_sha256": "0"}
    for workers, selection in (([], ["-k", "dtype1", function]), (["-n", "2"], ["-k", "dtype1", function]),
                               ([], [run]), (["-n", "2"], [run])):
        (checkout / "records/x.json").write_text(json.dumps({"environment": {}, "tests": {kept: old, run: old},
                                                             "outputs": {}}))
        result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *workers, "--record", "x",
                                 *selection], cwd=checkout, capture_output=True, text=True)
        assert result.returncode == 0 and "recorded 1 tests" in result.stdout, result.stdout[-2000:]
        tests = records.load("x")["tests"]
        assert tests[kept] == old, workers
        assert tests[run]["source_sha256"] == records.source_hash(run) != "0", workers


def test_a_recording_run_hashes_the_checkout_under_test_while_a_test_changes_a_copy_of_it(checkout):
    """A test that points the guide at a copy of the checkout and edits files there (pages, snippets) is
    recorded with the hash of the checkout's own files, in one process and when a worker runs it."""
    from guide import records

    shutil.copy(ROOT / "pyproject.toml", checkout)
    test = "tests/test_pages.py::test_a_pages_record_depends_on_what_its_program_and_commands_run"
    for workers in ([], ["-n", "2"]):
        (checkout / "records/x.json").write_text(json.dumps({"environment": {}, "tests": {}, "outputs": {}}))
        result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *workers, "--record", "x",
                                 test], cwd=checkout, capture_output=True, text=True)
        assert result.returncode == 0 and "recorded 1 tests" in result.stdout, result.stdout[-2000:]
        assert records.load("x")["tests"][test]["source_sha256"] == records.source_hash(test), workers


def test_no_source_file_is_ignored_by_git():
    """A .gitignore pattern must not hide code from commits (a bare `site/` once hid guide/site/)."""
    files = [str(p.relative_to(ROOT)) for folder in ("guide", "snippets", "tests")
             for p in sorted((ROOT / folder).rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *files], cwd=ROOT, capture_output=True, text=True)
    assert ignored.stdout == "", ignored.stdout


def test_a_run_spread_over_workers_records_every_test_and_output(checkout):
    """pytest-xdist: every worker's outcomes, skip reasons and observed outputs reach the record that
    the controller writes, as a run in one process (the committed CPU record) has them; and pytest's own
    --junitxml report still works beside the record (it takes test properties as name/value pairs)."""
    import xml.etree.ElementTree as ET

    from guide import records

    shutil.copy(ROOT / "pyproject.toml", checkout)
    ran = ["tests/test_troubleshooting.py::test_no_backward_on_cpu",
           "tests/test_troubleshooting.py::test_eager_flex_attention_warns_that_it_is_unfused",
           "tests/test_troubleshooting.py::test_autocast_with_compiled_flex_attention_runs_forward_and_backward",
           "tests/test_decoding.py::test_slicing_errors"]
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
                             "--record", "x", "--junitxml", "report.xml", *ran], cwd=checkout,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-2000:]
    cases = ET.parse(checkout / "report.xml").getroot().iter("testcase")
    assert sorted(f"{c.get('classname')}.{c.get('name')}" for c in cases) == \
        sorted(n.replace(".py::", ".").replace("/", ".") for n in ran)
    assert "created: 2/2 workers" in result.stdout and "recorded 4 tests" in result.stdout
    record, serial = records.load("x"), records.load("cpu")

    def same(entry):  # what does not depend on the run: no duration; the hash is checked on its own
        return {k: v for k, v in entry.items() if k not in ("seconds", "source_sha256")}

    assert set(record["tests"]) == set(ran)
    for nodeid in ran:
        assert same(record["tests"][nodeid]) == same(serial["tests"][nodeid]), nodeid
        assert record["tests"][nodeid]["source_sha256"] == records.source_hash(nodeid)
    observed = {k: same(v) for k, v in serial["outputs"].items() if v["test"] in ran}
    assert len(observed) >= 3 and {k: same(v) for k, v in record["outputs"].items()} == observed


def test_the_environment_stamp_names_the_versions_the_libraries_report():
    """The oracle: each library's own __version__, which the stamp does not import to read."""
    import platform

    import diffusers
    import torch
    import transformers

    from guide import records

    stamp = records.environment("x")
    assert (stamp["torch"], stamp["diffusers"], stamp["transformers"], stamp["python"]) == \
        (torch.__version__, diffusers.__version__, transformers.__version__, platform.python_version())
    if torch.cuda.is_available():
        import triton

        assert stamp["triton"] == triton.__version__ and stamp["gpu"] == torch.cuda.get_device_name()


def test_a_run_spread_over_workers_starts_the_longest_tests_first(monkeypatch):
    """Each worker starts on two consecutive tests of the order: one of the longest, then one of the
    shortest; a test with no recorded time counts as the longest; the tests with a part that runs
    alone come first of all, so that their compiles run beside the others; the tests marked cached
    last of all, after the tests that fill the caches."""
    from guide import pytest_plugin, records

    seconds = {"a": 10, "b": 8, "c": 5, "d": 1, "f": 3, "g": 2, "h": 4}
    monkeypatch.setattr(records, "load", lambda name: {"tests": {k: {"seconds": v} for k, v in seconds.items()}})
    items = [SimpleNamespace(nodeid=name, fixturenames=["observe"], get_closest_marker=lambda name: None)
             for name in "abcdefgh"]
    pytest_plugin.longest_first(items, workers=2)  # by time: e a b c h f g d
    assert [i.nodeid for i in items] == ["e", "d", "a", "g", "b", "c", "h", "f"]
    pytest_plugin.longest_first(items, workers=8)  # fewer tests than 2 x workers: four pairs
    assert [i.nodeid for i in items] == ["e", "d", "a", "g", "b", "f", "c", "h"]
    alone = {"a": ["observe", "alone"], "f": ["alone"]}  # each has a part that runs alone; f is the shorter
    for item in items:
        item.fixturenames = alone.get(item.nodeid, item.fixturenames)
    pytest_plugin.longest_first(items, workers=2)  # a f e b c h g d
    assert [i.nodeid for i in items] == ["a", "d", "f", "g", "e", "b", "c", "h"]
    next(i for i in items if i.nodeid == "b").get_closest_marker = {"cached": True}.get  # after the others
    pytest_plugin.longest_first(items, workers=2)  # a f e c h g d, then b
    assert [i.nodeid for i in items] == ["a", "d", "f", "g", "e", "c", "h", "b"]


def test_setup_for_the_gpu_tier_names_each_unmet_pin_and_the_install(monkeypatch):
    """Every pin of requirements-gpu.txt is checked against the installed version: a missing package and
    another version are each named, in one line whose fix is make gpu-setup."""
    import importlib.metadata
    import importlib.util

    import torch

    from guide import setup_check
    from guide.project import GuideError

    wanted = setup_check.pins((ROOT / "requirements-gpu.txt").read_text(encoding="utf-8"))
    assert {"pytest", "pytest-xdist", "hypothesis", "diffusers", "nbclient"} <= set(wanted), wanted

    def version_of(package):
        if package == "pytest-xdist":
            raise importlib.metadata.PackageNotFoundError(package)
        return "0.0.1" if package == "hypothesis" else wanted[package]

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(importlib.metadata, "version", version_of)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "yaml" else real(name, *a))
    with pytest.raises(GuideError) as error:
        setup_check.check(gpu=True)
    message = str(error.value)
    assert message.startswith(f"the GPU tier needs pytest-xdist=={wanted['pytest-xdist']} (not installed), "
                              f"hypothesis=={wanted['hypothesis']} (found 0.0.1), pyyaml (not installed)"), message
    assert "make gpu-setup GPU_PYTHON=" in message and "\n" not in message


def test_the_stamp_names_the_test_tools_that_ran():
    import importlib.metadata

    from guide import records

    tools = records.environment("x")["test_tools"]
    assert tools == {name: importlib.metadata.version(name) for name in ("pytest", "pytest-xdist", "hypothesis")}


def test_an_unpinned_gpu_requirement_is_refused_in_one_line():
    from guide import setup_check
    from guide.project import GuideError

    assert setup_check.pins("# tools\npytest==9.2.0  # the runner\n\nhypothesis==6.1\n") == \
        {"pytest": "9.2.0", "hypothesis": "6.1"}
    with pytest.raises(GuideError, match=r"'diffusers>=0.40' is not pinned as name==version"):
        setup_check.pins("pytest==9.2.0\ndiffusers>=0.40\n")


def test_the_gpu_tier_on_a_machine_without_a_gpu_stops_before_any_test_in_one_line():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the tier runs")
    result = subprocess.run([sys.executable, "-m", "pytest", "--gpu-tier", "-p", "no:cacheprovider", "-n", "2",
                             "tests/test_kernels.py"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 4, result.stdout[-2000:]
    assert result.stderr.strip() == (f"ERROR: no CUDA GPU visible to torch {torch.__version__}. Fix: run `make "
                                     "verify-gpu` on a CUDA machine, with GPU_PYTHON set to its CUDA Python")
    assert not re.search(r"\d+ (passed|skipped|failed)", result.stdout), result.stdout  # no test ran


def test_the_part_of_a_test_that_runs_alone_waits_for_the_running_tests_and_holds_off_new_ones(tmp_path):
    """Workers sharing a machine: the part of a test in alone() starts when no other test runs, the
    tests that start while it waits run first, and a test that starts during that part waits for it."""
    import threading
    import time

    from guide.pytest_plugin import alone_in, turn

    events, gate = [], {name: threading.Event() for name in ("first", "second")}

    def test(name, part_alone=False):
        with turn(tmp_path) as running:
            events.append(f"{name} in")
            if name in gate:
                gate[name].wait(10)
            if part_alone:
                with alone_in(running):
                    events.append(f"{name} alone")
                    time.sleep(0.3)
                    events.append(f"{name} alone done")
            events.append(f"{name} out")

    def start(*args):
        thread = threading.Thread(target=test, args=args)
        thread.start()
        time.sleep(0.2)
        return thread

    threads = [start("first"), start("whole", True), start("second")]
    assert events == ["first in", "whole in", "second in"], "a test starts while another waits to be alone"
    gate["first"].set()
    time.sleep(0.2)
    assert events[-1] == "first out" and "whole alone" not in events, "it waits for every running test"
    gate["second"].set()
    time.sleep(0.1)
    threads.append(start("later"))
    for thread in threads:
        thread.join(10)
    assert events[3:] == ["first out", "second out", "whole alone", "whole alone done", "later in",
                          "later out", "whole out"] or events[3:] == [
        "first out", "second out", "whole alone", "whole alone done", "whole out", "later in", "later out"]


def test_mutation_skips_exactly_the_lines_of_gpu_only_functions():
    from guide import mutate

    source = "import torch\n\n\ndef on_cpu():\n    return 1\n\n\n@decorated\ndef on_gpu():\n    return 2\n\n\ndef tail():\n    pass\n"
    assert mutate.kept_lines(source, ["on_gpu"]) == ["1-7", "11-14"]
    assert mutate.kept_lines(source, []) == ["1-14"]
    constants = "import torch\nSIZES = [\n    1,\n    2,\n]\nRUNS: int = 5\nKEPT = 3\n\n\ndef on_gpu():\n    return SIZES\n"
    assert mutate.kept_lines(constants, ["SIZES", "RUNS", "on_gpu"]) == ["1-1", "7-9"]
    assert mutate.kept_lines(constants, ["KEPT"]) == ["1-6", "8-11"]
    classes = "import torch\n\n\n@dataclass\nclass Block:\n    size = 1\n\n\ndef main():\n    pass\n"
    assert mutate.kept_lines(classes, ["Block"]) == ["1-3", "7-10"]
    assert mutate.kept_lines("import torch\nDIM, HEADS = (\n    64, 8)\nKEPT = 1\n", ["HEADS"]) == ["1-1", "4-4"]
    with pytest.raises(SystemExit, match="gpu-only names gone, which the module does not define"):
        mutate.kept_lines(source, ["gone"])


def test_a_mutant_meets_the_tests_that_ran_its_line_first_then_the_whole_file(tmp_path):
    """guide.mutate cover/test on a module of three functions: a mutant of a line one test runs is
    killed by that test alone; a mutant of a line no test runs goes to the whole file (and survives it),
    then to the program of the page that shows the module, which kills it."""
    (tmp_path / "snippets").mkdir()
    (tmp_path / "tests").mkdir()
    toy = tmp_path / "snippets" / "toy.py"
    toy.write_text("def a():\n    return 1\n\n\ndef b():\n    return 2\n\n\ndef never():\n    return 3\n")
    (tmp_path / "tests" / "test_toy.py").write_text(
        "import runpy\n\ntoy = runpy.run_path('snippets/toy.py')\n\n\ndef test_a():\n    assert toy['a']() == 1\n"
        "\n\ndef test_b():\n    assert toy['b']() == 2\n")
    cover = python("-m guide.mutate cover toy", cwd=tmp_path)
    assert cover.returncode == 0, cover.stdout + cover.stderr
    source = toy.read_text()
    toy.write_text(source.replace("return 2", "return 20"))
    killed = python("-m guide.mutate test toy", cwd=tmp_path)
    assert killed.returncode == 1, killed.stdout
    assert killed.stdout.splitlines()[0] == "tests that ran the mutated lines: tests/test_toy.py::test_b"
    assert "1 failed" in killed.stdout and "passed" not in killed.stdout and "whole" not in killed.stdout
    toy.write_text(source.replace("return 3", "return 30"))
    survived = python("-m guide.mutate test toy", cwd=tmp_path)
    assert survived.returncode == 0 and survived.stdout.splitlines()[0] == "the whole of tests/test_toy.py"
    assert "2 passed" in survived.stdout
    # A page that shows the module: its program's test (tests/test_pages.py) meets what the file let through.
    for name, text in {"mkdocs.yml": "", "claims/registry.yaml": "", "docs/en/toy.md": '--8<-- "snippets/toy.py"\n',
                       "docs/en/other.md": "no code\n", "tests/test_pages.py":
                       "import runpy\n\nimport pytest\n\n\n@pytest.mark.parametrize('page', ['toy.md', 'other.md'])\n"
                       "def test_cpu_page_runs_as_a_notebook_and_prints_what_it_shows(page):\n"
                       "    assert page != 'toy.md' or runpy.run_path('snippets/toy.py')['never']() == 3\n"}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    shown = python("-m guide.mutate test toy", cwd=tmp_path, env={"GUIDE_ROOT": ""})
    assert shown.returncode == 1, shown.stdout
    assert "the programs of the pages that show it: toy.md\n" in shown.stdout and "1 failed" in shown.stdout


def test_the_mutation_runner_tests_each_mutant_in_its_own_copy_and_resumes(tmp_path):
    """guide.mutate run on exported mutants of a toy module (written by hand here, not by cosmic-ray): the
    mutant a test sees is killed, the one no test sees survives, each judged in a copy of the checkout
    while the checkout keeps its source; a module whose tests failed unmutated (no cover file) is left
    out by name; one that runs past --timeout is stopped, and a second run tries it alone again; --until 0
    starts no mutant."""
    (tmp_path / "snippets").mkdir()
    (tmp_path / "tests").mkdir()
    source = "def a():\n    return 1\n\n\ndef never():\n    return 3\n"
    (tmp_path / "snippets" / "toy.py").write_text(source)
    (tmp_path / "snippets" / "other.py").write_text(source)
    (tmp_path / "tests" / "test_toy.py").write_text(
        "import runpy\n\n\ndef test_a():\n    assert runpy.run_path('snippets/toy.py')['a']() == 1\n")
    out = tmp_path / "build" / "mutation"
    out.mkdir(parents=True)
    jobs = [{"job": "seen", "edits": [[1, 2, ["    return 2\n"]]]},
            {"job": "unseen", "edits": [[5, 6, ["    return 30\n"]]]},
            {"job": "two-edits", "edits": [[1, 2, ["    return 1\n"]], [4, 5, ["def never(x=0):\n"]]]},
            {"job": "slow", "edits": [[1, 2, ["    __import__('time').sleep(60)\n"]]]}]
    for module in ("toy", "other"):
        (out / f"{module}.jobs.json").write_text(json.dumps({"module": module, "source": source, "jobs": jobs}))
    assert python("-m guide.mutate cover toy", cwd=tmp_path).returncode == 0
    assert python("-m guide.mutate run toy other --until 0", cwd=tmp_path).stdout.splitlines()[-1].startswith(
        "0 tested, 4 left for a later run")
    first = python("-m guide.mutate run toy other --jobs 2 --timeout 8", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "other: left out, no cover file" in first.stdout and "4 mutants to test, 2 at a time" in first.stdout
    results = {r["job"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert set(results) == {"seen", "unseen", "two-edits", "slow"}
    assert results["slow"]["code"] == "timeout" and results["slow"]["seconds"] < 30
    assert results["seen"]["code"] == 1 and "1 failed" in results["seen"]["output"]
    assert results["unseen"]["code"] == 0 and "whole of tests/test_toy.py" in results["unseen"]["output"]
    assert results["two-edits"]["code"] == 0
    assert (tmp_path / "snippets" / "toy.py").read_text() == source
    assert sorted(p.name for p in (out / "workers").iterdir()) == ["0", "1"]
    for copy in (out / "workers").iterdir():
        assert (copy / "snippets" / "toy.py").read_text() == source, "a worker's copy keeps a mutant"
    again = python("-m guide.mutate run toy --timeout 8", cwd=tmp_path)
    assert "1 mutants to test" in again.stdout, "only the mutant that timed out is tried again"
    assert len((out / "results.jsonl").read_text().splitlines()) == 5
    (tmp_path / "snippets" / "toy.py").write_text(source + "\n")
    stale = python("-m guide.mutate run toy", cwd=tmp_path)
    assert stale.returncode == 1 and stale.stderr.strip() == (
        "error: snippets/toy.py changed since its mutants were exported. Fix: make mutate MUTATE=toy")


def test_every_module_make_mutate_runs_has_a_config_whose_gpu_only_functions_exist(tmp_path):
    """make mutate's modules (MUTATE in the Makefile) each have mutation/<module>.toml that mutates
    snippets/<module>.py with tests/test_<module>.py, and every function its gpu-only list names exists."""
    import re
    import tomllib

    from guide import mutate

    modules = re.search(r"^MUTATE \?= (.*)$", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M)[1].split()
    assert {"decoding", "paged", "accuracy", "quickstart", "flash", "masks", "dispatch"} <= set(modules)
    for module in modules:
        config = ROOT / "mutation" / f"{module}.toml"
        settings = tomllib.loads(config.read_text(encoding="utf-8"))
        assert settings["cosmic-ray"]["module-path"] == f"snippets/{module}.py", module
        assert settings["cosmic-ray"]["test-command"].endswith(f"-m guide.mutate test {module}"), module
        assert "line-filter" not in settings["cosmic-ray"].get("filters", {}), f"{module}: use [guide] gpu-only"
        source = (ROOT / "snippets" / f"{module}.py").read_text(encoding="utf-8")
        mutate.kept_lines(source, settings.get("guide", {}).get("gpu-only", []))


def test_a_notebooks_install_line_pins_what_requirements_txt_pins():
    """The packages a downloaded notebook asks for (guide.pages.PACKAGES) at the versions the tests ran."""
    from guide import pages

    pinned = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    for module, requirement in pages.PACKAGES.items():
        if "==" in requirement:
            assert requirement in pinned, (module, requirement)


def test_a_page_gives_the_same_notebook_file_at_every_build():
    """Cell ids by position: two builds of a page write the same bytes (nbformat would draw random ids), and the
    ids are unique and valid nbformat 4.5 ids."""
    import nbformat

    from guide import i18n, pages

    made = [nbformat.writes(pages.notebook(i18n.body(ROOT / "docs" / "en" / "masks.md"), i18n.words("en")["downloads"],
                                           "cpu")) for _ in range(2)]
    assert made[0] == made[1]
    nb = nbformat.reads(made[0], as_version=nbformat.NO_CONVERT)
    nbformat.validate(nb)
    assert len({cell.id for cell in nb.cells}) == len(nb.cells) > 2


def test_the_gpu_tier_downloads_nothing_and_names_a_missing_upstream_wheel():
    result = subprocess.run(["make", "-s", "verify-gpu", "SIMPLETUNER_WHEEL=build/upstream/missing.whl",
                             "GPU_PYTHON=false"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert result.stderr.splitlines()[0] == (
        "error: build/upstream/missing.whl is missing, and the GPU tier downloads nothing. Fix: run 'make upstream' "
        "on a machine with a network and copy build/upstream/ to this checkout")
    assert "pip" not in result.stdout + result.stderr  # no download tried


def test_the_strict_build_prints_nothing_when_nothing_needs_the_authors_attention(tmp_path):
    """make site prints MkDocs' warnings and errors alone: no INFO lines, no theme banner, no jieba
    dictionary loading (the Chinese search's segmenter)."""
    result = subprocess.run(["make", "-s", "site", f"SITE={tmp_path / 'site'}"], cwd=ROOT, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert [line for line in (result.stdout + result.stderr).splitlines() if not line.startswith("setup ok")] == []
    assert all((tmp_path / "site" / lang / "index.html").exists() for lang in ("", "zh", "pt", "hi"))


def test_one_pages_loop_runs_its_tests_and_its_programs_and_refuses_an_unknown_page():
    result = subprocess.run(["make", "-s", "test-page", "PAGE=mask"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    first = result.stderr.splitlines()[0]
    assert result.returncode != 0 and first.startswith("error: no page docs/en/mask.md. Fix: make test-page PAGE=NAME")
    assert " masks " in first and " kernel_options " in first and "pytest" not in result.stdout
    planned = subprocess.run(["make", "-n", "test-page", "PAGE=masks"], cwd=ROOT, capture_output=True, text=True,
                             timeout=60).stdout
    assert "-m guide i18n check" in planned
    assert '-m pytest -q -n 2 tests/test_masks.py tests/test_pages.py -k "masks.md or not test_pages"' in planned


def test_the_quiet_build_still_prints_a_real_warning_and_stops(tmp_path):
    """make site in a copy of the checkout whose English index links to a page that does not exist: the
    strict build stops, and its few lines name the link and the page."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, files):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    index = tmp_path / "docs" / "en" / "index.md"
    index.write_text(index.read_text(encoding="utf-8") + "\nSee [the missing page](nowhere.md).\n", encoding="utf-8")
    result = subprocess.run(["make", "-s", "-o", ".venv/.installed", "site", f"SITE={tmp_path / 'site'}"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=600)
    lines = [line for line in (result.stdout + result.stderr).splitlines() if not line.startswith("setup ok")]
    assert result.returncode != 0
    assert any("WARNING" in line and "index.md" in line and "nowhere.md" in line for line in lines), lines
    assert len(lines) <= 4, lines
