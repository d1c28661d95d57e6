import shutil
import subprocess
import sys

import pytest

from tests.helpers import ROOT


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """The site, built strictly once per test run."""
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
                            cwd=ROOT, capture_output=True, text=True,
                            env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """The guide working on a copy of the checkout's data, which a test may change or break."""
    from guide import project

    for name in ("snippets", "tests", "records", "claims", "words", "docs"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "mkdocs.yml", tmp_path)
    monkeypatch.setattr(project, "_root", tmp_path)
    return tmp_path
