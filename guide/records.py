"""Verification records: what a real run observed, with its environment and the hash of the code that ran.

A record is records/<environment>.json with three parts:
- "environment": the stamp of the machine (GPU, compute capability, driver, CUDA, torch, ...);
- "tests": per test id, its outcome and the hash of the sources it ran;
- "outputs": per output id "<topic>.<name>", the text a test observed, shown on the pages.

A test of tests/test_<topic>.py runs snippets/<topic>.py (and its shell and config files); when
those sources or its test code change, its entries are stale until the next recording run. Its test
code is its module less the other test functions (its own function, the module's fixtures, helpers
and imports), conftest.py, and the shared test modules it imports: editing one test leaves the
records of its neighbours current. A page enters a hash as its program reads it (`program_view`: front
matter, code blocks, includes and output markers), and the interface words as the part its downloads
carry: editing its prose or the site's words leaves its records current.
"""
import ast
import copy
import datetime
import functools
import hashlib
import importlib.metadata
import json
import platform
import re
import subprocess
from pathlib import Path

import yaml

from guide import project


def folder() -> Path:
    return project.path("records")


def sources(topic: str, page: str = "") -> list:
    """The snippet files of a topic: what its tests and outputs run, and what a benchmark record measured,
    with the snippet modules they import. A test of one page (`page`: its file name) depends on that page's
    files alone (page_sources)."""
    snippets = project.path("snippets")
    if topic == "pages" and project.path("docs", "en", page).is_file():
        return page_sources(page)
    if topic == "pages":  # the pages as programs: the English pages and all the code they include
        files = (sorted(project.path("docs", "en").glob("*.md")) + sorted(snippets.rglob("*.py"))
                 + sorted(snippets.rglob("*.sh")) + sorted(snippets.glob("configs/*"))
                 + [project.path("words", "en.yaml")])
        return [f for f in files if f.exists() and "__pycache__" not in f.parts]
    files = [snippets / f"{topic}.py", snippets / "shell" / f"{topic}.sh"]
    if topic == "backend_config":
        files += sorted((snippets / "configs").glob("*"))
    files = [f for f in files if f.exists()]
    if not files:
        return []
    imported = sorted(set(named_snippets(files)) - set(files) - {snippets / "_cli.py"})
    return files + [snippets / "_cli.py"] + imported


def named_snippets(start: list, files=frozenset()) -> list:
    """The files `start` and those they name, followed through what each named snippet file names in turn:
    snippet files by path (snippets/x.py), modules imported or run (snippets.x, from snippets import x,
    python -m snippets x; every module for python -m snippets alone, which lists them); plus `files`."""
    snippets = project.path("snippets")
    files, todo = set(files) | set(start), list(start)
    while todo:
        path = todo.pop()
        if path.suffix not in (".py", ".sh", ".md"):
            continue
        text = path.read_text(encoding="utf-8")
        named = {snippets / name for name in re.findall(r"\bsnippets/([\w./-]+\.\w+)", text)}
        named |= {snippets / f"{name}.py" for name in re.findall(r"\bsnippets\.(\w+)", text)}
        named |= {snippets / f"{name}.py" for name in re.findall(r"\bfrom snippets import (\w+)", text)}
        named |= {snippets / f"{name}.py" for name in re.findall(r"python3? -m snippets (\w+)", text)}
        if re.search(r"python3? -m snippets[ \t]*$", text, re.MULTILINE):  # the list of every module
            named |= set(snippets.glob("*.py"))
        named = {f for f in named if f.is_file()}
        todo += [f for f in named - files if f.suffix in (".py", ".sh")]
        files |= named
    return sorted(f for f in files if f.is_file())


def page_sources(page: str) -> list:
    """What one page's program and its shell commands run: the English page, the interface words, the
    snippet files it names and what they name in turn (named_snippets), and the package's entry points."""
    snippets = project.path("snippets")
    return named_snippets([project.path("docs", "en", page)],
                          {project.path("words", "en.yaml"), snippets / "__init__.py", snippets / "__main__.py",
                           snippets / "_cli.py"})


def topic_of(key: str) -> str:
    """'dispatch.routing' -> 'dispatch'; 'tests/test_dispatch.py::test_x' -> 'dispatch'."""
    if "::" in key:
        return Path(key.split("::")[0]).stem.removeprefix("test_")
    return key.split(".", 1)[0]


def parameter(nodeid: str) -> str:
    """'tests/test_bench.py::test_x[nvidia-h200]' -> 'nvidia-h200'; '' for a test without parameters."""
    return nodeid.split("[", 1)[1].rstrip("]") if "[" in nodeid else ""


