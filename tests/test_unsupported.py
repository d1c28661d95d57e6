"""What FlexAttention does not take (snippets/unsupported.py), each statement against something other than the
page's code: the library's own answer and source, attention written out with the mask applied position by
position, exact averages worked out by enumeration, and SDPA over each sequence alone."""
import inspect
import math
import re
import shlex

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import flex_attention as flex_module
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from snippets import unsupported
from tests.helpers import python


def test_flex_attention_takes_no_dropout_and_sdpa_does(observe, ran, monkeypatch):
    given = []

    def watch(name, real):
        def call(*args, **kwargs):
            given.append((name, kwargs.get("dropout_p")))
            return real(*args, **kwargs)
        return call
    monkeypatch.setattr(unsupported.F, "scaled_dot_product_attention", watch("SDPA", F.scaled_dot_product_attention))
    monkeypatch.setattr(unsupported, "flex_attention", watch("flex_attention", flex_attention))
    text = unsupported.dropout_p_answers()
    monkeypatch.undo()
    assert given == [("SDPA", 0.5), ("flex_attention", 0.5)]  # the value each line names is the one each was given
    assert "dropout_p" not in inspect.signature(flex_attention).parameters
    assert not any("dropout" in name for name in inspect.signature(flex_attention).parameters)
    q = torch.randn(1, 2, 8, 16)
    assert torch.equal(F.scaled_dot_product_attention(q, q, q, dropout_p=1.0), torch.zeros_like(q))  # SDPA drops all
    assert text.splitlines() == ["SDPA, dropout_p=0.5: output of shape (1, 2, 8, 16)",
                                 "flex_attention, dropout_p=0.5: TypeError: flex_attention() got an unexpected "
                                 "keyword argument 'dropout_p'"]
    ran(modes="eager", passes="forward")
    observe("unsupported.no_dropout", text)


def written_out(q, k, v, keep):
    """Softmax over the kept keys, query by query; a query with no kept key gets zeros."""
    out = torch.zeros_like(q)
    for b, h, i in ((b, h, i) for b in range(q.shape[0]) for h in range(q.shape[1]) for i in range(q.shape[2])):
        kept = [j for j in range(k.shape[2]) if keep[b, h, i, j]]
        if kept:
            scores = torch.stack([q[b, h, i] @ k[b, h, j] for j in kept]) / math.sqrt(q.shape[-1])
            out[b, h, i] = sum(w * v[b, h, j] for w, j in zip(torch.softmax(scores, 0), kept))
    return out


@pytest.mark.parametrize("compiled", [False, True])
def test_scores_dropped_in_a_score_mod_are_a_softmax_over_the_kept_keys(compiled, ran, monkeypatch):
    """Random keep patterns, one query with every key dropped; float64 eager, float32 compiled (the CPU compiles
    FlexAttention in float32)."""
    g = torch.Generator().manual_seed(0)
    dtype = torch.float32 if compiled else torch.float64
    q, k, v = (torch.randn(2, 2, n, 16, generator=g, dtype=dtype) for n in (12, 20, 20))
    keep = torch.rand(2, 2, 12, 20, generator=g) > 0.5
    keep[0, 1, 3] = False
    if compiled:  # from a fresh start: what this process compiled before (other lengths) does not change the shapes
        torch._dynamo.reset()
    attention = torch.compile(flex_attention) if compiled else flex_attention
    monkeypatch.setattr(unsupported, "flex_attention", attention)
    got = unsupported.scores_dropped(q, k, v, keep)
    want = written_out(q.double(), k.double(), v.double(), keep)
    assert (got.double() - want).abs().max() < (1e-5 if compiled else 1e-12)
    assert torch.equal(got[0, 1, 3], torch.zeros(16, dtype=dtype))
    ran(dtypes=dtype, head_dims=16, lengths=[12, 20], modes="compiled" if compiled else "eager", passes="forward")


