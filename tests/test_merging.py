"""Attention merged from parts (snippets/merging.py) against attention over all the keys computed another
way: float64 SDPA given the causal mask written out position by position, torch.logsumexp of the scores
written out, and plain-torch attention with autograd for the merge's gradients."""
import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch.nn.attention.flex_attention import create_block_mask

from snippets import merging
from tests.helpers import python


def written_out(q_len, kv_len, q_offset):
    """allowed[i][j]: query i, at position i + q_offset, may attend to key j at or before it."""
    return torch.tensor([[i + q_offset >= j for j in range(kv_len)] for i in range(q_len)])


def qkv(q_len, kv_len, heads=4, head_dim=32, dtype=torch.float64, device="cpu", batch=1, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    return [torch.randn(batch, heads, n, head_dim, generator=g, device=device, dtype=torch.float32).to(dtype)
            for n in (q_len, kv_len, kv_len)]


def reference(q, k, v, allowed):
    """float64 SDPA over all the keys, and the log-sum-exp of the scores written out."""
    q, k, v = (x.double() for x in (q, k, v))
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~allowed, -math.inf)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed), torch.logsumexp(scores, dim=-1)


def relative_error(got, want) -> float:
    return ((got.double() - want.double()).norm() / want.double().norm()).item()


# (queries, keys, q_offset): self-attention, a chunk of 250 queries at the end of 1000 cached keys (a
# prefill in chunks), and queries one position before the keys (query 0 may attend to no key)
CASES = [(1000, 1000, 0), (250, 1000, 750), (1000, 1000, -1)]


@pytest.mark.parametrize("q_len,kv_len,q_offset", CASES)
@pytest.mark.parametrize("parts", [1, 2, 3, 4])
def test_parts_merged_are_attention_over_all_the_keys(parts, q_len, kv_len, q_offset, ran):
    """Eager, float64, on the CPU: the merged output and log-sum-exp are those of attention over all the keys,
    to 1e-12; a query with no key gets zeros and -inf, as FlexAttention over all the keys gives it."""
    q, k, v = qkv(q_len, kv_len)
    allowed = written_out(q_len, kv_len, q_offset)
    out, lse = merging.causal_in_parts(q, k, v, parts, q_offset=q_offset)
    want_out, want_lse = reference(q, k, v, allowed)
    rows = allowed.any(-1)  # queries with a key: SDPA gives NaN to the others
    assert (out[..., rows, :] - want_out[..., rows, :]).abs().max() < 1e-12
    assert (lse[..., rows] - want_lse[..., rows]).abs().max() < 1e-12
    whole = create_block_mask(merging.causal_part(q_offset, 0), None, None, q_len, kv_len, device="cpu")
    flex_out, flex_lse = merging.attention_and_lse(q, k, v, whole)  # FlexAttention over all the keys
    assert torch.equal(out[..., ~rows, :], flex_out[..., ~rows, :]) and not flex_out[..., ~rows, :].any()
    assert torch.equal(lse[..., ~rows], flex_lse[..., ~rows]) and torch.isneginf(lse[..., ~rows]).all()
    assert (~rows).sum() == (q_offset < 0)
    ran(dtypes=torch.float64, lengths=[q_len, kv_len], head_dims=32, heads=4, batch=1, modes="eager",
        passes="forward", inputs="causal mask")


def test_the_log_sum_exp_is_the_log_of_each_softmax_denominator(ran):
    """attention_and_lse's log-sum-exp, float64 eager on the CPU, is torch.logsumexp of the scaled scores with
    the masked ones left out, in natural log (not base 2), and -inf for a query with no key."""
    q, k, v = qkv(1000, 1000)
    block_mask = create_block_mask(merging.causal_part(-1, 0), None, None, 1000, 1000, device="cpu")
    _, want = reference(q, k, v, written_out(1000, 1000, -1))
    _, lse = merging.attention_and_lse(q, k, v, block_mask)
    assert lse.dtype == torch.float64 and (lse[..., 1:] - want[..., 1:]).abs().max() < 1e-12
    assert torch.isneginf(lse[..., 0]).all()
    ran(dtypes=torch.float64, lengths=1000, head_dims=32, heads=4, batch=1, modes="eager", passes="forward",
        inputs="causal mask")


