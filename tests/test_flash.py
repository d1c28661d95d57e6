"""The FLASH backend page: which kernels run, how accurate they are, what they refuse, the log-sum-exp
they return, and which GPUs flash-attn-4 serves (read from its released wheel)."""
import inspect
import math
import re
import zipfile

import pytest

from tests.helpers import ROOT, python, section, sh
from tests.upstream import FLASH_ATTN_4, flash_attn_4_source, upstream_wheel


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles its own kernels, never counting against another's recompile limit."""
    import torch

    torch._dynamo.reset()


def test_the_install_line_names_the_package_that_has_the_flash_kernels():
    """The package the page installs is the one whose wheel holds flash_attn.cute (its METADATA Name)."""
    command = section("snippets/shell/flash.sh", "install").split()
    assert command[:2] == ["pip", "install"] and len(command) == 3
    name, version, _ = FLASH_ATTN_4
    with zipfile.ZipFile(upstream_wheel(FLASH_ATTN_4)) as z:
        metadata = z.read(f"{name}-{version}.dist-info/METADATA").decode()
        assert "flash_attn/cute/interface.py" in z.namelist()
    declared = re.search(r"^Name: (.+)$", metadata, re.M).group(1).strip()
    assert re.sub(r"[-_.]+", "-", declared).lower() == command[2]


def test_the_run_line_without_a_gpu_says_so_in_one_line():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = sh(section("snippets/shell/flash.sh", "run"), cwd=ROOT)
    assert result.returncode == 2 and result.stderr == \
        "error: no CUDA GPU. Fix: run it on a machine with an NVIDIA GPU\n"


def test_flash_attn_4_serves_these_gpus_with_these_limits(ran):
    """What the page says of GPUs other than the ones measured, read from flash-attn-4's source."""
    interface = flash_attn_4_source()
    assert 'assert arch // 10 in [8, 9, 10, 11, 12], "Unsupported compute capability' in interface
    # per architecture, in the forward kernel's dispatch
    assert re.search(r'if arch // 10 == 8:\s+raise NotImplementedError\("Custom user-provided score_mod is not '
                     r'supported on SM8x', interface)
    assert re.search(r'elif arch // 10 == 9:\s+assert not is_split_kv, "SplitKV not supported on SM 9.0"', interface)
    assert 'assert not use_block_sparsity, "Block sparsity not supported on SM 12.0"' in interface
    # head dimensions on Hopper: 8 to 256
    assert "is_sm90_range = 8 <= head_dim <= 256 and 8 <= head_dim_v <= 256" in interface
    ran(flash_attn_4=FLASH_ATTN_4[1], inputs="released source")


def test_pytorch_returns_the_flash_log_sum_exp_in_natural_log_since_the_fix():
    """The CPU machine's PyTorch (2.13) has the fix of pytorch/pytorch#181824: the statistics are
    scaled by log(2) only when the kernel returned them in base 2, which FlashAttention-4 does not."""
    import torch
    from torch.nn.attention import flex_attention as module

    if tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 13):
        pytest.skip(f"torch {torch.__version__}: the fix is checked on 2.13 or later")
    source = inspect.getsource(module.flex_attention)
    assert "if stats_are_log2:" in source and "lse_scaled * ln2" in source.split("if stats_are_log2:")[1][:200]
    # the compiled path (torch.compile(flex_attention)) says base 2 for every backend but FLASH
    compiled_path = source.split("if torch.compiler.is_dynamo_compiling():", 1)[1].split("_warn_once(", 1)[0]
    assert re.search(r'stats_are_log2\s*=\s*kernel_options\[\s*"BACKEND"\s*\]\s*!=\s*"FLASH"\s*,', compiled_path), \
        compiled_path


def test_unexpected_arguments_are_one_line():
    result = python("-m snippets.flash --frobnicate")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "--frobnicate" in result.stderr


