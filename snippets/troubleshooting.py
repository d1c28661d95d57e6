"""The errors of the troubleshooting page, reproduced: each function returns the error text it got.

    python -m snippets.troubleshooting
"""
import contextlib
import warnings

from snippets._cli import run


# --8<-- [start:missing_helper]
def missing_helper() -> str:
    """The kernel-building helper some guides call does not exist in PyTorch."""
    from torch.nn.attention import flex_attention

    try:
        flex_attention.build_flex_attention_kernels()
    except AttributeError as e:
        return f"AttributeError: {e}"
    return "no error"
# --8<-- [end:missing_helper]


# --8<-- [start:string_version]
import importlib.metadata

import torch
from torch.torch_version import TorchVersion


def string_version_check() -> str:
    """torch.__version__ compares as a version; the same text as a plain str does not."""
    installed = torch.__version__  # a TorchVersion: compares as a version
    plain = importlib.metadata.version("torch")  # the same text, as a plain str
    lines = [
        f"torch.__version__ = {installed!r} ({type(installed).__name__}) >= '2.5.0': {installed >= '2.5.0'}",
        f"plain str {plain!r} >= '2.5.0': {plain >= '2.5.0'}",
        f"TorchVersion({plain!r}) >= '2.5.0': {TorchVersion(plain) >= '2.5.0'}",
    ]
    return "\n".join(lines)
# --8<-- [end:string_version]


# --8<-- [start:cpu_backward]
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


def cpu_backward() -> str:
    """Gradients of FlexAttention on the CPU."""
    q = torch.randn(1, 2, 128, 64, requires_grad=True)
    try:
        flex_attention(q, q, q).sum().backward()
    except NotImplementedError as e:
        return f"NotImplementedError: {e}"
    return "no error"
# --8<-- [end:cpu_backward]


# --8<-- [start:uncompiled_call]
def uncompiled_call():
    """flex_attention called as it is, without torch.compile: the unfused path, with a warning."""
    q = torch.randn(1, 1, 128, 64)
    return flex_attention(q, q, q)
# --8<-- [end:uncompiled_call]


def eager_warning() -> str:
    """The warning FlexAttention gives when it runs without torch.compile."""
    import torch.nn.attention.flex_attention as module

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        getattr(module, "_WARNINGS_SHOWN", set()).clear()  # it warns once per process
        uncompiled_call()
    messages = [str(w.message) for w in caught if "torch.compile" in str(w.message)]
    return messages[0].splitlines()[0] if messages else "no warning"


# --8<-- [start:autocast]
def autocast_forward_backward():
    """float32 inputs, compiled FlexAttention inside torch.autocast(bfloat16), then backward."""
    q, k, v = (torch.randn(4, 8, 1024, 64, device="cuda", requires_grad=True) for _ in range(3))
    causal = create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None, 1024, 1024)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = torch.compile(flex_attention)(q, k, v, block_mask=causal)
    out.float().sum().backward()
    return out, q, k, v


def relative(a, b) -> float:
    """Relative error of a against the float64 reference b."""
    return ((a.double() - b).norm() / b.norm()).item()


def autocast_compiled() -> str:
    """Compiled FlexAttention inside torch.autocast(bfloat16), forward and backward, on the GPU."""
    torch.manual_seed(0)
    out, q, k, v = autocast_forward_backward()
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    return f"output {out.dtype}, q.grad {q.grad.dtype}, relative error vs float64 SDPA {relative(out, want):.1e}"
# --8<-- [end:autocast]


# Each symptom of the troubleshooting page: a reproduction and a fix, on the GPU.

# --8<-- [start:count_compiles]
from torch._dynamo.utils import counters


