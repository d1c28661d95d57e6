"""The two steps of `make mutate` that cosmic-ray has no option for.

    python -m guide.mutate config mutation/<module>.toml build/mutation/<module>.toml
        the session's configuration: mutation/<module>.toml, with the lines to mutate computed from the
        source: every line but those of the functions its `[guide] gpu-only` list names (their tests need
        a GPU, so a CPU run cannot see a mutant there), for cr-filter-lines
    python -m guide.mutate sample build/mutation/<module>.sqlite KEEP
        with KEEP < 1, marks as skipped the -1 twin of each NumberReplacer mutant (its +1 twin stays) and
        a seeded random share 1 - KEEP of the other mutants; KEEP = 1 keeps all
"""
import ast
import random
import sys
import tomllib
from pathlib import Path


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


if __name__ == "__main__":
    action, *args = sys.argv[1:] or [""]
    if action == "config" and len(args) == 2:
        config(*args)
    elif action == "sample" and len(args) == 2:
        sample(args[0], float(args[1]))
    else:
        raise SystemExit("usage: python -m guide.mutate config SRC.toml OUT.toml | sample DB.sqlite KEEP")
