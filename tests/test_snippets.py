"""The snippets package as a whole: every module runs as a program and is listed."""
import pkgutil

import pytest

import snippets
from tests.helpers import ROOT, python

MODULES = [m.name for m in pkgutil.iter_modules(snippets.__path__) if not m.name.startswith("_")]


def test_python_m_snippets_lists_every_module():
    result = python("-m snippets")
    assert result.returncode == 0
    for name in MODULES:
        assert f"python -m snippets.{name}" in result.stdout


def test_every_module_has_a_test_module():
    for name in MODULES:
        assert (ROOT / "tests" / f"test_{name}.py").exists(), f"tests/test_{name}.py is missing"


@pytest.mark.parametrize("name", ["quickstart", "troubleshooting", "backend_config list"])
def test_module_runs_as_a_program(name):
    result = python(f"-m snippets.{name}")
    assert result.returncode == 0, result.stderr
    assert result.stdout


def test_unknown_subcommand_is_one_line():
    result = python("-m snippets frobnicate")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
