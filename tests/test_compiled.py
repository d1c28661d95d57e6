"""The compiled-model page (snippets/compiled.py): a transformer block trained with FlexAttention compiled three
ways and with what changes between steps, each against the same block on SDPA (torch's own attention, the
oracle), and the graphs and graph breaks that Dynamo counted."""
import re

import pytest

from tests.helpers import ROOT, python, section, sh


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles its own graphs, never counting against another's recompile limit."""
    import torch

    torch._dynamo.reset()


def test_the_run_line_without_a_gpu_says_so_in_one_line():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = sh(section("snippets/shell/compiled.sh", "run"), cwd=ROOT)
    assert result.returncode == 2 and result.stderr == \
        "error: no CUDA GPU. Fix: run it on a machine with an NVIDIA GPU\n"


def test_unexpected_arguments_are_one_line():
    result = python("-m snippets.compiled --fast")
    assert result.returncode == 2
    assert result.stderr == "error: unexpected arguments '--fast'. Fix: python -m snippets.compiled\n"


ROW = re.compile(r"(?P<name>.{44}) +(?P<graphs>\d+) +(?P<breaks>\d+) +(?P<kernels>\d+) +(?P<recorded>yes|no) +"
                 r"(?P<skips>\d+) +(?P<first>[\d.]+) +(?P<median>[\d.]+) +[\d.]+-[\d.]+ +(?P<start>[\d.]+) -> "
                 r"(?P<end>[\d.]+) +(?P<gap>\de[-+]\d\d)$")
BOUND = 1e-3  # largest relative difference of a step's loss from the SDPA block's


def rows(table: str, errors=None) -> dict:
    """{row name: its numbers}; every line after the header must be a row of numbers, or the error that
    `errors` ({row name: the error's line}) names for it."""
    found = {}
    for line in table.splitlines()[1:]:
        name = line[:44].strip()
        if errors and name in errors:
            assert line[44:].strip() == errors.pop(name), line
            continue
        match = ROW.match(line)
        assert match, f"not a row of numbers: {line!r}"
        found[match["name"].strip()] = {k: v if k in ("name", "recorded") else float(v)
                                        for k, v in match.groupdict().items()}
    assert not errors, f"rows that did not stop with their error: {errors}"
    return found


def assert_trained_as_sdpa(found: dict, graphs: dict):
    """Each row: the graphs the page says, no graph break, Inductor's kernels where it compiled (none not
    compiled), CUDA graphs recorded in the rows named for them and only there and never skipped, every loss
    within BOUND of the SDPA block's, and a training that lowered the loss."""
    assert {name: row["graphs"] for name, row in found.items()} == graphs
    for name, row in found.items():
        assert row["breaks"] == 0 and row["skips"] == 0, (name, row)
        assert (row["kernels"] > 0) == (name != "not compiled"), (name, row)
        assert row["recorded"] == ("yes" if "CUDA graphs" in name else "no"), (name, row)
        assert row["gap"] < BOUND, (name, row)
        assert row["end"] < 0.8 * row["start"], (name, row)


def ran_block(ran, lengths, modes):
    from snippets import compiled

    ran(dtypes="bfloat16", head_dims=compiled.DIM // compiled.HEADS, heads=compiled.HEADS, batch=compiled.BATCH,
        lengths=lengths, backends="triton", modes=modes, passes=["forward", "backward"],
        inputs="causal BlockMask, bfloat16 autocast, AdamW")


@pytest.mark.gpu
def test_the_ways_table(observe, ran):
    """Not compiled, flex_attention compiled alone, the whole block compiled, and with CUDA graphs: one graph
    each (not compiled, flex_attention still traces its own call with Dynamo, fullgraph, and runs it unfused:
    torch/nn/attention/flex_attention.py) and warns that it materializes the scores; no break."""
    import torch.nn.attention.flex_attention as flex_module

    from snippets import compiled

    getattr(flex_module, "_WARNINGS_SHOWN", set()).clear()  # the warning is given once per process
    with pytest.warns(UserWarning, match="materializes the full scores matrix"):
        table = compiled.ways_table()
    assert_trained_as_sdpa(rows(table), {"not compiled": 1, "flex_attention compiled alone": 1,
                                         "whole block compiled": 1, "whole block, CUDA graphs": 1})
    observe("compiled.ways", table)
    ran_block(ran, compiled.TOKENS, ["eager", "compiled"])


@pytest.mark.gpu
def test_the_changes_table(observe, ran):
    """With CUDA graphs, a BlockMask rebuilt each step or built in the block: one graph. Three lengths: two
    graphs, with and without CUDA graphs; with CUDA graphs and the BlockMask built in the block, Inductor stops
    with CantSplit. Padded to one length: one graph when the mask_mod reads the length from a tensor, two when
    it is a Python int."""
    from snippets import compiled

    table = compiled.changes_table()
    found = rows(table, {"CUDA graphs, 3 lengths, BlockMask in block": "InductorError: CantSplit"})
    assert_trained_as_sdpa(found, {
        "CUDA graphs, BlockMask each step": 1, "CUDA graphs, BlockMask in the block": 1,
        "compiled, 3 lengths": 2, "CUDA graphs, 3 lengths": 2,
        "CUDA graphs, 3 lengths padded": 1, "CUDA graphs, 3 lengths padded, int": 2})
    observe("compiled.changes", table)
    ran_block(ran, [1024, 1536, 2048], "compiled")


@pytest.mark.gpu
def test_a_wrong_gradient_or_mask_moves_the_losses_past_the_bound(ran):
    """The oracle can fail: the block with no gradient through q and k, or without its causal mask, trained the
    same way, is more than BOUND away from the SDPA block at some step (not compiled: the same math)."""
    from torch.nn.attention.flex_attention import flex_attention

    from snippets import compiled

    def no_grad_through_scores(q, k, v, block_mask=None):
        return flex_attention(q.detach(), k.detach(), v, block_mask=block_mask)

    def not_causal(q, k, v, block_mask=None):
        return flex_attention(q, k, v)

    reference = compiled.train(compiled.new_block(attention="sdpa"))["losses"]
    for attention in (no_grad_through_scores, not_causal):
        losses = compiled.train(compiled.new_block(attention=attention))["losses"]
        assert max(abs(a - b) / b for a, b in zip(losses, reference, strict=True)) > BOUND, attention.__name__
    ran_block(ran, compiled.TOKENS, "eager")
