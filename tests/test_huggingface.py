"""Transformers with attn_implementation="flex_attention" (snippets/huggingface.py) against the same model
with Transformers' SDPA path (another attention function, another mask: a boolean tensor, not a BlockMask),
Dynamo's own count of the graphs it compiled, and Transformers' source."""
import inspect
import re

import pytest
import torch

from snippets import huggingface
from tests.helpers import python


def relative_error(got, want) -> float:
    return ((got.double() - want.double()).norm() / want.double().norm()).item()


@pytest.mark.parametrize("tokens", [40, 200])
def test_flex_gives_the_logits_of_sdpa_in_float32(tokens, ran):
    """float32 on the CPU, batch 2, 0, 10 and 30 tokens of left padding: every logit, padding positions
    included, within 1e-5 of the SDPA model's."""
    flex, sdpa = huggingface.small_llama("flex_attention"), huggingface.small_llama("sdpa")
    assert flex.config._attn_implementation == "flex_attention" and sdpa.config._attn_implementation == "sdpa"
    for padding in (0, 10, 30):
        batch = huggingface.padded_batch(tokens, padding)
        gap = (huggingface.logits(flex, *batch) - huggingface.logits(sdpa, *batch)).abs().max()
        assert gap < 1e-5, (tokens, padding, gap)
    ran(dtypes=torch.float32, lengths=tokens, batch=2, heads=4, head_dims=16, modes="compiled", passes="forward",
        inputs="left padding")


def test_flex_in_bfloat16_is_as_close_to_float32_as_sdpa_in_bfloat16(ran):
    """bfloat16 on the CPU, 200 tokens, 30 of padding: the relative error of the flex model's logits against
    the float32 SDPA model's is at most 1.5 times that of the bfloat16 SDPA model."""
    batch = huggingface.padded_batch(200, 30)
    want = huggingface.logits(huggingface.small_llama("sdpa"), *batch)
    errors = {impl: relative_error(huggingface.logits(huggingface.small_llama(impl).to(torch.bfloat16), *batch),
                                   want) for impl in ("sdpa", "flex_attention")}
    assert 0 < errors["flex_attention"] <= 1.5 * errors["sdpa"], errors
    ran(dtypes=torch.bfloat16, lengths=200, batch=2, heads=4, head_dims=16, modes="compiled", passes="forward",
        inputs="left padding")


def test_a_first_length_compiles_two_graphs_a_second_two_more_and_later_lengths_none(ran):
    """Dynamo's count from a fresh start: 40 tokens 2 graphs (create_block_mask and flex_attention, by the
    names of the compiled frames), 40 again none, 41 two (the length made dynamic), 42 and 60 none, 129 (past
    one 128-token block) two, 200 none, a batch of 1 two; the SDPA model compiles nothing."""
    from torch._dynamo.utils import clear_compilation_metrics, get_compilation_metrics

    torch._dynamo.reset()
    clear_compilation_metrics()
    flex, sdpa = huggingface.small_llama("flex_attention"), huggingface.small_llama("sdpa")
    assert huggingface.graphs_compiled(sdpa, huggingface.padded_batch(40, 10)) == 0
    found = [huggingface.graphs_compiled(flex, huggingface.padded_batch(tokens, 10))
             for tokens in (40, 40, 41, 42, 60, 129, 200)]
    found.append(huggingface.graphs_compiled(flex, [x[:1] for x in huggingface.padded_batch(60, 10)]))
    assert found == [2, 0, 2, 0, 0, 2, 0, 2], found
    assert [m.co_name for m in get_compilation_metrics()] == ["create_block_mask", "flex_attention"] * 4
    ran(dtypes=torch.float32, lengths=[40, 41, 42, 60, 129, 200], batch=[1, 2], modes="compiled", passes="forward")


def test_the_batch_pads_the_start_of_the_second_sequence_and_its_mask_changes_only_that_sequence():
    """padded_batch's mask, position by position; with the mask, the second sequence's logits at its real
    tokens differ from those without it, and the first sequence's do not (SDPA model, float32)."""
    model = huggingface.small_llama("sdpa")
    for padding in (0, 10, 30):
        input_ids, mask = huggingface.padded_batch(40, padding)
        assert mask.tolist() == [[1] * 40, [0] * padding + [1] * (40 - padding)]
        masked = huggingface.logits(model, input_ids, mask)
        unmasked = huggingface.logits(model, input_ids, torch.ones_like(mask))
        assert torch.equal(masked[0], unmasked[0])
        assert (padding > 0) == bool((masked[1, padding:] - unmasked[1, padding:]).abs().max() > 1e-3), padding


def test_transformers_builds_one_block_mask_per_forward_for_every_sequence_and_every_head(monkeypatch, ran):
    """Watched at run time: one create_block_mask call per forward pass, shared by both layers, with B = the
    batch and H=None, and a BlockMask with one block pattern per sequence (its head dimension is 1)."""
    from transformers import masking_utils

    calls = []
    real = masking_utils.create_block_mask

    def spy(*args, **kwargs):
        calls.append(kwargs)
        calls[-1]["made"] = real(*args, **kwargs)
        return calls[-1]["made"]

    monkeypatch.setattr(masking_utils, "create_block_mask", spy)
    huggingface.logits(huggingface.small_llama("flex_attention"), *huggingface.padded_batch(40, 10))
    assert len(calls) == 1 and (calls[0]["B"], calls[0]["H"], calls[0]["_compile"]) == (2, None, True)
    assert tuple(calls[0]["made"].kv_num_blocks.shape[:2]) == (2, 1)
    ran(dtypes=torch.float32, lengths=40, batch=2, modes="compiled", passes="forward")


