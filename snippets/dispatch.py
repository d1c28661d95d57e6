"""FlexAttention through the Diffusers attention dispatcher: which models use it and what it does.

    python -m snippets.dispatch
"""
import torch
import torch.nn.functional as F

from snippets._cli import run


# --8<-- [start:select_model]
def use_flex(model):
    """Route every dispatch-enabled attention layer of a Diffusers model through FlexAttention."""
    model.set_attention_backend("flex")
    return model
# --8<-- [end:select_model]


# --8<-- [start:select_block]
from diffusers.models.attention_dispatch import attention_backend


def forward_with_flex(model, **inputs):
    """Use FlexAttention for this forward pass only."""
    with attention_backend("flex"):
        return model(**inputs)
# --8<-- [end:select_block]


def tiny_flux(seed=0):
    """A randomly initialised, very small Flux transformer and inputs for it (no downloads)."""
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(seed)
    model = FluxTransformer2DModel(
        patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
        attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
        pooled_projection_dim=32, axes_dims_rope=(4, 4, 8),
    ).eval()
    image, text = 64, 8
    inputs = dict(
        hidden_states=torch.randn(1, image, 4),
        encoder_hidden_states=torch.randn(1, text, 32),
        pooled_projections=torch.randn(1, 32),
        timestep=torch.tensor([1.0]),
        img_ids=torch.zeros(image, 3),
        txt_ids=torch.zeros(text, 3),
        return_dict=False,
    )
    return model, inputs


def tiny_unet(seed=0):
    """A randomly initialised, very small SD-style UNet and inputs for it."""
    from diffusers import UNet2DConditionModel

    torch.manual_seed(seed)
    model = UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(32, 64), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
        attention_head_dim=8, norm_num_groups=32,
    ).eval()
    inputs = dict(
        sample=torch.randn(1, 4, 16, 16), timestep=torch.tensor([1.0]),
        encoder_hidden_states=torch.randn(1, 8, 32), return_dict=False,
    )
    return model, inputs


# --8<-- [start:count_calls]
import diffusers.models.attention_dispatch as dispatch
import torch


def count_flex_calls(model, inputs) -> int:
    """How many times one forward pass under the `flex` backend calls flex_attention."""
    calls = 0
    original = dispatch.flex_attention.flex_attention

    def counting(*args, **kwargs):
        nonlocal calls
        calls += 1
        return original(*args, **kwargs)

    dispatch.flex_attention.flex_attention = counting
    try:
        with torch.no_grad():
            forward_with_flex(model, **inputs)
    finally:
        dispatch.flex_attention.flex_attention = original
    return calls
# --8<-- [end:count_calls]


# --8<-- [start:causal]
from diffusers.models.attention_dispatch import dispatch_attention_fn
from torch.nn.attention.flex_attention import create_block_mask


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def causal_flex(q, k, v):
    """Causal attention through the `flex` backend; q, k, v: (batch, tokens, heads, dim)."""
    mask = create_block_mask(causal, None, None, q.shape[1], k.shape[1], device=q.device)
    return dispatch_attention_fn(q, k, v, attn_mask=mask, backend="flex")
# --8<-- [end:causal]


# --8<-- [start:masks]
import torch.nn.functional as F


def padding_to_4d(mask, heads, query_tokens):
    """(batch, key tokens) boolean padding mask -> (batch, heads, query tokens, key tokens)."""
    batch, key_tokens = mask.shape
    return mask[:, None, None, :].expand(batch, heads, query_tokens, key_tokens)


def relative_error(a, b) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def sdpa(q, k, v, attn_mask=None, is_causal=False):
    """Plain PyTorch SDPA in the Diffusers layout, the reference for the `flex` backend."""
    if attn_mask is not None and attn_mask.ndim == 2:  # (batch, key tokens): a key padding mask
        attn_mask = attn_mask[:, None, None, :]
    out = F.scaled_dot_product_attention(
        *(x.transpose(1, 2) for x in (q, k, v)), attn_mask=attn_mask, is_causal=is_causal)
    return out.transpose(1, 2)


def qkv(dtype=torch.float32, seed=0, batch=2, tokens=256, heads=2, head_dim=32, device="cpu"):
    torch.manual_seed(seed)
    return [torch.randn(batch, tokens, heads, head_dim, dtype=dtype, device=device) for _ in range(3)]


def backend_vs_reference(is_causal=False, attn_mask=None, dtype=torch.float32, seed=0, device="cpu"):
    """Relative error of the `flex` backend against plain SDPA given the same arguments."""
    q, k, v = qkv(dtype, seed, device=device)
    out = dispatch_attention_fn(q, k, v, attn_mask=attn_mask, is_causal=is_causal, backend="flex")
    return relative_error(out, sdpa(q, k, v, attn_mask, is_causal))


def key_padding_mask(batch=2, tokens=256, valid=192, device="cpu"):
    mask = torch.zeros(batch, tokens, dtype=torch.bool, device=device)
    mask[:, :valid] = True
    return mask


def mask_behaviour(device="cpu", dtype=torch.float32) -> dict:
    """The `flex` backend against SDPA given the same arguments, for each kind of mask."""
    padding = key_padding_mask(device=device)
    q, k, v = qkv(dtype, device=device)
    return {
        "no mask": backend_vs_reference(dtype=dtype, device=device),
        "is_causal=True": backend_vs_reference(is_causal=True, dtype=dtype, device=device),
        "2-D boolean (batch, tokens)": backend_vs_reference(attn_mask=padding, dtype=dtype, device=device),
        "4-D boolean": backend_vs_reference(attn_mask=padding_to_4d(padding, 2, 256), dtype=dtype, device=device),
        "4-D float": backend_vs_reference(attn_mask=torch.randn(2, 2, 256, 256, device=device, dtype=dtype),
                                          dtype=dtype, device=device),
        "causal BlockMask": relative_error(causal_flex(q, k, v), sdpa(q, k, v, is_causal=True)),
    }
# --8<-- [end:masks]


def main(argv) -> int:
    import diffusers

    print(f"diffusers {diffusers.__version__}, torch {torch.__version__}")
    for name, build in (("FluxTransformer2DModel", tiny_flux), ("UNet2DConditionModel", tiny_unet)):
        print(f"{name}: {count_flex_calls(*build())} flex_attention calls per forward")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    print(f"{device}, {str(dtype)[6:]}: relative error of `flex` vs SDPA given the same arguments")
    for mask, error in mask_behaviour(device, dtype).items():
        print(f"  {mask:28} {error:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