def graphs_compiled(run, *args) -> int:
    """How many graphs Inductor compiled while run(*args) ran, from a fresh start: each compiled graph
    is looked up once in Inductor's FX-graph cache (found, not found, or not cacheable). Calls past
    the recompile limit run the unfused path, which compiles nothing."""
    torch._dynamo.reset()
    counters.clear()
    run(*args)
    return sum(counters["inductor"][name] for name in ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass"))
# --8<-- [end:count_compiles]


# --8<-- [start:recompile_int]
def shifted(offset):
    """A score_mod that closes over a Python int."""
    def score_mod(score, b, h, q_idx, kv_idx):
        return torch.where(kv_idx <= q_idx + offset, score, -float("inf"))
    return score_mod


def steps_with_python_int(q, steps=10):
    attention = torch.compile(flex_attention)
    for step in range(steps):
        attention(q, q, q, score_mod=shifted(step))
# --8<-- [end:recompile_int]


# --8<-- [start:recompile_float]
def scaled(scale):
    """A score_mod that closes over a Python float."""
    def score_mod(score, b, h, q_idx, kv_idx):
        return score * scale
    return score_mod


def steps_with_python_float(q, steps=3):
    attention = torch.compile(flex_attention)
    for step in range(steps):
        attention(q, q, q, score_mod=scaled(1.0 + step / 10))
# --8<-- [end:recompile_float]


# --8<-- [start:recompile_fix]
def steps_with_tensor(q, steps=10):
    """The same steps, the number kept in a tensor that is updated in place: one graph for all."""
    offset = torch.zeros((), dtype=torch.int32, device=q.device)

    def score_mod(score, b, h, q_idx, kv_idx):
        return torch.where(kv_idx <= q_idx + offset, score, -float("inf"))

    attention = torch.compile(flex_attention)
    for step in range(steps):
        offset.fill_(step)
        attention(q, q, q, score_mod=score_mod)
# --8<-- [end:recompile_fix]


# --8<-- [start:recompile_lengths]
def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def lengths(attention, first=512, count=10):
    """Calls attention at count sequence lengths, each with its own causal BlockMask."""
    for length in range(first, first + 128 * count, 128):
        x = torch.randn(1, 4, length, 64, device="cuda", dtype=torch.bfloat16)
        block_mask = create_block_mask(causal, None, None, length, length, device="cuda")
        attention(x, x, x, block_mask=block_mask)
# --8<-- [end:recompile_lengths]


def at_default_limit(function):
    """Runs function under PyTorch's default recompile limit, whatever ran before raised it to."""
    from snippets.decoding import RECOMPILE_LIMIT

    def wrapper(*args, **kwargs):
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            return function(*args, **kwargs)
    return wrapper


# --8<-- [start:recompiles_report]
def recompiles() -> str:
    """Graphs compiled for ten steps of each case, and the error a changing float gives."""
    q = torch.randn(1, 4, 1024, 64, device="cuda", dtype=torch.bfloat16)
    lines = [f"Python int in score_mod, 10 steps: {graphs_compiled(steps_with_python_int, q)} graphs",
             f"tensor in score_mod, 10 steps: {graphs_compiled(steps_with_tensor, q)} graphs",
             f"10 lengths, dynamic=False: {graphs_compiled(lengths, torch.compile(flex_attention, dynamic=False))} graphs",
             f"10 lengths, default dynamic: {graphs_compiled(lengths, torch.compile(flex_attention))} graphs"]
    try:
        steps_with_python_float(q)
        lines.append("Python float in score_mod: no error")
    except Exception as e:
        lines.append(f"Python float in score_mod: {type(e).__name__}: {str(e).splitlines()[0]}")
    return "\n".join(lines)
# --8<-- [end:recompiles_report]


# --8<-- [start:peak_memory]
def peak_memory(run, *args) -> int:
    """Bytes of GPU memory run(*args) allocated at its peak, beyond what was allocated before."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    run(*args)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before
# --8<-- [end:peak_memory]


# --8<-- [start:unfused_report]
import contextlib
import warnings


def unfused_cost(measuring=contextlib.nullcontext) -> dict:
    """Peak memory and time of one call at 16 heads x 8192 tokens: compiled, uncompiled, and
    compiled past the recompile limit (ten lengths before this one, dynamic=False). Each
    measurement runs in `with measuring():`, and no compile runs in it: the compiled call is
    compiled once before the others and again, from the cache, before its measurement."""
    import triton.testing

    q = torch.randn(1, 16, 8192, 64, device="cuda", dtype=torch.bfloat16)
    block_mask = create_block_mask(causal, None, None, 8192, 8192, device="cuda")
    found = {}

    def measure(name, attention):
        with measuring():
            attention(q, q, q, block_mask=block_mask)  # past the limit: the unfused path, as uncompiled
            found[name] = (peak_memory(attention, q, q, q, None, block_mask),
                           triton.testing.do_bench(lambda: attention(q, q, q, block_mask=block_mask), return_mode="median"))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = torch.compile(flex_attention, dynamic=False)
        torch._dynamo.reset()
        compiled(q, q, q, block_mask=block_mask)  # fills the compile caches for the last measurement
        torch._dynamo.reset()  # the limit counts per function, across torch.compile wrappers
        past = torch.compile(flex_attention, dynamic=False)
        lengths(past, first=8192 - 128 * 10, count=10)
        measure("past the limit", past)
        measure("uncompiled", flex_attention)
        torch._dynamo.reset()
        compiled(q, q, q, block_mask=block_mask)
        measure("compiled", compiled)
    return {name: found[name] for name in ("compiled", "uncompiled", "past the limit")}


def describe_cost(found: dict) -> str:
    return "\n".join(f"{name}: peak {peak / 2**20:,.0f} MiB, {ms:.2f} ms" for name, (peak, ms) in found.items())
# --8<-- [end:unfused_report]


# --8<-- [start:block_mask_memory]
def block_mask_cost(builder, length, B=None, H=None):
    """The peak memory of building a causal BlockMask, or the error building it gives."""
    try:
        return peak_memory(builder, causal, B, H, length, length, "cuda")
    except torch.OutOfMemoryError as e:
        return f"OutOfMemoryError: {str(e).split('. GPU')[0]}"
# --8<-- [end:block_mask_memory]


# --8<-- [start:block_mask_report]
def block_mask_memory(measuring=contextlib.nullcontext) -> str:
    """create_block_mask at 32768 tokens: as called, with batch and heads, and compiled. The
    measurements run in `with measuring():`, the compile before them."""
    length = 32768
    compiled_builder = torch.compile(create_block_mask)
    compiled_builder(causal, None, None, length, length, "cuda")  # compiles once
    with measuring():
        cases = [("create_block_mask, B=None, H=None", block_mask_cost(create_block_mask, length)),
                 ("create_block_mask, B=4, H=16", block_mask_cost(create_block_mask, length, 4, 16)),
                 ("torch.compile(create_block_mask), B=None, H=None", block_mask_cost(compiled_builder, length))]
    return "\n".join(f"{name}: " + (f"peak {cost / 2**20:,.0f} MiB" if isinstance(cost, int) else cost)
                     for name, cost in cases)
# --8<-- [end:block_mask_report]


# --8<-- [start:masked_rows]
import warnings


def padded(b, h, q_idx, kv_idx):
    """The first 200 of 256 tokens are real; the last 56 are padding and attend to nothing."""
    return (q_idx < 200) & (kv_idx < 200)


def masked_rows(device="cpu", attention=flex_attention):
    q, k, v = (torch.randn(1, 2, 256, 64, device=device, requires_grad=device != "cpu") for _ in range(3))
    block_mask = create_block_mask(padded, None, None, 256, 256, device=device)
    flex = attention(q, k, v, block_mask=block_mask)
    dense = padded(0, 0, torch.arange(256, device=device)[:, None], torch.arange(256, device=device))
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=dense)
    return q, k, v, flex, sdpa


def describe_masked_rows(device="cpu") -> str:
    """The padding rows' outputs, and on the GPU their gradients, with FlexAttention and SDPA."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        attention = torch.compile(flex_attention) if device == "cuda" else flex_attention
        q, k, v, flex, sdpa = masked_rows(device, attention)
    lines = []
    for name, out in (("flex_attention", flex), ("SDPA, boolean mask", sdpa)):
        line = f"{name}: padding rows {out[..., 200:, :].abs().max().item():g}, NaN {out.isnan().any().item()}"
        if device == "cuda":
            grads = torch.autograd.grad(out.sum(), (q, k, v))
            line += (f", q.grad on padding rows {grads[0][..., 200:, :].abs().max().item():g}"
                     f", gradients NaN {any(g.isnan().any().item() for g in grads)}")
        lines.append(line)
    return "\n".join(lines)
# --8<-- [end:masked_rows]


# --8<-- [start:odd_length]
def causal_attention(length, attention=torch.compile(flex_attention)):
    """Causal float32 attention over `length` tokens, any length, with its inputs."""
    q, k, v = (torch.randn(2, 4, length, 64, device="cuda", requires_grad=True) for _ in range(3))
    block_mask = create_block_mask(causal, None, None, length, length, device="cuda")
    return q, k, v, attention(q, k, v, block_mask=block_mask)
# --8<-- [end:odd_length]


# --8<-- [start:odd_lengths_report]
def odd_lengths() -> str:
    """Lengths that are not multiples of 128, forward and backward, against float64 SDPA:
    relative errors."""
    lines = []
    for length in (77, 1000, 1537):
        q, k, v, out = causal_attention(length)
        grads = torch.autograd.grad(out.sum(), (q, k, v))
        q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
        want = torch.nn.functional.scaled_dot_product_attention(q64, k64, v64, is_causal=True)
        want_grads = torch.autograd.grad(want.sum(), (q64, k64, v64))
        errors = [relative(a, b) for a, b in zip((out, *grads), (want, *want_grads))]
        lines.append(f"{length} tokens: output {errors[0]:.1e}, dq {errors[1]:.1e}, dk {errors[2]:.1e}, dv {errors[3]:.1e}")
    return "\n".join(lines)
# --8<-- [end:odd_lengths_report]


# --8<-- [start:large_head_dim]
import re

SMALL_BLOCKS = {"BLOCK_M": 32, "BLOCK_N": 32, "num_stages": 1}


def head_dim_512(kernel_options=None):
    q, k, v = (torch.randn(1, 4, 1024, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    out = torch.compile(flex_attention)(q, k, v, kernel_options=kernel_options)
    out.sum().backward()
    return q, k, v, out


def large_head_dim() -> str:
    """Head dimension 512 in bfloat16: the default blocks, then SMALL_BLOCKS."""
    torch._dynamo.reset()
    try:
        head_dim_512()
        lines = ["default kernel_options: no error"]
    except Exception as e:
        message = " ".join(str(e).split("\n\n")[0].split())
        # the kernel's name ends in a number that counts the kernels this process generated: left out
        lines = ["default kernel_options: " + re.sub(r"\b(triton_\w+?)_\d+\b", r"\1", message)]
    torch._dynamo.reset()
    q, k, v, out = head_dim_512(SMALL_BLOCKS)
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double())
    lines.append(f"{SMALL_BLOCKS}: forward and backward ran, relative error vs float64 SDPA {relative(out, want):.1e}")
    return "\n".join(lines)
# --8<-- [end:large_head_dim]


# --8<-- [start:mismatch_fix]
def matching_block_mask(q, k, mask_mod=causal):
    """A BlockMask on the queries' device, for these queries' and keys' lengths."""
    return create_block_mask(mask_mod, None, None, q.shape[-2], k.shape[-2], device=q.device)
# --8<-- [end:mismatch_fix]


# --8<-- [start:mismatches_report]
def mixed_backward(attention, q):
    """Queries in one dtype, keys and values in float16, all requiring gradients: forward and backward."""
    q = q.detach().requires_grad_()
    kv = q.detach().half().requires_grad_()
    out = attention(q, kv, kv)
    out.sum().backward()
    return out.dtype


def mismatches() -> str:
    """The errors of inputs on different devices or a BlockMask for another length, and what
    mixed dtypes give."""
    q = torch.randn(1, 2, 256, 64, device="cuda", dtype=torch.bfloat16)
    attention = torch.compile(flex_attention)
    cases = {
        "key on the CPU": lambda: attention(q, q.cpu(), q).dtype,
        "BlockMask built on the CPU": lambda: attention(q, q, q, block_mask=create_block_mask(causal, None, None, 256, 256, device="cpu")).dtype,
        "BlockMask built for 512 tokens": lambda: attention(q, q, q, block_mask=create_block_mask(causal, None, None, 512, 512, device="cuda")).dtype,
        "key and value in float16": lambda: attention(q, q.half(), q.half()).dtype,
        "key and value in float16, with gradients": lambda: mixed_backward(attention, q),
    }
    lines = []
    for name, call in cases.items():
        torch._dynamo.reset()
        try:
            lines.append(f"{name}: no error, output {call()}")
        except Exception as e:
            lines.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0].split('. As the block mask')[0]}")
    return "\n".join(lines)
