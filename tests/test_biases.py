"""Learnable biases (snippets/biases.py) against attention written out another way: the bias built row by
row from the table or the slopes, added to the scores, and float64 SDPA given it as a float mask, with
autograd for the gradients."""
import importlib.metadata
import importlib.util
import math
import re

import pytest
import torch
import torch.nn.functional as F

from snippets import biases
from tests.helpers import python


def bias_rows(table, tokens):
    """(heads, T, T): row i is table[:, i - j + L - 1] for j = 0..T-1 (table: heads x 2L-1), built one
    query at a time."""
    keys, longest = torch.arange(tokens, device=table.device), (table.shape[1] + 1) // 2
    return torch.stack([table[:, i - keys + longest - 1] for i in range(tokens)], dim=1)


def slopes_rows(slopes, tokens):
    """(heads, T, T): slopes[h] * (j - i), built one query at a time."""
    keys = torch.arange(tokens, device=slopes.device, dtype=torch.float64)
    return torch.stack([slopes.double()[:, None] * (keys - i) for i in range(tokens)], dim=1)


def sdpa64(q, k, v, bias):
    """float64 SDPA with the causal mask and the bias as one float mask."""
    tokens = q.shape[2]
    causal = torch.full((tokens, tokens), -math.inf, dtype=torch.float64, device=q.device).triu(1)
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=bias.double() + causal)


def relative_error(got, want) -> float:
    return ((got.double() - want.double()).norm() / want.double().norm()).item()


@pytest.mark.parametrize("mode,dtype,tokens", [(m, d, t) for m, d in [("eager", torch.float64), ("eager", torch.float32),
                                                                      ("compiled", torch.float32)]
                                               for t in (1000, 1024)])
@pytest.mark.parametrize("bias", ["table", "alibi", "alibi_per_head"])
def test_on_the_cpu_the_bias_is_added_to_the_scores(mode, dtype, tokens, bias, ran):
    """Forward on the CPU, the bias not requiring grad: FlexAttention with each score_mod of the page is
    float64 SDPA with the causal mask and the bias built row by row, within an absolute 1e-12 in float64
    and a relative 1e-5 in float32."""
    heads, head_dim = 4, 64
    q, k, v, table = biases.inputs(tokens, heads, head_dim, dtype, "cpu")
    slopes = torch.tensor([2 ** (-8 * (h + 1) / heads) for h in range(heads)], dtype=dtype)
    score_mod, dense = {"table": (biases.relative_bias(table), bias_rows(table, tokens)),
                        "alibi": (biases.alibi(slopes, biases.LONGEST), slopes_rows(slopes, tokens)),
                        "alibi_per_head": (biases.alibi_per_head(slopes), slopes_rows(slopes, tokens))}[bias]
    block_mask = biases.create_block_mask(biases.causal, None, None, tokens, tokens, device="cpu")
    attention = biases.flex_attention if mode == "eager" else torch.compile(biases.flex_attention)
    got = attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
    want = sdpa64(q, k, v, dense)
    if dtype == torch.float64:
        assert (got - want).abs().max() < 1e-12
    else:
        assert relative_error(got, want) < 1e-5
    ran(modes=mode, dtypes=dtype, lengths=tokens, heads=heads, head_dims=head_dim, batch=2, passes="forward",
        inputs=bias)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_the_alibi_table_is_the_per_head_bias(dtype, ran):
    """alibi(slopes, L)'s table holds slopes[h] * (kv_idx - q_idx) at index q_idx - kv_idx + L - 1: read
    through relative_bias's index, at every pair of 7 tokens and at the farthest pairs of L = 4096, it is
    slopes[h] * (j - i) rounded once to float32 (float64 for float64 slopes), bfloat16 slopes included;
    the per-head form gives the same value for float64 and float32 slopes."""
    assert torch.tensor(257.0).to(torch.bfloat16).item() == 256.0, "the page's reason for a float32 table"
    slopes = torch.tensor([0.5, 0.25, 2.0 ** -7.5], dtype=dtype)
    table_mod, head_mod = biases.alibi(slopes, biases.LONGEST), biases.alibi_per_head(slopes)
    pairs = [(i, j) for i in range(7) for j in range(7)] + [(4095, 0), (0, 4095), (4095, 4095), (4000, 977)]
    for h in range(3):
        for i, j in pairs:
            args = torch.tensor(0.0), 0, h, torch.tensor(i), torch.tensor(j)
            exact = slopes[h].to(torch.promote_types(dtype, torch.float32)) * float(j - i)  # one rounding, if any
            assert table_mod(*args).item() == exact.item(), (h, i, j)
            if dtype != torch.bfloat16:
                assert head_mod(*args).item() == pytest.approx(slopes[h].item() * (j - i), rel=1e-7)
    ran(dtypes=dtype, lengths=[7, biases.LONGEST], heads=3, modes="eager", inputs="alibi")


