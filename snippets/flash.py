"""FlexAttention's FLASH backend: the FlashAttention-4 kernels of the flash-attn-4 package, chosen with
kernel_options={"BACKEND": "FLASH"}. Which kernels run, how accurate they are, and what they refuse.

    python -m snippets.flash        # needs a CUDA GPU and flash-attn-4 (pip install flash-attn-4)
"""
from snippets._cli import UsageError, run

# --8<-- [start:select]
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

flex = torch.compile(flex_attention, dynamic=False)
FLASH = {"BACKEND": "FLASH"}  # without it ("AUTO"), FlexAttention runs its Triton kernels


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def inputs(batch=2, heads=8, tokens=2048, head_dim=128, dtype=torch.bfloat16, kv_heads=None):
    """q, k, v on the GPU, with gradients; kv_heads < heads for grouped-query attention."""
    torch.manual_seed(0)
    q = torch.randn(batch, heads, tokens, head_dim, device="cuda", dtype=dtype, requires_grad=True)
    k, v = (torch.randn(batch, kv_heads or heads, tokens, head_dim, device="cuda", dtype=dtype,
                        requires_grad=True) for _ in range(2))
    return q, k, v


def causal_mask(tokens=2048):
    return create_block_mask(causal, None, None, tokens, tokens, device="cuda")


def flash_attention(q, k, v, block_mask, **kwargs):
    """FlexAttention on the FlashAttention-4 kernels: forward and backward."""
    return flex(q, k, v, block_mask=block_mask, kernel_options=FLASH, **kwargs)
# --8<-- [end:select]


# --8<-- [start:kernels]
from torch.profiler import ProfilerActivity, profile


def kernel_names(kernel_options=None) -> list:
    """The GPU kernels one forward and backward pass launches, by name."""
    q, k, v = inputs()
    block_mask = causal_mask()
    flex(q, k, v, block_mask=block_mask, kernel_options=kernel_options).sum().backward()  # compiles
    with profile(activities=[ProfilerActivity.CUDA]) as trace:
        flex(q, k, v, block_mask=block_mask, kernel_options=kernel_options).sum().backward()
        torch.cuda.synchronize()
    return sorted({event.name for event in trace.events() if event.device_type.name == "CUDA"})


def attention_kernels(kernel_options=None) -> list:
    """Only the attention kernels: FlashAttention-4's (flash_attn) or FlexAttention's Triton ones."""
    return [name for name in kernel_names(kernel_options) if "flash_attn" in name or "flex_attention" in name]
# --8<-- [end:kernels]


# --8<-- [start:accuracy]
import torch.nn.functional as F


CAP = 2.0  # small enough to change unit-variance scores a lot


def soft_cap(score, b, h, q_idx, kv_idx):
    return CAP * torch.tanh(score / CAP)


def relative_error(got, want) -> float:
    return ((got.double() - want.double()).norm() / want.double().norm()).item()


def errors(attention, reference, q, k, v) -> list:
    """Relative errors of the output and of dq, dk, dv against reference() in float64."""
    out = attention(q, k, v)
    grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    want = reference(q64, k64, v64)
    want_grads = torch.autograd.grad(want, (q64, k64, v64), torch.ones_like(want))
    return [relative_error(g, w) for g, w in zip((out, *grads), (want, *want_grads))]


def dense_causal(q, k, v, cap=None):
    """Attention written out, in the inputs' dtype: the reference when given float64."""
    k, v = (x.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for x in (k, v))
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if cap:
        scores = cap * torch.tanh(scores / cap)
    causal_mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
    return scores.masked_fill(~causal_mask, float("-inf")).softmax(-1) @ v