# --8<-- [end:mismatches_report]


def main(argv) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # --8<-- [start:print_missing_helper]
        print(missing_helper())
        # --8<-- [end:print_missing_helper]
        # --8<-- [start:print_string_version]
        print(string_version_check())
        # --8<-- [end:print_string_version]
        # --8<-- [start:print_cpu_backward]
        print(cpu_backward())
        # --8<-- [end:print_cpu_backward]
        # --8<-- [start:print_eager_warning]
        uncompiled_call()  # warns on stderr, once per process
        # --8<-- [end:print_eager_warning]
        # --8<-- [start:print_masked_rows]
        print(describe_masked_rows())
        # --8<-- [end:print_masked_rows]
        # --8<-- [start:print_autocast]
        if torch.cuda.is_available():
            print(autocast_compiled())
        # --8<-- [end:print_autocast]
        # --8<-- [start:print_recompiles]
        if torch.cuda.is_available():
            print(recompiles())
        # --8<-- [end:print_recompiles]
        # --8<-- [start:print_unfused_cost]
        if torch.cuda.is_available():
            print(describe_cost(unfused_cost()))
        # --8<-- [end:print_unfused_cost]
        # --8<-- [start:print_block_mask_memory]
        if torch.cuda.is_available():
            print(block_mask_memory())
        # --8<-- [end:print_block_mask_memory]
        # --8<-- [start:print_masked_rows_gpu]
        if torch.cuda.is_available():
            print(describe_masked_rows("cuda"))
        # --8<-- [end:print_masked_rows_gpu]
        # --8<-- [start:print_odd_lengths]
        if torch.cuda.is_available():
            print(odd_lengths())
        # --8<-- [end:print_odd_lengths]
        # --8<-- [start:print_large_head_dim]
        if torch.cuda.is_available():
            print(large_head_dim())
        # --8<-- [end:print_large_head_dim]
        # --8<-- [start:print_mismatches]
        if torch.cuda.is_available():
            print(mismatches())
        # --8<-- [end:print_mismatches]
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