def test_on_the_cpu_a_table_whose_size_changes_breaks_the_compile(ran):
    """Compiled on the CPU: with the default dynamic shapes, a table of 2T-1 entries for T tokens runs at
    1000 tokens and its C++ does not compile at 1024; a fixed table breaks the same way when the number of
    heads, its first size, changes from 4 to 8; with dynamic=True a fixed table breaks at the first call.
    A fixed table runs 1000 then 1024 tokens, and so does the length-sized one with dynamic=False."""
    from torch._inductor.exc import InductorError

    def call(compiled, tokens, heads=4, sized=False):
        q, k, v, table = biases.inputs(tokens, heads, 64, torch.float32, "cpu")
        table = table[:, :2 * tokens - 1].contiguous() if sized else table
        block_mask = biases.create_block_mask(biases.causal, None, None, tokens, tokens, device="cpu")
        ran(modes="compiled", dtypes=torch.float32, lengths=tokens, heads=heads, head_dims=64, batch=2,
            passes="forward", inputs="table")
        compiled(q, k, v, score_mod=biases.relative_bias(table), block_mask=block_mask)

    def fresh(**options):
        torch._dynamo.reset()
        return torch.compile(biases.flex_attention, **options)

    broken = pytest.raises(InductorError, match="was not declared in this scope")
    compiled = fresh()
    call(compiled, 1000, sized=True)
    with broken:
        call(compiled, 1024, sized=True)
    compiled = fresh()
    call(compiled, 1000, heads=4)
    with broken:
        call(compiled, 1000, heads=8)
    with broken:
        call(fresh(dynamic=True), 1000)
    compiled = fresh()
    call(compiled, 1000)
    call(compiled, 1024)
    compiled = fresh(dynamic=False)
    call(compiled, 1000, sized=True)
    call(compiled, 1024, sized=True)


def test_on_the_cpu_a_bias_that_requires_grad_breaks_the_compiled_forward_outside_no_grad():
    """Compiled on the CPU, q, k and v without grad: a table or slopes that require grad stop the forward
    call (an IndexError inside Inductor); under torch.no_grad() the same call runs."""
    from torch._inductor.exc import InductorError

    torch._dynamo.reset()
    q, k, v, table = biases.inputs(1000, 4, 64, torch.float32, "cpu")
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])
    block_mask = biases.create_block_mask(biases.causal, None, None, 1000, 1000, device="cpu")
    compiled = torch.compile(biases.flex_attention)
    for make, param in ((biases.relative_bias, table), (biases.alibi_per_head, slopes)):
        param = param.clone().requires_grad_()
        with pytest.raises(InductorError, match="IndexError"):
            compiled(q, k, v, score_mod=make(param), block_mask=block_mask)
        with torch.no_grad():
            assert torch.isfinite(compiled(q, k, v, score_mod=make(param), block_mask=block_mask)).all()


def test_the_cpu_has_no_backward_for_a_learnable_bias():
    """The page's pointer to the GPU: on the CPU, with q, k or v requiring grad, as in a model whose
    projections train, the FlexAttention call itself raises, eager and compiled."""
    for which in range(3):
        inputs = biases.inputs(128, 2, 16, torch.float32, "cpu")
        inputs[which].requires_grad_()
        q, k, v, table = inputs
        for attention in (biases.flex_attention, torch.compile(biases.flex_attention)):
            with pytest.raises(NotImplementedError, match="FlexAttention does not support backward on CPU"):
                attention(q, k, v, score_mod=biases.relative_bias(table))


def test_program_prints_the_cpu_check(observe):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    biases.cpu_forward(tokens=256)
    assert counters["frames"]["ok"] >= 1, "the line that says compiled compiles"
    result = python("-W ignore -m snippets.biases")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["CPU, float64, eager", "CPU, float32, compiled"], lines
    errors = [float(re.findall(r"\d\.\de[-+]\d\d", line)[-1]) for line in lines]
    assert errors[0] < 1e-12 and errors[1] < 1e-5, lines
    observe("biases.cpu", result.stdout.rstrip("\n"))


