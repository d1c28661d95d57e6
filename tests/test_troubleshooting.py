import re

import pytest

from snippets import troubleshooting as ts


def numbers(version: str) -> tuple:
    """'2.11.0+cu130' -> (2, 11, 0)."""
    return tuple(int(x) for x in re.match(r"(\d+)\.(\d+)\.(\d+)", version).groups())


def test_the_seed_helper_does_not_exist(observe):
    from torch.nn.attention import flex_attention as module

    text = observe("troubleshooting.missing_helper", ts.missing_helper())
    assert text.startswith("AttributeError:") and "build_flex_attention_kernels" in text
    assert not hasattr(module, "build_flex_attention_kernels") and not hasattr(module, "kernel_root")


def test_torch_version_compares_as_a_version_and_a_plain_string_does_not(observe):
    """The oracle: the type of the real torch.__version__, and versions compared as integers."""
    import importlib.metadata

    import torch
    from torch.torch_version import TorchVersion

    assert isinstance(torch.__version__, TorchVersion) and isinstance(torch.__version__, str)
    plain = importlib.metadata.version("torch")
    assert type(plain) is str and numbers(plain) >= (2, 10, 0), "the plain-string case needs torch >= 2.10"
    text = observe("troubleshooting.string_version", ts.string_version_check())
    assert text.splitlines() == [
        f"torch.__version__ = {torch.__version__!r} (TorchVersion) >= '2.5.0': True",
        f"plain str {plain!r} >= '2.5.0': False",
        f"TorchVersion({plain!r}) >= '2.5.0': True",
    ]


def test_no_backward_on_cpu(observe):
    text = observe("troubleshooting.cpu_backward", ts.cpu_backward())
    assert text.startswith("NotImplementedError:") and "backward on CPU" in text


def test_eager_flex_attention_warns_that_it_is_unfused(observe):
    text = observe("troubleshooting.eager_warning", ts.eager_warning())
    assert "without torch.compile" in text and "materializes the full scores matrix" in text


@pytest.mark.gpu
def test_autocast_with_compiled_flex_attention_runs_forward_and_backward(observe):
    text = observe("troubleshooting.autocast", ts.autocast_compiled())
    assert text.startswith("output torch.bfloat16, q.grad torch.float32,")
    assert float(text.rsplit(" ", 1)[1]) < 2e-2  # bf16's own error, as on the accuracy page


@pytest.mark.parametrize("version", ["2.5.0", "2.9.1", "2.10.0", "2.13.0+cpu", "2.11.0+cu130", "2.49.9", "2.50.0"])
def test_plain_strings_misorder_from_2_10_to_2_49_and_torch_version_does_not(version):
    """Against versions compared as integers: a plain str >= '2.5.0' is wrong exactly for 2.10 to 2.49."""
    from torch.torch_version import TorchVersion

    truth = numbers(version) >= (2, 5, 0)
    assert truth
    assert (version >= "2.5.0") is not ((2, 10, 0) <= numbers(version) < (2, 50, 0))
    assert (TorchVersion(version) >= "2.5.0") is truth


def test_program_prints_the_three_errors_a_cpu_gives():
    from tests.helpers import python

    if ts.torch.cuda.is_available():
        pytest.skip("with a GPU it also prints the GPU outputs: tests/test_pages.py::test_cpu_page_prints_its_gpu_outputs_on_a_gpu")
    result = python("-m snippets.troubleshooting")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "\n".join([ts.missing_helper(), ts.string_version_check(), ts.cpu_backward(),
                                       ts.describe_masked_rows()]) + "\n"


# The symptoms of the troubleshooting page, each reproduced and fixed.

@pytest.mark.gpu
def test_changing_lengths_recompile_to_the_limit_a_float_breaks_and_a_tensor_compiles_once(observe, ran):

    text = observe("troubleshooting.recompiles", ts.at_default_limit(ts.recompiles)())  # the page's own call, at the default limit
    graphs = {name: int(n) for name, n in re.findall(r"^(.*?): (\d+) graphs$", text, re.M)}
    from snippets.decoding import RECOMPILE_LIMIT as limit  # PyTorch's default, checked in a fresh process by test_decoding
    assert limit == 8
    assert graphs["10 lengths, dynamic=False"] == limit  # then the unfused path: 10 graphs would be wrong
    assert graphs["Python int in score_mod, 10 steps"] == 2  # the second compile makes the int dynamic
    assert graphs["tensor in score_mod, 10 steps"] == 1
    assert graphs["10 lengths, default dynamic"] <= 2
    assert "Python float in score_mod: InductorError: LoweringException: RuntimeError: unbacked_bindings" in text
    ran(dtypes="bfloat16", head_dims=64, heads=4, batch=1, lengths=[512, 1024, 1664], modes="compiled",
        passes="forward", inputs=["closure int", "closure float"])


