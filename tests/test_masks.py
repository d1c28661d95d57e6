import pytest
import torch

from snippets import masks


@pytest.mark.parametrize("name", list(masks.examples()))
def test_each_mask_mod_matches_sdpa_with_the_same_dense_mask(name):
    assert masks.mask_error(masks.examples()[name]) < 1e-12


def test_the_masks_are_what_their_names_say():
    d = masks.dense
    assert torch.equal(d(masks.causal, 8), torch.ones(8, 8, dtype=torch.bool).tril())
    window = d(masks.causal_window(3), 8)
    assert window[7].tolist() == [False] * 5 + [True] * 3
    lm = d(masks.prefix_lm(4), 8)
    assert lm[0].tolist() == [True] * 4 + [False] * 4 and lm[6].tolist() == [True] * 7 + [False]
    docs = d(masks.causal_documents(torch.tensor([0, 0, 1, 1, 1, 2, 2, 2])), 8)
    assert docs[4].tolist() == [False, False, True, True, True, False, False, False]


def test_alibi_and_soft_cap_match_attention_written_by_hand():
    assert masks.alibi_error() < 1e-12
    assert masks.alibi_error(heads=3) < 1e-5, "slopes that are not whole powers of two (float32 slopes)"
    assert masks.soft_cap_error() < 1e-12
    # The references would catch a wrong score_mod: without soft-capping the result differs.
    q, k, v = masks.qkv()
    from torch.nn.attention.flex_attention import flex_attention

    capped = flex_attention(q * 4, k, v, score_mod=masks.soft_cap(20.0))
    assert masks.relative_error(flex_attention(q * 4, k, v), capped) > 1e-3


def test_causal_score_mod_gives_the_same_output_but_skips_nothing():
    from torch.nn.attention.flex_attention import _create_empty_block_mask, flex_attention

    q, k, v = masks.qkv()
    assert masks.relative_error(flex_attention(q, k, v, score_mod=masks.causal_as_score_mod),
                                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)) < 1e-12
    # Without a block_mask, flex_attention uses one block covering every query and key: nothing is skipped.
    default = _create_empty_block_mask(q, k)
    assert default.kv_num_blocks.tolist() == [[[1]]] and default.BLOCK_SIZE[0] >= q.shape[-2]
    assert 45 < masks.sparsity(masks.causal) < 55, "the causal BlockMask skips about half of the blocks"


def test_pictures_and_sparsity(observe):
    lines = []
    for name, mask_mod in masks.examples().items():
        share = masks.sparsity(masks.examples(4096)[name])
        drawing = masks.picture(mask_mod)
        assert drawing.count("\n") == 15 and set(drawing) <= {"█", "·", "\n"}
        observe(f"masks.picture_{name}", f"{share:.1f}% of the blocks skipped at 4096 tokens\n{drawing}")
        lines.append(share)
    causal, window, prefix_lm, documents = lines
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