# On the GPU: the relative error bounds the page states, per dtype.
BOUNDS = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1e-2}
GPU_CASES = [(bias, dtype, head_dim, tokens) for bias in ("table", "alibi", "alibi_per_head")
             for dtype in BOUNDS for head_dim in (64, 128) for tokens in (1000, 1024)
             if bias == "table" or (head_dim == 64 and tokens == 1024 and (bias == "alibi_per_head" or
                                                                           dtype == torch.float32))]


@pytest.mark.gpu
@pytest.mark.parametrize("bias,dtype,head_dim,tokens", GPU_CASES,
                         ids=[f"{b}-{str(d)[6:]}-{h}-{t}" for b, d, h, t in GPU_CASES])
def test_gradients_of_a_learnable_bias_match_float64(bias, dtype, head_dim, tokens, ran):
    """Compiled FlexAttention (Triton) with the bias learnable, batch 2, 4 heads, causal: the output and
    the gradients of q, k, v and the table or slopes against float64 SDPA with the bias built row by row
    (autograd through the rows), from the same rounded inputs: a relative error under BOUNDS[dtype]; and
    the page's own check, gradients(), says the same."""
    heads = 4
    q, k, v, table = biases.inputs(tokens, heads, head_dim, dtype, "cuda")
    slopes = torch.tensor([2 ** (-8 * (h + 1) / heads) for h in range(heads)], device="cuda").to(dtype)
    param = table if bias == "table" else slopes
    grad_out = torch.randn(q.shape, device="cuda")
    block_mask = biases.create_block_mask(biases.causal, None, None, tokens, tokens, device="cuda")
    compiled = torch.compile(biases.flex_attention)
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v, param)]
    out = compiled(*leaves[:3], score_mod=biases.score_mod_of(bias, leaves[3]), block_mask=block_mask)
    out.backward(grad_out.to(dtype))
    got = [out] + [x.grad for x in leaves]
    exact = [x.detach().double().requires_grad_() for x in (q, k, v, param)]
    rows = bias_rows(exact[3], tokens) if bias == "table" else slopes_rows(exact[3], tokens)
    want_out = sdpa64(*exact[:3], rows)
    want_out.backward(grad_out.double())
    want = [want_out] + [x.grad for x in exact]
    for name, g, w in zip(["output", "dq", "dk", "dv", "dparam"], got, want):
        assert g.dtype == dtype, name
        assert relative_error(g, w) < BOUNDS[dtype], (name, relative_error(g, w))
    errors = biases.gradients(dtype, head_dim, tokens, heads, bias=bias)
    assert len(errors) == 5 and all(math.isfinite(e) and e < BOUNDS[dtype] for e in errors.values()), errors
    ran(modes="compiled", dtypes=dtype, lengths=tokens, heads=heads, head_dims=head_dim, batch=2,
        passes=["forward", "backward"], backends="triton", inputs=bias)


@pytest.mark.gpu
def test_alibi_float32_table_with_bfloat16_inputs_does_not_compile_on_the_gpu(ran):
    """alibi(slopes, L) builds a float32 table; with bfloat16 q, k, v and slopes that require grad, as in
    training (head dim 64, 1024 tokens), compiled FlexAttention stops: Triton finds no kernel configuration
    that fits the shared memory."""
    from torch._inductor.exc import InductorError

    q, k, v, _ = (x.requires_grad_() for x in biases.inputs(1024, 4, 64, torch.bfloat16, "cuda"))
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625], device="cuda", dtype=torch.bfloat16, requires_grad=True)
    block_mask = biases.create_block_mask(biases.causal, None, None, 1024, 1024, device="cuda")
    with pytest.raises(InductorError, match="out of resource"):
        torch.compile(biases.flex_attention)(q, k, v, score_mod=biases.alibi(slopes, biases.LONGEST),
                                             block_mask=block_mask)
    ran(modes="compiled", dtypes=torch.bfloat16, lengths=1024, heads=4, head_dims=64, batch=2, passes="forward",
        backends="triton", inputs="alibi")