def test_weights_dropped_is_what_sdpa_dropout_p_does_on_average(ran):
    """SDPA's own dropout, averaged over 4000 calls, against no dropout; and the page's weights_dropped, whose
    average over every pattern is exact (next test), keeps a weight where keep is True, scaled by 1 / (1 - p)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, n, 16, generator=g, dtype=torch.float64) for n in (4, 8, 8))
    plain = F.scaled_dot_product_attention(q, k, v)
    torch.manual_seed(0)
    mean = sum(F.scaled_dot_product_attention(q, k, v, dropout_p=0.5) for _ in range(4000)) / 4000
    assert (mean - plain).abs().max() < 0.06
    keep = torch.zeros(1, 1, 4, 8, dtype=torch.bool)
    keep[..., 2] = True
    weights = torch.softmax(q @ k.transpose(-2, -1) / 4, -1)
    assert torch.allclose(unsupported.weights_dropped(q, k, v, keep, 0.5), 2 * weights[..., 2:3] * v[..., 2, :])
    ran(dtypes=torch.float64, head_dims=16, lengths=[4, 8], modes="eager", passes="forward")


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_on_average_dropping_weights_changes_nothing_and_dropping_scores_does(p, ran):
    """The average over every pattern, worked out again here by enumeration with the probabilities written as a
    product over keys, for 4 queries over 8 keys in float64."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 1, n, 16, generator=g, dtype=torch.float64) for n in (4, 8, 8))
    plain = written_out(q, k, v, torch.ones(1, 1, 4, 8, dtype=torch.bool))
    after, before = torch.zeros_like(q), torch.zeros_like(q)
    for pattern in range(256):
        kept = [(pattern >> j) & 1 == 1 for j in range(8)]
        chance = math.prod(1 - p if kept_j else p for kept_j in kept)
        keep = torch.tensor(kept).expand(1, 1, 4, 8)
        weights = torch.softmax(q @ k.transpose(-2, -1) / 4, -1)
        after += chance * (weights * keep / (1 - p)) @ v
        before += chance * written_out(q, k, v, keep)
    assert (after - plain).abs().max() < 1e-12
    assert (unsupported.expected(lambda *a: unsupported.weights_dropped(*a, p), q, k, v, p) - after).abs().max() < 1e-12
    assert (unsupported.expected(unsupported.scores_dropped, q, k, v, p) - before).abs().max() < 1e-12
    assert (before - plain).abs().max() > 1e-3  # ten orders of magnitude above the rounding of the rest
    ran(dtypes=torch.float64, head_dims=16, lengths=[4, 8], modes="eager", passes="forward")


