import inspect

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from snippets import masks

LENGTHS = (200, 256, 1000)  # eager; 200 and 1000 end in a partial 128-token block
COMPILED_LENGTH = 200  # compiled: one length (a CPU compile takes 10-40 s)


def documents(tokens):
    """(start, end) of the three packed documents of the page's example: a quarter, a half and the rest."""
    first, second = tokens // 4, tokens // 4 + tokens // 2
    return [(0, first), (first, second), (second, tokens)]


def written_out(kind, tokens):
    """The mask written out row by row from what its name says, without the mask_mods: row i lists the
    keys query i may attend to. Windows and prefixes are a quarter of the tokens, as in the examples."""
    quarter = tokens // 4
    allowed = torch.zeros(tokens, tokens, dtype=torch.bool)
    for i in range(tokens):
        start, end = next((s, e) for s, e in documents(tokens) if s <= i < e)
        keys = {"causal": slice(0, i + 1),                             # itself and every earlier key
                "sliding_window": slice(max(0, i - quarter + 1), tokens),  # not `quarter` or more keys back
                "prefix": slice(0, quarter),                           # the prefix only
                "same_document": slice(start, end),                    # its whole document
                "causal_window": slice(max(0, i - quarter + 1), i + 1),  # the last `quarter` keys up to itself
                "prefix_lm": slice(0, max(i + 1, quarter)),            # the prefix, and causal after it
                "causal_documents": slice(start, i + 1)}[kind]         # its document up to itself
        allowed[i, keys] = True
    return allowed


def mask_mods(tokens):
    """The page's mask_mods alone (window and prefix a quarter of the tokens) and composed (its examples)."""
    quarter = tokens // 4
    return {"causal": masks.causal, "sliding_window": masks.sliding_window(quarter), "prefix": masks.prefix(quarter),
            "same_document": masks.same_document(masks.example_documents(tokens)),
            **{name: mask_mod for name, mask_mod in masks.examples(tokens).items() if name != "causal"}}


def compiled_flex(*args, **kwargs):
    """flex_attention under torch.compile, from a fresh cache (so that no recompile limit sends it back to eager)."""
    torch._dynamo.reset()
    return torch.compile(flex_attention, dynamic=False)(*args, **kwargs)


@pytest.mark.parametrize("name", list(mask_mods(8)))
def test_each_mask_mod_matches_sdpa_with_the_same_dense_mask(name, ran):
    """Eager, in float64 at 200, 256 and 1000 tokens, against SDPA given the mask written out row by row."""
    for tokens in LENGTHS:
        q, k, v = masks.qkv(tokens=tokens)
        mask_mod = mask_mods(tokens)[name]
        block_mask = create_block_mask(mask_mod, None, None, tokens, tokens, device="cpu")
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=written_out(name, tokens))
        assert masks.relative_error(flex_attention(q, k, v, block_mask=block_mask), want) < 1e-12, (name, tokens)
        ran(modes="eager", dtypes=torch.float64, lengths=tokens, heads=4, head_dims=32, batch=1, passes="forward")


def test_each_mask_mod_matches_sdpa_compiled(ran):
    """Compiled, the kernel that skips the blocks each BlockMask marks empty and applies no mask_mod in the
    blocks it marks full, in float32 at 200 tokens (a partial last block); all masks in one graph, one compile."""
    tokens = COMPILED_LENGTH
    q, k, v = masks.qkv(tokens=tokens, dtype=torch.float32)
    names = list(mask_mods(tokens))
    block_masks = [create_block_mask(mask_mod, None, None, tokens, tokens, device="cpu")
                   for mask_mod in mask_mods(tokens).values()]

    def every_mask(q, k, v, block_masks):
        return [flex_attention(q, k, v, block_mask=block_mask) for block_mask in block_masks]

    torch._dynamo.reset()
    outputs = torch.compile(every_mask, dynamic=False, fullgraph=True)(q, k, v, block_masks)
    for name, out in zip(names, outputs, strict=True):
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=written_out(name, tokens))
        assert masks.relative_error(out, want) < 1e-5, name
    ran(modes="compiled", dtypes=torch.float32, lengths=tokens, heads=4, head_dims=32, batch=1, passes="forward")


def test_the_masks_are_what_their_names_say():
    d = masks.dense
    assert torch.equal(d(masks.causal, 8), torch.ones(8, 8, dtype=torch.bool).tril())
    window = d(masks.causal_window(3), 8)
    assert window[7].tolist() == [False] * 5 + [True] * 3
    lm = d(masks.prefix_lm(4), 8)
    assert lm[0].tolist() == [True] * 4 + [False] * 4 and lm[6].tolist() == [True] * 7 + [False]
    docs = d(masks.causal_documents(torch.tensor([0, 0, 1, 1, 1, 2, 2, 2])), 8)
    assert docs[4].tolist() == [False, False, True, True, True, False, False, False]
    for name, mask_mod in mask_mods(16).items():  # every mask_mod, position by position
        assert torch.equal(d(mask_mod, 16), written_out(name, 16)), name