@pytest.mark.gpu
def test_program_prints_the_gradient_errors(observe, ran):
    """The page's table of errors: every line's five errors under the bound for its dtype."""
    text = biases.describe_gradients()
    lines = text.splitlines()
    assert len(lines) == 6 and lines[0].startswith("relative error against float64")
    for line in lines[1:]:
        dtype = getattr(torch, line.split()[1])
        errors = [float(x) for x in re.findall(r"\d\.\de[-+]\d\d", line)]
        assert len(errors) == 5 and max(errors) < BOUNDS[dtype], line
    observe("biases.gradients", text)
    ran(modes="compiled", dtypes=[torch.float32, torch.bfloat16, torch.float16], lengths=[1000, 1024], heads=4,
        head_dims=[64, 128], batch=2, passes=["forward", "backward"], backends="triton")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32])  # bfloat16: the float32 sums are rounded at the end, and
def test_the_bias_gradient_can_differ_between_runs_and_the_rest_does_not(dtype, observe, ran):  # may agree
    """Five identical forward and backward passes: the output and the gradients of q, k and v are bitwise
    the same each time; the table's gradient, summed with atomic adds, is not."""
    same = biases.repeatability(runs=5, dtype=dtype)
    assert same == {"output": True, "dq": True, "dk": True, "dv": True, "dtable": False}, same
    if dtype == torch.float32:
        text = biases.describe_repeatability()
        assert text == "5 runs, float32: output the same, dq the same, dk the same, dv the same, dtable differs"
        observe("biases.repeat", text)
    ran(modes="compiled", dtypes=dtype, lengths=1024, heads=4, head_dims=64, batch=2,
        passes=["forward", "backward"], backends="triton", inputs="table")


@pytest.mark.gpu
@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is None, reason="needs flash-attn-4 (the FLASH backend)")
def test_the_flash_backend_refuses_a_learnable_table_and_runs_a_frozen_one(observe, ran):
    """BACKEND="FLASH" with a table that requires grad stops with the lowering's reason; with the table
    frozen it runs forward and backward, and its output is float64 SDPA's with the bias rows within 1e-2."""
    text = biases.flash_answer()
    lines = text.splitlines()
    assert len(lines) == 2, text
    assert lines[0].startswith("learnable table: ") and "Input buffers require gradients" in lines[0] \
        and "BACKEND='FLASH'" in lines[0], text
    assert lines[1] == "frozen table: forward and backward ran", text
    observe("biases.flash", text)
    tokens, heads = 1024, 4
    q, k, v, table = biases.inputs(tokens, heads, 128, torch.bfloat16, "cuda")
    block_mask = biases.create_block_mask(biases.causal, None, None, tokens, tokens, device="cuda")
    out = torch.compile(biases.flex_attention)(q, k, v, score_mod=biases.relative_bias(table), block_mask=block_mask,
                                               kernel_options={"BACKEND": "FLASH"})
    assert relative_error(out, sdpa64(q, k, v, bias_rows(table, tokens))) < 1e-2
    ran(modes="compiled", dtypes=torch.bfloat16, lengths=tokens, heads=heads, head_dims=128, batch=2,
        passes=["forward", "backward"], backends="flash", inputs="table",
        flash_attn_4=importlib.metadata.version("flash-attn-4"))


@pytest.mark.gpu
def test_the_cost_of_a_learnable_bias(observe, alone, ran):
    """bfloat16, batch 4, 4096 tokens, 16 heads, head dim 64, forward and backward: FlexAttention with the
    table is faster than SDPA with the dense bias and allocates less than a fifth of its memory; ALiBi's
    slopes read in the score_mod are more than 5 times slower than the table."""
    with alone():
        rows = biases.cost()
    (table_ms, *_), table_mib = rows["flex, table"]
    (sdpa_ms, *_), sdpa_mib = rows["SDPA, dense bias"]
    (slopes_ms, *_), _ = rows["flex, alibi_per_head"]
    assert list(rows) == ["flex, table", "flex, alibi_per_head", "SDPA, dense bias"], rows
    assert table_ms < sdpa_ms and table_mib < sdpa_mib / 5, rows
    assert slopes_ms > 5 * table_ms, rows
    observe("biases.cost", biases.describe_cost(rows))
    ran(modes="compiled", dtypes=torch.bfloat16, lengths=4096, heads=16, head_dims=64, batch=4,
        passes=["forward", "backward"], backends="triton")
