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


# --8<-- [start:models]
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


def flex_calls() -> dict:
    """flex_attention calls in one forward pass of each model under the `flex` backend."""
    return {"FluxTransformer2DModel": count_flex_calls(*tiny_flux()),
            "UNet2DConditionModel": count_flex_calls(*tiny_unet())}


def describe_calls(calls) -> str:
    return "\n".join(f"{name + ':':23} {n} flex_attention calls per forward pass" for name, n in calls.items())
# --8<-- [end:models]


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


# --8<-- [start:compare]
import torch
import torch.nn.functional as F
from diffusers.models.attention_dispatch import dispatch_attention_fn


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
# --8<-- [end:compare]


# --8<-- [start:padding]
def key_padding_mask(batch=2, tokens=256, valid=192, device="cpu"):
    """(batch, key tokens): the first `valid` tokens of each sequence are real, the rest padding."""
    mask = torch.zeros(batch, tokens, dtype=torch.bool, device=device)
    mask[:, :valid] = True
    return mask


def padding_to_4d(mask, heads, query_tokens):
    """(batch, key tokens) boolean padding mask -> (batch, heads, query tokens, key tokens)."""
    batch, key_tokens = mask.shape
    return mask[:, None, None, :].expand(batch, heads, query_tokens, key_tokens)
# --8<-- [end:padding]


# --8<-- [start:masks]
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


def mask_report(errors, device, dtype) -> str:
    return (f"{device}, {str(dtype)[6:]}: relative error of `flex` vs SDPA given the same arguments\n"
            + "\n".join(f"  {mask:28} {error:.1e}" for mask, error in errors.items()))
# --8<-- [end:masks]


# --8<-- [start:flux_gpu]
def flux_flex_vs_native(compiled=False, device="cuda", dtype=torch.bfloat16) -> float:
    """Relative error of the small Flux transformer's output with the `flex` backend against its
    output with the native one, run eagerly or compiled with torch.compile."""
    model, inputs = tiny_flux()
    model = model.to(device, dtype)
    inputs = {k: v.to(device, dtype) if torch.is_tensor(v) and v.is_floating_point() else v
              for k, v in inputs.items()}
    with torch.no_grad():
        native = model(**inputs)[0]
        run = torch.compile(model) if compiled else model
        flex = forward_with_flex(run, **inputs)[0]
    return relative_error(flex, native)


def flux_report(error, compiled, dtype=torch.bfloat16) -> str:
    return f"Flux ({str(dtype)[6:]}, {'compiled' if compiled else 'eager'}): flex vs native relative error {error:.1e}"
# --8<-- [end:flux_gpu]


# --8<-- [start:per_head]
def per_head_block_mask(mask):
    """A boolean mask of shape (batch, heads, query tokens, key tokens) as a BlockMask with each
    head's own block pattern (H=heads): pass it as `attn_mask` when the mask differs between heads."""
    batch, heads, query_tokens, key_tokens = mask.shape

    def mask_mod(b, h, q_idx, kv_idx):
        return mask[b, h, q_idx, kv_idx]

    return create_block_mask(mask_mod, batch, heads, query_tokens, key_tokens, device=mask.device)


@torch.compile
def compiled_flex(q, k, v, mask):
    """The `flex` backend under torch.compile, as in a compiled model."""
    return dispatch_attention_fn(q, k, v, attn_mask=mask, backend="flex")


def per_head_errors(mask, device="cpu"):
    """Compiled: the error of each head against SDPA with the same mask, given the 4-D boolean mask
    itself and given per_head_block_mask(mask)."""
    q, k, v = qkv(device=device)
    want = sdpa(q, k, v, mask)
    errors = {}
    for name, given in (("4-D boolean tensor", mask), ("per-head BlockMask", per_head_block_mask(mask))):
        out = compiled_flex(q, k, v, given)
        errors[name] = [relative_error(out[:, :, h], want[:, :, h]) for h in range(mask.shape[1])]
    return errors