def test_installed_means_flash_attn_4s_cute_kernels_not_flash_attention_2(tmp_path, monkeypatch):
    """The program's check looks for flash_attn.cute: a flash_attn without it (FlashAttention 2)
    does not count. Checked against packages made here, and against this machine."""
    import importlib.util
    import sys

    from snippets import flash

    for name in {"flash_attn", "flash_attn.cute"} | {m for m in sys.modules if m.startswith("flash_attn.")}:
        monkeypatch.setitem(sys.modules, name, None)  # put back, or removed, after the test
        del sys.modules[name]
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "flash_attn").mkdir()
    (tmp_path / "flash_attn" / "__init__.py").write_text("")
    importlib.invalidate_caches()
    assert flash.installed() is False, "FlashAttention 2's flash_attn, no cute"
    (tmp_path / "flash_attn" / "cute").mkdir()
    (tmp_path / "flash_attn" / "cute" / "__init__.py").write_text("")
    importlib.invalidate_caches()
    assert flash.installed() is True, "flash-attn-4's flash_attn.cute"


def ran_on_gpu(ran, passes=("forward", "backward"), **found):
    """Record what a GPU test of this page ran: snippets.flash's inputs (bfloat16, 2 sequences of 2048 tokens
    unless said otherwise), compiled, with this machine's flash-attn-4."""
    import importlib.metadata

    ran(**{"dtypes": "bfloat16", "lengths": 2048, "batch": 2, **found}, passes=list(passes), modes="compiled",
        flash_attn_4=importlib.metadata.version("flash-attn-4"))


@pytest.mark.gpu
def test_flash_runs_flash_attention_4_kernels_and_auto_runs_triton(observe, ran):
    """The oracle is the profiler: the names of the kernels the GPU ran."""
    from snippets import flash

    kernels = {backend: flash.attention_kernels({"BACKEND": backend}) for backend in ("FLASH", "AUTO")}
    kernels["no kernel_options"] = flash.attention_kernels(None)
    assert any("FlashAttentionForward" in n for n in kernels["FLASH"])
    assert any("FlashAttentionBackward" in n for n in kernels["FLASH"])
    assert not any("triton" in n for n in kernels["FLASH"])
    for default in ("AUTO", "no kernel_options"):
        assert kernels[default] and all(n.startswith("triton") for n in kernels[default]), (default, kernels[default])
        assert any("flex_attention_backward" in n for n in kernels[default])
    import importlib.metadata

    import torch

    observe("flash.kernels", f"torch {torch.__version__}, flash-attn-4 {importlib.metadata.version('flash-attn-4')}\n"
            + "\n".join(f"{backend}: {', '.join(n[:60] for n in names)}" for backend, names in kernels.items()))
    ran_on_gpu(ran, head_dims=128, heads=8, backends=["flash", "triton"], inputs="causal mask")


@pytest.mark.gpu
def test_flash_is_as_accurate_as_triton_forward_and_backward(observe, ran):
    import torch
    from torch.profiler import ProfilerActivity, profile

    from snippets import flash

    # The profiler shows which kernels the FLASH row really ran: FlashAttention-4's, forward and backward
    with profile(activities=[ProfilerActivity.CUDA]) as trace:
        rows = {"FLASH": flash.accuracy({"BACKEND": "FLASH"})}
        torch.cuda.synchronize()
    names = {event.name for event in trace.events() if event.device_type.name == "CUDA"}
    assert any("FlashAttentionForward" in n for n in names), sorted(names)
    assert any("FlashAttentionBackward" in n for n in names), sorted(names)
    rows["TRITON"] = flash.accuracy({"BACKEND": "TRITON"})
    sdpa = flash.sdpa_accuracy()["causal"]
    for case, flash_errors in rows["FLASH"].items():
        for name, mine, triton in zip(("output", "dq", "dk", "dv"), flash_errors, rows["TRITON"][case]):
            assert mine < 2e-2 and mine < 1.5 * triton + 1e-4, (case, name, mine, triton)
    for name, mine, own in zip(("output", "dq", "dk", "dv"), rows["FLASH"]["causal"], sdpa):
        assert mine < 3 * own + 1e-6, f"{name}: FLASH {mine:.1e} vs SDPA's own bfloat16 error {own:.1e}"
    # the soft cap changes the result far more than FLASH's error: the score_mod really ran
    q, k, v = (x.detach().double() for x in flash.inputs())
    capped, plain = flash.dense_causal(q, k, v, cap=flash.CAP), flash.dense_causal(q, k, v)
    assert flash.relative_error(plain, capped) > 10 * rows["FLASH"]["soft-cap score_mod"][0]
    lines = [f"{'case':34} {'backend':7} {'output':>8} {'dq':>8} {'dk':>8} {'dv':>8}"]
    for case in rows["FLASH"]:
        for backend in rows:
            lines.append(f"{case:34} {backend:7} " + " ".join(f"{e:8.1e}" for e in rows[backend][case]))
    lines.append(f"{'causal':34} {'SDPA':7} " + " ".join(f"{e:8.1e}" for e in sdpa))
    observe("flash.accuracy", f"bfloat16, relative error vs float64 ({torch.cuda.get_device_name()})\n"
                              + "\n".join(lines))
    ran_on_gpu(ran, head_dims=[128, 64], heads=[8, 32], backends=["flash", "triton"],
               inputs=["causal mask", "soft-cap score_mod", "GQA 32:8"])


