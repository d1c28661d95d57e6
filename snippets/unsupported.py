"""What FlexAttention does not take, dropout and nested tensors, and what to do instead.

    python -m snippets.unsupported   # dropout both ways, Transformers' refusal, a nested batch packed
"""
from snippets._cli import UsageError, run

# --8<-- [start:no_dropout]
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import flex_attention


def dropout_p_answers(p=0.5) -> str:
    """What SDPA and flex_attention answer when given dropout_p."""
    q = torch.randn(1, 2, 8, 16)
    lines = [f"SDPA, dropout_p={p}: output of shape {tuple(F.scaled_dot_product_attention(q, q, q, dropout_p=p).shape)}"]
    try:
        flex_attention(q, q, q, dropout_p=p)
    except TypeError as e:
        lines.append(f"flex_attention, dropout_p={p}: TypeError: {e}")
    return "\n".join(lines)
# --8<-- [end:no_dropout]


# --8<-- [start:two_dropouts]
def scores_dropped(q, k, v, keep):
    """What a score_mod can do with a random tensor: FlexAttention with the score of each (query, key)
    where keep is False set to -inf before the softmax. keep: booleans, (batch, heads, queries, keys)."""
    def drop(score, b, h, q_idx, kv_idx):
        return torch.where(keep[b, h, q_idx, kv_idx], score, -torch.inf)
    return flex_attention(q, k, v, score_mod=drop)


def weights_dropped(q, k, v, keep, p):
    """Attention dropout as SDPA's dropout_p applies it: after the softmax, each weight kept where keep
    is True and scaled by 1 / (1 - p), so that on average the weights are unchanged."""
    weights = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
    return (weights * keep / (1 - p)) @ v
# --8<-- [end:two_dropouts]


# --8<-- [start:expected]
from functools import partial


def expected(dropped, q, k, v, p):
    """The exact average output over every pattern of kept keys (each key dropped with probability p,
    the same keys for every query): the sum over the 2**keys patterns of its probability times its output."""
    n = k.shape[-2]
    total = torch.zeros_like(q)
    for bits in range(2 ** n):
        kept = torch.tensor([bits >> j & 1 == 1 for j in range(n)])
        keep = kept.expand(*q.shape[:-1], n)
        total += (1 - p) ** int(kept.sum()) * p ** (n - int(kept.sum())) * dropped(q, k, v, keep)
    return total
# --8<-- [end:expected]


# --8<-- [start:transformers]
from transformers import LlamaConfig, LlamaForCausalLM


def small_llama(attention_dropout):
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, attention_dropout=attention_dropout,
                         attn_implementation="flex_attention")
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def forward_in(model, mode) -> str:
    """A forward pass in train mode, or in eval mode without gradients (inference): the loss, or the error."""
    model.train(mode == "train")
    ids = torch.randint(0, 128, (2, 40), generator=torch.Generator().manual_seed(0))
    try:
        with torch.set_grad_enabled(mode == "train"):
            loss = model(input_ids=ids, labels=ids).loss
    except (ValueError, NotImplementedError) as e:
        return f"{type(e).__name__}: {e}"
    return f"loss {loss.item():.4f}"
# --8<-- [end:transformers]


# --8<-- [start:nested]
def nested_answer() -> str:
    """What flex_attention answers when given a jagged NestedTensor."""
    batch = torch.nested.nested_tensor([torch.randn(n, 2, 16) for n in (5, 3)], layout=torch.jagged)
    try:
        flex_attention(batch, batch, batch)
    except (NotImplementedError, RuntimeError) as e:  # PyTorch 2.11 on a GPU: a RuntimeError from torch.compile
        return f"{type(e).__name__}: {e}"
    return "no error"
# --8<-- [end:nested]


# --8<-- [start:packed]
from torch.nn.attention.flex_attention import create_block_mask


def causal_per_sequence_mask(offsets, build=None):
    """A BlockMask over packed sequences (offsets: where each starts, and the total at the end): causal
    within each sequence, nothing across them; built by `build` (create_block_mask if None)."""
    sequence = torch.repeat_interleave(torch.arange(len(offsets) - 1, device=offsets.device), offsets.diff())

    def same_sequence_causal(b, h, q_idx, kv_idx):
        return (sequence[q_idx] == sequence[kv_idx]) & (q_idx >= kv_idx)
    total = int(offsets[-1])
    return (build or create_block_mask)(same_sequence_causal, None, None, total, total, device=offsets.device)


