"""The head dimensions and determinism page (snippets/head_dims.py): each head dimension against float64 SDPA
(the math backend, with autograd), flash-attn-4's released source for why dq goes wrong, and the bits of
repeated runs."""
import importlib.metadata
import re

import pytest

from tests.helpers import ROOT, python, section, sh
from tests.upstream import FLASH_ATTN_4, flash_attn_4_source


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles its own kernels, never counting against another's recompile limit."""
    import torch

    torch._dynamo.reset()


def test_the_run_line_without_a_gpu_says_so_in_one_line():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = sh(section("snippets/shell/head_dims.sh", "run"), cwd=ROOT)
    assert result.returncode == 2 and result.stderr == \
        "error: no CUDA GPU. Fix: run it on a machine with an NVIDIA GPU\n"


def test_unexpected_arguments_are_one_line():
    result = python("-m snippets.head_dims --fast")
    assert result.returncode == 2
    assert result.stderr == "error: unexpected arguments '--fast'. Fix: python -m snippets.head_dims\n"


def test_flash_attn_4_rounds_its_dq_buffer_and_its_backward_tile_differently(ran):
    """On compute capability 9.x (H100, H200), flash-attn-4 4.0.0b36's backward kernel rounds the head
    dimension up to a multiple of 16 (64 when it swaps dK/dV's operands) while the interface allocates the
    dq accumulator rounded to 32: they differ where the head dimension is 1 to 16 more than a multiple of 32
    (48, 72, 80), and agree at 88 and 120."""
    kernel = flash_attn_4_source("flash_attn/cute/flash_bwd_sm90.py")
    assert "hdim_multiple_of = 64 if dKV_swapAB else 16" in kernel
    assert "self.tile_hdim = int(math.ceil(head_dim / hdim_multiple_of) * hdim_multiple_of)" in kernel
    interface = flash_attn_4_source()
    assert "hdim_multiple_of = 64 if arch // 10 == 9 and dKV_swapAB else 32" in interface
    assert "head_dim_rounded = (head_dim + hdim_multiple_of - 1) // hdim_multiple_of * hdim_multiple_of" \
        in interface

    def up(d, m):
        return -(-d // m) * m
    # up to head dimension 128 the backward kernel's configurations never swap dK/dV's operands
    start = interface.index("def _tile_size_bwd_sm90")
    configs = interface[start:interface.index("elif head_dim <= 192:", start)]
    assert "if head_dim <= 64:" in configs and "elif head_dim <= 96:" in configs and "elif head_dim <= 128:" in configs
    assert configs.count("dKV_swapAB=False") == 3 and "dKV_swapAB=True" not in configs
    differ = [d for d in range(8, 129, 8) if up(d, 16) != up(d, 32)]
    assert differ == [d for d in range(8, 129, 8) if 1 <= d % 32 <= 16] == [8, 16, 40, 48, 72, 80, 104, 112]
    ran(flash_attn_4=FLASH_ATTN_4[1], inputs="released source")


# What the page says of each head dimension, backend and mask: "ok", "dq wrong", or the start of the error.
HEAD_DIMS = (32, 48, 64, 72, 80, 96, 128, 160, 192, 256)
DQ_WRONG = {16, 40, 48, 72, 80, 104, 112}  # 1 to 16 more than a multiple of 32
FLASH_REFUSES = "Block sparsity requires sparse_block_size[1] to be a multiple of tile_n"
FLASH_BLOCK_SIZES = {160: (128, 96), 192: (128, 96), 256: (128, 64)}
FLOAT32_REFUSED = {160, 192}
BOUND = {"bfloat16": 5e-3, "float16": 5e-4, "float32": 1e-5}  # norm of the difference / norm of float64's


def against_float64_sdpa(head_dim, backend, dtype, masked, block_size, expected, ran):
    """snippets.head_dims.attention_and_grads against SDPA in float64 (math backend, is_causal), with autograd,
    from the same rounded inputs: every output and gradient within the page's bound, except dq where the
    page says FLASH gets it wrong (more than half of dq's norm away); or the error the page names."""
    import torch
    import torch.nn.functional as F

    from snippets import head_dims

    q, k, v, grad_out = head_dims.inputs(head_dim, getattr(torch, dtype), seed=head_dim)
    passes = ["forward", "backward"]
    try:
        got = head_dims.attention_and_grads(q, k, v, grad_out, backend, masked, block_size)
    except Exception as error:
        assert expected not in ("ok", "dq wrong"), f"{type(error).__name__}: {error}"[:400]
        assert expected in str(error), str(error)[:400]
        if expected == "No valid triton configs":  # for want of shared memory
            assert "out of resource" in str(error), str(error)[:400]
        passes = ["forward"]  # where it stopped is not told apart
    else:
        assert expected in ("ok", "dq wrong"), f"ran, but the page says it stops with {expected!r}"
        q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
        out = F.scaled_dot_product_attention(q64, k64, v64, is_causal=masked)
        want = [out, *torch.autograd.grad(out, (q64, k64, v64), grad_out.double())]
        errors = {name: ((g.double() - w).norm() / w.norm()).item()
                  for name, g, w in zip(("out", "dq", "dk", "dv"), got, want)}
        for name, error in errors.items():
            if name == "dq" and expected == "dq wrong":
                assert error > 0.5, errors
            else:
                assert error < BOUND[dtype], (name, errors)
    batch, heads, tokens, _ = q.shape
    ran(dtypes=dtype, head_dims=head_dim, lengths=tokens, batch=batch, heads=heads, backends=backend.lower(),
        modes="compiled", passes=passes, inputs="causal BlockMask" if masked else "no mask",
        flash_attn_4=importlib.metadata.version("flash-attn-4"))


def ids(cases):
    return [f"{t}-{d}" + ("" if s == 128 else "-" + "x".join(map(str, s))) for d, t, s in cases]


TRITON = [(d, t, 128) for t in ("bfloat16", "float16") for d in HEAD_DIMS]


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim,dtype,block_size", TRITON, ids=ids(TRITON))
def test_triton_runs_every_head_dim(head_dim, dtype, block_size, ran):
    against_float64_sdpa(head_dim, "TRITON", dtype, True, block_size, "ok", ran)


FLOAT32 = [(d, "float32", 128) for d in (64, 80, 96, 128, 160, 192, 256)]


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim,dtype,block_size", FLOAT32, ids=ids(FLOAT32))
def test_triton_in_float32_stops_at_160_and_192(head_dim, dtype, block_size, ran):
    expected = "No valid triton configs" if head_dim in FLOAT32_REFUSED else "ok"
    against_float64_sdpa(head_dim, "TRITON", dtype, True, block_size, expected, ran)


FLASH_MASKED = [(d, t, 128) for t in ("bfloat16", "float16") for d in sorted(set(HEAD_DIMS) | DQ_WRONG | {88, 120})]


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim,dtype,block_size", FLASH_MASKED, ids=ids(FLASH_MASKED))
def test_flash_with_a_block_mask(head_dim, dtype, block_size, ran):
    expected = FLASH_REFUSES if head_dim in FLASH_BLOCK_SIZES else "dq wrong" if head_dim in DQ_WRONG else "ok"
    against_float64_sdpa(head_dim, "FLASH", dtype, True, block_size, expected, ran)


FLASH_OTHER_BLOCKS = [(d, t, s) for t in ("bfloat16", "float16") for d, s in FLASH_BLOCK_SIZES.items()]


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim,dtype,block_size", FLASH_OTHER_BLOCKS, ids=ids(FLASH_OTHER_BLOCKS))
def test_flash_with_other_block_sizes_runs_160_192_and_256(head_dim, dtype, block_size, ran):
    against_float64_sdpa(head_dim, "FLASH", dtype, True, block_size, "ok", ran)


FLASH_NO_MASK = [(d, t, 128) for t in ("bfloat16", "float16") for d in sorted(set(HEAD_DIMS) | {88, 112, 120})]


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim,dtype,block_size", FLASH_NO_MASK, ids=ids(FLASH_NO_MASK))
def test_flash_without_a_mask(head_dim, dtype, block_size, ran):
    expected = "Operation creation failed" if head_dim == 112 else "dq wrong" if head_dim in DQ_WRONG else "ok"
    against_float64_sdpa(head_dim, "FLASH", dtype, False, block_size, expected, ran)


def cells(table: str) -> dict:
    """The page's head-dimension table, {head_dim: (TRITON cell, FLASH cell)}."""
    rows = [re.match(r"\s*(\d+)  (.{14})  (.*)$", line) for line in table.splitlines()[1:]]
    return {int(r.group(1)): (r.group(2).strip(), r.group(3).strip()) for r in rows}


@pytest.mark.gpu
def test_the_head_dim_table(observe, ran):
    from snippets import head_dims

    table = head_dims.head_dim_table()
    found = cells(table)
    assert sorted(found) == list(HEAD_DIMS), table
    for head_dim, (triton, flash) in found.items():
        assert re.fullmatch(r"ok \de-0\d", triton) and float(triton[3:]) < BOUND["bfloat16"], (head_dim, triton)
        if head_dim in FLASH_BLOCK_SIZES:
            assert flash.startswith("ValueError: " + FLASH_REFUSES), (head_dim, flash)
        elif head_dim in DQ_WRONG:
            assert re.fullmatch(r"wrong dq \d\.\d\d", flash) and float(flash.split()[-1]) > 0.5, (head_dim, flash)
        else:
            assert re.fullmatch(r"ok \de-0\d", flash) and float(flash[3:]) < BOUND["bfloat16"], (head_dim, flash)
    observe("head_dims.table", table)
    batch, heads, tokens, _ = head_dims.inputs(64)[0].shape
    ran(dtypes="bfloat16", head_dims=list(HEAD_DIMS), lengths=tokens, batch=batch, heads=heads, backends=["triton", "flash"],
        modes="compiled", passes=["forward", "backward"], inputs="causal BlockMask",
        flash_attn_4=importlib.metadata.version("flash-attn-4"))


@pytest.mark.gpu
def test_the_flash_block_size_table(observe, ran):
    from snippets import head_dims

    table = head_dims.flash_block_size_table()
    lines = table.splitlines()
    assert [line.split()[:2] for line in lines] == [[str(d), f"BLOCK_SIZE=({s[0]},"]
                                                   for d, s in FLASH_BLOCK_SIZES.items()], table
    assert all(float(re.search(r": ok (\de-0\d)$", line).group(1)) < BOUND["bfloat16"] for line in lines), table
    observe("head_dims.block_size", table)
    batch, heads, tokens, _ = head_dims.inputs(64)[0].shape
    ran(dtypes="bfloat16", head_dims=[160, 192, 256], lengths=tokens, batch=batch, heads=heads, backends="flash",
        modes="compiled", passes=["forward", "backward"], inputs="causal BlockMask, BLOCK_SIZE (128, 96) and (128, 64)",
        flash_attn_4=importlib.metadata.version("flash-attn-4"))


@pytest.mark.gpu
def test_the_determinism_table(observe, ran):
    """Counts of distinct bit patterns in 5 runs: 1 for everything on Triton; on FLASH 1 for the output, more
    than 1 for dq without a mask and for dk and dv with 2 KV heads and a BlockMask, 1 everywhere with
    torch.use_deterministic_algorithms(True) and no mask, and NotImplementedError with a BlockMask."""
    from snippets import head_dims

    table = head_dims.determinism_table()
    rows = {}
    for line in table.splitlines()[1:]:
        backend, mask, heads, deterministic, found = re.match(r"(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(.*)$", line).groups()
        rows[backend, mask, heads, deterministic] = found
    assert len(rows) == 11, table

    assert table.splitlines()[0].endswith("distinct results in 5 runs") and head_dims.RUNS == 5, table

    def counts(key):
        found = {name: int(n) for name, n in re.findall(r"(out|dq|dk|dv) (\d+)", rows[key])}
        assert all(1 <= n <= 5 for n in found.values()), rows[key]
        return found
    for mask in ("BlockMask", "none"):
        for heads in ("8:8", "8:2"):
            assert counts(("TRITON", mask, heads, "False")) == {"out": 1, "dq": 1, "dk": 1, "dv": 1}, table
            assert counts(("FLASH", mask, heads, "False"))["out"] == 1, table
    assert counts(("FLASH", "none", "8:8", "False"))["dq"] > 1, table
    assert all(counts(("FLASH", "none", "8:2", "False"))[n] > 1 for n in ("dq", "dk", "dv")), table
    assert all(counts(("FLASH", "BlockMask", "8:2", "False"))[n] > 1 for n in ("dk", "dv")), table
    for heads in ("8:8", "8:2"):
        assert counts(("FLASH", "none", heads, "True")) == {"out": 1, "dq": 1, "dk": 1, "dv": 1}, table
    assert "NotImplementedError: Deterministic backward for flex_attention with block_mask using the FLASH " \
        "backend is not yet implemented" in rows["FLASH", "BlockMask", "8:8", "True"], table
    observe("head_dims.determinism", table)
    shape = head_dims.SHAPE
    ran(dtypes="bfloat16", head_dims=shape["head_dim"], lengths=shape["tokens"], batch=shape["batch"], heads=[8, 2], backends=["triton", "flash"],
        modes="compiled", passes=["forward", "backward"], inputs=["causal BlockMask", "no mask", "GQA 8:2"],
        flash_attn_4=importlib.metadata.version("flash-attn-4"))