# What FLASH refuses, and the start of the error it raises.
REFUSED = {
    "float32": "AssertionError: inputs must be float16, bfloat16",
    "query and key dtypes differ": "Mixed query, key, and value dtype is not supported",
    "head dim 256": "Block sparsity requires sparse_block_size[1] to be a multiple of tile_n",
    "BlockMask with BLOCK_SIZE=64": "Block sparsity expects sparse_block_size[1]=128",
    "score_mod reads a tensor that requires grad": "Input buffers require gradients",
    "dynamic=True, a Python int in the mask_mod": "captures a dynamic scalar",
    "torch.use_deterministic_algorithms(True)": "Deterministic backward for flex_attention with block_mask",
}
# ...and what the Triton backend runs of them, forward and backward.
TRITON_RUNS = {"float32", "score_mod reads a tensor that requires grad", "dynamic=True, a Python int in the mask_mod"}


@pytest.mark.gpu
def test_flash_refuses_these_inputs_with_an_error_and_triton_runs_most(observe, ran):
    from snippets import flash

    refused, triton = flash.tries("FLASH"), flash.tries("TRITON")
    assert set(refused) == set(REFUSED)
    for case, start in REFUSED.items():
        assert start in refused[case], (case, refused[case])
    for case in TRITON_RUNS:
        assert triton[case] == "ok", (case, triton[case])
    observe("flash.limits", "\n".join(f"{case}\n  FLASH:  {refused[case][:150]}\n  TRITON: {triton[case][:150]}"
                                      for case in REFUSED))
    ran_on_gpu(ran, dtypes=["bfloat16", "float32"], head_dims=[128, 256], heads=8, backends=["flash", "triton"],
               inputs=["causal mask", "BLOCK_SIZE 64", "learned bias score_mod", "int a mask_mod closes over",
                       "deterministic algorithms with a BlockMask"])


@pytest.mark.gpu
def test_flash_log_sum_exp_against_float64(observe, ran):
    """The oracle: logsumexp of the scores in float64; the fixed PyTorch is told apart by its source."""
    import torch
    from torch.nn.attention import flex_attention as module

    from snippets import flash

    result = flash.lse_errors()
    assert result["corrected"] < 1e-3, result
    if "stats_are_log2" in inspect.getsource(module.flex_attention):  # pytorch/pytorch#181824
        assert abs(result["scale"] - 1) < 1e-3 and result["returned"] < 1e-3, result
    else:
        assert abs(result["scale"] - math.log(2)) < 1e-3 and result["returned"] > 0.25, result
    observe("flash.lse", f"torch {torch.__version__}: returned log-sum-exp / true = {result['scale']:.4f} "
                         f"(log 2 = {math.log(2):.4f})\nrelative error vs float64: as returned "
                         f"{result['returned']:.1e}, corrected {result['corrected']:.1e}")
    ran_on_gpu(ran, passes=["forward"], head_dims=128, batch=[1, 2], heads=[1, 8], backends="flash",
               inputs=["causal mask", "return_aux lse"])
