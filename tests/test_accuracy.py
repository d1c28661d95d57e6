import pytest
import torch

from snippets import accuracy
from tests.helpers import python

# Each test compiles its own kernels: a fresh Dynamo state keeps one test's recompiles from
# counting against the next one's recompile limit.
@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    torch.set_float32_matmul_precision("highest")
    yield


# Bounds vs float64 SDPA, per dtype: FlexAttention must be about as accurate as SDPA itself.
BOUNDS = {torch.bfloat16: 2e-2, torch.float16: 3e-3, torch.float32: 1e-4}


def gpu_kernels(attention, dtype) -> set:
    """The names of the GPU kernels one forward and backward pass of `attention` launches (the profiler)."""
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    q = torch.randn(accuracy.SHAPE, device="cuda", dtype=dtype)
    with profile(activities=[ProfilerActivity.CUDA]) as trace:
        accuracy.forward_backward(attention, q, q, q)
        torch.cuda.synchronize()
    return {event.name for event in trace.events() if event.device_type.name == "CUDA"}


@pytest.mark.gpu
def test_forward_and_backward_match_sdpa_in_every_dtype(observe, ran):
    rows, table = accuracy.dtype_table()
    for dtype, by_kernel in rows.items():
        for name, flex, sdpa in zip(("output", "dq", "dk", "dv"), by_kernel["flex"], by_kernel["sdpa"]):
            assert flex < BOUNDS[dtype], (dtype, name, flex)
            assert flex < 3 * sdpa + 1e-6, f"{dtype} {name}: flex {flex:.1e} vs SDPA's own {sdpa:.1e}"
        # The errors are those of the compiled kernels: flex_causal runs FlexAttention's Triton kernels,
        # forward and backward (eager flex_attention runs no Triton kernel).
        names = gpu_kernels(accuracy.flex_causal, dtype)
        flex_kernels = [n for n in names if n.startswith("triton") and "flex_attention" in n]
        assert any("backward" not in n for n in flex_kernels), (dtype, sorted(names))
        assert any("flex_attention_backward" in n for n in flex_kernels), (dtype, sorted(names))
        ran(dtypes=dtype)
    observe("accuracy.dtypes", table)
    ran(passes=["forward", "backward"], batch=accuracy.SHAPE[0], heads=accuracy.SHAPE[1],
        head_dims=accuracy.SHAPE[3], lengths=accuracy.SHAPE[2], modes="compiled", backends="triton",
        inputs="causal mask")


@pytest.mark.gpu
def test_tf32_precision_error_measured(observe, ran):
    errors = accuracy.tf32_errors()
    assert errors["highest"] < 1e-5
    # The metric: relative error of the whole output, ||out - ref|| / ||ref||, against float64 SDPA.
    assert errors["high"] > 100 * errors["highest"], "TF32 ('high'): orders of magnitude larger"
    assert errors["high"] < 5e-3, "...and still below 0.5%"
    observe("accuracy.tf32", "\n".join(f"float32 matmul precision {p!r}: relative error vs float64 SDPA {e:.1e}"
                                       for p, e in errors.items()))
    ran(dtypes="float32", passes="forward", batch=accuracy.SHAPE[0], heads=accuracy.SHAPE[1],
        head_dims=accuracy.SHAPE[3], lengths=accuracy.SHAPE[2], modes="compiled", backends="triton",
        inputs="causal mask")


@pytest.mark.gpu
def test_gqa_matches_sdpa_with_repeated_heads(observe, ran):
    errors = accuracy.gqa_errors()
    assert all(e < BOUNDS[torch.bfloat16] for e in errors), errors
    # SDPA's own bfloat16 error on the same inputs, with the heads repeated: the scale of bfloat16 rounding
    own = accuracy.errors_against_float64(accuracy.sdpa_repeated, torch.bfloat16, q_shape=(2, 8, 1024, 64),
                                          kv_shape=(2, 2, 1024, 64), reference=accuracy.sdpa_repeated)
    for name, flex, sdpa in zip(("output", "dq", "dk", "dv"), errors, own):
        assert flex < 3 * sdpa + 1e-6, f"{name}: flex {flex:.1e} vs SDPA's own {sdpa:.1e}"
    observe("accuracy.gqa", "8 query heads, 2 key/value heads, enable_gqa=True, bfloat16: relative error vs "
                            "float64 SDPA with repeated heads\n" + ", ".join(
                                f"{n} {e:.1e}" for n, e in zip(("output", "dq", "dk", "dv"), errors)))
    ran(dtypes="bfloat16", passes=["forward", "backward"], batch=2, heads=8,
        head_dims=accuracy.SHAPE[3], lengths=accuracy.SHAPE[2], modes="compiled", backends="triton",
        inputs=["causal mask", "GQA 8:2"])


