"""The steps of `make mutate` that cosmic-ray has no option for.

    python -m guide.mutate config mutation/<module>.toml build/mutation/<module>.toml
        the session's configuration: mutation/<module>.toml, with the lines to mutate computed from the
        source: every line but those of the functions, classes and module-level names its `[guide] gpu-only`
        list names (their tests need a GPU, so a CPU run cannot see a mutant there), for cr-filter-lines
    python -m guide.mutate sample build/mutation/<module>.sqlite KEEP
        with KEEP < 1, marks as skipped the -1 twin of each NumberReplacer mutant (its +1 twin stays) and
        a seeded random share 1 - KEEP of the other mutants; KEEP = 1 keeps all
    python -m guide.mutate cover <module>
        runs tests/test_<module>.py once under coverage, each line recorded with the test functions that
        ran it, into build/mutation/<module>.cover.json with the unmutated source beside it
    python -m guide.mutate test <module>
        the test command of each mutant: first only the test functions that ran the mutated lines, the
        quickest first, stopping at the first failure (the mutant is killed); if they all pass, or no test
        ran those lines (code reached only in a subprocess or under torch.compile's tracing escapes
        coverage), the whole of tests/test_<module>.py, then the programs of the CPU pages that show the
        module (tests/test_pages.py, each output a page shows printed by its program), so that a survivor
        is one `make test` lets through
    python -m guide.mutate export MODULE
        the pending mutants of build/mutation/<module>.sqlite, each as the lines it changes in
        snippets/<module>.py, into build/mutation/<module>.jobs.json
    python -m guide.mutate run MODULE... [--jobs N] [--until SECONDS] [--timeout SECONDS]
        each exported mutant of the modules, N at a time, each in its own copy of the checkout
        (build/mutation/workers/), tested with `guide.mutate test`; one line per mutant appended to
        build/mutation/results.jsonl, where a later run resumes (a mutant that timed out, a machine too
        busy perhaps, is tried again). A module without its cover file (its
        tests fail unmutated) is left out and named. Past --until seconds no new mutant starts.
        Needs only the standard library and the tests' packages, so it also runs where cosmic-ray is not
    python -m guide.mutate import MODULE
        the results of build/mutation/results.jsonl into build/mutation/<module>.sqlite (exit 0:
        survived, else killed; a timeout counts as killed and is counted apart), for cr-report
"""
import ast
import difflib
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

OUT = Path("build/mutation")


def kept_lines(source: str, gpu_only) -> list:
    """Line ranges ("a-b") of the source outside the named top-level functions and classes (decorators
    included) and module-level names (an assignment, all its lines: a constant only the GPU code reads)."""
    tree = ast.parse(source)
    found = {node.name: node for node in tree.body
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    for node in tree.body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        names = [n for t in targets for n in (t.elts if isinstance(t, ast.Tuple) else [t])]  # A, B = 1, 2
        found.update({name.id: node for name in names if isinstance(name, ast.Name)})
    missing = sorted(set(gpu_only) - set(found))
    if missing:
        raise SystemExit(f"error: gpu-only names {', '.join(missing)}, which the module does not define. "
                         f"Fix: correct the [guide] gpu-only list")
    dropped = set()
    for name in gpu_only:
        node = found[name]
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        dropped.update(range(start, node.end_lineno + 1))
    ranges, start = [], None
    last = len(source.splitlines())
    for line in range(1, last + 2):
        inside = line <= last and line not in dropped
        if inside and start is None:
            start = line
        elif not inside and start is not None:
            ranges.append(f"{start}-{line - 1}")
            start = None
    return ranges


def config(source_toml: str, out_toml: str) -> None:
    text = Path(source_toml).read_text(encoding="utf-8")
    settings = tomllib.loads(text)
    gpu_only = settings.get("guide", {}).get("gpu-only", [])
    module = settings["cosmic-ray"]["module-path"]
    out = text
    if gpu_only:
        ranges = kept_lines(Path(module).read_text(encoding="utf-8"), gpu_only)
        out += ("\n# Computed by guide.mutate from [guide] gpu-only: the lines outside those functions.\n"
                "[cosmic-ray.filters.line-filter.lines]\n"
                f'"{module}" = [{", ".join(repr(r).replace(chr(39), chr(34)) for r in ranges)}]\n')
    Path(out_toml).parent.mkdir(parents=True, exist_ok=True)
    Path(out_toml).write_text(out, encoding="utf-8")


def sample(path: str, keep: float) -> None:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    if keep >= 1:
        return
    rng = random.Random(0)
    with use_db(path, WorkDB.Mode.open) as db:
        for item in sorted(db.pending_work_items, key=lambda i: i.job_id):
            m = item.mutations[0]
            if m.operator_name == "core/NumberReplacer" and m.occurrence % 2 == 1:
                why = "NumberReplacer -1 twin"
            elif rng.random() >= keep:
                why = f"random sample, keep {keep}"
            else:
                continue
            db.set_result(item.job_id, WorkResult(output=f"sampled out: {why}", worker_outcome=WorkerOutcome.SKIPPED))


def _pytest(*args) -> int:
    return subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *args]).returncode


