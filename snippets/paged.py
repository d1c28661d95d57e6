"""A paged KV cache: sequences of different lengths share one pool of pages, with GQA.

    python -m snippets.paged     # attention over the pages, checked against SDPA for each sequence
"""
from snippets._cli import UsageError, run

# --8<-- [start:paged]
import torch
import torch.nn.functional as F
from torch.nn.attention.experimental._paged_attention import PagedAttention  # experimental
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

MAX_TOKENS = 512  # the longest a sequence may grow: what a static cache allocates for each


def paged_attention(q, keys, values, page_size=128):
    """One new token per sequence, over sequences of different lengths whose keys and values share
    one pool of pages: each sequence takes only the pages its length needs."""
    lengths = [k.size(2) for k in keys]
    n_pages = sum(-(-n // page_size) for n in lengths)
    k_pool = q.new_zeros(1, keys[0].size(1), n_pages * page_size, keys[0].size(3))
    v_pool = torch.zeros_like(k_pool)
    paged = PagedAttention(n_pages, page_size, max_batch_size=len(keys), device=q.device)
    for b, (k, v) in enumerate(zip(keys, values)):
        batch = torch.tensor([b], device=q.device)
        paged.reserve(batch, torch.tensor(k.size(2), device=q.device))  # pages for this sequence
        paged.assign(batch, torch.arange(k.size(2), device=q.device)[None], k, v, k_pool, v_pool)
    last = torch.tensor(lengths, device=q.device) - 1

    def sees(b, h, q_idx, kv_idx):  # in the sequence's own positions, as if it had its own cache
        return kv_idx <= last[b]
    logical = create_block_mask(sees, len(keys), None, 1, MAX_TOKENS, device=q.device, BLOCK_SIZE=page_size)
    physical = paged.convert_logical_block_mask(logical)  # the same mask over the pool's pages
    return flex_attention(q, k_pool, v_pool, block_mask=physical, enable_gqa=True), n_pages


def check(lengths=(101, 301, 41), page_size=128) -> dict:
    """The paged result against SDPA over each sequence's own keys and values (float64, CPU)."""
    torch.manual_seed(0)
    q = torch.randn(len(lengths), 8, 1, 16, dtype=torch.float64)  # 8 query heads share 2 KV heads
    keys = [torch.randn(1, 2, n, 16, dtype=torch.float64) for n in lengths]
    values = [torch.randn_like(k) for k in keys]
    out, n_pages = paged_attention(q, keys, values, page_size)
    error = max((out[b] - F.scaled_dot_product_attention(q[b:b + 1], k, v, enable_gqa=True)[0]).abs().max().item()
                for b, (k, v) in enumerate(zip(keys, values)))
    return {"lengths": lengths, "pages": n_pages, "slots": n_pages * page_size,
            "static": len(lengths) * MAX_TOKENS, "error": error}


def describe(r) -> str:
    return (f"{len(r['lengths'])} sequences of {', '.join(map(str, r['lengths']))} tokens: {r['pages']} pages "
            f"({r['slots']} token slots) instead of {len(r['lengths'])} x {MAX_TOKENS} = {r['static']} in a "
            f"static cache; largest difference from SDPA: {r['error']:.1e}")
# --8<-- [end:paged]


def main(argv) -> int:
    if argv:
        raise UsageError(f"unexpected arguments {' '.join(argv)!r}", "python -m snippets.paged")
    # --8<-- [start:print_check]
    print(describe(check()))
    # --8<-- [end:print_check]
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