def test_compiled_on_the_cpu_flex_attention_does_not_return_the_log_sum_exp(ran):
    """Inductor's CPU FlexAttention refuses return_aux=AuxRequest(lse=True); eager gives it (the tests above)."""
    q, k, v = qkv(256, 256, dtype=torch.float32)
    block_mask = create_block_mask(merging.causal_part(0, 0), None, None, 256, 256, device="cpu")
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"torch.compile on CPU only supports inference and `return_lse` is not "
                                        r"supported yet"):
        torch.compile(merging.attention_and_lse)(q, k, v, block_mask)
    ran(dtypes=torch.float32, lengths=256, head_dims=32, heads=4, batch=1, modes="compiled", passes="forward")


def int_part(q_offset, kv_offset, device="cpu"):
    """causal_part with the shift as a Python int."""
    shift = q_offset - kv_offset
    return lambda b, h, q_idx, kv_idx: q_idx + shift >= kv_idx


@pytest.mark.parametrize("dynamic,int_graphs", [(None, [2, 3]), (False, [2, 6])], ids=["default", "static"])
def test_the_parts_of_one_length_share_one_compiled_graph(dynamic, int_graphs, monkeypatch, ran):
    """Traced by Dynamo (backend aot_eager, which the CPU allows with the log-sum-exp), with torch.compile's
    default dynamic setting and with dynamic=False: 2 parts of 500 keys make one graph and 4 parts of 250
    one more, because the shift is a tensor; the outputs are those of the eager parts. With the shift as a
    Python int: dynamic=False makes one graph per part (2 + 4), the default one graph more than the tensor
    (it makes the int a dynamic value after it changes once)."""
    q, k, v = qkv(1000, 1000, dtype=torch.float32)
    want = {parts: merging.causal_in_parts(q, k, v, parts) for parts in (2, 4)}
    found = {}
    for shift, causal_part in (("tensor", merging.causal_part), ("int", int_part)):
        monkeypatch.setattr(merging, "causal_part", causal_part)
        torch._dynamo.reset()
        counters.clear()
        traced = torch.compile(merging.attention_and_lse, backend="aot_eager", dynamic=dynamic)
        found[shift] = []
        for parts in (2, 4):
            out, lse = merging.causal_in_parts(q, k, v, parts, attention=traced)
            assert torch.equal(out, want[parts][0]) and torch.equal(lse, want[parts][1]), (shift, parts)
            found[shift].append(counters["stats"]["unique_graphs"])
    assert found == {"tensor": [1, 2], "int": int_graphs}, found
    ran(dtypes=torch.float32, lengths=[250, 500, 1000], head_dims=32, heads=4, batch=1, modes="compiled",
        passes="forward", inputs="causal mask")