def cover(module: str) -> None:
    source, tests = Path(f"snippets/{module}.py"), f"tests/test_{module}.py"
    data = OUT / f"{module}.coverage"
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "coverage.rc").write_text("[run]\ndynamic_context = test_function\n", encoding="utf-8")
    before = source.read_text(encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "coverage", "run", f"--rcfile={OUT / 'coverage.rc'}",
                          f"--data-file={data}", f"--include={source}", "-m", "pytest", "-q", "-p",
                           "no:cacheprovider", tests])
    if proc.returncode != 0:
        raise SystemExit(f"error: {tests} fails on the unmutated code. Fix: make it pass before mutating")
    from coverage import CoverageData

    found = CoverageData(str(data))
    found.read()
    by_line = found.contexts_by_lineno(str(source.resolve()))
    lines = {}
    for line, contexts in by_line.items():
        # coverage names a context after the innermost test_* function: a hypothesis test's is hypothesis's
        # own (ConjectureRunner.test_function), which no test id matches; such lines go to the whole file
        ids = sorted({f"{tests}::" + "::".join(c.split(".")[1:]) for c in contexts
                      if c.startswith(f"test_{module}.")})
        if ids:
            lines[str(line)] = ids
    (OUT / f"{module}.cover.json").write_text(json.dumps({"source": before, "lines": lines}), encoding="utf-8")


def _cover_or_none(module: str) -> bool:
    try:
        cover(module)
    except SystemExit as stop:
        print(stop, flush=True)
        return False
    return True


def changed_lines(before: str, after: str) -> set:
    """The lines (1-based, of `before`) that a mutation replaced, deleted or inserted text at."""
    changed = set()
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag != "equal":
            changed.update(range(i1 + 1, max(i2, i1 + 1) + 1))
    return changed


def seconds_by_test() -> dict:
    """Each test function's time in the CPU record (its parameter cases summed), to run the quickest first."""
    try:
        tests = json.loads(Path("records/cpu.json").read_text(encoding="utf-8"))["tests"]
    except (OSError, ValueError, KeyError):
        return {}
    seconds = {}
    for nodeid, entry in tests.items():
        key = nodeid.split("[")[0]
        seconds[key] = seconds.get(key, 0) + entry.get("seconds", 0)
    return seconds


def test(module: str) -> int:
    cover_file = OUT / f"{module}.cover.json"
    if not cover_file.exists():
        raise SystemExit(f"error: {cover_file} is missing. Fix: python -m guide.mutate cover {module}")
    data = json.loads(cover_file.read_text(encoding="utf-8"))
    after = Path(f"snippets/{module}.py").read_text(encoding="utf-8")
    seconds = seconds_by_test()
    chosen = sorted({t for line in changed_lines(data["source"], after) for t in data["lines"].get(str(line), [])},
                    key=lambda t: (seconds.get(t, 1e9), t))
    if chosen:
        print(f"tests that ran the mutated lines: {', '.join(chosen)}", flush=True)
        code = _pytest(*chosen)
        if code not in (0, 4, 5):  # 4, 5: a test id pytest did not take; let the whole file decide
            return code
    print(f"the whole of tests/test_{module}.py", flush=True)
    code = _pytest(f"tests/test_{module}.py")
    pages = pages_showing(module)
    if code != 0 or not pages:
        return code
    print(f"the programs of the pages that show it: {', '.join(pages)}", flush=True)
    code = _pytest("tests/test_pages.py", "-k", f"test_cpu_page_runs_as_a_notebook_and_prints_what_it_shows and ({' or '.join(pages)})")
    return 0 if code == 5 else code  # 5: none collected, the pages are GPU pages


