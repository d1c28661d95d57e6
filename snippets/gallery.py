"""A gallery of mask_mods and score_mods: padding, documents, windows, grids, images, trees, sinks, biases.

    python -m snippets.gallery      # each mask's share of skipped blocks, and its picture drawn from the mask
"""
from snippets._cli import UsageError, run

# --8<-- [start:padding]
import math

import torch
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, create_mask, flex_attention


# A batch of sequences padded to one length: lengths[b] is the number of real tokens of sample b.
# The mask depends on b, so build its BlockMask with B=len(lengths): with B=None, the BlockMask holds
# the block pattern of sample 0 alone, and every sample of the batch gets it.
def key_padding(lengths):
    def mask(b, h, q_idx, kv_idx):
        return kv_idx < lengths[b]  # a padding key is never attended to
    return mask


def padded_causal(lengths):
    def mask(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (kv_idx < lengths[b])
    return mask
# --8<-- [end:padding]


# --8<-- [start:documents]
# Packed documents: document_ids[i] is the document of token i, one entry per token.
def documents(document_ids):
    def mask(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (document_ids[q_idx] == document_ids[kv_idx])
    return mask
# --8<-- [end:documents]


# --8<-- [start:trap]
# A bias per key, for the real keys of a sequence padded to kv_len: key_bias has real_keys entries.
# The mask keeps the padding keys out, but the score_mod is still evaluated there.
def real_keys(count):
    def mask(b, h, q_idx, kv_idx):
        return kv_idx < count
    return mask


def key_bias_trap(key_bias):
    def score_mod(score, b, h, q_idx, kv_idx):
        return score + key_bias[kv_idx]  # kv_idx up to kv_len - 1: past the end of key_bias
    return score_mod
# --8<-- [end:trap]


# --8<-- [start:trap_fix]
def key_bias_padded(key_bias, kv_len):
    key_bias = torch.nn.functional.pad(key_bias, (0, kv_len - len(key_bias)))  # once: an entry per key

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + key_bias[kv_idx]
    return score_mod
# --8<-- [end:trap_fix]


# --8<-- [start:global_window]
# Longformer: each token sees the tokens less than `window` away on either side, and the first
# `globals_` tokens see every token and are seen by every token.
def window_with_globals(window, globals_):
    def mask(b, h, q_idx, kv_idx):
        near = (q_idx - kv_idx).abs() < window
        is_global = (q_idx < globals_) | (kv_idx < globals_)
        return near | is_global
    return mask
# --8<-- [end:global_window]


# --8<-- [start:dilated]
# A causal window with gaps: every `dilation`-th earlier token, `window` of them (itself included),
# so it reaches (window - 1) * dilation tokens back with the cost of `window` keys.
def dilated_causal(window, dilation):
    def mask(b, h, q_idx, kv_idx):
        distance = q_idx - kv_idx
        return (distance >= 0) & (distance < window * dilation) & (distance % dilation == 0)
    return mask
# --8<-- [end:dilated]


# --8<-- [start:chunk]
# Queries and keys of different lengths. A chunk of new queries after `cached` tokens already in the
# KV cache: query i is the token at position cached + i, and sees every key up to that position.
# Build with create_block_mask(mask, B, H, chunk_length, cached + chunk_length).
def chunk_over_cache(cached):
    def mask(b, h, q_idx, kv_idx):
        return kv_idx <= cached + q_idx
    return mask


# Cross-attention: every query (of the decoder) sees the valid keys of its sample (of the encoder),
# kv_lengths[b] of them; the query and key lengths differ. As for padding, build with B=len(kv_lengths).
def cross_padding(kv_lengths):
    def mask(b, h, q_idx, kv_idx):
        return kv_idx < kv_lengths[b]
    return mask
# --8<-- [end:chunk]


# --8<-- [start:neighbourhood]
# Neighbourhood attention (NATTEN) on a height x width image whose pixels are flattened row by row:
# the pixel at (row, col) sees a kernel x kernel square of pixels centred on it, shifted inward at the
# edges of the image, so every query sees exactly kernel * kernel keys (kernel odd, at most the
# image's height and width).
def neighbourhood_2d(height, width, kernel):
    def mask(b, h, q_idx, kv_idx):
        q_row, q_col = q_idx // width, q_idx % width
        kv_row, kv_col = kv_idx // width, kv_idx % width
        top = (q_row - kernel // 2).clamp(0, height - kernel)  # the square's first row, inside the image
        left = (q_col - kernel // 2).clamp(0, width - kernel)
        return ((kv_row >= top) & (kv_row < top + kernel)
                & (kv_col >= left) & (kv_col < left + kernel))
    return mask
# --8<-- [end:neighbourhood]


# --8<-- [start:multimodal]
# Interleaved images and captions: segments = [(image_tokens, text_tokens), ...], each image's tokens
# followed by its caption's. An image token sees its whole image (both ways); a text token sees its
# image and the text of its own caption up to itself.
def image_text(segments, device="cpu"):
    # Per-token tensors, built once: the segment of each token, and whether it is an image token.
    segment = torch.cat([torch.full((image + text,), s) for s, (image, text) in enumerate(segments)])
    is_image = torch.cat([torch.arange(image + text) < image for image, text in segments])
    segment, is_image = segment.to(device), is_image.to(device)

    def mask(b, h, q_idx, kv_idx):
        same_segment = segment[q_idx] == segment[kv_idx]
        # an image key for anyone in its segment; a text key for a query at or after it (the text
        # comes after the image, so an image query never sees its caption)
        return same_segment & (is_image[kv_idx] | (kv_idx <= q_idx))
    return mask
# --8<-- [end:multimodal]


# --8<-- [start:tree]
# Speculative decoding checks a tree of draft tokens in one pass. parents[i] is the draft token that
# draft token i continues (-1: it continues the prefix); a parent comes before its children. The
# queries are the drafts, the keys the prefix and then the drafts: q_len = len(parents),
# kv_len = prefix + len(parents). A draft sees the whole prefix, itself and its ancestors.
def tree_mask(prefix, parents, device="cpu"):
    n = len(parents)
    ancestor = torch.eye(n, dtype=torch.bool)  # ancestor[i, j]: draft j is draft i or an ancestor of it
    for i, parent in enumerate(parents):
        if parent >= 0:  # plain Python on a list, outside the mask_mod
            ancestor[i] |= ancestor[parent]
    ancestor = ancestor.to(device)

    def mask(b, h, q_idx, kv_idx):
        draft = kv_idx - prefix
        # clamped indices: a prefix key (draft < 0), or a position past the last token, reads a
        # valid entry, which the `draft >= 0` and the prefix test then override
        seen = ancestor[q_idx.clamp(0, n - 1), draft.clamp(0, n - 1)]
        return (kv_idx < prefix) | ((draft >= 0) & seen)
    return mask
# --8<-- [end:tree]


# --8<-- [start:sinks]
# Attention sinks (gpt-oss): a learned logit per head, sinks[h], that joins each row's softmax but
# has no value, so a query can give part of its attention to nothing.
#   with the sink: out' = sum_j e^s_j v_j / (sum_j e^s_j + e^sink) = out * Z / (Z + e^sink), Z = e^lse
#   so out' = out / (1 + e^(sink - lse)) = out * sigmoid(lse - sink)
def attention_with_sinks(q, k, v, sinks, block_mask=None):
    out, aux = flex_attention(q, k, v, block_mask=block_mask, return_aux=AuxRequest(lse=True))
    kept = torch.sigmoid(aux.lse - sinks[None, :, None])  # (batch, heads, queries), float32
    return (out * kept[..., None]).to(out.dtype)
# --8<-- [end:sinks]


# --8<-- [start:score_mods]
# Learned relative position biases: a score_mod that adds a number looked up by the distance.
def relative_bias(table, max_distance):
    """table: (heads, 2 * max_distance + 1), for distances -max_distance to max_distance; a key farther
    away, before or after the query, gets the entry at that end."""
    def score_mod(score, b, h, q_idx, kv_idx):
        distance = (q_idx - kv_idx).clamp(-max_distance, max_distance)
        return score + table[h, distance + max_distance]
    return score_mod


def t5_bias(table, buckets=32, max_distance=128, bidirectional=True):
    """T5's relative position buckets, table: (heads, buckets). Half of the buckets (of each direction)
    hold the small distances one by one, the rest grow logarithmically up to max_distance."""
    def score_mod(score, b, h, q_idx, kv_idx):
        relative = kv_idx - q_idx  # > 0: the key comes after the query
        n = buckets
        if bidirectional:  # a Python bool, not a tensor: fine in a score_mod
            n = buckets // 2
            bucket = (relative > 0).long() * n  # keys after the query use the upper half
            distance = relative.abs()
        else:
            bucket = torch.zeros_like(relative)
            distance = (-relative).clamp(min=0)  # later keys count as distance 0
        exact = n // 2
        # log(distance / exact) / log(max_distance / exact) spreads the rest over n - exact buckets
        # (distance clamped to >= exact: the small distances take the exact branch anyway)
        far = exact + (torch.log(distance.clamp(min=exact).float() / exact)
                       / math.log(max_distance / exact) * (n - exact)).long()
        bucket = bucket + torch.where(distance < exact, distance, far.clamp(max=n - 1))
        return score + table[h, bucket]
    return score_mod
# --8<-- [end:score_mods]


# --8<-- [start:pictures]
TREE = [-1, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7]  # 16 drafts: a binary tree, draft i under (i - 1) // 2


def examples(tokens=256, device="cpu"):
    """The gallery's masks at `tokens` tokens (256, 4096 or 16384): name -> (mask_mod, q_len, kv_len, batch)."""
    t = tokens
    lengths = torch.tensor([t, 3 * t // 4, t // 2], device=device)  # a batch of 3; sample 2 has the most padding
    side = math.isqrt(t)  # a side x side image: 16 x 16 at 256 tokens
    sizes = torch.tensor([3 * t // 16, 5 * t // 16, t // 8, t - 3 * t // 16 - 5 * t // 16 - t // 8])  # 4 documents
    document_ids = torch.repeat_interleave(torch.arange(4), sizes).to(device)
    return {
        "key_padding": (key_padding(lengths), t, t, 3),
        "padded_causal": (padded_causal(lengths), t, t, 3),
        "window_with_globals": (window_with_globals(t // 16, t // 64), t, t, 1),
        "dilated_causal": (dilated_causal(t // 16, 4), t, t, 1),
        "chunk_over_cache": (chunk_over_cache(3 * t // 4), t // 4, t, 1),
        "cross_padding": (cross_padding(lengths), t // 2, t, 3),
        "neighbourhood_2d": (neighbourhood_2d(side, side, 7), t, t, 1),
        "image_text": (image_text([(t // 4, t // 8), (t // 4, t // 8), (t // 8, t // 8)], device), t, t, 1),
        "tree": (tree_mask(t - len(TREE), TREE, device), len(TREE), t, 1),
        "documents": (documents(document_ids), t, t, 1),
    }


SHADES = "·░▒█"  # none of the cell's positions may attend, under half, half or more but not all, all


def picture(mask_mod, q_len, kv_len, b=0, cells=32) -> str:
    """The mask of sample b drawn from the mask itself: one character per square of
    max(q_len, kv_len) // cells tokens a side, queries down, keys across."""
    size = max(q_len, kv_len) // cells
    rows, cols = q_len // size, kv_len // size
    allowed = create_mask(mask_mod, b + 1, 1, q_len, kv_len, device="cpu")[b, 0]
    share = allowed[:rows * size, :cols * size].reshape(rows, size, cols, size).float().mean((1, 3))
    shade = torch.where(share == 0, 0, torch.where(share < 0.5, 1, torch.where(share < 1, 2, 3)))
    return "\n".join("".join(SHADES[s] for s in row) for row in shade.tolist())


def sparsity(mask_mod, q_len, kv_len, batch=1) -> float:
    """The share of the 128 x 128 blocks that the BlockMask lets the kernel skip, in percent, over the
    batch. Counted in blocks: BlockMask.sparsity() counts 128 x 128 positions for every block, even a
    last block cut short, and so goes below zero for the tree's 16 queries."""
    block_mask = create_block_mask(mask_mod, batch, None, q_len, kv_len, device="cpu")
    computed = block_mask.kv_num_blocks.sum() + block_mask.full_kv_num_blocks.sum()
    return 100 * (1 - computed.item() / block_mask.kv_indices.numel())  # kv_indices: one entry a block
# --8<-- [end:pictures]


def main(argv) -> int:
    if argv:
        raise UsageError(f"unexpected arguments {' '.join(argv)!r}", "python -m snippets.gallery")
    # --8<-- [start:print_pictures]
    big, huge = examples(4096), examples(16384)
    for name, (mask_mod, q_len, kv_len, batch) in examples(256).items():
        s4, s16 = sparsity(*big[name]), sparsity(*huge[name])
        print(f"{name}: {s4:.1f}% of the blocks skipped at 4096 tokens, {s16:.1f}% at 16384")
        if name == "tree":  # 16 draft rows: drawn at its own size, 16 prefix keys then the drafts, a key a column
            print(picture(tree_mask(16, TREE), 16, 32))
        else:  # the last sample: for the padding masks, sample 2, the one with the most padding
            print(picture(mask_mod, q_len, kv_len, b=batch - 1))
    # --8<-- [end:print_pictures]
    # --8<-- [start:print_sinks]
    # Equal scores (q = 0) and v = 1: attention alone gives 1 in every row, the sink keeps sigmoid(lse - sink)
    # of it, so 1 - out is the sink's share. A sink logit of 0 counts as one more key.
    ones, zeros = torch.ones(1, 1, 256, 8), torch.zeros(1, 1, 256, 8)
    causal = create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None, 256, 256, device="cpu")
    share = 1 - attention_with_sinks(zeros, zeros, ones, torch.zeros(1), causal)[0, 0, :, 0]
    a, b, c = (f"{100 * share[n - 1]:.1f}%" for n in (1, 4, 256))  # query i sees i + 1 keys
    print(f"sinks: equal scores, sink logit 0: the sink takes {a} of the attention of a query over 1 key, "
          f"{b} over 4 keys, {c} over 256 keys")
    # --8<-- [end:print_sinks]
    # --8<-- [start:print_t5]
    # The bucket of each distance: a table holding each bucket's own number, added to a score of 0.
    bucket_of = t5_bias(torch.arange(32.0)[None, :])  # one head, 32 buckets, max_distance 128

    def bucket(q_idx, kv_idx):
        return int(bucket_of(torch.tensor(0.0), 0, 0, torch.tensor(q_idx), torch.tensor(kv_idx)))
    distances = (1, 7, 8, 12, 16, 32, 64, 127, 1000)
    print("t5_bias: buckets by distance, key before the query: " + " ".join(f"{d}:{bucket(d, 0)}" for d in distances)
          + "; key after it: " + " ".join(f"{d}:{bucket(0, d)}" for d in distances))
    # --8<-- [end:print_t5]
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