def test_transformers_refuses_attention_dropout_in_training_only(ran):
    """Transformers' own message (read from its source); in eval mode dropout is off, so the model with
    attention_dropout 0.1 gives the loss of the same model with 0.0."""
    from transformers.integrations import flex_attention as hf_flex

    source = inspect.getsource(hf_flex.flex_attention_forward)
    message = "`flex_attention` does not support `dropout`. Please use it with inference only (`model.eval()`) " \
              "or turn off the attention dropout in the respective config."
    assert '"`flex_attention` does not support `dropout`. Please use it with inference"' in source
    with_dropout, without = unsupported.small_llama(0.1), unsupported.small_llama(0.0)
    assert unsupported.forward_in(with_dropout, "train") == f"ValueError: {message}"
    assert unsupported.forward_in(without, "train").startswith("NotImplementedError: FlexAttention does not support "
                                                               "backward on CPU")
    eval_loss = unsupported.forward_in(with_dropout, "eval")
    assert eval_loss.startswith("loss ") and eval_loss == unsupported.forward_in(without, "eval")
    ids = torch.randint(0, 128, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():  # train mode stops the 0.1 model without gradients too; the 0.0 model runs
        with_dropout.train(), without.train()
        with pytest.raises(ValueError, match="does not support `dropout`"):
            with_dropout(input_ids=ids, labels=ids)
        assert f"loss {without(input_ids=ids, labels=ids).loss.item():.4f}" == eval_loss
    ran(dtypes=torch.float32, lengths=[40], batch=2, heads=4, modes="eager", passes="forward")


def test_nested_tensors_are_refused_and_create_nested_block_mask_is_gone(observe, ran):
    source = inspect.getsource(flex_module._validate_no_nested_tensors)
    answer = unsupported.nested_answer()
    assert answer.startswith("NotImplementedError: flex_attention does not support NestedTensor inputs")
    assert " ".join(answer.removeprefix("NotImplementedError: ").split()[:6]) in source
    assert not hasattr(flex_module, "create_nested_block_mask")
    compiled = torch.compile(flex_attention)
    batch = torch.nested.nested_tensor([torch.randn(n, 2, 16) for n in (5, 3)], layout=torch.jagged)
    with pytest.raises(NotImplementedError, match="does not support NestedTensor"):
        compiled(batch, batch, batch)
    from torch.nn.attention.varlen import varlen_attn

    packed, starts = torch.randn(8, 2, 16), torch.tensor([0, 5, 8], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="'aten::_flash_attention_forward' with arguments from the 'CPU'"):
        varlen_attn(packed, packed, packed, starts, starts, 5, 5)
    ran(modes=["eager", "compiled"], passes="forward")
    observe("unsupported.nested", answer)


@pytest.mark.skipif(not torch.__version__.startswith("2.11."),
                    reason="what PyTorch 2.11 answers: runs where it is installed (the GPU machines)")
def test_pytorch_2_11_refuses_a_nested_batch_from_inside_torch_compile(ran):
    """PyTorch 2.11 has no _validate_no_nested_tensors: the refusal comes from Dynamo, without compiling (flex_attention
    compiles its own call) and compiled, with the batch on the CPU and, where there is one, on the GPU."""
    assert not hasattr(flex_module, "create_nested_block_mask")
    assert not hasattr(flex_module, "_validate_no_nested_tensors")
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        torch._dynamo.reset()
        batch = torch.nested.nested_tensor([torch.randn(n, 2, 16, device=device) for n in (5, 3)], layout=torch.jagged)
        with pytest.raises(torch._dynamo.exc.Unsupported, match="no rule registered for HOP flex_attention and "
                                                                "subclass <class 'torch.nested._internal.nested_tensor"):
            flex_attention(batch, batch, batch)
        with pytest.raises(torch._dynamo.exc.InternalTorchDynamoError, match="'NestedIntNode' object has no attribute"):
            torch.compile(flex_attention)(batch, batch, batch)
    from torch.nn.attention.varlen import varlen_attn

    packed, starts = torch.randn(8, 2, 16), torch.tensor([0, 5, 8], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="'aten::_flash_attention_forward' with arguments from the 'CPU'"):
        varlen_attn(packed, packed, packed, starts, starts, 5, 5)
    ran(modes=["eager", "compiled"], passes="forward")


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("lengths", [(100, 37, 250), (128, 128, 1), (300,)])
def test_a_nested_batch_packed_with_a_sequence_mask_is_causal_attention_over_each_sequence(lengths, compiled, ran,
                                                                                            monkeypatch):
    """Against SDPA over each sequence alone; compiled (the BlockMask's skipped blocks matter there) in float32,
    eager in float64; lengths across and on the 128-token block boundary, and a single sequence."""
    dtype = torch.float32 if compiled else torch.float64
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.nested.nested_tensor([torch.randn(n, 2, 16, generator=g, dtype=dtype) for n in lengths],
                                          layout=torch.jagged) for _ in range(3))
    if compiled:  # from a fresh start: what this process compiled before (other lengths) does not change the shapes
        torch._dynamo.reset()
    attention = torch.compile(flex_attention) if compiled else flex_attention
    masks = []

    def kept(*args, **kwargs):
        masks.append(create_block_mask(*args, **kwargs))
        return masks[-1]
    monkeypatch.setattr(unsupported, "create_block_mask", kept)
    out = unsupported.causal_per_sequence(q, k, v, attention=attention)
    blocks = -(-sum(lengths) // 128)  # blocks of 128 tokens along each side; the kernel skips those not listed
    assert int((masks[0].kv_num_blocks + masks[0].full_kv_num_blocks).sum()) < blocks * blocks
    assert out.is_nested and out.shape[0] == len(lengths)
    for i, n in enumerate(lengths):
        assert out[i].shape == (n, 2, 16)
        want = F.scaled_dot_product_attention(*(t[i].transpose(0, 1).double() for t in (q, k, v)), is_causal=True)
        assert (out[i].transpose(0, 1).double() - want).abs().max() < (1e-5 if compiled else 1e-12), (n, compiled)
    ran(dtypes=dtype, head_dims=16, lengths=list(lengths), batch=len(lengths), heads=2,
        modes="compiled" if compiled else "eager", passes="forward")


@pytest.mark.parametrize("lengths", [(100, 37, 250), (128, 128, 1), (300,)])
def test_the_reference_is_sdpa_with_one_mask_that_keeps_each_sequence_causal_to_itself(lengths):
    """The page's float64 reference (SDPA over each sequence alone) against SDPA over the packed batch with a
    dense mask written position by position: the output and the gradients of q, k and v."""
    g = torch.Generator().manual_seed(0)
    *values, grad = (torch.randn(sum(lengths), 2, 16, generator=g, dtype=torch.float64) for _ in range(4))
    got = unsupported.gradients(unsupported.sdpa_per_sequence, lengths, values, grad)
    sequence = [n for n, length in enumerate(lengths) for _ in range(length)]
    allowed = torch.tensor([[sequence[i] == sequence[j] and i >= j for j in range(len(sequence))]
                            for i in range(len(sequence))])
    leaves = [x.clone().requires_grad_() for x in values]
    out = F.scaled_dot_product_attention(*(x.transpose(0, 1) for x in leaves), attn_mask=allowed).transpose(0, 1)
    out.backward(grad)
    for a, b in zip(got, [out.detach(), *(x.grad for x in leaves)]):
        assert (a - b).abs().max() < 1e-12


def errors_of(text):
    """{(head_dim, way): {"out": error, "dq": ..., "dk": ..., "dv": ...}} from against_float64's lines."""
    found = {}
    for line in text.splitlines()[1:]:
        head, way, rest = re.fullmatch(r"head dim +(\d+), (.+?) +(out .*)", line).groups()
        found[int(head), way] = {k: float(e) for k, e in re.findall(r"(\w+) (\S+)", rest)}
    return found


@pytest.mark.gpu
def test_on_the_gpu_varlen_attn_and_flex_with_a_sequence_mask_are_causal_attention_per_sequence(observe, ran):
    """bfloat16, 16 heads, head dims 64 and 128, sequences of 1000, 37, 2500, 128 and 1 tokens: the output and
    the gradients of q, k and v of varlen_attn and of compiled FlexAttention within 1e-2 of float64."""
    text = unsupported.against_float64()
    found = errors_of(text)
    assert set(found) == {(d, w) for d in (64, 128) for w in ("flex_attention, compiled", "varlen_attn")}, text
    for errors in found.values():
        assert set(errors) == {"out", "dq", "dk", "dv"} and all(0 < e < 1e-2 for e in errors.values()), text
    observe("unsupported.varlen", text)
    ran(dtypes=torch.bfloat16, head_dims=[64, 128], heads=16, lengths=[1000, 37, 2500, 128, 1], batch=5,
        modes="compiled", passes=["forward", "backward"], backends="triton")



AFTER_TRANSFORMERS = """
import sys
import torch
from torch.nn.attention.flex_attention import flex_attention
from snippets import unsupported

def backward_of(compiled):
    q = torch.randn(1, 2, 4096, 64, device="cuda", requires_grad=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    name = type(compiled(q, q, q).grad_fn).__name__
    return f"{name} {(torch.cuda.max_memory_allocated() - before) / 2**20:.0f}"

if sys.argv[1] == "compiled before":
    print(backward_of(torch.compile(flex_attention)))
for dropout in (0.1, 0.0):
    model = unsupported.small_llama(dropout)
    for mode in ("train", "eval"):
        unsupported.forward_in(model, mode)
print(backward_of(torch.compile(flex_attention)))
print(backward_of(unsupported.compiled_flex()))
"""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.__version__.startswith("2.11."), reason="what PyTorch 2.11 does: runs where it is installed")
@pytest.mark.parametrize("first", ["compiled before", "not compiled before"])
def test_on_pytorch_2_11_flex_attention_compiled_after_the_transformers_section_runs_unfused_until_dynamo_is_reset(
        first, ran):
    """In a fresh process on the GPU, float32, 2 heads of 4096 tokens: compiled before the Transformers section (or
    not at all), its backward is the compiled one; compiled after it, the unfused FlexAttentionAutogradOp's, with a
    peak of more than the 128 MiB the scores take; compiled_flex(), after torch._dynamo.reset(), the compiled one,
    with a peak under 32 MiB."""
    result = python("-W ignore -c " + shlex.quote(AFTER_TRANSFORMERS) + " " + shlex.quote(first))
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()[-(3 if first == "compiled before" else 2):]
    found = [(name, int(mib)) for name, mib in (line.split() for line in lines)]
    expected = ["FlexAttentionAutogradOpBackward", "CompiledFunctionBackward"]
    assert [name for name, _ in found] == ["CompiledFunctionBackward"] * (first == "compiled before") + expected, \
        result.stdout
    for name, mib in found:
        assert (mib > 128) if name == "FlexAttentionAutogradOpBackward" else (mib < 32), result.stdout
    ran(modes="compiled", passes=["forward", "backward"], dtypes=torch.float32, lengths=4096, heads=2, head_dims=64,
        batch=1, backends="triton")


