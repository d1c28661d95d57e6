from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from snippets import dispatch


def test_flux_routes_through_the_flex_backend_and_the_sd_unet_does_not(observe):
    flux = dispatch.count_flex_calls(*dispatch.tiny_flux())
    unet = dispatch.count_flex_calls(*dispatch.tiny_unet())
    assert flux == 2  # one double-stream and one single-stream block
    assert unet == 0
    observe("dispatch.routing", f"FluxTransformer2DModel: {flux} flex_attention calls per forward pass\n"
                                f"UNet2DConditionModel:   {unet} flex_attention calls per forward pass")


def test_set_attention_backend_gives_the_same_output_as_native(monkeypatch):
    """use_flex routes every attention call of the model through torch's flex_attention (counted),
    and the output matches the native backend's (SDPA), the oracle."""
    import diffusers.models.attention_dispatch as ad

    model, inputs = dispatch.tiny_flux()
    with torch.no_grad():
        native = model(**inputs)[0]
    calls, original = [], ad.flex_attention.flex_attention
    monkeypatch.setattr(ad.flex_attention, "flex_attention", lambda *a, **k: calls.append(1) or original(*a, **k))
    with torch.no_grad():
        flex = dispatch.use_flex(model)(**inputs)[0]
    assert len(calls) == 2, "one double-stream and one single-stream block, each through flex_attention"
    assert dispatch.relative_error(flex, native) < 1e-5


def test_which_transformers_use_the_dispatcher():
    import diffusers

    models = Path(diffusers.__file__).parent / "models"
    users = {p.stem for p in models.rglob("*.py") if "dispatch_attention_fn(" in p.read_text(encoding="utf-8")}
    assert {"transformer_flux", "transformer_wan", "transformer_ltx", "transformer_qwenimage"} <= users
    assert not {"unet_2d_condition", "unet_2d_blocks", "attention_processor"} & users


def test_float32_runs_through_the_flex_backend(observe):
    error = dispatch.backend_vs_reference(dtype=torch.float32)
    assert error < 1e-5
    observe("dispatch.float32", f"float32, no mask: relative error {error:.1e}")


def test_is_causal_is_ignored_without_a_mask(observe):
    error = dispatch.backend_vs_reference(is_causal=True)
    assert error > 0.5  # not causal attention...
    q, k, v = dispatch.qkv()
    out = dispatch.dispatch_attention_fn(q, k, v, is_causal=True, backend="flex")
    full = F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v))).transpose(1, 2)
    assert dispatch.relative_error(out, full) < 1e-5  # ...but full attention, computed by SDPA itself
    observe("dispatch.is_causal", f"is_causal=True: relative error vs causal SDPA {error:.2f}")


def test_two_d_padding_mask_is_not_applied_to_keys(observe):
    error = dispatch.backend_vs_reference(attn_mask=dispatch.key_padding_mask())
    assert error > 0.1
    observe("dispatch.padding_mask", f"2-D (batch, tokens) mask: relative error vs key padding {error:.2f}")


def test_two_d_padding_mask_masks_queries_not_keys():
    """Against SDPA without a mask: valid query rows see every key; padded query rows are zeros."""
    q, k, v = dispatch.qkv()
    out = dispatch.dispatch_attention_fn(q, k, v, attn_mask=dispatch.key_padding_mask(), backend="flex")
    full = dispatch.sdpa(q, k, v)
    assert dispatch.relative_error(out[:, :192], full[:, :192]) < 1e-5
    assert out[:, 192:].abs().max() == 0


def test_four_d_boolean_mask_is_applied(observe):
    mask = dispatch.padding_to_4d(dispatch.key_padding_mask(), heads=2, query_tokens=256)
    error = dispatch.backend_vs_reference(attn_mask=mask)
    assert error < 1e-5
    observe("dispatch.full_mask", f"4-D boolean mask: relative error {error:.1e}")


def test_mask_and_is_causal_together_are_refused_when_checks_are_on():
    """With the switch a reader sets, DIFFUSERS_ATTN_CHECKS=1, in a fresh process (Diffusers reads it
    on import); with it off, the same call runs."""
    import shlex

    from tests.helpers import python

    call = ("from snippets import dispatch; "
            "dispatch.backend_vs_reference(is_causal=True, attn_mask=dispatch.key_padding_mask())")
    on = python("-c", shlex.quote(call), env={"DIFFUSERS_ATTN_CHECKS": "1"})
    assert on.returncode == 1
    assert on.stderr.strip().splitlines()[-1] == "ValueError: `is_causal` cannot be True when `attn_mask` is not None."
    off = python("-c", shlex.quote(call), env={"DIFFUSERS_ATTN_CHECKS": "0"})
    assert off.returncode == 0, off.stderr