@pytest.mark.gpu
def test_past_the_recompile_limit_and_uncompiled_flex_attention_materialise_the_scores(observe, alone):
    found = ts.at_default_limit(ts.unfused_cost)(measuring=alone)  # peaks of 13 GiB, and times: with no other test running
    observe("troubleshooting.unfused_cost", ts.describe_cost(found))
    scores = 16 * 8192 * 8192 * 2  # one bfloat16 score per query, key and head: what a fused kernel never stores
    (compiled, _), (uncompiled, uncompiled_ms), (past, past_ms) = found["compiled"], found["uncompiled"], found["past the limit"]
    assert uncompiled >= scores and past >= scores
    assert compiled < scores / 100
    assert abs(past - uncompiled) < 0.1 * uncompiled  # past the limit is the uncompiled path: as much memory...
    assert 0.9 < past_ms / uncompiled_ms < 1.1  # ...and as slow (medians of the same unfused path)


@pytest.mark.gpu
def test_create_block_mask_materialises_the_mask_and_compiling_it_does_not(observe, alone):
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    eager = create_block_mask(ts.causal, 2, 3, 4096, 4096, "cuda")
    compiled = torch.compile(create_block_mask)(ts.causal, 2, 3, 4096, 4096, "cuda")
    for name in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
        assert torch.equal(getattr(eager, name), getattr(compiled, name)), name
    # a peak of 10 GiB, and an allocation that fails: with no other test running
    text = observe("troubleshooting.block_mask_memory", ts.block_mask_memory(measuring=alone))
    peaks = {name: float(mib.replace(",", "")) for name, mib in re.findall(r"^(.*?): peak ([\d,]+) MiB$", text, re.M)}
    assert peaks["create_block_mask, B=None, H=None"] * 2**20 >= 32768 * 32768  # a boolean per query and key
    assert peaks["torch.compile(create_block_mask), B=None, H=None"] * 16 < peaks["create_block_mask, B=None, H=None"]
    assert "create_block_mask, B=4, H=16: OutOfMemoryError: CUDA out of memory" in text


def test_rows_with_nothing_to_attend_to_are_zero_not_nan_on_the_cpu(observe):
    import torch
    from torch.nn.attention.flex_attention import create_mask

    text = observe("troubleshooting.masked_rows_cpu", ts.describe_masked_rows("cpu"))
    assert text.splitlines() == ["flex_attention: padding rows 0, NaN False", "SDPA, boolean mask: padding rows 0, NaN False"]
    # the docstring's mask, written out position by position: the first 200 tokens attend to each other only
    written = torch.tensor([[q < 200 and k < 200 for k in range(256)] for q in range(256)])
    assert torch.equal(create_mask(ts.padded, None, None, 256, 256, device="cpu")[0, 0], written)


@pytest.mark.gpu
def test_rows_with_nothing_to_attend_to_have_zero_output_and_gradients_on_the_gpu(observe):
    text = observe("troubleshooting.masked_rows", ts.describe_masked_rows("cuda"))
    for line in text.splitlines():
        assert line.endswith("padding rows 0, NaN False, q.grad on padding rows 0, gradients NaN False"), line


@pytest.mark.gpu
def test_lengths_that_are_not_multiples_of_the_block_size_are_exact_forward_and_backward(observe):
    text = observe("troubleshooting.odd_lengths", ts.odd_lengths())
    errors = [float(x) for x in re.findall(r"(\d\.\de[-+]\d+)", text)]
    assert len(errors) == 12 and max(errors) < 1e-5  # float32 against float64: rounding only


@pytest.mark.gpu
def test_head_dim_512_runs_out_of_shared_memory_and_smaller_blocks_fix_it(observe):
    import torch

    text = observe("troubleshooting.large_head_dim", ts.large_head_dim())
    first, second = text.splitlines()
    limit = torch.cuda.get_device_properties(0).shared_memory_per_block_optin  # the oracle: the GPU's own limit
    assert "out of resource" in first and f"Hardware limit:{limit}" in first
    assert second.startswith(f"{ts.SMALL_BLOCKS}: forward and backward ran")
    assert float(second.rsplit(" ", 1)[1]) < 2e-2  # bfloat16's own error


@pytest.mark.gpu
def test_device_and_length_mismatches_name_the_problem_and_mixed_dtypes_stop_only_the_backward_pass(observe, ran):
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    text = observe("troubleshooting.mismatches", ts.mismatches())
    lines = dict(line.split(": ", 1) for line in text.splitlines())
    assert lines["key on the CPU"].startswith("ValueError: Expected query, key, and value to have the same device type")
    assert lines["BlockMask built on the CPU"].startswith("RuntimeError: Expect q/k/v and block_mask to be on the same device")
    assert lines["BlockMask built for 512 tokens"].startswith(
        "ValueError: block_mask was created for block_mask.shape=(1, 1, 512, 512) but got q_len=256 and kv_len=256")
    assert lines["key and value in float16"] == "no error, output torch.bfloat16"
    assert "ValueError: Backward pass with mixed query, key, and value dtype is not supported" in \
        lines["key and value in float16, with gradients"]
    ran(dtypes=[torch.bfloat16, torch.float16], backends="triton", modes="compiled", passes=["forward", "backward"],
        lengths=256, head_dims=64, heads=2, batch=1)
    q, k = torch.randn(2, 1, 2, 256, 64, device="cuda").unbind()
    out = torch.compile(flex_attention)(q, k.to(q.device), k, block_mask=ts.matching_block_mask(q, k))
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), k.double(), is_causal=True)
    assert ts.relative(out, want) < 1e-5
