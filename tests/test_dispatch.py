from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from snippets import dispatch


def test_flux_routes_through_the_flex_backend_and_the_sd_unet_does_not(observe):
    calls = dispatch.flex_calls()
    assert calls["FluxTransformer2DModel"] == 2  # one double-stream and one single-stream block
    assert calls["UNet2DConditionModel"] == 0
    observe("dispatch.routing", dispatch.describe_calls(calls))


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


def head_zero_blocks(mask, block=128):
    """What a BlockMask built from head 0's mask (H=None) does to every head, written out block by block:
    a block head 0 masks entirely is skipped, one it keeps entirely is computed without the mask, and
    inside a block it masks partly each head's own mask applies."""
    out = torch.empty_like(mask)
    tokens_q, tokens_k = mask.shape[2:]
    for b in range(mask.shape[0]):
        for i in range(0, tokens_q, block):
            for j in range(0, tokens_k, block):
                tile = mask[b, 0, i:i + block, j:j + block]
                if bool(tile.all()) or not bool(tile.any()):
                    out[b, :, i:i + block, j:j + block] = bool(tile.all())
                else:
                    out[b, :, i:i + block, j:j + block] = mask[b, :, i:i + block, j:j + block]
    return out


def per_head_masks():
    """Masks that differ between heads, (batch 2, heads 2, 256, 256): head 0 causal and head 1 full (head 1
    loses the block above the diagonal), the reverse (head 1 gets full attention), and random masks (every
    block partial: each head exact)."""
    tril = torch.ones(256, 256, dtype=torch.bool).tril()
    full = torch.ones(256, 256, dtype=torch.bool)
    generator = torch.Generator().manual_seed(0)
    return {"causal, full": torch.stack([tril, full])[None].expand(2, 2, 256, 256),
            "full, causal": torch.stack([full, tril])[None].expand(2, 2, 256, 256),
            "random": torch.rand(2, 2, 256, 256, generator=generator) < 0.7}


def test_four_d_boolean_mask_that_differs_per_head_under_torch_compile(ran, observe):
    """Eager: every head gets its own mask, as in SDPA. Compiled: Diffusers builds the BlockMask from head
    0's mask with H=None, so head 0's blocks decide what is skipped and what is computed without the mask
    for every head; a BlockMask built with H=heads (per_head_block_mask) is exact."""
    q, k, v = dispatch.qkv()  # (batch 2, 256 tokens, 2 heads, 32)
    not_head_zero = 0
    for name, mask in per_head_masks().items():
        want = dispatch.sdpa(q, k, v, mask)
        eager = dispatch.dispatch_attention_fn(q, k, v, attn_mask=mask, backend="flex")
        assert dispatch.relative_error(eager, want) < 1e-5, name
        errors = dispatch.per_head_errors(mask)
        assert max(errors["per-head BlockMask"]) < 1e-5, (name, errors)
        out = dispatch.compiled_flex(q, k, v, mask)
        what_happens = dispatch.sdpa(q, k, v, head_zero_blocks(mask))
        assert dispatch.relative_error(out, what_happens) < 1e-5, name
        wrong = (head_zero_blocks(mask) != mask).any()
        assert (dispatch.relative_error(out, want) > 0.1) == bool(wrong), name
        head_zero_everywhere = mask[:, :1].expand_as(mask)  # what the page said before: wrong
        differs = bool((head_zero_blocks(mask) != head_zero_everywhere).any())
        error = dispatch.relative_error(out, dispatch.sdpa(q, k, v, head_zero_everywhere))
        assert (error > 0.1) == differs, name
        not_head_zero += differs
        ran(modes=["eager", "compiled"], dtypes=torch.float32, lengths=256, heads=2, head_dims=32,
            inputs="per-head mask")
    assert not_head_zero == 2, "head 0 causal, head 1 full and random masks: not head 0's pattern everywhere"
    observe("dispatch.per_head", dispatch.per_head_report(dispatch.per_head_errors(dispatch.causal_and_full())))


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


def test_block_mask_gives_causal_attention(observe, ran):
    q, k, v = dispatch.qkv()
    error = dispatch.relative_error(dispatch.causal_flex(q, k, v), dispatch.sdpa(q, k, v, is_causal=True))
    assert error < 1e-5
    ran(modes="eager", dtypes=torch.float32, lengths=256, heads=2, head_dims=32, batch=2, passes="forward",
        inputs="causal BlockMask")
    observe("dispatch.causal_block_mask", f"causal BlockMask: relative error vs causal SDPA {error:.1e}")


def test_block_mask_gives_causal_attention_under_torch_compile(ran):
    """Compiled, the kernel skips the blocks the BlockMask marks empty and computes those it marks full
    without the mask_mod: a BlockMask whose blocks were wrong would give non-causal attention here,
    where eager attention applies the mask_mod everywhere. The oracle: SDPA with is_causal=True."""
    q, k, v = dispatch.qkv()
    out = torch.compile(dispatch.causal_flex)(q, k, v)
    assert dispatch.relative_error(out, dispatch.sdpa(q, k, v, is_causal=True)) < 1e-5
    ran(modes="compiled", dtypes=torch.float32, lengths=256, heads=2, head_dims=32, batch=2,
        passes="forward", inputs="causal BlockMask")