def plain_attention(q, k, v, allowed):
    """Attention with its log-sum-exp in plain torch ops (differentiable on the CPU), zeros and -inf for a
    query with no key, as FlexAttention gives them."""
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~allowed, -math.inf)
    lse = torch.logsumexp(scores, dim=-1)
    weights = torch.exp(scores - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
    return weights @ v, lse


def test_the_merge_passes_gradients_of_attention_over_all_the_keys_and_none_to_an_empty_row(ran):
    """FlexAttention has no backward on the CPU, so here each part is plain-torch attention: the gradients of
    q, k and v through merge (of the output and of the log-sum-exp) are those of attention over all the keys,
    in float64, and a query with no key gets gradients of 0, not NaN."""
    q, k, v = (x.requires_grad_() for x in qkv(300, 300, heads=2, head_dim=16))
    allowed = written_out(300, 300, -1)
    rows = allowed.any(-1)
    grad_out, grad_lse = torch.randn(1, 2, 300, 16, dtype=torch.float64), torch.randn(1, 2, 300, dtype=torch.float64)

    def loss(out, lse):
        return (out * grad_out).sum() + (lse[..., rows] * grad_lse[..., rows]).sum()

    outputs, lses = zip(*(plain_attention(q, k[:, :, s:e], v[:, :, s:e], allowed[:, s:e])
                          for s, e in ((0, 100), (100, 200), (200, 300))))
    got = torch.autograd.grad(loss(*merging.merge(list(outputs), list(lses))), (q, k, v))
    want = torch.autograd.grad(loss(*plain_attention(q, k, v, allowed)), (q, k, v))
    for g, w in zip(got, want):
        assert torch.isfinite(g).all() and (g - w).abs().max() < 1e-12
    assert torch.equal(got[0][..., ~rows, :], torch.zeros_like(got[0][..., ~rows, :]))
    ran(dtypes=torch.float64, lengths=[100, 300], passes="backward")


@pytest.mark.parametrize("dtype,scale", [(torch.float64, 300.0), (torch.float32, 30.0)])
def test_large_scores_merge_without_overflow(dtype, scale, ran):
    """Scores in the thousands (q scaled by 300 in float64, 30 in float32; eager on the CPU, 4 parts of 1000
    keys): exp(lse_i) overflows, and the merge, which subtracts the largest lse_i, still gives attention
    over all the keys."""
    q, k, v = qkv(1000, 1000, dtype=dtype)
    q = q * scale
    allowed = written_out(1000, 1000, 0)
    out, lse = merging.causal_in_parts(q, k, v, 4)
    want_out, want_lse = reference(q, k, v, allowed)
    assert torch.isinf(torch.exp(want_lse.to(dtype))).any()
    assert relative_error(out, want_out) < (1e-12 if dtype == torch.float64 else 1e-5)
    assert ((lse - want_lse).abs() / want_lse.abs()).max() < (1e-12 if dtype == torch.float64 else 1e-5)
    ran(dtypes=dtype, lengths=[250, 1000], head_dims=32, heads=4, batch=1, modes="eager", passes="forward",
        inputs="causal mask")


def test_bfloat16_and_float16_outputs_merge_in_float32_and_come_back_in_their_dtype(ran):
    """merge weighs bfloat16 and float16 outputs in the log-sum-exp's float32, then rounds once: the same
    bits as merging their float32 copies and rounding the result."""
    g = torch.Generator().manual_seed(1)
    lses = list(torch.randn(3, 1, 2, 64, generator=g) * 4)
    for dtype in (torch.bfloat16, torch.float16):
        outputs = [torch.randn(1, 2, 64, 8, generator=g).to(dtype) for _ in range(3)]
        out, _ = merging.merge(outputs, lses)
        assert out.dtype == dtype
        assert torch.equal(out, merging.merge([o.float() for o in outputs], lses)[0].to(dtype)), dtype
    ran(dtypes=[torch.bfloat16, torch.float16])


def test_without_its_guard_the_merge_gives_nan_to_a_query_with_no_key():
    """The trap the guard in merge avoids: exp(lse_i - lse) for a query whose every lse_i is -inf."""
    lses = torch.full((2, 1, 1, 1), -math.inf)
    assert torch.isnan(torch.exp(lses - torch.logsumexp(lses, dim=0))).all()
    out, lse = merging.merge([torch.zeros(1, 1, 1, 4)] * 2, list(lses))
    assert torch.equal(out, torch.zeros(1, 1, 1, 4)) and torch.isneginf(lse).all()


def test_program_prints_the_gaps_and_the_empty_query(observe):
    result = python("-W ignore -m snippets.merging")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 5, result.stdout
    assert lines[0].startswith("log-sum-exp against torch.logsumexp of the scores: ")
    assert [line.split(":")[0] for line in lines[1:4]] == ["1 part(s)", "2 part(s)", "4 part(s)"], lines
    gaps = [float(x) for line in lines[:4] for x in re.findall(r"\d\.\de[-+]\d\d", line)]
    # float64 gaps: below 1e-8, where the same program in float32 prints 2.2e-07 to 1.4e-06 (one run of the whole suite
    # printed 1.1e-09 for FlexAttention's own log-sum-exp and for 1 part; 60 runs alone printed 2.7e-15)
    assert len(gaps) == 7 and max(gaps) < 1e-8, result.stdout
    assert lines[4] == "query 0, no key: over all keys 0.0 and -inf, merged from 4 parts 0.0 and -inf"
    observe("merging.parts", result.stdout.rstrip("\n"))


GPU_CASES = [(torch.bfloat16, 64, 0), (torch.bfloat16, 128, 0), (torch.float16, 64, 0), (torch.float32, 64, 0),
             (torch.bfloat16, 64, -1)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,head_dim,q_offset", GPU_CASES,
                         ids=[f"{str(d)[6:]}-{h}-{o}" for d, h, o in GPU_CASES])
def test_parts_merged_on_the_gpu_forward_and_backward(dtype, head_dim, q_offset, ran):
    """Compiled as the page shows (torch.compile's defaults, the Triton backend), 4096 queries and keys in 2
    and 4 parts, batch 2, 4 heads: the merged output and the gradients of q, k and v are as close to float64
    SDPA over all the keys (from the same rounded inputs) as FlexAttention over all the keys is, within 1.5
    times its relative error plus 1e-6; the merged log-sum-exp is float64's within 1e-3; a query with no key
    gets zeros, -inf and gradients of 0; after one call over all the keys, the parts of both lengths add one
    compiled graph."""
    t = 4096
    allowed = written_out(t, t, q_offset).cuda()
    rows = allowed.any(-1)  # (q_len,)
    given = allowed | ~rows[:, None]  # SDPA's reference: a query with no key gets every key, then 0 in and out
    q, k, v = qkv(t, t, head_dim=head_dim, dtype=dtype, device="cuda", batch=2)
    grad_out = torch.randn_like(q) * rows[:, None]
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(head_dim)
    want_lse = torch.logsumexp(scores.masked_fill(~allowed, -math.inf), dim=-1)
    del scores

    def forward_backward(attention):
        inputs = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        out, lse = attention(*inputs)
        return [out * rows[:, None], *torch.autograd.grad(out, inputs, grad_out)], out, lse

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=given), None

    torch._dynamo.reset()
    compiled = torch.compile(merging.attention_and_lse)
    whole = create_block_mask(merging.causal_part(q_offset, 0, "cuda"), None, None, t, t, device="cuda")
    want = forward_backward(sdpa)[0]
    baseline = [relative_error(g, w) for g, w in zip(forward_backward(lambda q, k, v: compiled(q, k, v, whole))[0],
                                                     want)]
    counters.clear()
    for parts in (2, 4):
        got, out, lse = forward_backward(lambda q, k, v: merging.causal_in_parts(q, k, v, parts, q_offset, compiled))
        assert counters["stats"]["unique_graphs"] == 1, (parts, dict(counters["stats"]))
        assert out.dtype == dtype and not out[..., ~rows, :].any() and torch.isneginf(lse[..., ~rows]).all()
        assert (lse[..., rows] - want_lse[..., rows]).abs().max() < 1e-3, parts
        for what, g, w, base in zip(("output", "dq", "dk", "dv"), got, want, baseline):
            assert torch.isfinite(g).all(), (parts, what)
            print(f"{dtype} {head_dim} {q_offset} {parts} {what}: {relative_error(g, w):.3e} vs {base:.3e}")
            assert relative_error(g, w) <= 1.5 * base + 1e-6, (parts, what, relative_error(g, w), base)
        assert not got[1][..., ~rows, :].any(), parts  # dq of a query with no key
    ran(modes="compiled", dtypes=dtype, lengths=[1024, 2048, 4096], heads=4, head_dims=head_dim, batch=2,
        passes=["forward", "backward"], backends="triton", inputs="causal mask")
