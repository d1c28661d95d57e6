"""How close compiled FlexAttention comes to SDPA on a GPU: dtypes, backward, GQA, block masks.

    python -m snippets.accuracy        # needs a CUDA GPU

Every comparison is against float64 SDPA on the same inputs, so the error of FlexAttention can be
set beside the error of SDPA itself in the same dtype.
"""
from snippets._cli import UsageError, run

# --8<-- [start:forward_backward]
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import and_masks, create_block_mask, create_mask, flex_attention

SHAPE = (2, 4, 1024, 64)  # batch, heads, tokens, head dim


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def forward_backward(attention, q, k, v):
    """Output and gradients of q, k, v; the loss is the sum of the output."""
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    out = attention(q, k, v)
    out.sum().backward()
    return out, q.grad, k.grad, v.grad


compiled = torch.compile(flex_attention)


def flex_causal(q, k, v):
    block_mask = create_block_mask(causal, None, None, q.shape[-2], k.shape[-2], device=q.device)
    return compiled(q, k, v, block_mask=block_mask)


def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def relative_error(got, want) -> float:
    return ((got.double() - want.double()).norm() / want.double().norm()).item()


def errors_against_float64(attention, dtype, seed=0, **sizes):
    """Relative errors of output, dq, dk, dv of `attention` in `dtype` vs float64 SDPA."""
    torch.manual_seed(seed)
    shape = sizes.get("q_shape", SHAPE)
    q = torch.randn(shape, device="cuda")
    k, v = (torch.randn(sizes.get("kv_shape", shape), device="cuda") for _ in range(2))
    reference = sizes.get("reference", sdpa_causal)
    want = forward_backward(reference, q.double(), k.double(), v.double())
    got = forward_backward(attention, q.to(dtype), k.to(dtype), v.to(dtype))
    return [relative_error(g, w) for g, w in zip(got, want)]


def dtype_table() -> tuple:
    """Errors of FlexAttention and of SDPA itself, per dtype: (rows, printable table)."""
    rows = {}
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        rows[dtype] = {"flex": errors_against_float64(flex_causal, dtype),
                       "sdpa": errors_against_float64(sdpa_causal, dtype)}
    lines = [f"{'dtype':9} {'kernel':6} {'output':>8} {'dq':>8} {'dk':>8} {'dv':>8}"]
    for dtype, by_kernel in rows.items():
        for kernel, errs in by_kernel.items():
            lines.append(f"{str(dtype)[6:]:9} {kernel:6} " + " ".join(f"{e:8.1e}" for e in errs))
    return rows, "\n".join(lines)
# --8<-- [end:forward_backward]


# --8<-- [start:tf32]
def tf32_errors() -> dict:
    """float32 FlexAttention at each float32 matmul precision, vs float64 SDPA."""
    errors = {}
    for precision in ("highest", "high"):
        torch.set_float32_matmul_precision(precision)
        torch._dynamo.reset()  # the precision is baked into the compiled kernel
        errors[precision] = errors_against_float64(flex_causal, torch.float32)[0]
    torch.set_float32_matmul_precision("highest")
    return errors
# --8<-- [end:tf32]


# --8<-- [start:gqa]
def flex_gqa(q, k, v):
    """8 query heads share 2 key/value heads: no copy of k and v is made."""
    block_mask = create_block_mask(causal, None, None, q.shape[-2], k.shape[-2], device=q.device)
    return compiled(q, k, v, block_mask=block_mask, enable_gqa=True)


def sdpa_repeated(q, k, v):
    """The same attention with k and v repeated to 8 heads."""
    groups = q.shape[1] // k.shape[1]
    k, v = (x.repeat_interleave(groups, dim=1) for x in (k, v))
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def gqa_errors(dtype=torch.bfloat16):
    return errors_against_float64(flex_gqa, dtype, q_shape=(2, 8, 1024, 64), kv_shape=(2, 2, 1024, 64),
                                  reference=sdpa_repeated)
# --8<-- [end:gqa]


# --8<-- [start:sliding_window]
def sliding_window(b, h, q_idx, kv_idx):
    """With causal: each token and the 256 before it, a window of 257 tokens."""
    return q_idx - kv_idx <= 256


causal_window = and_masks(causal, sliding_window)


def flex_window(q, k, v):
    """Blocks that the mask leaves out entirely are skipped."""
    window = create_block_mask(causal_window, None, None, q.shape[-2], k.shape[-2], device=q.device)
    return compiled(q, k, v, block_mask=window)