VARLEN_WAYS = ["varlen_attn", "flex, mask built before", "flex, mask built each call", "flex, compiled build each call"]


@pytest.mark.gpu
def test_on_the_gpu_a_sequence_mask_built_before_costs_about_what_varlen_attn_costs(observe, alone, ran):
    """bfloat16, 16 heads, head dims 64 and 128, 16384 tokens in 8 sequences, a no-grad forward and a forward and
    backward: compiled FlexAttention with the mask built before within 1.5x of varlen_attn either way; the mask built
    again at each call more than 2x varlen_attn's time; built by the compiled builder, slower than varlen_attn and
    less than half the time of the eager build."""
    with alone():
        rows = unsupported.varlen_cost()
    assert list(rows) == [(d, w) for d in (64, 128) for w in VARLEN_WAYS], rows
    for d in (64, 128):
        for step in (0, 1):
            varlen, before, each, each_compiled = (rows[d, w][step][0] for w in VARLEN_WAYS)
            assert varlen / 1.5 < before < 1.5 * varlen, (d, step, rows)
            assert each > 2 * varlen, (d, step, rows)
            assert varlen < each_compiled < each / 2, (d, step, rows)
    text = unsupported.describe_varlen_cost(rows)
    lines = text.splitlines()
    assert lines[0].endswith(f"16384 tokens in 8 sequences, bfloat16, 16 heads, {torch.cuda.get_device_name()}")
    assert [re.match(r"head dim +(\d+), (.+?) +no-grad", line).groups() for line in lines[1:]] == \
        [(str(d), w) for d in (64, 128) for w in VARLEN_WAYS], text
    observe("unsupported.varlen_cost", text)
    ran(dtypes=torch.bfloat16, head_dims=[64, 128], heads=16, lengths=sum(unsupported.DOCUMENTS), batch=8,
        modes="compiled", passes=["forward", "backward"], backends="triton")


