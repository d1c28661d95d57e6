"""Small helpers shared by the tests: run a command, read a snippet section."""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def url_of(lang, page) -> str:
    """The site path of a page ('kernels.md' or 'kernels') in a language: /kernels/, /zh/kernels/."""
    stem = page.removesuffix(".md")
    return ("/" if lang == "en" else f"/{lang}/") + ("" if stem == "index" else f"{stem}/")


def section(path, name) -> str:
    """The lines between `--8<-- [start:name]` and `--8<-- [end:name]` of a snippet file."""
    text = (ROOT / path).read_text(encoding="utf-8")
    match = re.search(rf"--8<-- \[start:{name}\]\n(.*?)\n[^\n]*--8<-- \[end:{name}\]", text, re.S)
    assert match, f"{path} has no section {name!r}"
    return match.group(1)


def sh(script, cwd=None, env=None, timeout=300, start=False):
    """Run a shell snippet with the test's Python first on PATH, as a reader's shell would; with
    start=True, start it and return the running process, its output to read as it comes."""
    full_env = {**os.environ, **(env or {})}
    full_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{full_env['PATH']}"
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    if start:
        return subprocess.Popen(["bash", "-c", script], cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=full_env, capture_output=True,
                          text=True, timeout=timeout)


def python(*args, **kwargs):
    return sh(" ".join(["python", *args]), **kwargs)