def sdpa_window(q, k, v):
    """SDPA with the same mask as a dense boolean tensor: every score is computed."""
    dense = create_mask(causal_window, None, None, q.shape[-2], k.shape[-2], device=q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=dense)


def window_errors(dtype=torch.bfloat16):
    return errors_against_float64(flex_window, dtype, reference=sdpa_window)


def window_sparsity(tokens=1024) -> float:
    """The share of blocks the sliding-window BlockMask skips, in percent."""
    return create_block_mask(causal_window, None, None, tokens, tokens, device="cuda").sparsity()
# --8<-- [end:sliding_window]


# --8<-- [start:block_size]
def causal_mask_with_block_size(block_size, tokens=1024):
    """BLOCK_SIZE: one int for both sides, or (query block, key/value block)."""
    return create_block_mask(causal, None, None, tokens, tokens, device="cuda", BLOCK_SIZE=block_size)


def flex_with_block_size(q, k, v, block_size, kernel_options=None):
    """kernel_options can set the kernel's own tiles, e.g. {"BLOCK_M": 64, "BLOCK_N": 64}."""
    mask = causal_mask_with_block_size(block_size, q.shape[-2])
    return compiled(q, k, v, block_mask=mask, kernel_options=kernel_options)


def first_line(error: Exception) -> str:
    return f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"


def block_size_result(block_size, kernel_options=None, dtype=torch.bfloat16) -> dict:
    """What compiled forward, then forward and backward, do with a BlockMask of this block size."""
    torch._dynamo.reset()  # each variant compiles afresh, never falling back to eager

    def attention(q, k, v):
        return flex_with_block_size(q, k, v, block_size, kernel_options)

    torch.manual_seed(0)
    q = torch.randn(SHAPE, device="cuda", dtype=dtype)
    result = {}
    try:
        with torch.no_grad():
            out = attention(q, q, q)
        result["forward"] = f"ok, error {relative_error(out, sdpa_causal(*(q.double(),) * 3)):.1e}"
    except Exception as e:  # the page shows the error a reader would get
        result["forward"] = first_line(e)
    try:
        errs = errors_against_float64(attention, dtype)
        result["backward"] = "ok, " + ", ".join(f"{n} {e:.1e}" for n, e in zip(("output", "dq", "dk", "dv"), errs))
    except Exception as e:
        result["backward"] = first_line(e)
    return result


# The variants the page reports: the block sizes, and 64 with the kernel's tiles set to 64.
BLOCK_SIZE_VARIANTS = [(128, None), (256, None), (64, None), ((128, 64), None), ((64, 128), None),
                       (64, {"BLOCK_M": 64, "BLOCK_N": 64})]
# --8<-- [end:block_size]


def main(argv) -> int:
    if argv:
        raise UsageError(f"unexpected arguments {' '.join(argv)!r}", "python -m snippets.accuracy")
    if not torch.cuda.is_available():
        raise UsageError("no CUDA GPU", "run it on a machine with an NVIDIA GPU; FlexAttention's "
                         "backward pass and compiled GPU kernels need one")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    # --8<-- [start:run]
    print(dtype_table()[1])
    # --8<-- [end:run]
    # --8<-- [start:print_tf32]
    for precision, error in tf32_errors().items():
        print(f"float32 matmul precision {precision!r}: relative error vs float64 SDPA {error:.1e}")
    # --8<-- [end:print_tf32]
    # --8<-- [start:print_gqa]
    print("8 query heads, 2 key/value heads, enable_gqa=True, bfloat16: relative error vs float64 SDPA "
          "with repeated heads")
    print(", ".join(f"{n} {e:.1e}" for n, e in zip(("output", "dq", "dk", "dv"), gqa_errors())))
    # --8<-- [end:print_gqa]
    # --8<-- [start:print_sliding_window]
    print(f"causal sliding window of 257 tokens, 1024 tokens: {window_sparsity():.1f}% of blocks skipped")
    print("relative error vs float64 SDPA with a dense mask: "
          + ", ".join(f"{n} {e:.1e}" for n, e in zip(("output", "dq", "dk", "dv"), window_errors())))
    # --8<-- [end:print_sliding_window]
    # --8<-- [start:print_block_sizes]
    for size, options in BLOCK_SIZE_VARIANTS:
        r = block_size_result(size, options)
        print(f"BLOCK_SIZE={size!s}" + (f", kernel_options={options}" if options else ""))
        print(f"  forward:              {r['forward']}\n  forward and backward: {r['backward']}")
    # --8<-- [end:print_block_sizes]
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