def pages_showing(module: str) -> list:
    """The English pages whose program or shell commands run snippets/<module>.py (records.page_sources)."""
    from guide import project, records

    if not Path("docs", "en").is_dir():
        return []
    source = project.path("snippets", f"{module}.py")
    return sorted(page.name for page in project.path("docs", "en").glob("*.md")
                  if source in records.page_sources(page.name))


def export(module: str) -> None:
    import cosmic_ray.plugins
    from cosmic_ray.mutating import mutate_code
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    source = Path(f"snippets/{module}.py").read_text(encoding="utf-8")
    before = source.splitlines(keepends=True)
    jobs = []
    with use_db(str(OUT / f"{module}.sqlite"), WorkDB.Mode.open) as db:
        for item in sorted(db.pending_work_items, key=lambda i: i.job_id):
            (m,) = item.mutations
            operator = cosmic_ray.plugins.get_operator(m.operator_name)(**(m.operator_args or {}))
            after = mutate_code(source, operator, m.occurrence)
            if after is None:
                db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.NO_TEST))
                continue
            lines = after.splitlines(keepends=True)
            matcher = difflib.SequenceMatcher(None, before, lines, autojunk=False)
            edits = [[i1, i2, lines[j1:j2]] for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]
            jobs.append({"job": item.job_id, "edits": edits})
    (OUT / f"{module}.jobs.json").write_text(json.dumps({"module": module, "source": source, "jobs": jobs}),
                                             encoding="utf-8")
    print(f"{module}: {len(jobs)} mutants exported")


def mutated(source: str, edits) -> str:
    """The source with each edit [i1, i2, lines] (lines i1..i2 of the source replaced) applied."""
    lines = source.splitlines(keepends=True)
    for i1, i2, new in sorted(edits, reverse=True):
        lines[i1:i2] = new
    return "".join(lines)


def _results(path: Path) -> list:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _worker_copy(root: Path, copy: Path) -> Path:
    """A copy of the checkout for one worker: sources, tests, records and cover files; the venv and the
    upstream wheels (build/upstream) linked."""
    if copy.exists():
        shutil.rmtree(copy)
    skip = shutil.ignore_patterns(".git", "build", "site", ".venv", "__pycache__", ".pytest_cache", ".hypothesis",
                                  ".fa4*", ".whl", "out")
    shutil.copytree(root, copy, ignore=skip, symlinks=True)
    (copy / "build" / "mutation").mkdir(parents=True)
    for cover_file in (root / OUT).glob("*.cover.json"):
        shutil.copy2(cover_file, copy / OUT / cover_file.name)
    for shared in (".venv", "build/upstream"):  # the environment, and the upstream wheels tests read
        if (root / shared).exists():
            (copy / shared).symlink_to((root / shared).resolve())
    return copy


def _test_one(copy: Path, module: str, source: str, edits, timeout: float) -> tuple:
    target = copy / "snippets" / f"{module}.py"
    target.write_text(mutated(source, edits), encoding="utf-8")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "guide.mutate", "test", module], cwd=copy, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        code, output = "timeout", f"timed out after {timeout:.0f} s\n{output}"
    finally:
        target.write_text(source, encoding="utf-8")
    return code, output[-2000:], round(time.monotonic() - start, 1)


