"""Masks as readers write them, each with one mistake the checker should find (and two without one).
Lengths: the tests check them at 1000 x 1000 tokens, a partial last 128-token block, except those in LENGTHS."""
import torch

TOKENS = 1000


# trace: a Python `if` on a tensor
def window_with_if(b, h, q_idx, kv_idx):
    if q_idx - kv_idx > 128:
        return torch.tensor(False)
    return q_idx >= kv_idx


# trace: `and` between two tensors
def causal_window_and(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx and q_idx - kv_idx < 256


# trace: .item() on an index
def causal_item(b, h, q_idx, kv_idx):
    return kv_idx.item() <= q_idx


# trace: .tolist() of an index
def prefix_tolist(b, h, q_idx, kv_idx):
    return kv_idx < 100 if kv_idx.tolist() < 100 else q_idx >= kv_idx


# trace: a Python bool, not a tensor
def everything_python(b, h, q_idx, kv_idx):
    return True


# bounds: a lookup table of the 1000 real tokens, indexed directly, checked at 1024 (a batch padded past it)
segment = torch.arange(TOKENS) // 250  # four segments of 250 tokens


def same_segment(b, h, q_idx, kv_idx):
    return segment[q_idx] == segment[kv_idx]


# empty-rows: strictly earlier keys only, so query 0 sees nothing
def strictly_causal(b, h, q_idx, kv_idx):
    return q_idx > kv_idx


# batch-heads: a padding mask with one length per sample of a batch of 2
lengths = torch.tensor([1000, 600])


def padded_batch(b, h, q_idx, kv_idx):
    return kv_idx < lengths[b]


# batch-heads: a different window per head
windows = torch.tensor([128, 512])


def window_per_head(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < windows[h])


# batch-heads: one length for "the batch", indexed by b
one_length = torch.tensor([700])


def padded_one_length(b, h, q_idx, kv_idx):
    return kv_idx < one_length[b]


# score-mod: a score_mod that only masks
def causal_score_mod(score, b, h, q_idx, kv_idx):
    return torch.where(q_idx >= kv_idx, score, float("-inf"))


# sparsity: every position allowed, written as a mask
def full_attention(b, h, q_idx, kv_idx):
    return kv_idx >= 0


# clean: causal, and a causal sliding window
def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def causal_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 256)


# clean: a score_mod that changes scores (a relative-position bias)
def relative_bias(score, b, h, q_idx, kv_idx):
    return score - 0.01 * (q_idx - kv_idx).abs()


# bad usage: a factory (to be called first), a tensor, a three-parameter mask
def sliding_window(window):
    def mask(b, h, q_idx, kv_idx):
        return q_idx - kv_idx < window
    return mask


def three_parameters(q_idx, kv_idx, h):
    return q_idx >= kv_idx


# the expected finding of each mask: (check, status)
EXPECTED = {
    "window_with_if": ("trace", "fail"), "causal_window_and": ("trace", "fail"), "causal_item": ("trace", "fail"),
    "prefix_tolist": ("trace", "fail"), "everything_python": ("trace", "fail"),
    "same_segment": ("bounds", "fail"), "strictly_causal": ("empty-rows", "warn"),
    "padded_batch": ("batch-heads", "warn"), "window_per_head": ("batch-heads", "warn"),
    "padded_one_length": ("batch-heads", "warn"), "causal_score_mod": ("score-mod", "warn"),
    "full_attention": ("sparsity", "warn"),
}
CLEAN = ["causal", "causal_window", "relative_bias"]
LENGTHS = {"same_segment": 1024}  # q_len = kv_len where not TOKENS
# the sizes given on the command line where the mistake needs them: the 0% sparsity warning is given only when
# every sample and head was checked, and the empty row below is in sample 1 only
ARGS = {"full_attention": ["--batch", "1", "--heads", "1"], "empty_in_sample_1": ["--batch", "2"]}


# empty-rows: causal, but sample 1 never sees key 0, so its query 0 has no key
def empty_in_sample_1(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & ((b == 0) | (kv_idx > 0))


EXPECTED["empty_in_sample_1"] = ("empty-rows", "warn")


# trace: an integer tensor, not a boolean one
def causal_as_int(b, h, q_idx, kv_idx):
    return torch.where(q_idx >= kv_idx, 1, 0)


EXPECTED["causal_as_int"] = ("trace", "fail")


# bounds: one length per sample of a batch of 2, checked with --batch 3: the third sample reads past the end
two_lengths = torch.tensor([1000, 600])


def two_samples_of_three(b, h, q_idx, kv_idx):
    return kv_idx < two_lengths[b]


EXPECTED["two_samples_of_three"] = ("bounds", "fail")
ARGS["two_samples_of_three"] = ["--batch", "3"]

# bounds: same_segment's read past the lengths, checked with --batch 2: one sample reads past them too
same_segment_in_a_batch = same_segment
EXPECTED["same_segment_in_a_batch"] = ("bounds", "fail")
LENGTHS["same_segment_in_a_batch"] = 1024
ARGS["same_segment_in_a_batch"] = ["--batch", "2"]


# not a mistake alone: a window per head whose first two heads agree (heads 0-3: 128, heads 4-7: 1024)
head_pair_windows = torch.tensor([128] * 4 + [1024] * 4)


def window_by_head_pairs(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < head_pair_windows[h])