def test_four_d_boolean_mask_that_differs_per_head_under_torch_compile():
    """Eager: each head gets its own mask, as in SDPA. Compiled: Diffusers builds the BlockMask from
    head 0 (H=None), so head 1's causal mask is lost and it gets full attention."""
    q, k, v = dispatch.qkv()  # (batch 2, 256 tokens, 2 heads, 32)
    mask = torch.ones(2, 2, 256, 256, dtype=torch.bool)
    mask[:, 1] = torch.ones(256, 256, dtype=torch.bool).tril()  # head 0: full, head 1: causal
    want, full = dispatch.sdpa(q, k, v, mask), dispatch.sdpa(q, k, v)
    eager = dispatch.dispatch_attention_fn(q, k, v, attn_mask=mask, backend="flex")
    assert dispatch.relative_error(eager, want) < 1e-5
    torch._dynamo.reset()
    attend = torch.compile(lambda q, k, v, m: dispatch.dispatch_attention_fn(q, k, v, attn_mask=m, backend="flex"))
    out = attend(q, k, v, mask)
    assert dispatch.relative_error(out[:, :, 0], want[:, :, 0]) < 1e-5, "head 0's own mask"
    assert dispatch.relative_error(out[:, :, 1], want[:, :, 1]) > 0.5, "head 1 is not causal..."
    assert dispatch.relative_error(out[:, :, 1], full[:, :, 1]) < 1e-5, "...but full attention, as head 0"


def test_dtype_and_cuda_errors_come_from_flash_and_sage_not_from_flex():
    """With the reader's switch DIFFUSERS_ATTN_CHECKS=1, in a fresh process: the messages are raised
    by the flash and sage backends' input checks; flex raises neither for float32 on the CPU."""
    import shlex

    from tests.helpers import sh

    script = ("import torch\n"
              "from diffusers.models.attention_dispatch import dispatch_attention_fn\n"
              "q = torch.randn(1, 16, 2, 32)\n"
              "for backend in ('flex', 'flash', 'sage'):\n"
              "    try:\n"
              "        dispatch_attention_fn(q, q, q, backend=backend)\n"
              "        print(backend, 'ok')\n"
              "    except ValueError as e:\n"
              "        print(backend, f'ValueError: {e}')\n")
    result = sh("export DIFFUSERS_ATTN_CHECKS=1; python -W ignore -c " + shlex.quote(script))
    assert result.returncode == 0, result.stderr
    said = dict(line.split(" ", 1) for line in result.stdout.strip().splitlines())
    assert said == {"flex": "ok",
                    "flash": "ValueError: Query, key, and value must be either bfloat16 or float16.",
                    "sage": "ValueError: Query, key, and value must be on a CUDA device."}


def test_float_mask_is_added_to_the_scores():
    bias = torch.randn(2, 2, 256, 256)
    assert dispatch.backend_vs_reference(attn_mask=bias) < 1e-5


def test_block_mask_gives_causal_attention(observe):
    q, k, v = dispatch.qkv()
    error = dispatch.relative_error(dispatch.causal_flex(q, k, v), dispatch.sdpa(q, k, v, is_causal=True))
    assert error < 1e-5
    observe("dispatch.causal_block_mask", f"causal BlockMask: relative error vs causal SDPA {error:.1e}")


def test_flex_backend_checks_neither_dtype_nor_cuda():
    from diffusers.models import attention_dispatch as ad

    checks = ad._AttentionBackendRegistry._constraints[ad.AttentionBackendName.FLEX]
    assert ad._check_device_cuda not in checks
    assert ad._check_qkv_dtype_bf16_or_fp16 not in checks
    # ...while other backends do, which is where the errors some guides quote come from.
    constraints = ad._AttentionBackendRegistry._constraints
    assert ad._check_device_cuda in constraints[ad.AttentionBackendName.SAGE]
    assert ad._check_qkv_dtype_bf16_or_fp16 in constraints[ad.AttentionBackendName.FLASH]


