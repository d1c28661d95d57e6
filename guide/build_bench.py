"""Times what an author waits for: the strict build of the whole site (all languages), and the
`mkdocs serve` rebuild after a snippet edit, until the served page shows the edit.

    python -m guide build-bench [--runs N]

Prints the median of N runs of each, in seconds, after one warm-up.
"""
import logging
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from guide import project
SITE_SOURCES = ("mkdocs.yml", "docs", "snippets", "tests", "overrides", "records", "claims", "words")


def build_once(site_dir) -> float:
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    start = time.perf_counter()
    config = load_config(str(project.path("mkdocs.yml")), site_dir=site_dir, strict=True)
    build(config)
    return time.perf_counter() - start


def fetch(url) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode("utf-8")
    except OSError:
        return ""


def wait_for(url, text, timeout=120) -> float:
    start = time.perf_counter()
    while text not in fetch(url):
        if time.perf_counter() - start > timeout:
            raise project.GuideError(f"{url} did not show {text!r} within {timeout} s", "run `make serve` and read its log")
        time.sleep(0.02)
    return time.perf_counter()


def serve_rebuilds(runs) -> list:
    """Edit a snippet the home page includes, in a copy of the sources served by `mkdocs serve`."""
    with tempfile.TemporaryDirectory() as tmp:
        for name in SITE_SOURCES:
            (shutil.copytree if project.path(name).is_dir() else shutil.copy)(project.path(name), Path(tmp) / name)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        url = f"http://127.0.0.1:{port}/"
        server = subprocess.Popen([sys.executable, "-m", "mkdocs", "serve", "-a", f"127.0.0.1:{port}"], cwd=tmp,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
        try:
            wait_for(url, "causal")
            snippet = Path(tmp) / "snippets/quickstart.py"
            original = snippet.read_text(encoding="utf-8")
            times = []
            for run in range(runs + 1):
                marker = f"edit_{run}"
                start = time.perf_counter()
                snippet.write_text(original.replace("return q_idx >= kv_idx", f"return q_idx >= kv_idx  # {marker}", 1),
                                   encoding="utf-8")
                times.append(wait_for(url, marker) - start)
            return times[1:]  # the first edit is the warm-up
        finally:
            server.terminate()
            server.wait()


def main(runs: int) -> int:
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as site:
        build_once(site)  # warm-up: imports, jieba's dictionary
        times = [build_once(site) for _ in range(runs)]
    print(f"strict build of all languages: median {statistics.median(times):.2f} s "
          f"(min {min(times):.2f}, max {max(times):.2f}, {runs} runs)")
    times = serve_rebuilds(runs)
    print(f"mkdocs serve, snippet edit until the page shows it: median {statistics.median(times):.2f} s "
          f"(min {min(times):.2f}, max {max(times):.2f}, {runs} runs)")
    return 0
