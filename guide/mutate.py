"""The steps of `make mutate` that cosmic-ray has no option for.

    python -m guide.mutate config mutation/<module>.toml build/mutation/<module>.toml
        the session's configuration: mutation/<module>.toml, with the lines to mutate computed from the
        source: every line but those of the functions its `[guide] gpu-only` list names (their tests need
        a GPU, so a CPU run cannot see a mutant there), for cr-filter-lines
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
        coverage), the whole of tests/test_<module>.py, so that a survivor is one the whole file lets through
"""
import ast
import difflib
import json
import random
import subprocess
import sys
import tomllib
from pathlib import Path

OUT = Path("build/mutation")


def kept_lines(source: str, gpu_only) -> list:
    """Line ranges ("a-b") of the source outside the named top-level functions (decorators included)."""
    tree = ast.parse(source)
    found = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    missing = sorted(set(gpu_only) - set(found))
    if missing:
        raise SystemExit(f"error: gpu-only names {', '.join(missing)}, which the module does not define. "
                         f"Fix: correct the [guide] gpu-only list")
    dropped = set()
    for name in gpu_only:
        node = found[name]
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
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
    run = subprocess.run([sys.executable, "-m", "coverage", "run", f"--rcfile={OUT / 'coverage.rc'}",
                          f"--data-file={data}", f"--include={source}", "-m", "pytest", "-q", "-p",
                          "no:cacheprovider", tests])
    if run.returncode != 0:
        raise SystemExit(f"error: {tests} fails on the unmutated code. Fix: make it pass before mutating")
    from coverage import CoverageData

    found = CoverageData(str(data))
    found.read()
    by_line = found.contexts_by_lineno(str(source.resolve()))
    lines = {}
    for line, contexts in by_line.items():
        ids = sorted({f"{tests}::" + "::".join(c.split(".")[1:]) for c in contexts if c})
        if ids:
            lines[str(line)] = ids
    (OUT / f"{module}.cover.json").write_text(json.dumps({"source": before, "lines": lines}), encoding="utf-8")


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
    return _pytest(f"tests/test_{module}.py")


if __name__ == "__main__":
    action, *args = sys.argv[1:] or [""]
    if action == "config" and len(args) == 2:
        config(*args)
    elif action == "sample" and len(args) == 2:
        sample(args[0], float(args[1]))
    elif action == "cover" and len(args) == 1:
        cover(args[0])
    elif action == "test" and len(args) == 1:
        sys.exit(test(args[0]))
    else:
        raise SystemExit("usage: python -m guide.mutate config SRC.toml OUT.toml | sample DB.sqlite KEEP | "
                         "cover MODULE | test MODULE")
