"""The errors of the troubleshooting page, reproduced: each function returns the error text it got.

    python -m snippets.troubleshooting
"""
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


def string_version_check() -> str:
    """torch.__version__ compares as a version; the same text as a plain str does not."""
    # --8<-- [start:string_version]
    import importlib.metadata

    from torch.torch_version import TorchVersion

    installed = torch.__version__  # a TorchVersion: compares as a version
    plain = importlib.metadata.version("torch")  # the same text, as a plain str
    lines = [
        f"torch.__version__ = {installed!r} ({type(installed).__name__}) >= '2.5.0': {installed >= '2.5.0'}",
        f"plain str {plain!r} >= '2.5.0': {plain >= '2.5.0'}",
        f"TorchVersion({plain!r}) >= '2.5.0': {TorchVersion(plain) >= '2.5.0'}",
    ]
    # --8<-- [end:string_version]
    return "\n".join(lines)


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


def eager_warning() -> str:
    """The warning FlexAttention gives when it runs without torch.compile."""
    from torch.nn.attention.flex_attention import flex_attention
    import torch.nn.attention.flex_attention as module

    q = torch.randn(1, 1, 128, 64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        getattr(module, "_WARNINGS_SHOWN", set()).clear()  # it warns once per process
        flex_attention(q, q, q)
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
# --8<-- [end:autocast]


def autocast_compiled() -> str:
    """Compiled FlexAttention inside torch.autocast(bfloat16), forward and backward, on the GPU."""
    torch.manual_seed(0)
    out, q, k, v = autocast_forward_backward()
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    error = ((out.double() - want).norm() / want.norm()).item()
    return f"output {out.dtype}, q.grad {q.grad.dtype}, relative error vs float64 SDPA {error:.1e}"


def main(argv) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # --8<-- [start:print_missing_helper]
        print(missing_helper())
        # --8<-- [end:print_missing_helper]
        print(string_version_check())
        # --8<-- [start:print_cpu_backward]
        print(cpu_backward())
        # --8<-- [end:print_cpu_backward]
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
