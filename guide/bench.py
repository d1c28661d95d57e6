"""Benchmark records (records/bench/<gpu>.json): written by `python -m guide bench record`, which
runs the suite of snippets/bench.py on a CUDA GPU, and read by the performance page and the tests.

    python -m guide bench record [--quick] [--out FILE]   # on a CUDA machine (make bench)
    python -m guide bench report                          # each record: GPU, date, complete, current
"""
import datetime
import json
from pathlib import Path

from guide import project, records
from guide.project import GuideError


def folder() -> Path:
    return records.folder() / "bench"


def load_all() -> dict:
    """Full-suite records by GPU record name (the --quick records are for trying the suite)."""
    found = {}
    for path in sorted(folder().glob("*.json")):
        if path.stem.endswith("-quick"):
            continue
        record = project.parsed(path)
        if not isinstance(record, dict) or not isinstance(record.get("cases"), list) or "environment" not in record:
            raise GuideError(f"records/bench/{path.name} is not a benchmark record",
                             "restore it from git or run `make bench` again")
        found[path.stem] = record
    return found


def quick_records() -> list:
    return [project.parsed(p) for p in sorted(folder().glob("*-quick.json"))]


def current(record) -> bool:
    return record.get("source_sha256") == records.source_hash("bench")


def cases(record, group) -> list:
    return [c for c in record["cases"] if c["group"] == group]


def table(record, group) -> dict:
    """{shape as JSON: {variant: case}} in the order measured."""
    rows = {}
    for case in cases(record, group):
        rows.setdefault(json.dumps(case["shape"], sort_keys=True), {})[case["variant"]] = case
    return rows


def speedup(row, variant, baseline, key):
    """How many times faster variant is than baseline (baseline time / variant time); None if missing."""
    if key in row.get(variant, {}) and key in row.get(baseline, {}):
        return row[baseline][key] / row[variant][key]
    return None


def ratios(record, group, variant, baseline, key) -> list:
    """speedup() at every shape of a group, in the order measured."""
    return [speedup(row, variant, baseline, key) for row in table(record, group).values()]


def report() -> int:
    for name, record in load_all().items():
        print(f"{name:24} {record['date']} complete={record.get('complete', False)} "
              f"current={current(record)} cases={len(record['cases'])} seconds={record['seconds']:.0f}")
    return 0


def record(quick=False, out=None) -> int:
    """Run the suite of snippets/bench.py and write its record, saved after every case."""
    import torch

    if not torch.cuda.is_available():
        raise GuideError("no CUDA GPU", "run the benchmarks on a machine with an NVIDIA GPU (make bench)")
    from snippets import bench

    name = records.gpu_name()
    out = Path(out) if out else folder() / f"{name}{'-quick' if quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    stamp = {"environment": records.environment(name), "source_sha256": records.source_hash("bench"),
             "date": datetime.date.today().isoformat()}

    def save(result):
        out.write_text(json.dumps({**stamp, **result}, indent=1) + "\n", encoding="utf-8")

    result = bench.suite(quick, save=save)
    print(f"recorded {len(result['cases'])} results in {out} ({result['seconds']:.0f} s)")
    return 0
