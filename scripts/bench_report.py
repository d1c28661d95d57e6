"""Reads the benchmark records (records/bench/<gpu>.json, written by `make bench`).

    python scripts/bench_report.py      # each record: GPU, date, complete, current, cases

The performance page (hooks/performance.py) and the tests read the numbers through these
functions, so that every number on the page comes from a record.
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from scripts import records  # noqa: E402

BENCH = records.RECORDS / "bench"


def load_all() -> dict:
    """Full-suite records by GPU record name (the --quick records are for trying the suite)."""
    return {p.stem: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted(BENCH.glob("*.json")) if not p.stem.endswith("-quick")}


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


def speedup(row, variant, baseline, key) -> float:
    """How many times faster variant is than baseline (baseline time / variant time); None if missing."""
    if key in row.get(variant, {}) and key in row.get(baseline, {}):
        return row[baseline][key] / row[variant][key]
    return None


def ratios(record, group, variant, baseline, key) -> list:
    """speedup() at every shape of a group, in the order measured."""
    return [speedup(row, variant, baseline, key) for row in table(record, group).values()]


def main(argv) -> int:
    if argv:
        print("error: no arguments. Fix: python scripts/bench_report.py", file=sys.stderr)
        return 2
    for name, record in load_all().items():
        print(f"{name:24} {record['date']} complete={record.get('complete', False)} "
              f"current={current(record)} cases={len(record['cases'])} seconds={record['seconds']:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