def test_sources(nodeid: str) -> list:
    """The files a test's outcome depends on beyond the snippets: its module, the conftest and
    helpers it uses, and the benchmark record it reads when it is parametrized with one."""
    tests = project.path("tests")
    module = project.path(nodeid.split("::")[0])
    files = [module, tests / "conftest.py"]
    if module.exists():
        files += [tests / f"{name}.py" for name in _test_modules_used(str(module), module.stat().st_mtime_ns)]
    bench = project.path("records", "bench", f"{parameter(nodeid)}.json")
    if parameter(nodeid) and bench.exists():
        files.append(bench)
    return [f for f in files if f.exists()]


@functools.lru_cache(maxsize=None)
def _test_modules_used(module: str, mtime_ns: int) -> tuple:
    """The shared test modules (tests.helpers, tests.upstream) a test module imports, in name order."""
    text = Path(module).read_text(encoding="utf-8")
    return tuple(sorted({name for name in re.findall(r"\btests\.(\w+)", text) if not name.startswith("test_")}))


def source_hash(key: str) -> str:
    """The hash of what a test id ran (snippets and test code) or of a topic's snippets ('bench')."""
    files = sources(topic_of(key), parameter(key).split("-")[0]) + (test_sources(key) if "::" in key else [])
    base = project.root()
    return _digest(tuple((str(p), p.relative_to(base).as_posix(), p.stat().st_mtime_ns) for p in files),
                   key.split("::")[0] if "::" in key else "", _function_of(key))


def current(recorded: str, key: str) -> bool:
    """Whether a recorded hash is that of today's sources of `key` (a test id, an output's test or 'bench')."""
    return recorded == source_hash(key)


def _function_of(key: str) -> str:
    """'tests/test_x.py::test_y[case]' -> 'test_y'; '' for an output or benchmark key."""
    return re.split(r"[\[:]", key.split("::", 1)[1])[0] if "::" in key else ""


@functools.lru_cache(maxsize=None)
def _digest(files: tuple, module: str = "", function: str = "") -> str:
    """sha256 over the files' names and bytes, the test module's as its test `function` sees it;
    computed once per version (mtime) of the files."""
    digest = hashlib.sha256()
    for path, name, _ in files:
        data = Path(path).read_bytes()
        if name == module:
            data = _without_other_tests(data.decode("utf-8"), function).encode()
        elif name.startswith("docs/") and name.endswith(".md"):
            data = program_view(data.decode("utf-8")).encode()
        elif name.startswith("words/"):
            data = downloads_view(data.decode("utf-8")).encode()
        digest.update(name.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()[:16]


FENCE_LINE = re.compile(r"^[ \t]*(`{3,}|~{3,})")


def program_view(markdown: str) -> str:
    """The lines of a page that its program and its tests read: the front matter (its tier), the code
    blocks with their fences, the include lines and the `<!-- observed: -->` markers, in page order. Prose
    is left out: editing a sentence leaves the page's records current; editing code or an output marker
    makes them stale."""
    kept, fence, lines = [], None, markdown.splitlines()
    front = lines.index("---", 1) + 1 if lines[:1] == ["---"] and "---" in lines[1:] else 0
    for number, line in enumerate(lines):
        opened = FENCE_LINE.match(line)
        if fence is None and opened:
            fence, keep = opened[1], True
        elif fence is not None:
            keep = True
            if opened and opened[1][0] == fence[0] and len(opened[1]) >= len(fence) and not line.strip(" \t`~"):
                fence = None
        else:
            keep = number < front or "--8<--" in line or "<!-- observed:" in line
        if keep:
            kept.append(line)
    return "\n".join(kept) + "\n"


def downloads_view(words: str) -> str:
    """Of the interface words, the part a page's downloads carry (the notebook's first cell): the other
    words are the site's, which no page's program or notebook reads."""
    return json.dumps((yaml.safe_load(words) or {}).get("downloads"), sort_keys=True, ensure_ascii=False)


def _without_other_tests(text: str, function: str) -> str:
    """A test module without its test functions other than `function` (decorators included) and the
    blank lines just above each of them, so that adding or removing a test function leaves the text
    its neighbours see as it was."""
    lines = text.splitlines(keepends=True)
    drop = set()
    for name, start, end in _test_functions(text):
        if name != function:
            while start > 0 and not lines[start - 1].strip():
                start -= 1
            drop.update(range(start, end))
    return "".join(line for number, line in enumerate(lines) if number not in drop)


@functools.lru_cache(maxsize=64)
def _test_functions(text: str) -> tuple:
    """(name, first line, end) of each top-level test function, 0-based, decorators included: a module is
    parsed once, not once per test function whose hash it enters."""
    found = []
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
            found.append((node.name, min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1, node.end_lineno))
    return tuple(found)


def gpu_name() -> str:
    """The record name of this machine: cpu, or the GPU's name (nvidia-h100-80gb-hbm3)."""
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name().lower()).strip("-")


