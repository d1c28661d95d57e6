import json
import re

import pytest

from tests.helpers import ROOT, python, sh


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
    assert all(status[c] == "ok" for c in ("torch", "cuda", "triton", "flex_attention", "compile_cache",
                                           "recompile_limit", "shared_memory", "flash_backend")), status
    import torch

    limit = torch.cuda.get_device_properties(0).shared_memory_per_block_optin  # from the driver, not doctor
    assert f"{limit // 1024} KiB of shared memory per block" in result.stdout
    assert "compiled flex_attention ran on the GPU" in result.stdout
    import importlib.metadata

    assert f"flash-attn-4 {importlib.metadata.version('flash-attn-4')}: BACKEND='FLASH' available" in result.stdout
    observe("doctor.report_gpu", result.stdout.strip())


def test_doctor_statuses_on_a_cpu_machine():
    import torch

    if torch.cuda.is_available():
        pytest.skip("the CPU report; test_doctor_on_a_gpu checks the GPU one")
    report = json.loads(python("-m snippets doctor --json").stdout)
    assert {c["check"]: c["status"] for c in report["checks"]} == {
        "torch": "ok", "cuda": "warn", "triton": "ok", "flex_attention": "ok",
        "compile_cache": "ok", "recompile_limit": "ok", "shared_memory": "ok", "flash_backend": "ok", "diffusers": "ok",
        "float32_precision": "ok"}
    messages = {c["check"]: c["message"] for c in report["checks"]}
    assert messages["triton"] == "Triton not needed on CPU (the CPU kernels are C++)"
    assert messages["float32_precision"] == "float32 matmul precision is 'highest'"


@pytest.mark.parametrize("version, status", [("2.4.1", "fail"), ("2.5.0", "ok"), ("2.13.0", "ok")])
def test_torch_older_than_2_5_fails(monkeypatch, version, status):
    import torch

    from snippets import doctor

    monkeypatch.setattr(torch, "__version__", version)
    got = doctor.check_torch()
    assert got[0] == status and got[2] == ("torch_old" if status == "fail" else "")


@pytest.mark.parametrize("limit, status", [(8, "ok"), (64, "ok"), (7, "warn"), (1, "warn")])
def test_a_recompile_limit_below_the_default_warns_with_the_recompiles_section(limit, status):
    import torch._dynamo

    from snippets import doctor

    # PyTorch's default, 8, is checked in a fresh process by test_decoding's test_the_recompile_limit_shown_is_pytorchs_default
    with torch._dynamo.config.patch(recompile_limit=limit):
        got = doctor.check_recompile_limit()
    assert got[0] == status and got[2] == ("recompiles" if status == "warn" else "")
    assert str(limit) in got[1]


@pytest.mark.parametrize("kib, status", [(228, "ok"), (227, "ok"), (226, "warn"), (163, "warn"), (99, "warn")])
def test_little_shared_memory_per_block_warns_with_the_out_of_resources_section(monkeypatch, kib, status):
    import types

    import torch

    from snippets import doctor

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: types.SimpleNamespace(shared_memory_per_block_optin=kib * 1024))
    got = doctor.check_shared_memory()
    assert got[0] == status and got[2] == ("smem" if status == "warn" else "")
    assert f"{kib} KiB" in got[1]


@pytest.fixture(scope="module")
def flash_capabilities():
    """The compute capabilities (major) where flash-attn-4 4.0.0b36 serves both a BlockMask and a
    score_mod, read from its released wheel: those it accepts, less those with either limit."""
    from tests.upstream import flash_attn_4_source

    source = flash_attn_4_source()
    accepted = set(eval(re.search(r"assert arch // 10 in (\[[\d, ]+\]), \"Unsupported", source).group(1)))
    no_score_mod = {int(m) for m in re.findall(r"if arch // 10 == (\d+):\s+raise NotImplementedError\(\"Custom "
                                                 r"user-provided score_mod", source)}
    no_block_mask = {int(m) for m in re.findall(r"elif arch // 10 == (\d+):\s+# [^\n]*\n\s+assert not "
                                                  r"use_block_sparsity", source)}
    assert no_score_mod and no_block_mask, "flash-attn-4's source changed shape"
    return accepted - no_score_mod - no_block_mask


@pytest.mark.parametrize("installed, capability, status, fix", [
    (False, (9, 0), "warn", "flash"), (True, (9, 0), "ok", ""), (True, (10, 0), "ok", ""),
    (True, (8, 0), "warn", "flash_gpus"), (True, (12, 0), "warn", "flash_gpus")])