def causal_and_full(batch=2, tokens=256, device="cpu"):
    """Head 0 causal, head 1 full: a mask that differs between heads."""
    mask = torch.ones(batch, 2, tokens, tokens, dtype=torch.bool, device=device)
    mask[:, 0] = torch.ones(tokens, tokens, dtype=torch.bool, device=device).tril()
    return mask


def per_head_report(errors) -> str:
    return "compiled, head 0 causal, head 1 full: relative error of each head against SDPA\n" + "\n".join(
        f"  {name:20} " + "  ".join(f"head {h} {e:.1e}" for h, e in enumerate(errs)) for name, errs in errors.items())
# --8<-- [end:per_head]


# --8<-- [start:old_torch]
import subprocess
import sys

CHECK_AS_IF = """
import diffusers.utils.import_utils as versions
versions._torch_version = {version!r}  # the version Diffusers read from the installed PyTorch
versions.is_torch_version.cache_clear()
import diffusers.models.attention_dispatch as dispatch  # reads it on import
try:
    dispatch._check_attention_backend_requirements(dispatch.AttentionBackendName.FLEX)
    print("accepted")
except RuntimeError as e:
    print(f"RuntimeError: {{e}}")
"""


def flex_backend_with_torch(version: str) -> str:
    """What Diffusers' own requirement check says of the `flex` backend when it reads `version` as
    the installed PyTorch's: in a fresh Python process, since Diffusers reads the version on import."""
    result = subprocess.run([sys.executable, "-W", "ignore", "-c", CHECK_AS_IF.format(version=version)],
                            capture_output=True, text=True, check=True)
    return result.stdout.strip().splitlines()[-1]
# --8<-- [end:old_torch]


def main(argv) -> int:
    import diffusers

    print(f"diffusers {diffusers.__version__}, torch {torch.__version__}")
    # --8<-- [start:print_routing]
    print(describe_calls(flex_calls()))
    # --8<-- [end:print_routing]
    # --8<-- [start:print_float32]
    print(f"float32, no mask: relative error {backend_vs_reference(dtype=torch.float32):.1e}")
    # --8<-- [end:print_float32]
    # --8<-- [start:print_is_causal]
    print(f"is_causal=True: relative error vs causal SDPA {backend_vs_reference(is_causal=True):.2f}")
    # --8<-- [end:print_is_causal]
    # --8<-- [start:print_causal_block_mask]
    q, k, v = qkv()
    error = relative_error(causal_flex(q, k, v), sdpa(q, k, v, is_causal=True))
    print(f"causal BlockMask: relative error vs causal SDPA {error:.1e}")
    # --8<-- [end:print_causal_block_mask]
    # --8<-- [start:print_full_mask]
    mask = padding_to_4d(key_padding_mask(), heads=2, query_tokens=256)
    print(f"4-D boolean mask: relative error {backend_vs_reference(attn_mask=mask):.1e}")
    # --8<-- [end:print_full_mask]
    # --8<-- [start:print_padding_mask]
    print(f"2-D (batch, tokens) mask: relative error vs key padding {backend_vs_reference(attn_mask=key_padding_mask()):.2f}")
    # --8<-- [end:print_padding_mask]
    # --8<-- [start:per_head_run]
    print(per_head_report(per_head_errors(causal_and_full())))
    # --8<-- [end:per_head_run]
    # --8<-- [start:print_masks]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    print(mask_report(mask_behaviour(device, dtype), device, dtype))
    # --8<-- [end:print_masks]
    # --8<-- [start:print_old_torch]
    print(flex_backend_with_torch("2.4.1"))
    # --8<-- [end:print_old_torch]
    # --8<-- [start:print_flux_gpu]
    if torch.cuda.is_available():
        for compiled in (False, True):
            print(flux_report(flux_flex_vs_native(compiled), compiled))
    # --8<-- [end:print_flux_gpu]
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