def accuracy(kernel_options=FLASH, dtype=torch.bfloat16) -> dict:
    """FlexAttention with these kernel_options against float64, for each kind of attention."""
    torch._dynamo.reset()  # a fresh recompile budget: each case compiles its own kernels
    block_mask = causal_mask()
    cases = {
        "causal": (lambda q, k, v: flex(q, k, v, block_mask=block_mask, kernel_options=kernel_options),
                   dense_causal, {}),
        "causal, head dim 64": (lambda q, k, v: flex(q, k, v, block_mask=block_mask, kernel_options=kernel_options),
                                dense_causal, {"head_dim": 64}),
        "soft-cap score_mod": (lambda q, k, v: flex(q, k, v, score_mod=soft_cap, block_mask=block_mask,
                                                    kernel_options=kernel_options),
                               lambda q, k, v: dense_causal(q, k, v, cap=CAP), {}),
        "GQA, 32 query heads, 8 KV heads": (
            lambda q, k, v: flex(q, k, v, block_mask=block_mask, enable_gqa=True, kernel_options=kernel_options),
            dense_causal, {"heads": 32, "kv_heads": 8}),
    }
    return {name: errors(attention, reference, *inputs(dtype=dtype, **sizes))
            for name, (attention, reference, sizes) in cases.items()}


def sdpa_accuracy(dtype=torch.bfloat16) -> dict:
    """SDPA's own error in the same dtype, for the plain causal case: the scale of dtype rounding."""
    return {"causal": errors(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                             dense_causal, *inputs(dtype=dtype))}
# --8<-- [end:accuracy]


# --8<-- [start:limits]
def first_line(error: Exception) -> str:
    return f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"