def test_the_flash_backend_check_says_whether_flash_attn_4_serves_this_gpu(
        monkeypatch, flash_capabilities, installed, capability, status, fix):
    import importlib.metadata
    import importlib.util

    import torch

    from snippets import doctor

    assert set(doctor.FLASH_COMPUTE_CAPABILITIES) == flash_capabilities
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda: capability)
    find_spec, version = importlib.util.find_spec, importlib.metadata.version
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: (object() if installed else None) if name == "flash_attn.cute"
                        else find_spec(name, *a))
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "4.0.0b36" if name == "flash-attn-4" else version(name))
    got = doctor.check_flash_backend()
    assert got[0] == status and got[2] == fix, got
    assert ("not installed" in got[1]) == (not installed)
    if installed:
        assert f"compute capability {capability[0]}.{capability[1]}" in got[1]


@pytest.mark.parametrize("precision, status", [("highest", "ok"), ("high", "warn"), ("medium", "warn")])
def test_precision_below_highest_warns_about_tf32(monkeypatch, precision, status):
    import torch

    from snippets import doctor

    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: precision)
    got = doctor.check_precision()
    assert got[0] == status and got[2] == ("tf32" if status == "warn" else "")


def test_fix_links_are_the_site_urls_of_their_sections():
    from snippets import doctor
    from tests.helpers import url_of

    for target, _ in doctor.FIXES.values():
        page, anchor = target.split("#")
        for lang in doctor.LANGS:
            assert doctor.link(target, lang) == doctor.GUIDE.rstrip("/") + url_of(lang, page) + "#" + anchor


def test_a_check_that_raises_fails_with_the_first_line_of_its_error(monkeypatch):
    from snippets import doctor

    def broken():
        raise RuntimeError("first line\nsecond line")

    monkeypatch.setitem(doctor.CHECKS, "diffusers", broken)
    result = {r["check"]: r for r in doctor.diagnose()}["diffusers"]
    assert (result["status"], result["message"]) == ("fail", "RuntimeError: first line")
    assert result["fix"] == doctor.fix_text("broken", "en")


def test_text_report_shows_a_fix_after_a_message_only_where_there_is_one(capsys):
    from snippets import doctor

    assert doctor.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    results = doctor.diagnose()
    assert len(lines) == len(results) + 1 and lines[-1].startswith("next  your_mask")
    for line, r in zip(lines, results):
        assert line.split()[:2] == [r["status"], r["check"]]
        assert line.endswith(f"{r['message']} -> {r['fix']}" if r["fix"] else r["message"]), line


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_doctor_ends_with_the_mask_checker_whose_command_runs_as_printed(lang):
    """The last line names the checker's command; with the placeholders filled in, the checker itself
    (not doctor) takes it and passes a mask of the page's own file, and the link is the checker's page."""
    report = python(f"-m snippets doctor --lang {lang}")
    assert report.returncode == 0, report.stderr
    last = report.stdout.splitlines()[-1]
    command, fix = last.removeprefix("next  your_mask").strip().split(" -> ")
    assert fix.endswith("maskcheck/#run-it)") and (lang == "en") == ("/zh/" not in fix)
    filled = command.replace("MODULE:NAME", "my_masks:causal_documents").replace(" N", " 256")
    checked = sh(f"{filled} --no-compile", cwd=ROOT / "snippets" / "configs")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "ok    trace" in checked.stdout, checked.stdout
    assert json.loads(python(f"-m snippets doctor --json --lang {lang}").stdout)["next"] == {
        "command": command, "fix": fix}