def test_torch_older_than_2_5_is_refused(observe):
    """Diffusers' own version test decides, in a fresh process that reports PyTorch 2.4.1."""
    import shlex

    from diffusers.models import attention_dispatch as ad

    from tests.helpers import python

    assert ad._REQUIRED_FLEX_VERSION == "2.5.0"
    script = ("import diffusers.utils.import_utils as iu\n"
              "iu._torch_version = '2.4.1'\n"
              "iu.is_torch_version.cache_clear()\n"
              "import diffusers.models.attention_dispatch as ad\n"
              "try:\n"
              "    ad._check_attention_backend_requirements(ad.AttentionBackendName.FLEX)\n"
              "    print('accepted')\n"
              "except RuntimeError as e:\n"
              "    print(f'RuntimeError: {e}')\n")
    result = python("-W ignore -c " + shlex.quote(script))
    assert result.returncode == 0, result.stderr
    said = result.stdout.strip().splitlines()[-1]
    assert said.startswith("RuntimeError: Flex Attention backend 'flex' is not usable because of missing "
                           "package or the version is too old."), said
    observe("dispatch.old_torch", said)


@pytest.mark.gpu
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_flux_with_flex_matches_native_on_gpu(compiled, observe):
    model, inputs = dispatch.tiny_flux()
    model = model.to("cuda", torch.bfloat16)
    inputs = {k: v.to("cuda", torch.bfloat16) if torch.is_tensor(v) and v.is_floating_point() else v
              for k, v in inputs.items()}
    with torch.no_grad():
        native = model(**inputs)[0]
        run = torch.compile(model) if compiled else model
        flex = dispatch.forward_with_flex(run, **inputs)[0]
    error = dispatch.relative_error(flex, native)
    assert error < 2e-2
    name = "compiled" if compiled else "eager"
    observe(f"dispatch.flux_gpu_{name}", f"Flux (bfloat16, {name}): flex vs native relative error {error:.1e}")


def test_mask_and_is_causal_with_checks_off_drop_the_mask():
    q, k, v = dispatch.qkv()
    mask = dispatch.padding_to_4d(dispatch.key_padding_mask(), heads=2, query_tokens=256)
    out = dispatch.dispatch_attention_fn(q, k, v, attn_mask=mask, is_causal=True, backend="flex")
    assert dispatch.relative_error(out, dispatch.sdpa(q, k, v, is_causal=True)) < 1e-5
    assert dispatch.relative_error(out, dispatch.sdpa(q, k, v, mask, is_causal=False)) > 0.1


@pytest.mark.gpu
def test_masks_and_is_causal_on_gpu(observe):
    errors = dispatch.mask_behaviour("cuda", torch.bfloat16)
    ignored = {"is_causal=True", "2-D boolean (batch, tokens)"}
    for mask, error in errors.items():
        assert (error > 0.1) if mask in ignored else (error < 2e-2), (mask, error)
    observe("dispatch.masks_gpu", "cuda, bfloat16: relative error of `flex` vs SDPA given the same arguments\n"
            + "\n".join(f"  {mask:28} {error:.1e}" for mask, error in errors.items()))


@pytest.mark.gpu
def test_flux_routes_through_the_flex_backend_and_the_sd_unet_does_not_on_gpu():
    models = [dispatch.tiny_flux(), dispatch.tiny_unet()]
    counts = [dispatch.count_flex_calls(model.to("cuda"), {k: v.cuda() if torch.is_tensor(v) else v
                                                           for k, v in inputs.items()})
              for model, inputs in models]
    assert counts == [2, 0]


def test_masks_behave_on_the_cpu_as_the_page_says_they_do_on_the_gpu():
    errors = dispatch.mask_behaviour("cpu", torch.float32)
    ignored = {"is_causal=True", "2-D boolean (batch, tokens)"}
    assert set(errors) == ignored | {"no mask", "4-D boolean", "4-D float", "causal BlockMask"}
    for mask, error in errors.items():
        assert (error > 0.1) if mask in ignored else (error < 1e-5), (mask, error)


def test_program_reports_routing_and_masks_in_float32_on_the_cpu():
    from tests.helpers import python

    result = python("-W ignore -m snippets.dispatch")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1:3] == ["FluxTransformer2DModel: 2 flex_attention calls per forward",
                          "UNet2DConditionModel: 0 flex_attention calls per forward"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = "bfloat16" if device == "cuda" else "float32"
    assert lines[3] == f"{device}, {dtype}: relative error of `flex` vs SDPA given the same arguments"
    assert len(lines) == 10
