import json
import re

import pytest

from tests.helpers import python, sh


def test_doctor_on_this_machine(observe):
    result = python("-m snippets doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    status = {line.split()[1]: line.split()[0] for line in result.stdout.splitlines()}
    assert status["torch"] == "ok" and status["flex_attention"] == "ok"
    assert "Traceback" not in result.stderr
    observe("doctor.report", result.stdout.strip())


def test_doctor_json():
    report = json.loads(python("-m snippets doctor --json").stdout)
    assert report["usable"] is True
    assert [c["check"] for c in report["checks"]][:2] == ["torch", "cuda"]


def test_doctor_without_torch_says_so_and_exits_1(tmp_path):
    (tmp_path / "torch.py").write_text("raise ImportError('blocked')\n")
    (tmp_path / "sitecustomize.py").write_text(
        "import importlib.util, sys\n"
        "orig = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda n, *a: None if n.split('.')[0] == 'torch' else orig(n, *a)\n"
        "sys.modules['torch'] = None\n")
    result = sh(f"PYTHONPATH={tmp_path}:$PYTHONPATH python -m snippets doctor")
    assert result.returncode == 1
    assert "fail  torch" in result.stdout and "PyTorch is not installed" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_doctor_without_diffusers_warns_but_passes(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(
        "import importlib.util\n"
        "orig = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda n, *a: None if n.split('.')[0] == 'diffusers' else orig(n, *a)\n")
    result = sh(f"PYTHONPATH={tmp_path}:$PYTHONPATH python -m snippets doctor")
    assert result.returncode == 0
    assert "warn  diffusers" in result.stdout


def test_doctor_unknown_option_is_one_line():
    result = python("-m snippets doctor --frobnicate")
    assert result.returncode == 2 and result.stderr.count("\n") == 1


def test_fixes_link_to_sections_that_exist_in_every_language():
    import re

    import yaml

    from snippets import doctor
    from tests.helpers import ROOT

    assert yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))["site_url"] == doctor.GUIDE
    for key, (target, texts) in doctor.FIXES.items():
        assert set(texts) == set(doctor.LANGS), key
        page, anchor = target.split("#")
        for lang in doctor.LANGS:
            text = (ROOT / "docs" / lang / page).read_text(encoding="utf-8")
            assert re.search(rf"^#+ .*\{{#{anchor}\}}$", text, re.M), f"{lang}/{page} has no section #{anchor}"


def test_lang_gives_the_fix_and_link_in_that_language():
    result = python("-m snippets doctor --json --lang zh")
    fixes = [c["fix"] for c in json.loads(result.stdout)["checks"] if c["fix"]]
    if not fixes:  # a machine where every check is ok has no fix to show
        return
    assert all("https://flexattention-guide.github.io/zh/" in f for f in fixes), fixes
    assert all(re.search("[\u4e00-\u9fff]", f) for f in fixes), fixes


def test_unknown_language_is_one_line():
    result = python("-m snippets doctor --lang xx")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "invalid choice" in result.stderr


@pytest.mark.gpu
def test_doctor_on_a_gpu(observe):
    result = python("-m snippets doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    status = {line.split()[1]: line.split()[0] for line in result.stdout.splitlines()}
    assert all(status[c] == "ok" for c in ("torch", "cuda", "triton", "flex_attention", "compile_cache")), status
    assert "compiled flex_attention ran on the GPU" in result.stdout
    observe("doctor.report_gpu", result.stdout.strip())