def run(modules, jobs: int = 1, until: float = None, timeout: float = 900) -> None:
    start = time.monotonic()
    results = OUT / "results.jsonl"
    done = {r["job"] for r in _results(results) if r["code"] != "timeout"}  # a timed-out mutant is tried again
    tasks, sources = [], {}
    for module in modules:
        jobs_file, cover_file = OUT / f"{module}.jobs.json", OUT / f"{module}.cover.json"
        if not jobs_file.exists():
            raise SystemExit(f"error: {jobs_file} is missing. Fix: python -m guide.mutate export {module}")
        data = json.loads(jobs_file.read_text(encoding="utf-8"))
        if Path(f"snippets/{module}.py").read_text(encoding="utf-8") != data["source"]:
            raise SystemExit(f"error: snippets/{module}.py changed since its mutants were exported. "
                             f"Fix: make mutate MUTATE={module}")
        if not cover_file.exists() or json.loads(cover_file.read_text(encoding="utf-8"))["source"] != data["source"]:
            print(f"{module}: left out, no cover file for this source (its tests fail unmutated, or "
                  f"python -m guide.mutate cover {module} was not run)", flush=True)
            continue
        sources[module] = data["source"]
        tasks += [(module, job) for job in data["jobs"] if job["job"] not in done]
    random.Random(0).shuffle(tasks)  # modules mixed, so that no module's slow survivors come last together
    print(f"{len(tasks)} mutants to test, {jobs} at a time", flush=True)
    copies = queue.Queue()
    for k in range(min(jobs, len(tasks))):
        copies.put(_worker_copy(Path.cwd(), OUT / "workers" / str(k)))
    lock = threading.Lock()
    counts = {"tested": 0, "left": 0}

    def one(task):
        module, job = task
        if until is not None and time.monotonic() - start > until:
            with lock:
                counts["left"] += 1
            return
        copy = copies.get()
        try:
            code, output, seconds = _test_one(copy, module, sources[module], job["edits"], timeout)
        finally:
            copies.put(copy)
        line = json.dumps({"job": job["job"], "module": module, "code": code, "seconds": seconds, "output": output})
        with lock, results.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            counts["tested"] += 1

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        list(pool.map(one, tasks))
    print(f"{counts['tested']} tested, {counts['left']} left for a later run, in {time.monotonic() - start:.0f} s")


def load(module: str) -> None:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    data = json.loads((OUT / f"{module}.jobs.json").read_text(encoding="utf-8"))
    edits = {job["job"]: job["edits"] for job in data["jobs"]}
    found = {r["job"]: r for r in _results(OUT / "results.jsonl") if r["job"] in edits}  # the last line counts
    path = f"snippets/{module}.py"
    with use_db(str(OUT / f"{module}.sqlite"), WorkDB.Mode.open) as db:
        for job, r in found.items():
            diff = "".join(difflib.unified_diff(data["source"].splitlines(keepends=True),
                                                mutated(data["source"], edits[job]).splitlines(keepends=True),
                                                f"a/{path}", f"b/{path}"))
            outcome = TestOutcome.SURVIVED if r["code"] == 0 else TestOutcome.KILLED
            db.set_result(job, WorkResult(worker_outcome=WorkerOutcome.NORMAL, test_outcome=outcome,
                                          output=r["output"], diff=diff))
    seconds = sum(r["seconds"] for r in found.values())
    survived = sum(r["code"] == 0 for r in found.values())
    timeouts = sum(r["code"] == "timeout" for r in found.values())
    print(f"{module}: {len(found)} of {len(edits)} mutants tested, {len(found) - survived} killed "
          f"({timeouts} by a timeout), {survived} survived, {seconds:.0f} s of tests")


if __name__ == "__main__":
    action, *args = sys.argv[1:] or [""]
    options = {}
    while len(args) >= 2 and args[-2] in ("--jobs", "--until", "--timeout"):
        options[args[-2][2:]] = float(args[-1])
        args = args[:-2]
    if action == "config" and len(args) == 2:
        config(*args)
    elif action == "sample" and len(args) == 2:
        sample(args[0], float(args[1]))
    elif action == "cover" and args:
        with ThreadPoolExecutor(int(options.get("jobs", 1))) as pool:
            failed = [m for m, ok in zip(args, pool.map(_cover_or_none, args)) if not ok]
        if failed:
            raise SystemExit(f"error: the tests of {', '.join(failed)} fail on the unmutated code. "
                             f"Fix: make them pass before mutating")
    elif action == "test" and len(args) == 1:
        sys.exit(test(args[0]))
    elif action == "export" and len(args) == 1:
        export(args[0])
    elif action == "run" and args:
        run(args, int(options.get("jobs", 1)), options.get("until"), options.get("timeout", 900))
    elif action == "import" and len(args) == 1:
        load(args[0])
    else:
        raise SystemExit("usage: python -m guide.mutate config SRC.toml OUT.toml | sample DB.sqlite KEEP | "
                         "cover MODULE... [--jobs N] | test MODULE | export MODULE | "
                         "run MODULE... [--jobs N] [--until S] [--timeout S] | import MODULE")
