"""Recorded outputs: what a real run printed, with its environment and the hash of the code that ran.

    python scripts/records.py status     # list every recorded output and whether it is current

A record is records/<environment>.json. Each output is keyed "<module>.<name>", where
<module> is the snippets module whose code produced it; the hash of snippets/<module>.py
at recording time tells whether the output is still current.
"""
import datetime
import hashlib
import json
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "records"


def source_hash(output_id: str) -> str:
    module = output_id.split(".", 1)[0]
    path = ROOT / "snippets" / f"{module}.py"
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


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
    try:
        import diffusers

        env["diffusers"] = diffusers.__version__
    except ImportError:
        pass
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        env.update(gpu=torch.cuda.get_device_name(), compute_capability=f"{major}.{minor}",
                   cuda=torch.version.cuda)
        try:
            import triton

            env["triton"] = triton.__version__
        except ImportError:
            pass
    else:
        env["gpu"] = "none (CPU)"
    return env


def load(name: str) -> dict:
    path = RECORDS / f"{name}.json"
    if not path.exists():
        return {"environment": {}, "outputs": {}}
    return json.loads(path.read_text(encoding="utf-8"))


def save(name: str, outputs: dict) -> Path:
    """Merge this run's outputs into records/<name>.json under a fresh environment stamp."""
    record = load(name)
    record["environment"] = environment(name)
    record["outputs"].update(outputs)
    record["outputs"] = dict(sorted(record["outputs"].items()))
    RECORDS.mkdir(exist_ok=True)
    path = RECORDS / f"{name}.json"
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def all_records() -> dict:
    return {p.stem: load(p.stem) for p in sorted(RECORDS.glob("*.json"))}


def stale(record: dict) -> list:
    """The output ids whose snippet changed since they were recorded."""
    return [oid for oid, out in record["outputs"].items()
            if not (ROOT / "snippets" / f"{oid.split('.', 1)[0]}.py").exists()
            or out["source_sha256"] != source_hash(oid)]


def main(argv) -> int:
    if argv != ["status"]:
        print("error: unknown command. Fix: python scripts/records.py status", file=sys.stderr)
        return 2
    bad = 0
    for name, record in all_records().items():
        old = set(stale(record))
        bad += len(old)
        for oid in record["outputs"]:
            print(f"{name:8} {'STALE' if oid in old else 'current':8} {oid}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
