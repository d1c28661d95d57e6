"""Attention over all keys from attention over parts of them, merged with FlexAttention's log-sum-exp
(ring attention, a prefill over a cache kept in pieces, a cache and new tokens computed apart).

    python -m snippets.merging      # merge causal attention computed in 1, 2 and 4 parts, and print the gaps
"""
from snippets._cli import UsageError, run

# --8<-- [start:lse]
import torch
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention


def attention_and_lse(q, k, v, block_mask=None):
    """FlexAttention's output and, per query, the log-sum-exp of its scores: log(sum_j exp(s_j)), the
    log of its softmax's denominator (float32, float64 for float64 inputs; -inf for a query that may
    attend to no key)."""
    out, aux = flex_attention(q, k, v, block_mask=block_mask, return_aux=AuxRequest(lse=True))
    return out, aux.lse
# --8<-- [end:lse]


# --8<-- [start:merge]
def merge(outputs, lses):
    """Attention over all the keys from attention over parts of them. Part i's softmax has the
    denominator Z_i = exp(lse_i); over all the keys it is Z = sum_i Z_i, so
    out = sum_i out_i * Z_i / Z, and lse = log Z."""
    lses = torch.stack(lses)  # (parts, batch, heads, queries), float32 (float64 for float64 inputs)
    top = lses.amax(dim=0)  # Z_i / exp(top) stays at most 1
    top = torch.where(torch.isinf(top), 0.0, top)  # -inf for a query that has no key in any part
    weights = torch.exp(lses - top)  # 0 for a part where the query has no key
    total = weights.sum(dim=0)  # 0 for a query with no key at all: it gets zeros, as FlexAttention
    seen = total > 0  # gives it, and gradients of 0, not NaN
    total = torch.where(seen, total, 1.0)
    out = sum(o * (w / total).unsqueeze(-1) for o, w in zip(outputs, weights))  # in float32, then back
    return out.to(outputs[0].dtype), torch.where(seen, top + torch.log(total), -torch.inf)
# --8<-- [end:merge]


# --8<-- [start:parts]
def causal_part(q_offset, kv_offset, device="cpu"):
    """The causal mask of a part whose queries start at position q_offset and keys at kv_offset. The
    shift is a tensor, so that the parts of one length share one compiled graph."""
    shift = torch.tensor(q_offset - kv_offset, device=device)

    def mask(b, h, q_idx, kv_idx):
        return q_idx + shift >= kv_idx
    return mask


def causal_in_parts(q, k, v, parts, q_offset=0, attention=attention_and_lse):
    """Causal attention of the queries (the first at position q_offset: for a chunk of queries at the
    end of a cache, the cache's length minus theirs) over the keys cut into `parts` consecutive pieces,
    each computed on its own with its own BlockMask, as each device of a ring would, then merged.
    Compiled: attention=torch.compile(attention_and_lse)."""
    outputs, lses = [], []
    for keys in torch.arange(k.shape[2]).tensor_split(parts):
        start, end = int(keys[0]), int(keys[-1]) + 1
        block_mask = create_block_mask(causal_part(q_offset, start, q.device), None, None, q.shape[2], end - start,
                                       device=q.device)
        out, lse = attention(q, k[:, :, start:end], v[:, :, start:end], block_mask)
        outputs.append(out)
        lses.append(lse)
    return merge(outputs, lses)
# --8<-- [end:parts]


def main(argv) -> int:
    if argv:
        raise UsageError(f"unexpected arguments {' '.join(argv)!r}", "python -m snippets.merging")
    # --8<-- [start:print_parts]
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 1000, 32, dtype=torch.float64) for _ in range(3))
    causal = create_block_mask(causal_part(0, 0), None, None, 1000, 1000, device="cpu")
    out, lse = attention_and_lse(q, k, v, causal)
    scores = (q @ k.transpose(-2, -1) / 32**0.5).masked_fill(~torch.ones(1000, 1000).tril().bool(), -torch.inf)
    print(f"log-sum-exp against torch.logsumexp of the scores: {(lse - scores.logsumexp(-1)).abs().max():.1e}")
    for parts in (1, 2, 4):
        merged, merged_lse = causal_in_parts(q, k, v, parts)
        print(f"{parts} part(s): output differs by {(merged - out).abs().max():.1e}, "
              f"log-sum-exp by {(merged_lse - lse).abs().max():.1e}")
    # Queries one position before the keys: query 0 may attend to no key, in any part.
    before = create_block_mask(causal_part(-1, 0), None, None, 1000, 1000, device="cpu")
    out, lse = attention_and_lse(q, k, v, before)
    merged, merged_lse = causal_in_parts(q, k, v, 4, q_offset=-1)
    print(f"query 0, no key: over all keys {out[0, 0, 0].abs().max().item()} and {lse[0, 0, 0].item()}, "
          f"merged from 4 parts {merged[0, 0, 0].abs().max().item()} and {merged_lse[0, 0, 0].item()}")
    # --8<-- [end:print_parts]
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