def test_from_pretrained_takes_the_same_argument(tmp_path, ran):
    """A model saved and loaded with from_pretrained(..., attn_implementation="flex_attention") runs
    FlexAttention and gives the logits of the model it was saved from."""
    from transformers import AutoModelForCausalLM

    sdpa = huggingface.small_llama("sdpa")
    sdpa.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="flex_attention").eval()
    assert loaded.config._attn_implementation == "flex_attention"
    batch = huggingface.padded_batch(40, 10)
    assert (huggingface.logits(loaded, *batch) - huggingface.logits(sdpa, *batch)).abs().max() < 1e-5
    ran(dtypes=torch.float32, lengths=40, batch=2, modes="compiled", passes="forward")


def test_transformers_builds_the_block_mask_compiled_for_every_head_and_compiles_flex_with_the_defaults():
    """Read from the installed Transformers' source: create_block_mask with B = the batch, H=None (one block
    pattern for every head) and _compile=True; flex_attention compiled by torch.compile with its defaults on
    PyTorch 2.7 and newer; no log-sum-exp asked for on the CPU."""
    from transformers import masking_utils
    from transformers.integrations import flex_attention as integration

    builder = inspect.getsource(masking_utils.flex_attention_mask)
    call = re.search(r"create_block_mask\((.*?)\n    \)", builder, re.S)[1]
    assert re.findall(r"(\w+)=", call) == ["mask_mod", "B", "H", "Q_LEN", "KV_LEN", "device", "_compile"]
    assert "B=batch_size" in call and "H=None" in call and "_compile=True" in call
    wrapper = inspect.getsource(integration.WrappedFlexAttention.__init__)
    assert "self._compiled_flex_attention = torch.compile(flex_attention)\n" in wrapper
    assert 'return_lse = query.device.type != "cpu"' in inspect.getsource(integration.flex_attention_forward)


def test_training_on_the_cpu_stops_at_the_forward_pass(ran):
    """With gradients recorded (parameters that require them), the forward pass itself raises; without them
    (torch.no_grad), the same forward runs."""
    model = huggingface.small_llama("flex_attention").train()
    input_ids, _ = huggingface.padded_batch(40, 0)
    with pytest.raises(NotImplementedError, match="FlexAttention does not support backward on CPU"):
        model(input_ids=input_ids, labels=input_ids)
    with torch.no_grad():
        assert torch.isfinite(model(input_ids=input_ids, labels=input_ids).loss)
    # Only the layers after the last attention (the final norm and lm_head) trained: no gradient reaches q, k
    # or v, and forward and backward run
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name.startswith(("model.norm.", "lm_head.")))
    model(input_ids=input_ids, labels=input_ids).loss.backward()
    assert model.lm_head.weight.grad.abs().sum() > 0
    ran(dtypes=torch.float32, lengths=40, batch=2, modes="compiled", passes=["forward", "backward"])


def test_program_prints_the_graphs_the_gap_and_the_error(observe):
    result = python("-W ignore -m snippets.huggingface")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:8] == [f"{t} tokens: {n} graphs compiled" for t, n in
                         ((40, 2), (40, 0), (41, 2), (42, 0), (60, 0), (129, 2), (200, 0))] + \
        ["60 tokens, batch 1: 2 graphs compiled"], lines
    gap = re.fullmatch(r"float32, 40 tokens, 10 of them padding: the logits differ by at most (\S+)", lines[8])
    assert gap and float(gap[1]) < 1e-5, lines[8]
    assert lines[9].startswith("NotImplementedError: FlexAttention does not support backward on CPU.")
    observe("huggingface.graphs", "\n".join(lines[:8]))
    observe("huggingface.compare", lines[8])
    observe("huggingface.backward", lines[9])


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [256, 1000])
def test_flex_trains_like_sdpa_on_the_gpu(tokens, ran):
    """bfloat16 on the GPU, batch 2 with 30 tokens of left padding, training mode: the relative error of the
    logits and of every parameter's gradient against the float32 SDPA model's is at most 1.5 times that of
    the bfloat16 SDPA model, plus 1e-6."""
    batch = [x.cuda() for x in huggingface.padded_batch(tokens, 30)]
    labels = batch[0].masked_fill(batch[1] == 0, -100)

    def step(impl, dtype):
        model = huggingface.small_llama(impl).to("cuda", dtype).train()
        out = model(input_ids=batch[0], attention_mask=batch[1], labels=labels)
        out.loss.backward()
        return [out.logits.detach()] + [p.grad for p in model.parameters()]

    want = step("sdpa", torch.float32)
    got = {impl: step(impl, torch.bfloat16) for impl in ("sdpa", "flex_attention")}
    for i, w in enumerate(want):
        flex, sdpa = relative_error(got["flex_attention"][i], w), relative_error(got["sdpa"][i], w)
        assert flex <= 1.5 * sdpa + 1e-6, (i, flex, sdpa)
    ran(dtypes=torch.bfloat16, lengths=tokens, batch=2, heads=4, head_dims=16, modes="compiled",
        passes=["forward", "backward"], backends="triton", inputs="left padding")
