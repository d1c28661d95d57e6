"""A first FlexAttention call: causal attention from a mask_mod, checked against SDPA.

    python -m snippets.quickstart
"""
import torch.nn.functional as F

from snippets._cli import run

# --8<-- [start:causal]
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def causal_attention(q, k, v, attention=flex_attention):
    """q, k, v: (batch, heads, tokens, head_dim)."""
    block_mask = create_block_mask(
        causal, B=None, H=None, Q_LEN=q.shape[-2], KV_LEN=k.shape[-2], device=q.device
    )
    return attention(q, k, v, block_mask=block_mask)
# --8<-- [end:causal]

# --8<-- [start:version]
from torch.torch_version import TorchVersion


def has_flex_attention(version: str) -> bool:
    # Compare versions as versions: the string "2.13.0" sorts before "2.5.0".
    return TorchVersion(version) >= (2, 5)
# --8<-- [end:version]


# --8<-- [start:compiled]
compiled_flex_attention = torch.compile(flex_attention)
# --8<-- [end:compiled]


def compare_with_sdpa(device="cpu", dtype=torch.float32, tokens=256, attention=flex_attention):
    """Relative error of causal FlexAttention against SDPA's causal attention."""
    q, k, v = (torch.randn(2, 4, tokens, 64, device=device, dtype=dtype) for _ in range(3))
    out = causal_attention(q, k, v, attention=attention)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    return ((out.double() - ref).norm() / ref.norm()).item()


def main(argv) -> int:
    # --8<-- [start:call]
    q, k, v = (torch.randn(2, 4, 256, 64) for _ in range(3))  # batch, heads, tokens, head_dim
    out = causal_attention(q, k, v)  # not compiled: runs, and warns
    # --8<-- [end:call]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    attention = compiled_flex_attention if device == "cuda" else flex_attention
    print(f"torch {torch.__version__}, device {device}")
    print(f"relative error vs SDPA: {compare_with_sdpa(device, attention=attention):.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
