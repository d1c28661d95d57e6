"""A small library of mask_mods and score_mods, one idea per function, each checked against SDPA.

    python -m snippets.masks        # a picture of each mask, drawn from the mask itself, and its sparsity
"""
from snippets._cli import UsageError, run

# --8<-- [start:mask_mods]
import torch
from torch.nn.attention.flex_attention import and_masks, create_block_mask, create_mask, flex_attention, or_masks


# A mask_mod answers one question: may query position q_idx attend to key position kv_idx?
def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding_window(window):
    def mask(b, h, q_idx, kv_idx):
        return q_idx - kv_idx < window  # combine with causal: and_masks(causal, sliding_window(w))
    return mask


def prefix(length):
    def mask(b, h, q_idx, kv_idx):
        return kv_idx < length  # every query sees the whole prefix
    return mask


def same_document(document_ids):
    """Packed sequences: document_ids[i] is the document of token i."""
    def mask(b, h, q_idx, kv_idx):
        return document_ids[q_idx] == document_ids[kv_idx]
    return mask
# --8<-- [end:mask_mods]


# --8<-- [start:compose]
def causal_window(window):
    return and_masks(causal, sliding_window(window))


def prefix_lm(prefix_length):
    """Bidirectional over the prefix, causal after it."""
    return or_masks(causal, prefix(prefix_length))


def causal_documents(document_ids):
    return and_masks(causal, same_document(document_ids))
# --8<-- [end:compose]


# --8<-- [start:score_mods]
# A score_mod changes one score before the softmax; it sees the score and the same indices.
def alibi(heads):
    """ALiBi, for causal attention (use it with the causal mask): each earlier key's score loses
    slope x distance. The slopes 2^(-8/heads), 2^(-16/heads), ..., 2^(-8) are the paper's for a
    power-of-two number of heads."""
    slopes = torch.tensor([2 ** (-8 * (i + 1) / heads) for i in range(heads)])

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)
    return score_mod


def soft_cap(cap):
    """tanh soft-capping, as in Gemma 2: scores stay within (-cap, cap)."""
    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)
    return score_mod
# --8<-- [end:score_mods]


# --8<-- [start:as_score_mod]
def causal_as_score_mod(score, b, h, q_idx, kv_idx):
    """The causal mask written as a score_mod: correct, but no block can be skipped."""
    return torch.where(q_idx >= kv_idx, score, -float("inf"))
# --8<-- [end:as_score_mod]


# --8<-- [start:pictures]
def example_documents(tokens=256):
    """Three packed documents of 64, 128 and 64 tokens (scaled to `tokens`)."""
    sizes = [tokens // 4, tokens // 2, tokens - tokens // 4 - tokens // 2]
    return torch.repeat_interleave(torch.arange(3), torch.tensor(sizes))


def examples(tokens=256):
    """The masks the page shows, for `tokens` tokens: window and prefix are a quarter of them."""
    return {
        "causal": causal,
        "causal_window": causal_window(tokens // 4),
        "prefix_lm": prefix_lm(tokens // 4),
        "causal_documents": causal_documents(example_documents(tokens)),
    }


def dense(mask_mod, tokens):
    """The mask as a (tokens, tokens) boolean tensor, for SDPA and for pictures."""
    return create_mask(mask_mod, None, None, tokens, tokens, device="cpu")[0, 0]


def picture(mask_mod, tokens=256, cells=16) -> str:
    """The mask drawn from the mask itself: one character per (tokens/cells)^2 square, █ if any
    position in it may attend, · if none."""
    allowed = dense(mask_mod, tokens).reshape(cells, tokens // cells, cells, tokens // cells).any(3).any(1)
    return "\n".join("".join("█" if a else "·" for a in row) for row in allowed.tolist())


def sparsity(mask_mod, tokens=4096) -> float:
    """The share of 128 x 128 blocks a BlockMask of this mask_mod lets the kernel skip, in percent."""
    return create_block_mask(mask_mod, None, None, tokens, tokens, device="cpu").sparsity()
# --8<-- [end:pictures]


def qkv(heads=4, tokens=256, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    return [torch.randn(1, heads, tokens, 32, dtype=dtype) for _ in range(3)]


def relative_error(got, want) -> float:
    return ((got - want).norm() / want.norm()).item()


def main(argv) -> int:
    if argv:
        raise UsageError(f"unexpected arguments {' '.join(argv)!r}", "python -m snippets.masks")
    # --8<-- [start:print_pictures]
    for name, mask_mod in examples().items():
        print(f"{name}: {sparsity(examples(4096)[name]):.1f}% of the blocks skipped at 4096 tokens")
        print(picture(mask_mod))
    # --8<-- [end:print_pictures]
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