def tries(backend: str) -> dict:
    """Inputs the FLASH backend refuses, each tried forward and backward with BACKEND=backend."""
    def run(attention, **sizes):
        torch._dynamo.reset()  # each try compiles afresh
        q, k, v = inputs(**sizes)
        try:
            attention(q, k, v).sum().backward()
            return "ok"
        except Exception as e:  # the error a reader would get
            return first_line(e)

    options = {"BACKEND": backend}
    block_mask = causal_mask()
    mask_64 = create_block_mask(causal, None, None, 2048, 2048, BLOCK_SIZE=64)
    bias = torch.randn(8, device="cuda", requires_grad=True)  # a learned bias per head

    def learned_bias(score, b, h, q_idx, kv_idx):
        return score + bias[h]

    def with_float32(q, k, v):
        return flex(q.float(), k.float(), v.float(), block_mask=block_mask, kernel_options=options)

    def with_mixed_dtypes(q, k, v):
        return flex(q, k.half(), v, block_mask=block_mask, kernel_options=options)

    def with_dynamic_window(q, k, v):
        window = 256  # a Python int captured by the mask, under dynamic=True

        def sliding(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (q_idx - kv_idx < window)
        mask = create_block_mask(sliding, None, None, 2048, 2048)
        return torch.compile(flex_attention, dynamic=True)(q, k, v, block_mask=mask, kernel_options=options)

    def deterministic(q, k, v):
        torch.use_deterministic_algorithms(True)
        try:
            out = flex(q, k, v, block_mask=block_mask, kernel_options=options)
            out.sum().backward()
        finally:
            torch.use_deterministic_algorithms(False)
        return out.detach().requires_grad_()

    return {
        "float32": run(with_float32),
        "query and key dtypes differ": run(with_mixed_dtypes),
        "head dim 256": run(lambda q, k, v: flex(q, k, v, block_mask=block_mask, kernel_options=options),
                            head_dim=256),
        "BlockMask with BLOCK_SIZE=64": run(lambda q, k, v: flex(q, k, v, block_mask=mask_64,
                                                                 kernel_options=options)),
        "score_mod reads a tensor that requires grad": run(
            lambda q, k, v: flex(q, k, v, score_mod=learned_bias, block_mask=block_mask, kernel_options=options)),
        "dynamic=True, a Python int in the mask_mod": run(with_dynamic_window),
        "torch.use_deterministic_algorithms(True)": run(deterministic),
    }
# --8<-- [end:limits]


# --8<-- [start:lse]
import functools
import math

from torch.nn.attention.flex_attention import AuxRequest


def flash_lse(q, k, v):
    """The log-sum-exp of each query's scores, which the FLASH backend returns with return_aux."""
    out, aux = flash_attention(q, k, v, causal_mask(q.shape[-2]), return_aux=AuxRequest(lse=True))
    return aux.lse


@functools.cache
def lse_scale() -> float:
    """FLASH's log-sum-exp divided by the true one, measured where the true one is known: with
    all scores 0, query i sees i + 1 keys, so its log-sum-exp is log(i + 1). Measured once."""
    zeros = torch.zeros(1, 1, 2048, 128, device="cuda", dtype=torch.bfloat16)
    known = torch.arange(1, 2049, device="cuda", dtype=torch.float64).log()
    return (flash_lse(zeros, zeros, zeros)[0, 0, 1:].double() / known[1:]).mean().item()


def natural_lse(q, k, v):
    """FLASH's log-sum-exp in natural log, on PyTorch versions that scale it by log(2) twice too."""
    scale = lse_scale()
    return flash_lse(q, k, v) / (math.log(2) if abs(scale - math.log(2)) < 1e-3 else 1.0)


def lse_errors() -> dict:
    """FLASH's log-sum-exp as returned and as corrected, against float64 logsumexp."""
    with torch.no_grad():
        q, k, v = (x.detach() for x in inputs())
        scores = (q.double() @ k.double().transpose(-1, -2)) / 128 ** 0.5
        causal_mask = torch.ones(2048, 2048, dtype=torch.bool, device="cuda").tril()
        want = scores.masked_fill(~causal_mask, float("-inf")).logsumexp(-1)
        return {"scale": lse_scale(), "returned": relative_error(flash_lse(q, k, v), want),
                "corrected": relative_error(natural_lse(q, k, v), want)}
# --8<-- [end:lse]


def installed() -> bool:
    """Whether flash-attn-4's CuTe kernels can be imported (flash_attn alone may be FlashAttention 2)."""
    import importlib.util

    try:
        return importlib.util.find_spec("flash_attn.cute") is not None
    except ModuleNotFoundError:
        return False


def main(argv) -> int:
    if argv:
        raise UsageError(f"unexpected arguments {' '.join(argv)!r}", "python -m snippets.flash")
    if not torch.cuda.is_available():
        raise UsageError("no CUDA GPU", "run it on a machine with an NVIDIA GPU")
    if not installed():
        raise UsageError("flash-attn-4 is not installed", "pip install flash-attn-4")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    # --8<-- [start:run]
    import importlib.metadata
    import math

    q, k, v = inputs()
    out = flash_attention(q, k, v, causal_mask())
    out.sum().backward()
    ran = {backend: attention_kernels({"BACKEND": backend}) for backend in ("FLASH", "AUTO")}
    ran["no kernel_options"] = attention_kernels(None)
    print(f"torch {torch.__version__}, flash-attn-4 {importlib.metadata.version('flash-attn-4')}")
    for backend, names in ran.items():
        print(f"{backend}: {', '.join(n[:60] for n in names)}")

    rows = {backend: accuracy({"BACKEND": backend}) for backend in ("FLASH", "TRITON")}
    print(f"bfloat16, relative error vs float64 ({torch.cuda.get_device_name()})")
    print(f"{'case':34} {'backend':7} {'output':>8} {'dq':>8} {'dk':>8} {'dv':>8}")
    for case in rows["FLASH"]:
        for backend in rows:
            print(f"{case:34} {backend:7} " + " ".join(f"{e:8.1e}" for e in rows[backend][case]))
    print(f"{'causal':34} {'SDPA':7} " + " ".join(f"{e:8.1e}" for e in sdpa_accuracy()["causal"]))

    refused, triton = tries("FLASH"), tries("TRITON")
    for case in refused:
        print(f"{case}\n  FLASH:  {refused[case][:150]}\n  TRITON: {triton[case][:150]}")

    lse = lse_errors()
    print(f"torch {torch.__version__}: returned log-sum-exp / true = {lse['scale']:.4f} (log 2 = {math.log(2):.4f})")
    print(f"relative error vs float64: as returned {lse['returned']:.1e}, corrected {lse['corrected']:.1e}")
    # --8<-- [end:run]
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