def test_two_d_mask_in_cross_attention_raises():
    """Keys longer than the queries, as in cross-attention with a text padding mask over the keys: the
    `flex` backend expands the (batch, tokens) mask over the query rows and cannot; the native backend
    applies it to the keys (the oracle: SDPA with the mask over the keys)."""
    torch.manual_seed(0)
    q, k = torch.randn(2, 16, 2, 32), torch.randn(2, 32, 2, 32)
    mask = torch.ones(2, 32, dtype=torch.bool)
    mask[:, 24:] = False
    with pytest.raises(RuntimeError, match=r"The expanded size of the tensor \(16\) must match the existing size \(32\)"):
        dispatch.dispatch_attention_fn(q, k, k, attn_mask=mask, backend="flex")
    native = dispatch.dispatch_attention_fn(q, k, k, attn_mask=mask, backend="native")
    assert dispatch.relative_error(native, dispatch.sdpa(q, k, k, mask)) < 1e-5


def test_flex_backend_checks_neither_dtype_nor_cuda():
    from diffusers.models import attention_dispatch as ad

    constraints = ad._AttentionBackendRegistry._constraints
    name = ad.AttentionBackendName

    def backends_with(prefix):
        """The backends with an input check whose function is named prefix... (a factory's inner check too)."""
        return {backend for backend, checks in constraints.items()
                if any(check.__qualname__.startswith(prefix) for check in checks)}

    dtype_checked = backends_with("_check_qkv_dtype")  # "must be either bfloat16 or float16", and bf16-only
    cuda_checked = backends_with("_check_device_cuda")  # "must be on a CUDA device"
    assert name.FLEX not in dtype_checked and name.FLEX not in cuda_checked
    assert not any("dtype" in c.__qualname__ or "cuda" in c.__qualname__ for c in constraints[name.FLEX])
    # ...while other backends do, which is where the errors some guides quote come from: the
    # flash-attention backends, SageAttention and SDPA's cuDNN and flash backends among them.
    assert ad._check_qkv_dtype_bf16_or_fp16 in constraints[name.FLASH]
    assert {name.FLASH, name.SAGE, name._NATIVE_CUDNN, name._NATIVE_FLASH} <= dtype_checked
    assert ad._check_device_cuda in constraints[name.SAGE]
    assert name.SAGE in cuda_checked


def test_torch_older_than_2_5_is_refused(observe):
    """Diffusers' own version test decides, in a fresh process that reports PyTorch 2.4.1."""
    from diffusers.models import attention_dispatch as ad

    assert ad._REQUIRED_FLEX_VERSION == "2.5.0"
    said = dispatch.flex_backend_with_torch("2.4.1")  # a fresh process; check=True: it exits with 0
    assert said.startswith("RuntimeError: Flex Attention backend 'flex' is not usable because of missing "
                           "package or the version is too old."), said
    observe("dispatch.old_torch", said)


def test_flex_attention_that_fails_to_import_is_refused_with_the_same_message():
    """Diffusers also turns `flex` off when `import torch.nn.attention.flex_attention` fails (ImportError,
    OSError, RuntimeError), whatever the version: in a fresh process where that import fails, the same
    message as for PyTorch 2.4.1, and the warning Diffusers logs."""
    import shlex

    from tests.helpers import python

    call = ("import sys, torch\n"
            "sys.modules['torch.nn.attention.flex_attention'] = None  # the import raises ImportError\n"
            "import diffusers.models.attention_dispatch as dispatch\n"
            "try:\n"
            "    dispatch._check_attention_backend_requirements(dispatch.AttentionBackendName.FLEX)\n"
            "    print('accepted')\n"
            "except RuntimeError as e:\n"
            "    print(f'RuntimeError: {e}')\n")
    result = python("-W ignore -c", shlex.quote(call))
    assert result.returncode == 0, result.stderr
    assert "flex_attention failed to import" in result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith(
        "RuntimeError: Flex Attention backend 'flex' is not usable because of missing package or the version is too old.")


@pytest.mark.gpu
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_flux_with_flex_matches_native_on_gpu(compiled, observe):
    error = dispatch.flux_flex_vs_native(compiled)  # the page's own call: the native backend (SDPA) is the oracle
    assert error < 2e-2
    observe(f"dispatch.flux_gpu_{'compiled' if compiled else 'eager'}", dispatch.flux_report(error, compiled))


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
    observe("dispatch.masks_gpu", dispatch.mask_report(errors, "cuda", torch.bfloat16))


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
    assert lines[1:3] == ["FluxTransformer2DModel: 2 flex_attention calls per forward pass",
                          "UNet2DConditionModel:   0 flex_attention calls per forward pass"]
    assert [line.rsplit(" ", 1)[0] for line in lines[3:8]] == [
        "float32, no mask: relative error", "is_causal=True: relative error vs causal SDPA",
        "causal BlockMask: relative error vs causal SDPA", "4-D boolean mask: relative error",
        "2-D (batch, tokens) mask: relative error vs key padding"]
    assert lines[8] == "compiled, head 0 causal, head 1 full: relative error of each head against SDPA"
    assert [line.split()[:3] for line in lines[9:11]] == [["4-D", "boolean", "tensor"], ["per-head", "BlockMask", "head"]]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = "bfloat16" if device == "cuda" else "float32"
    assert lines[11] == f"{device}, {dtype}: relative error of `flex` vs SDPA given the same arguments"
    assert lines[18].startswith("RuntimeError: Flex Attention backend 'flex' is not usable")
    flux = ["Flux (bfloat16, eager): flex vs native relative error", "Flux (bfloat16, compiled): flex vs native relative error"]
    assert [line.rsplit(" ", 1)[0] for line in lines[19:]] == (flux if device == "cuda" else [])
