from snippets import paged
from tests.helpers import python


def test_paged_cache_matches_sdpa_for_each_sequence(observe):
    r = paged.check()
    assert r["error"] < 1e-12
    assert r["slots"] < r["static"] / 2  # only the pages the lengths need
    observe("paged.check", paged.describe(r))


def test_pages_are_not_laid_out_in_order():
    # The check above would pass by accident if each sequence's pages sat in order at the start
    # of the pool; the page table maps them elsewhere.
    import torch
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