def causal_per_sequence(q, k, v, attention=flex_attention, build=None):
    """Causal attention within each sequence of a jagged NestedTensor batch (batch, sequence, heads,
    head_dim; q, k and v with the same lengths), computed as one packed sequence with a mask that keeps
    each sequence to itself. Returns a NestedTensor of the same layout."""
    offsets = q.offsets()  # where each sequence starts in the packed values, and the total at the end
    packed = [t.values().transpose(0, 1).unsqueeze(0) for t in (q, k, v)]  # (1, heads, total, head_dim)
    out = attention(*packed, block_mask=causal_per_sequence_mask(offsets, build))
    return torch.nested.nested_tensor_from_jagged(out[0].transpose(0, 1), offsets)
# --8<-- [end:packed]


# --8<-- [start:varlen]
def causal_per_sequence_varlen(q, k, v):
    """causal_per_sequence with PyTorch's variable-length attention kernel (CUDA only): the packed values,
    where each sequence starts (int32), the longest sequence, and window_size=(-1, 0) for causal."""
    from torch.nn.attention.varlen import varlen_attn

    starts = q.offsets().to(torch.int32)
    longest = int(starts.diff().max())
    out = varlen_attn(q.values(), k.values(), v.values(), starts, starts, longest, longest, window_size=(-1, 0))
    return torch.nested.nested_tensor_from_jagged(out, q.offsets())


def sdpa_per_sequence(q, k, v):
    """The reference: causal SDPA over each sequence alone, packed again."""
    offsets = q.offsets()
    parts = [F.scaled_dot_product_attention(*(t.values()[a:b].transpose(0, 1) for t in (q, k, v)), is_causal=True)
             for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
    return torch.nested.nested_tensor_from_jagged(torch.cat(parts, dim=1).transpose(0, 1), offsets)


def gradients(attention, lengths, values, grad):
    """The output and the gradients of q, k and v of `attention` over a jagged batch made of `values`
    (q, k and v packed: total tokens, heads, head_dim) with the given sequence lengths."""
    offsets = torch.tensor([0, *lengths], device=grad.device).cumsum(0)
    leaves = [x.detach().clone().requires_grad_() for x in values]
    out = attention(*(torch.nested.nested_tensor_from_jagged(x, offsets) for x in leaves)).values()
    out.backward(grad.to(out.dtype))
    return [out.detach(), *(x.grad for x in leaves)]


def compiled_flex():
    """torch.compile(flex_attention), compiled afresh: with PyTorch 2.11, after the Transformers section
    above, flex_attention compiled later in the same process runs unfused, every score in memory."""
    torch._dynamo.reset()
    return torch.compile(flex_attention)


def against_float64(lengths=(1000, 37, 2500, 128, 1), head_dims=(64, 128), heads=16, dtype=torch.bfloat16):
    """Both ways in bfloat16 on the GPU, compiled FlexAttention and varlen_attn: for the output and the
    gradients of q, k and v, the norm of the difference from the float64 reference over its norm."""
    compiled = compiled_flex()
    ways = {"flex_attention, compiled": lambda q, k, v: causal_per_sequence(q, k, v, attention=compiled),
            "varlen_attn": causal_per_sequence_varlen}
    lines = [f"relative error from causal SDPA over each sequence in float64, {dtype}, {heads} heads, "
             f"sequences of {', '.join(map(str, lengths))} tokens, {torch.cuda.get_device_name()}"]
    for head_dim in head_dims:
        g = torch.Generator("cuda").manual_seed(0)
        *values, grad = (torch.randn(sum(lengths), heads, head_dim, device="cuda", generator=g) for _ in range(4))
        want = gradients(sdpa_per_sequence, lengths, [x.double() for x in values], grad)
        for name, attention in ways.items():
            got = gradients(attention, lengths, [x.to(dtype) for x in values], grad)
            errors = [((a.double() - b).norm() / b.norm()).item() for a, b in zip(got, want)]
            lines.append(f"head dim {head_dim:3}, {name:24} " +
                         "  ".join(f"{what} {e:.1e}" for what, e in zip(("out", "dq", "dk", "dv"), errors)))
    return "\n".join(lines)
# --8<-- [end:varlen]


# --8<-- [start:varlen_cost]
DOCUMENTS = (3000, 517, 1200, 4096, 800, 2500, 1750, 2521)  # 16384 tokens packed from 8 sequences


def varlen_cost(lengths=DOCUMENTS, head_dims=(64, 128), heads=16, dtype=torch.bfloat16):
    """{(head_dim, way): (forward ms, forward and backward ms)}, each a (median, 20%, 80%) of
    triton.testing.do_bench after a warm-up: varlen_attn, and compiled FlexAttention with the sequence
    mask built once before, built again at each call, and built at each call by a compiled builder."""
    from torch.nn.attention.varlen import varlen_attn
    from triton.testing import do_bench

    compiled, compiled_build = compiled_flex(), torch.compile(create_block_mask)
    offsets = torch.tensor([0, *lengths], device="cuda").cumsum(0)
    starts, longest = offsets.to(torch.int32), max(lengths)  # made once: reading them back waits for the GPU
    rows = {}
    for head_dim in head_dims:
        g = torch.Generator("cuda").manual_seed(0)
        *values, grad = (torch.randn(sum(lengths), heads, head_dim, device="cuda", generator=g, dtype=dtype)
                         for _ in range(4))
        q, k, v = (x.requires_grad_() for x in values)
        packed = [t.transpose(0, 1).unsqueeze(0) for t in (q, k, v)]  # (1, heads, tokens, head_dim)
        before = causal_per_sequence_mask(offsets)
        ways = {
            "varlen_attn": lambda: varlen_attn(q, k, v, starts, starts, longest, longest, window_size=(-1, 0)),
            "flex, mask built before": lambda: compiled(*packed, block_mask=before)[0].transpose(0, 1),
            "flex, mask built each call": lambda: compiled(
                *packed, block_mask=causal_per_sequence_mask(offsets))[0].transpose(0, 1),
            "flex, compiled build each call": lambda: compiled(
                *packed, block_mask=causal_per_sequence_mask(offsets, compiled_build))[0].transpose(0, 1),
        }
        for name, attention in ways.items():
            def step():
                for x in (q, k, v):
                    x.grad = None
                attention().backward(grad)
            step()  # compiles
            with torch.no_grad():
                forward = do_bench(attention, warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8])
            rows[head_dim, name] = (forward, do_bench(step, warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8]))
    return rows