def written_out_window(tokens=1024) -> torch.Tensor:
    """The page's window written out position by position, without the code's mask_mod: key j is kept
    for query i when j <= i (causal) and j >= i - 256 (the 256 tokens before it)."""
    ones = torch.ones(tokens, tokens, dtype=torch.bool)
    return ones.tril() & ~ones.tril(-257)


def test_sliding_window_keeps_each_token_and_the_256_before_it(ran):
    """The mask the code builds is the window the page describes, and its BlockMask skips exactly the
    128-token blocks the written-out window leaves empty."""
    from torch.nn.attention.flex_attention import create_block_mask, create_mask

    want = written_out_window()
    assert want.sum(-1).tolist() == [min(i + 1, 257) for i in range(1024)], "each token and the 256 before it"
    got = create_mask(accuracy.causal_window, None, None, 1024, 1024, device="cpu")[0, 0]
    assert torch.equal(got, want)
    blocks = want.reshape(8, 128, 8, 128).any(3).any(1)  # (query block, key block): anything to compute
    skipped = 100 * (1 - blocks.float().mean().item())
    block_mask = create_block_mask(accuracy.causal_window, None, None, 1024, 1024, device="cpu")
    assert abs(block_mask.sparsity() - skipped) < 1e-6 and skipped > 50, (block_mask.sparsity(), skipped)
    ran(lengths=1024, modes="eager", inputs="causal sliding-window mask")


@pytest.mark.gpu
def test_sliding_window_block_mask_matches_dense_mask(observe, ran):
    from torch.nn.attention.flex_attention import create_mask

    # SDPA's dense mask is the window written out position by position
    dense = create_mask(accuracy.causal_window, None, None, 1024, 1024, device="cuda")[0, 0]
    assert torch.equal(dense.cpu(), written_out_window())
    errors = accuracy.window_errors()
    sparsity = accuracy.window_sparsity()
    assert all(e < BOUNDS[torch.bfloat16] for e in errors), errors
    assert 50 < sparsity < 100, "a causal 257-token window over 1024 tokens skips most blocks"
    observe("accuracy.sliding_window",
            f"causal sliding window of 257 tokens, 1024 tokens: {sparsity:.1f}% of blocks skipped\n"
            "relative error vs float64 SDPA with a dense mask: "
            + ", ".join(f"{n} {e:.1e}" for n, e in zip(("output", "dq", "dk", "dv"), errors)))
    ran(dtypes="bfloat16", passes=["forward", "backward"], batch=accuracy.SHAPE[0], heads=accuracy.SHAPE[1],
        head_dims=accuracy.SHAPE[3], lengths=accuracy.SHAPE[2], modes="compiled", backends="triton",
        inputs="causal sliding-window mask")


@pytest.mark.gpu
def test_block_sizes_other_than_128(observe, ran):
    results = [(size, options, accuracy.block_size_result(size, options))
               for size, options in accuracy.BLOCK_SIZE_VARIANTS]
    observe("accuracy.block_sizes", "\n".join(
        f"BLOCK_SIZE={size!s}" + (f", kernel_options={options}" if options else "")
        + f"\n  forward:              {r['forward']}\n  forward and backward: {r['backward']}"
        for size, options, r in results))
    by_variant = {(str(size), str(options)): r for size, options, r in results}
    for size in ("128", "256"):  # multiples of the default tiles work, as accurately as ever
        r = by_variant[(size, "None")]
        assert r["forward"].startswith("ok") and r["backward"].startswith("ok"), r
        assert all(float(e.split()[-1]) < BOUNDS[torch.bfloat16] for e in r["backward"].split(",")[1:]), r
    for size in ("64", "(128, 64)", "(64, 128)"):  # smaller than the default tiles: no kernel
        r = by_variant[(size, "None")]
        assert "must be divisible by BLOCK_M and BLOCK_N" in r["forward"], r
    # Forward tiles of 64 make the forward pass work; the backward kernel's tiles are not set that way.
    r = by_variant[("64", str({"BLOCK_M": 64, "BLOCK_N": 64}))]
    assert r["forward"].startswith("ok") and float(r["forward"].split()[-1]) < BOUNDS[torch.bfloat16], r
    assert "NoValidChoicesError" in r["backward"], r
    ran(dtypes="bfloat16", passes=["forward", "backward"],
        head_dims=accuracy.SHAPE[3], lengths=accuracy.SHAPE[2], modes="compiled", backends="triton")



def test_without_a_gpu_the_program_says_so():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = python("-m snippets.accuracy")
    assert result.returncode == 2
    assert result.stderr.startswith("error: no CUDA GPU. Fix:") and result.stderr.count("\n") == 1
