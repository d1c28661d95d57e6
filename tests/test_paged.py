import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import flex_attention

from snippets import paged
from tests.helpers import python

LENGTHS = (101, 301, 41)  # the lengths of paged.check


def test_paged_cache_matches_sdpa_for_each_sequence(observe, ran, monkeypatch):
    shapes = []

    def watched(q, keys, values, page_size):
        shapes.append((tuple(q.shape), [tuple(k.shape) for k in keys], page_size))
        return real(q, keys, values, page_size)

    real = paged.paged_attention
    monkeypatch.setattr(paged, "paged_attention", watched)
    r = paged.check()
    assert r["lengths"] == LENGTHS
    assert shapes == [((3, 8, 1, 16), [(1, 2, n, 16) for n in LENGTHS], 128)]  # GQA 8:2, pages of 128 tokens
    assert r["error"] < 1e-12
    pages = sum(-(-n // 128) for n in LENGTHS)  # only the pages the lengths need: 1 + 3 + 1
    assert (r["pages"], r["slots"], r["static"]) == (pages, pages * 128, len(LENGTHS) * paged.MAX_TOKENS)
    assert r["slots"] < r["static"] / 2
    ran(dtypes=torch.float64, head_dims=16, lengths=list(LENGTHS), batch=len(LENGTHS), heads=8, modes="eager",
        passes="forward", inputs=["paged KV cache", "GQA 8:2", "page size 128"])
    observe("paged.check", paged.describe(r))


def test_paged_cache_compiled_visits_the_pages_the_block_mask_lists(monkeypatch, ran):
    """Eager, flex_attention applies the converted mask_mod to every slot of the pool and never reads the
    physical BlockMask's table of blocks; compiled, the kernel visits only the pages that table lists.
    Against float64 SDPA over each sequence's own keys and values, with no mask; pages of 128 and 64 tokens
    (the logical BlockMask's block size is the page size)."""
    monkeypatch.setattr(paged, "flex_attention", torch.compile(flex_attention))
    for page_size in (128, 64):
        torch.manual_seed(0)
        q = torch.randn(len(LENGTHS), 8, 1, 16)  # float32: the CPU does not compile flex_attention in float64
        keys = [torch.randn(1, 2, n, 16) for n in LENGTHS]
        values = [torch.randn_like(k) for k in keys]
        out, n_pages = paged.paged_attention(q, keys, values, page_size)
        assert n_pages == sum(-(-n // page_size) for n in LENGTHS)
        for b, (k, v) in enumerate(zip(keys, values)):
            want = F.scaled_dot_product_attention(q[b:b + 1].double(), k.double(), v.double(), enable_gqa=True)
            assert (out[b:b + 1].double() - want).abs().max() < 1e-5, (page_size, LENGTHS[b])
    ran(dtypes=torch.float32, head_dims=16, lengths=list(LENGTHS), batch=len(LENGTHS), heads=8, modes="compiled",
        passes="forward", inputs=["paged KV cache", "GQA 8:2", "page size 128", "page size 64"])


def test_pages_are_not_laid_out_in_order():
    # The check above would pass by accident if each sequence's pages sat in order at the start
    # of the pool; the page table maps them elsewhere.
    from torch.nn.attention.experimental._paged_attention import PagedAttention

    table = PagedAttention(5, 128, max_batch_size=2, device="cpu")
    table.reserve(torch.tensor([0]), torch.tensor(101))
    table.reserve(torch.tensor([1]), torch.tensor(301))
    assert table.page_table[1, :3].tolist() != [1, 2, 3]


def test_program_prints_the_check_and_refuses_arguments():
    result = python("-W ignore -m snippets.paged")
    assert result.returncode == 0 and "largest difference from SDPA" in result.stdout, result.stderr
    result = python("-m snippets.paged --bogus")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "Fix:" in result.stderr