def test_program_prints_each_answer(observe):
    result = python("-W ignore -m snippets.unsupported")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 12 or torch.cuda.is_available(), result.stdout  # a GPU's outputs follow (test_pages)
    assert lines[:2] == unsupported.dropout_p_answers().splitlines()
    for line, p in zip(lines[2:4], ("0.1", "0.5")):
        assert line.startswith(f"p = {p}, averaged over the 256 patterns of 8 keys"), line
        after, before = (float(x) for x in line.split("softmax ")[1].split(", scores dropped before it "))
        assert after < 1e-12 and before > 1e-3, line
    assert lines[4].startswith("attention_dropout=0.1, train: ValueError: `flex_attention` does not support")
    assert lines[5].startswith("attention_dropout=0.1, eval: loss ")
    assert lines[6].startswith("attention_dropout=0.0, train: NotImplementedError")
    assert lines[5].split(": ")[1] == lines[7].split(": ")[1]
    assert lines[8] == unsupported.nested_answer()
    for line, n in zip(lines[9:], (100, 37, 250)):
        assert line.startswith(f"sequence of {n} tokens: largest difference from SDPA over it alone ")
        assert float(line.rsplit(" ", 1)[1]) < 1e-12
    observe("unsupported.expected", "\n".join(lines[2:4]))
    observe("unsupported.transformers", "\n".join(lines[4:8]))
    observe("unsupported.packed", "\n".join(lines[9:]))