def describe_varlen_cost(rows, lengths=DOCUMENTS, heads=16):
    lines = [f"ms: median (20%-80%) and x varlen_attn, {sum(lengths)} tokens in {len(lengths)} sequences, "
             f"bfloat16, {heads} heads, {torch.cuda.get_device_name()}"]
    for (head_dim, name), (forward, both) in rows.items():
        base = rows[head_dim, "varlen_attn"]
        lines.append(f"head dim {head_dim:3}, {name:30} no-grad forward {forward[0]:6.2f} ({forward[1]:.2f}-{forward[2]:.2f}) "
                     f"{forward[0] / base[0][0]:5.1f}x   forward+backward {both[0]:6.2f} ({both[1]:.2f}-{both[2]:.2f}) "
                     f"{both[0] / base[1][0]:5.1f}x")
    return "\n".join(lines)
# --8<-- [end:varlen_cost]


def main(argv) -> int:
    if argv:
        raise UsageError(f"unexpected arguments {' '.join(argv)!r}", "python -m snippets.unsupported")
    # --8<-- [start:print_no_dropout]
    print(dropout_p_answers())
    # --8<-- [end:print_no_dropout]
    # --8<-- [start:print_expected]
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, n, 16, dtype=torch.float64) for n in (4, 8, 8))
    plain = F.scaled_dot_product_attention(q, k, v)
    for p in (0.1, 0.5):
        after = (expected(partial(weights_dropped, p=p), q, k, v, p) - plain).abs().max().item()
        before = (expected(scores_dropped, q, k, v, p) - plain).abs().max().item()
        print(f"p = {p}, averaged over the 256 patterns of 8 keys, largest difference from no dropout: "
              f"weights dropped after the softmax {after:.1e}, scores dropped before it {before:.1e}")
    # --8<-- [end:print_expected]
    # --8<-- [start:print_transformers]
    for dropout in (0.1, 0.0):
        model = small_llama(dropout)
        for mode in ("train", "eval"):
            print(f"attention_dropout={dropout}, {mode}: {forward_in(model, mode)}")
    # --8<-- [end:print_transformers]
    # --8<-- [start:print_nested]
    print(nested_answer())
    # --8<-- [end:print_nested]
    # --8<-- [start:print_packed]
    torch.manual_seed(0)
    lengths = (100, 37, 250)
    q, k, v = (torch.nested.nested_tensor([torch.randn(n, 2, 16, dtype=torch.float64) for n in lengths],
                                          layout=torch.jagged) for _ in range(3))
    out = causal_per_sequence(q, k, v)
    for i, n in enumerate(lengths):
        want = F.scaled_dot_product_attention(*(t[i].transpose(0, 1) for t in (q, k, v)), is_causal=True)
        print(f"sequence of {n} tokens: largest difference from SDPA over it alone "
              f"{(out[i].transpose(0, 1) - want).abs().max().item():.1e}")
    # --8<-- [end:print_packed]
    # --8<-- [start:print_varlen]
    if torch.cuda.is_available():
        print(against_float64())
    # --8<-- [end:print_varlen]
    # --8<-- [start:print_varlen_cost]
    if torch.cuda.is_available():
        print(describe_varlen_cost(varlen_cost()))
    # --8<-- [end:print_varlen_cost]
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