def test_doctor_also_runs_as_its_own_module():
    result = python("-m snippets.doctor --json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["usable"] is True


# PyTorch's names by release, read from each release's source (claims/torch_api.yaml): the oracle for
# what doctor meets on an older PyTorch.
TORCH_API = "claims/torch_api.yaml"
# The torch name each check reads that not every release since 2.5 has.
NEWER_NAMES = {
    "compile_cache": "torch._inductor.runtime.cache_dir_utils.cache_dir",
    "recompile_limit": "torch._dynamo.config.recompile_limit",
    "shared_memory": "torch._C._CudaDeviceProperties.shared_memory_per_block_optin",
}


def torch_api() -> dict:
    import yaml

    from tests.helpers import ROOT

    return yaml.safe_load((ROOT / TORCH_API).read_text())["names"]


def first_release(name) -> str:
    return min((v for v, names in torch_api().items() if name in names), key=lambda v: tuple(map(int, v.split("."))))


class Without:
    """A config module less some of its names, which monkeypatch cannot delete; the names it keeps read
    as the real module reads them (cache_size_limit, an alias of recompile_limit since 2.7, looks
    that up in sys.modules)."""

    def __init__(self, real, absent):
        self._real, self._absent = real, absent

    def __getattr__(self, name):
        import sys
        from unittest import mock

        if name in self._absent:
            raise AttributeError(f"module {self._real.__name__!r} has no attribute {name!r}")
        with mock.patch.dict(sys.modules, {self._real.__name__: self._real}):
            return getattr(self._real, name)


def as_release(monkeypatch, version):
    """The installed torch, made into `version`: its __version__, and without the guide's names that
    claims/torch_api.yaml says `version` lacks (modules, attributes and config fields; an instance's
    attribute, such as a device property, has no object here to remove it from)."""
    import importlib
    import sys
    import types

    import torch
    from torch.torch_version import TorchVersion

    api = torch_api()
    monkeypatch.setattr(torch, "__version__", TorchVersion(f"{version}.0"))
    removed = []
    for name in sorted(set().union(*api.values()) - set(api[version])):  # a module before its names
        if any(name.startswith(r + ".") for r in removed):
            continue
        parent_name, _, last = name.rpartition(".")
        try:
            parent = importlib.import_module(parent_name)
        except ImportError:
            parent = None
        if parent is None or not hasattr(parent, last):
            continue
        if name in sys.modules:
            monkeypatch.setitem(sys.modules, name, None)
        if type(parent) is types.ModuleType:
            monkeypatch.delattr(parent, last)
        else:  # torch._dynamo.config
            grandparent, _, attr = parent_name.rpartition(".")
            fake = Without(parent, {last})
            monkeypatch.setitem(sys.modules, parent_name, fake)
            monkeypatch.setattr(importlib.import_module(grandparent), attr, fake)
        removed.append(name)
    return removed


@pytest.fixture(scope="module")
def report_here():
    from snippets import doctor

    return {r["check"]: r for r in doctor.diagnose()}


@pytest.mark.parametrize("version", ["2.5", "2.6", "2.7"])
def test_doctor_on_an_older_pytorch_warns_once_per_missing_name(monkeypatch, capsys, report_here, ran, version):
    from snippets import doctor

    removed = as_release(monkeypatch, version)
    ran(torch_api=version)
    code = doctor.main([])
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in out + err and not err, out + err
    lines = {line.split()[1]: line for line in out.splitlines()}
    assert list(lines) == [*report_here, "your_mask"], out  # every check reported, once, in order
    assert lines.pop("your_mask").startswith(f"next  {'your_mask':17} {doctor.MASKCHECK} -> ")
    missing = {check: name for check, name in NEWER_NAMES.items() if name not in torch_api()[version]}
    if version == "2.7":
        assert not missing  # 2.7 has every name doctor reads
    for check, name in missing.items():
        if check == "shared_memory":  # read only on a GPU: test_shared_memory_on_an_older_pytorch
            continue
        assert name in removed or any(name.startswith(r + ".") for r in removed)
        assert lines[check].startswith(f"warn  {check:17} torch {version}.0 has no {name} "
                                       f"(from {first_release(name)}"), lines[check]
        assert lines[check].count("\n") == 0 and "Error" not in lines[check]
    if "recompile_limit" in missing:  # and what this release has instead, read from it
        import torch._dynamo  # the value this process has (8 by default; other tests may have raised it)

        assert f"; here: cache_size_limit {torch._dynamo.config.cache_size_limit})" in lines["recompile_limit"]
    for check, line in lines.items():
        if check not in missing and check != "torch":
            here = report_here[check]
            assert line.split()[0] == here["status"] and here["message"] in line, line
    assert lines["torch"].startswith(f"ok    torch             torch {version}.0")


@pytest.mark.parametrize("version", ["2.5", "2.6", "2.7"])
def test_shared_memory_on_an_older_pytorch(monkeypatch, ran, version):
    import types

    import torch

    from snippets import doctor

    name = NEWER_NAMES["shared_memory"]
    props = types.SimpleNamespace(**({name.rpartition(".")[2]: 227 * 1024} if name in torch_api()[version] else {}))
    as_release(monkeypatch, version)
    ran(torch_api=version)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(doctor, "CHECKS", {"torch": doctor.check_torch, "shared_memory": doctor.check_shared_memory})
    result = doctor.diagnose()[1]
    if version == "2.7":
        assert (result["status"], result["message"]) == ("ok", "227 KiB of shared memory per block")
    else:
        assert result["status"] == "warn", result
        assert result["message"] == f"torch {version}.0 has no {name} (from {first_release(name)})"
        assert result["fix"] == doctor.fix_text("torch_newer", "en")


def test_the_installed_pytorch_has_every_name_of_its_release_or_older():
    """The data file against the one release here: every name it lists for this release or an older
    one resolves in the installed torch (a device property only on a CUDA build)."""
    import functools
    import importlib

    import torch
    from torch.torch_version import TorchVersion

    api = torch_api()
    here = max((v for v in api if TorchVersion(torch.__version__) >= v), key=lambda v: tuple(map(int, v.split("."))))
    for name in api[here]:
        if name.startswith("torch._C._CudaDeviceProperties") and not torch.cuda.is_available():
            continue
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            try:
                module = importlib.import_module(".".join(parts[:i]))
                break
            except ImportError:
                continue
        if name.endswith("BlockMask.seq_lengths"):  # a field of each instance
            from torch.nn.attention.flex_attention import BlockMask

            assert "seq_lengths" in BlockMask.__init__.__code__.co_varnames
            continue
        functools.reduce(getattr, parts[i:], module)  # AttributeError where the installed torch lacks it
