"""Times the strict build of the whole site (all languages), the way an author runs it.

    python scripts/build_bench.py [--runs N]

Prints the median of N in-process builds after one warm-up build, in seconds.
"""
import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_once(site_dir) -> float:
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    start = time.perf_counter()
    config = load_config(str(ROOT / "mkdocs.yml"), site_dir=site_dir, strict=True)
    build(config)
    return time.perf_counter() - start


def main(argv) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/build_bench.py")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as site:
        build_once(site)  # warm-up: imports, jieba's dictionary
        times = [build_once(site) for _ in range(args.runs)]
    print(f"strict build of all languages: median {statistics.median(times):.2f} s "
          f"(min {min(times):.2f}, max {max(times):.2f}, {args.runs} runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