def test_the_written_out_masks_are_the_rows_the_names_say():
    """The reference itself, at 8 tokens (window and prefix 2, documents 0-1, 2-5, 6-7)."""
    rows = {name: [written_out(name, 8)[i].int().tolist() for i in (1, 4)] for name in mask_mods(8)}
    assert rows == {"causal": [[1, 1, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0]],
                    "sliding_window": [[1, 1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1, 1]],
                    "prefix": [[1, 1, 0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0]],
                    "same_document": [[1, 1, 0, 0, 0, 0, 0, 0], [0, 0, 1, 1, 1, 1, 0, 0]],
                    "causal_window": [[1, 1, 0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 1, 0, 0, 0]],
                    "prefix_lm": [[1, 1, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0]],
                    "causal_documents": [[1, 1, 0, 0, 0, 0, 0, 0], [0, 0, 1, 1, 1, 0, 0, 0]]}


# The ALiBi paper's slopes (Press et al., 2022): 2^(-8/n), 2^(-16/n), ..., 2^(-8) for n heads.
PAPER_SLOPES = {4: [1 / 4, 1 / 16, 1 / 64, 1 / 256], 8: [1 / 2 ** i for i in range(1, 9)]}


def attention_with_bias(q, k, v, bias):
    """Attention computed by hand with an additive bias on the scores (-inf masks a position)."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5 + bias
    return torch.softmax(scores, dim=-1) @ v


def paper_alibi_bias(slopes, tokens, causal=True):
    """The paper's ALiBi bias, row by row: query i adds -slope * (i - j) to key j <= i; later keys are masked
    (causal), or, for the statement the page made before, get -slope * |i - j| as well."""
    slopes = torch.tensor(slopes, dtype=torch.float64)[:, None]
    bias = torch.empty(len(slopes), tokens, tokens, dtype=torch.float64)
    for i in range(tokens):
        bias[:, i, : i + 1] = -slopes * (i - torch.arange(i + 1))
        bias[:, i, i + 1:] = -float("inf") if causal else -slopes * (torch.arange(i + 1, tokens) - i)
    return bias


def test_alibi_and_soft_cap_match_attention_written_by_hand(ran):
    for tokens in (200, 256):
        causal = create_block_mask(masks.causal, None, None, tokens, tokens, device="cpu")
        for heads, slopes in PAPER_SLOPES.items():
            q, k, v = masks.qkv(heads, tokens)
            got = flex_attention(q, k, v, score_mod=masks.alibi(heads), block_mask=causal)
            assert masks.relative_error(got, attention_with_bias(q, k, v, paper_alibi_bias(slopes, tokens))) < 1e-12
            # Without the causal mask, the later keys get a bonus, not the penalty on distance the page said before.
            alone = flex_attention(q, k, v, score_mod=masks.alibi(heads))
            symmetric = attention_with_bias(q, k, v, paper_alibi_bias(slopes, tokens, causal=False))
            assert masks.relative_error(alone, symmetric) > 0.1, (heads, tokens)
            ran(heads=heads)
        q, k, v = masks.qkv(tokens=tokens)
        q = q * 4  # large scores, so that the cap matters
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        capped = flex_attention(q, k, v, score_mod=masks.soft_cap(20.0))
        assert masks.relative_error(capped, torch.softmax(20.0 * torch.tanh(scores / 20.0), dim=-1) @ v) < 1e-12
        assert masks.relative_error(flex_attention(q, k, v), capped) > 1e-3, "the cap changes the result"
        ran(modes="eager", dtypes=torch.float64, lengths=tokens, heads=4, head_dims=32, batch=1, passes="forward")


def test_causal_score_mod_gives_the_same_output_but_skips_nothing(ran):
    for tokens in (200, 256):
        q, k, v = masks.qkv(tokens=tokens)
        assert masks.relative_error(flex_attention(q, k, v, score_mod=masks.causal_as_score_mod),
                                    F.scaled_dot_product_attention(q, k, v, is_causal=True)) < 1e-12
        ran(modes="eager", dtypes=torch.float64, lengths=tokens, heads=4, head_dims=32, batch=1, passes="forward")
    q, k, v = masks.qkv(tokens=COMPILED_LENGTH, dtype=torch.float32)
    assert masks.relative_error(compiled_flex(q, k, v, score_mod=masks.causal_as_score_mod),
                                F.scaled_dot_product_attention(q, k, v, is_causal=True)) < 1e-5
    ran(modes="compiled", dtypes=torch.float32, lengths=COMPILED_LENGTH)
    # Without a block_mask, flex_attention (its source) takes one block covering every query and key.
    assert "if block_mask is None:\n        block_mask = _create_empty_block_mask(query, key)" in (
        inspect.getsource(flex_attention))
    from torch.nn.attention.flex_attention import _create_empty_block_mask

    default = _create_empty_block_mask(q, k)
    assert default.kv_num_blocks.tolist() == [[[1]]] and default.full_kv_num_blocks is None
    assert default.BLOCK_SIZE[0] >= q.shape[-2] and default.BLOCK_SIZE[1] >= k.shape[-2]


def test_the_compiled_kernel_skips_the_blocks_its_block_mask_leaves_out(ran):
    """A causal BlockMask with one block the causal mask allows left out (queries 128-199, keys 0-127): the
    compiled kernel skips it, so those queries see no earlier block; eager computes every score from the
    mask_mod and ignores the blocks. So a skipped block is never computed, and skipping needs torch.compile."""
    tokens = COMPILED_LENGTH
    q, k, v = masks.qkv(tokens=tokens, dtype=torch.float32)
    holes = create_block_mask(lambda b, h, q_idx, kv_idx: (q_idx >= kv_idx) & ((q_idx < 128) | (kv_idx >= 128)),
                              None, None, tokens, tokens, device="cpu")
    block_mask = BlockMask.from_kv_blocks(holes.kv_num_blocks, holes.kv_indices, holes.full_kv_num_blocks,
                                          holes.full_kv_indices, BLOCK_SIZE=holes.BLOCK_SIZE, mask_mod=masks.causal,
                                          seq_lengths=(tokens, tokens))
    without_block = written_out("causal", tokens)
    for i in range(128, tokens):
        without_block[i, :128] = False
    causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    compiled = compiled_flex(q, k, v, block_mask=block_mask)
    assert masks.relative_error(compiled, F.scaled_dot_product_attention(q, k, v, attn_mask=without_block)) < 1e-5
    assert masks.relative_error(compiled[:, :, 128:], causal[:, :, 128:]) > 0.1
    assert masks.relative_error(compiled[:, :, :128], causal[:, :, :128]) < 1e-5
    assert masks.relative_error(flex_attention(q, k, v, block_mask=block_mask), causal) < 1e-5
    ran(modes=["eager", "compiled"], dtypes=torch.float32, lengths=tokens, heads=4, head_dims=32, batch=1,
        passes="forward")


def block_sparsity(allowed, block=128):
    """The share of block x block squares in which no query may attend to any key, in percent, counted from
    the written-out mask."""
    n = allowed.shape[0] // block
    empty = sum(not bool(allowed[i * block:(i + 1) * block, j * block:(j + 1) * block].any())
                for i in range(n) for j in range(n))
    return 100 * empty / (n * n)


def test_pictures_and_sparsity(observe, ran):
    lines = []
    for name, mask_mod in masks.examples().items():
        share = masks.sparsity(masks.examples(4096)[name])
        assert share == pytest.approx(block_sparsity(written_out(name, 4096)), abs=1e-9), name
        drawing = masks.picture(mask_mod)
        assert drawing.count("\n") == 15 and set(drawing) <= {"█", "·", "\n"}
        observe(f"masks.picture_{name}", f"{share:.1f}% of the blocks skipped at 4096 tokens\n{drawing}")
        lines.append(share)
    ran(lengths=4096)
    causal, window, prefix_lm, documents = lines
    assert 45 < causal < 55, "the causal BlockMask skips about half of the blocks"
    assert window > causal > prefix_lm and documents > causal


def test_program_prints_every_mask():
    from tests.helpers import python

    result = python("-W ignore -m snippets.masks")
    assert result.returncode == 0, result.stderr
    assert all(f"{name}:" in result.stdout for name in masks.examples())


def test_same_document_alone_lets_each_token_see_its_whole_document_only():
    ids = torch.tensor([0, 0, 1, 1, 1, 2, 2, 2])
    assert torch.equal(masks.dense(masks.same_document(ids), 8), ids[:, None] == ids[None, :])


@pytest.mark.parametrize("tokens", [256, 4096])
def test_example_documents_are_a_quarter_a_half_and_a_quarter_of_the_tokens(tokens):
    ids = masks.example_documents(tokens)
    assert ids.tolist() == [0] * (tokens // 4) + [1] * (tokens // 2) + [2] * (tokens // 4)


def test_the_examples_window_and_prefix_are_a_quarter_of_the_tokens():
    examples = masks.examples(16)
    assert torch.equal(masks.dense(examples["causal_window"], 16), masks.dense(masks.causal_window(4), 16))
    assert torch.equal(masks.dense(examples["prefix_lm"], 16), masks.dense(masks.prefix_lm(4), 16))


def test_pictures_show_the_blocks_of_the_mask():
    """The causal picture is lower triangular: row i has i + 1 filled squares, then dots; a sliding
    window's rows keep a band of the same width."""
    rows = masks.picture(masks.causal).splitlines()
    assert rows == ["█" * (i + 1) + "·" * (15 - i) for i in range(16)]
    band = masks.picture(masks.causal_window(64)).splitlines()
    assert all(row.strip("·") == "█" * min(i + 1, 5) for i, row in enumerate(band)), band