def _driver() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.split("\n")[0].strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _versions(*packages) -> dict:
    """The installed version of each package that is installed, read from its metadata: importing
    diffusers to ask it takes seconds, at the end of every recording run."""
    found = {}
    for package in packages:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def environment(name: str) -> dict:
    """The stamp of this machine: what a reader needs to reproduce an output."""
    import torch

    env = {
        "name": name,
        "date": datetime.date.today().isoformat(),
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "torch": torch.__version__,
    }
    env.update(_versions("diffusers", "transformers"))
    env["test_tools"] = _versions("pytest", "pytest-xdist", "hypothesis")  # what ran the tests
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        env.update(gpu=torch.cuda.get_device_name(), compute_capability=f"{major}.{minor}",
                   cuda=torch.version.cuda)
        if driver := _driver():
            env["driver"] = driver
        env.update(_versions("triton"))
    else:
        env["gpu"] = "none (CPU)"
    return env


def load(name: str) -> dict:
    """records/<name>.json, parsed once per version of the file; shared: read it, do not change it."""
    path = folder() / f"{name}.json"
    record = project.parsed(path) if path.exists() else {}
    if not isinstance(record, dict) or not all(isinstance(record.get(k, {}), dict)
                                               for k in ("environment", "tests", "outputs")):
        raise project.GuideError(f"records/{name}.json is not a verification record",
                                 "restore it from git or record it again (make record / make verify-gpu)")
    return {"environment": record.get("environment", {}), "tests": record.get("tests", {}),
            "outputs": record.get("outputs", {})}


def test_exists(nodeid: str) -> bool:
    """Whether the test function a test id names is still defined."""
    path = project.path(nodeid.split("::")[0])
    name = _function_of(nodeid)
    return path.exists() and bool(re.search(rf"^def {re.escape(name)}\(", path.read_text(encoding="utf-8"), re.M))


def save(name: str, tests: dict, outputs: dict, deselected=frozenset(), named=frozenset()) -> Path:
    """Merge this run into records/<name>.json under a fresh environment stamp: a test function that
    ran replaces every recorded case of it (and the outputs they observed), but the cases the run
    deselected (-k, -m, the GPU tier) keep theirs, and so do the other cases of a function whose cases
    the command line `named` one by one (test_x.py::test_y[case]); removed tests go."""
    record = copy.deepcopy(load(name))  # load() shares its parsed records
    record["environment"] = environment(name)
    ran = {nodeid.split("[", 1)[0] for nodeid in tests}  # a function that ran replaces all its cases

    def replaced(nodeid):
        function = nodeid.split("[", 1)[0]
        return function in ran and nodeid not in deselected and (function not in named or nodeid in tests)
    for part, new in (("tests", tests), ("outputs", outputs)):
        kept = {k: v for k, v in record[part].items() if not replaced(k if part == "tests" else v["test"])}
        merged = {**kept, **new}
        record[part] = {k: v for k, v in sorted(merged.items())
                        if test_exists(k if part == "tests" else v["test"])}
    folder().mkdir(exist_ok=True)
    path = folder() / f"{name}.json"
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def all_records() -> dict:
    return {p.stem: load(p.stem) for p in sorted(folder().glob("*.json"))}


def stale(record: dict) -> list:
    """The test and output ids whose sources (snippets and test code) changed since they were recorded;
    an output is as current as the test that observed it."""
    return [key for part in ("tests", "outputs") for key, entry in record[part].items()
            if not current(entry["source_sha256"], key if part == "tests" else entry["test"])]


def missing(record: dict) -> list:
    """For a GPU record, what its GPU tier records for the pages and has no entry for: each output that a
    page shows from a GPU run, and each page test of the GPU tier (a GPU page's script and notebook, a CPU
    page's GPU outputs printed by its script). [] for the CPU record."""
    if "compute_capability" not in record["environment"]:
        return []
    from guide import pages

    want = []
    for page, tier in pages.programs().items():
        shown = [oid for oid, gpu in pages.observed(page) if gpu]
        want += shown
        if tier == "gpu":
            want += [f"tests/test_pages.py::test_gpu_page_runs_as_one_script[{page}]",
                     f"tests/test_pages.py::test_gpu_notebook_runs[{page}]"]
        elif shown:
            want.append(f"tests/test_pages.py::test_cpu_page_prints_its_gpu_outputs_on_a_gpu[{page}]")
    return [key for key in want if key not in record["tests"] and key not in record["outputs"]]


def status() -> int:
    """Every recorded test and output, current or STALE, and what a GPU record lacks (MISSING); 1 when any
    entry is stale or missing."""
    bad = 0
    for name, record in all_records().items():
        old = set(stale(record))
        lacking = missing(record)
        bad += len(old) + len(lacking)
        for key in [*record["tests"], *record["outputs"]]:
            print(f"{name:22} {'STALE' if key in old else 'current':8} {key}")
        for key in lacking:
            print(f"{name:22} {'MISSING':8} {key}")
    if bad:
        print(f"{bad} stale or missing entries: record them with `make record` (CPU) or `make verify-gpu` (CUDA)")
    return 1 if bad else 0
