"""Head dimensions and determinism: which head dimensions compiled FlexAttention runs forward and backward on
its Triton and FLASH backends, whether the gradients it returns are right, and whether two runs of the same
backward pass return the same gradients.

    python -m snippets.head_dims    # needs a CUDA GPU and flash-attn-4 (pip install flash-attn-4)
"""
from snippets._cli import UsageError, run

# --8<-- [start:attention]
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

flex = torch.compile(flex_attention, dynamic=False)


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def inputs(head_dim, dtype=torch.bfloat16, heads=4, kv_heads=None, tokens=1024, batch=1, seed=0):
    """q, k, v with gradients, and the gradient of the output that the backward pass is given."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def randn(heads):
        return torch.randn(batch, heads, tokens, head_dim, device="cuda", generator=g).to(dtype)
    q, k, v = randn(heads), randn(kv_heads or heads), randn(kv_heads or heads)
    return q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), randn(heads)


def attention_and_grads(q, k, v, grad_out, backend="TRITON", masked=True, block_size=128) -> list:
    """Compiled FlexAttention forward and backward on one backend ("TRITON" or "FLASH"), causal with a
    BlockMask of this BLOCK_SIZE or (masked=False) over every key: [out, dq, dk, dv]."""
    tokens = q.shape[2]
    block_mask = create_block_mask(causal, None, None, tokens, tokens, device="cuda",
                                   BLOCK_SIZE=block_size) if masked else None
    out = flex(q, k, v, block_mask=block_mask, kernel_options={"BACKEND": backend},
               enable_gqa=q.shape[1] != k.shape[1])
    return [out, *torch.autograd.grad(out, (q, k, v), grad_out)]
# --8<-- [end:attention]


# --8<-- [start:head_dims]
NAMES = ("out", "dq", "dk", "dv")


def written_out(q, k, v, grad_out, masked=True) -> list:
    """The same attention and its gradients, written out in float64: [out, dq, dk, dv]."""
    q, k, v = (x.detach().double().requires_grad_() for x in (q, k, v))
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if masked:
        allowed = torch.ones(scores.shape[-2:], dtype=torch.bool, device="cuda").tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    out = scores.softmax(-1) @ v
    return [out, *torch.autograd.grad(out, (q, k, v), grad_out.double())]


def relative_error(got, want) -> float:
    return ((got.double() - want).norm() / want.norm()).item()


def check(head_dim, backend, dtype=torch.bfloat16, masked=True, block_size=128) -> str:
    """'ok' and the largest relative error of out, dq, dk and dv against float64; the ones more than 10%
    off (or NaN) and their error; or the first line of the error that stopped it."""
    torch._dynamo.reset()  # a fresh recompile budget for each head dimension
    q, k, v, grad_out = inputs(head_dim, dtype)
    try:
        got = attention_and_grads(q, k, v, grad_out, backend, masked, block_size)
    except Exception as error:
        return f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"
    errors = dict(zip(NAMES, map(relative_error, got, written_out(q, k, v, grad_out, masked))))
    wrong = [name for name, error in errors.items() if not error < 0.1]
    if wrong:
        return "wrong " + ", ".join(f"{name} {errors[name]:.2f}" for name in wrong)
    return f"ok {max(errors.values()):.0e}"


HEAD_DIMS = (32, 48, 64, 72, 80, 96, 128, 160, 192, 256)


def head_dim_table(head_dims=HEAD_DIMS) -> str:
    """Causal attention with a BlockMask, bfloat16, 1024 tokens, forward and backward, on each backend."""
    lines = [f"{'head dim':>8}  {'TRITON':14}  FLASH"]
    for head_dim in head_dims:
        lines.append(f"{head_dim:>8}  {check(head_dim, 'TRITON'):14}  {check(head_dim, 'FLASH')[:100]}")
    return "\n".join(lines)
# --8<-- [end:head_dims]


# --8<-- [start:block_size]
FLASH_BLOCK_SIZES = {160: (128, 96), 192: (128, 96), 256: (128, 64)}  # (query block, key block)


def flash_block_size_table() -> str:
    """FLASH at the head dimensions it refuses with the default BlockMask, with these block sizes instead."""
    return "\n".join(f"{head_dim:>8}  BLOCK_SIZE={size}: {check(head_dim, 'FLASH', block_size=size)[:100]}"
                     for head_dim, size in FLASH_BLOCK_SIZES.items())
# --8<-- [end:block_size]


# --8<-- [start:determinism]
RUNS = 5
SHAPE = {"head_dim": 128, "heads": 8, "tokens": 2048, "batch": 2}  # bfloat16; 2 KV heads with gqa


def distinct_results(backend, masked=True, gqa=False, deterministic=False, runs=RUNS) -> str:
    """Run the same forward and backward `runs` times and count the distinct results, bit for bit, of
    out, dq, dk and dv (1 each: every run gave the same bits)."""
    torch._dynamo.reset()
    torch.use_deterministic_algorithms(deterministic)
    try:
        q, k, v, grad_out = inputs(**SHAPE, kv_heads=2 if gqa else None)
        seen = [set() for _ in NAMES]
        for _ in range(runs):
            for found, x in zip(seen, attention_and_grads(q, k, v, grad_out, backend, masked)):
                found.add(x.detach().view(torch.int16).cpu().numpy().tobytes())
        return "  ".join(f"{name} {len(found)}" for name, found in zip(NAMES, seen))
    except Exception as error:
        return f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"
    finally:
        torch.use_deterministic_algorithms(False)


DETERMINISM_CASES = [  # (backend, masked, gqa, deterministic)
    ("TRITON", True, False, False), ("TRITON", True, True, False),
    ("TRITON", False, False, False), ("TRITON", False, True, False),
    ("FLASH", True, False, False), ("FLASH", True, True, False),
    ("FLASH", False, False, False), ("FLASH", False, True, False),
    ("FLASH", False, False, True), ("FLASH", False, True, True), ("FLASH", True, False, True),
]


def determinism_table(cases=DETERMINISM_CASES) -> str:
    lines = [f"{'backend':7}  {'mask':9}  {'heads':5}  {'deterministic':13}  distinct results in {RUNS} runs"]
    for backend, masked, gqa, deterministic in cases:
        found = distinct_results(backend, masked, gqa, deterministic)
        lines.append(f"{backend:7}  {'BlockMask' if masked else 'none':9}  {'8:2' if gqa else '8:8':5}  "
                     f"{str(deterministic):13}  {found}")
    return "\n".join(lines)
# --8<-- [end:determinism]


def installed() -> bool:
    """Whether flash-attn-4's CuTe kernels can be imported (flash_attn alone may be FlashAttention 2)."""
    import importlib.util

    try:
        return importlib.util.find_spec("flash_attn.cute") is not None
    except ModuleNotFoundError:
        return False


def main(argv) -> int:
    if argv:
        raise UsageError(f"unexpected arguments {' '.join(argv)!r}", "python -m snippets.head_dims")
    if not torch.cuda.is_available():
        raise UsageError("no CUDA GPU", "run it on a machine with an NVIDIA GPU")
    if not installed():
        raise UsageError("flash-attn-4 is not installed", "pip install flash-attn-4")
    # --8<-- [start:run]
    import importlib.metadata

    print(f"torch {torch.__version__}, flash-attn-4 {importlib.metadata.version('flash-attn-4')}, "
          f"{torch.cuda.get_device_name()}")
    print(head_dim_table())
    print(flash_block_size_table())
    print(determinism_table())
    # --8<-- [end:run]
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
