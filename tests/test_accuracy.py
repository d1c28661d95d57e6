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


@pytest.mark.gpu
def test_forward_and_backward_match_sdpa_in_every_dtype(observe):
    rows, table = accuracy.dtype_table()
    for dtype, by_kernel in rows.items():
        for name, flex, sdpa in zip(("output", "dq", "dk", "dv"), by_kernel["flex"], by_kernel["sdpa"]):
            assert flex < BOUNDS[dtype], (dtype, name, flex)
            assert flex < 3 * sdpa + 1e-6, f"{dtype} {name}: flex {flex:.1e} vs SDPA's own {sdpa:.1e}"
    observe("accuracy.dtypes", table)


@pytest.mark.gpu
def test_tf32_precision_error_measured(observe):
    errors = accuracy.tf32_errors()
    assert errors["highest"] < 1e-5
    # The metric: relative error of the whole output, ||out - ref|| / ||ref||, against float64 SDPA.
    assert errors["high"] > 100 * errors["highest"], "TF32 ('high'): orders of magnitude larger"
    assert errors["high"] < 5e-3, "...and still far below 1%"
    observe("accuracy.tf32", "\n".join(f"float32 matmul precision {p!r}: relative error vs float64 SDPA {e:.1e}"
                                       for p, e in errors.items()))


@pytest.mark.gpu
def test_gqa_matches_sdpa_with_repeated_heads(observe):
    errors = accuracy.gqa_errors()
    assert all(e < BOUNDS[torch.bfloat16] for e in errors), errors
    observe("accuracy.gqa", "8 query heads, 2 key/value heads, enable_gqa=True, bfloat16: relative error vs "
                            "float64 SDPA with repeated heads\n" + ", ".join(
                                f"{n} {e:.1e}" for n, e in zip(("output", "dq", "dk", "dv"), errors)))


@pytest.mark.gpu
def test_sliding_window_block_mask_matches_dense_mask(observe):
    errors = accuracy.window_errors()
    sparsity = accuracy.window_sparsity()
    assert all(e < BOUNDS[torch.bfloat16] for e in errors), errors
    assert 50 < sparsity < 100, "a causal 256-token window over 1024 tokens skips most blocks"
    observe("accuracy.sliding_window",
            f"causal sliding window of 256 tokens, 1024 tokens: {sparsity:.1f}% of blocks skipped\n"
            "relative error vs float64 SDPA with a dense mask: "
            + ", ".join(f"{n} {e:.1e}" for n, e in zip(("output", "dq", "dk", "dv"), errors)))


@pytest.mark.gpu
def test_block_sizes_other_than_128(observe):
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


def test_without_a_gpu_the_program_says_so():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = python("-m snippets.accuracy")
    assert result.returncode == 2
    assert result.stderr.startswith("error: no CUDA GPU. Fix:") and result.stderr.count("\n") == 1
