"""Learnable biases in a score_mod: a table of relative-position biases per head, and ALiBi with learned
slopes, trained through FlexAttention's backward; checked against float64 attention with the bias added
to the scores densely.

    python -m snippets.biases      # the CPU forward check; on a CUDA GPU also gradients, repeatability,
                                   # the FLASH backend's answer, and time and memory against SDPA
"""
from snippets._cli import UsageError, run

# --8<-- [start:table]
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


def relative_bias(table):
    """A score_mod adding table[h, q_idx - kv_idx + L - 1]: a bias per head and per distance between a
    query and a key, for sequences of up to L tokens (table: heads x 2L-1, L fixed, as for a model's
    parameter). When `table` requires grad, FlexAttention's backward computes its gradient too."""
    middle = (table.shape[1] - 1) // 2

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + table[h, q_idx - kv_idx + middle]
    return score_mod


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
# --8<-- [end:table]


# --8<-- [start:alibi]
def alibi_per_head(slopes):
    """ALiBi with learned slopes, read in the score_mod: slopes[h] * (kv_idx - q_idx)."""
    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)
    return score_mod


def alibi(slopes, longest):
    """The same bias as a table built from the slopes outside the score_mod, for sequences of up to
    `longest` tokens: entry d of head h is slopes[h] * (kv_idx - q_idx) for q_idx - kv_idx = d - (longest - 1),
    in float32 at least (bfloat16 rounds 257 to 256: not every integer above 256 is in it). Autograd
    carries the table's gradient back to the slopes."""
    dtype = torch.promote_types(slopes.dtype, torch.float32)
    distances = torch.arange(longest - 1, -longest, -1, device=slopes.device, dtype=dtype)
    return relative_bias(slopes.to(dtype)[:, None] * distances)
# --8<-- [end:alibi]


# --8<-- [start:dense]
def dense_attention(q, k, v, bias, allowed):
    """Attention written out: softmax(q k^T / sqrt(D) + bias, masked by `allowed`) v, in q's dtype."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5 + bias
    return scores.masked_fill(~allowed, -torch.inf).softmax(-1) @ v


def dense_relative_bias(table, tokens):
    """table[h, i - j + L - 1] for every query i and key j of T tokens: (heads, T, T)."""
    positions = torch.arange(tokens, device=table.device)
    return table[:, positions[:, None] - positions[None, :] + (table.shape[1] - 1) // 2]


LONGEST = 4096  # the tables' L: the longest sequence they serve


def inputs(tokens, heads, head_dim, dtype, device, batch=2, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    q, k, v = (torch.randn(batch, heads, tokens, head_dim, generator=g, device=device).to(dtype) for _ in range(3))
    table = 0.5 * torch.randn(heads, 2 * LONGEST - 1, generator=g, device=device).to(dtype)
    return q, k, v, table


def relative_error(got, want) -> float:
    return ((got.double() - want.double()).norm() / want.double().norm()).item()
# --8<-- [end:dense]


# --8<-- [start:cpu]
def cpu_forward(tokens=1000, heads=4, head_dim=64):
    """On the CPU, forward only, with a table that does not require grad: FlexAttention with the table,
    eager in float64 and compiled in float32 (compiled CPU FlexAttention takes no float64), against
    dense_attention with the bias added densely, in float64 from the same inputs."""
    q, k, v, table = inputs(tokens, heads, head_dim, torch.float64, "cpu")
    block_mask = create_block_mask(causal, None, None, tokens, tokens, device="cpu")
    allowed = torch.ones(tokens, tokens, dtype=torch.bool).tril()
    lines = []
    for mode, dtype, attention in (("eager", torch.float64, flex_attention),
                                   ("compiled", torch.float32, torch.compile(flex_attention))):
        x = [t.to(dtype) for t in (q, k, v, table)]
        want = dense_attention(*[t.double() for t in x[:3]], dense_relative_bias(x[3].double(), tokens), allowed)
        got = attention(*x[:3], score_mod=relative_bias(x[3]), block_mask=block_mask)
        lines.append(f"CPU, {str(dtype)[6:]}, {mode}: relative error against the dense bias in float64 "
                     f"{relative_error(got, want):.1e}")
    return "\n".join(lines)
# --8<-- [end:cpu]


# --8<-- [start:gradients]
BIASES = {"table": relative_bias, "alibi_per_head": alibi_per_head}  # alibi takes the length too


def score_mod_of(bias, param):
    return alibi(param, LONGEST) if bias == "alibi" else BIASES[bias](param)


def backward(attention, q, k, v, param, grad_out):
    """attention(q, k, v, param)'s output and the gradients of q, k, v and param, from fresh leaves."""
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v, param)]
    out = attention(*leaves)
    out.backward(grad_out.to(out.dtype))
    return [out.detach()] + [x.grad for x in leaves]


def compiled_flex():
    """flex_attention compiled from a fresh start. Dynamo keeps what it compiled for flex_attention for the
    whole process, so without the reset the lengths and dtypes of earlier experiments would change how
    this one compiles."""
    torch._dynamo.reset()
    return torch.compile(flex_attention)


def gradients(dtype, head_dim=64, tokens=1024, heads=4, bias="table"):
    """One forward and backward of compiled FlexAttention with a learnable bias on the GPU, and the
    relative errors of the output and of every gradient against float64 dense attention with autograd,
    from the same rounded inputs. bias: "table" (relative_bias), "alibi" (the slopes through a table) or
    "alibi_per_head" (the slopes read in the score_mod)."""
    compiled = compiled_flex()
    q, k, v, table = inputs(tokens, heads, head_dim, dtype, "cuda")
    slopes = torch.tensor([2 ** (-8 * (h + 1) / heads) for h in range(heads)], device="cuda").to(dtype)
    param = table if bias == "table" else slopes
    block_mask = create_block_mask(causal, None, None, tokens, tokens, device="cuda")
    allowed = torch.ones(tokens, tokens, dtype=torch.bool, device="cuda").tril()
    grad_out = torch.randn(q.shape, generator=torch.Generator(device="cuda").manual_seed(1), device="cuda")

    def dense_bias(p):
        if bias == "table":
            return dense_relative_bias(p, tokens)
        return dense_relative_bias(p[:, None] * torch.arange(LONGEST - 1, -LONGEST, -1, device="cuda"), tokens)

    got = backward(lambda q, k, v, p: compiled(q, k, v, score_mod=score_mod_of(bias, p),
                                               block_mask=block_mask), q, k, v, param, grad_out)
    want = backward(lambda q, k, v, p: dense_attention(q, k, v, dense_bias(p), allowed),
                    *[x.double() for x in (q, k, v, param)], grad_out)
    names = ["output", "dq", "dk", "dv", "dtable" if bias == "table" else "dslopes"]
    return {name: relative_error(g, w) for name, g, w in zip(names, got, want)}


def describe_gradients():
    lines = [f"relative error against float64, {torch.cuda.get_device_name()}, torch {torch.__version__}"]
    for bias, dtype, head_dim, tokens in [("table", torch.float32, 64, 1024), ("table", torch.bfloat16, 128, 1000),
                                          ("table", torch.float16, 64, 1024), ("alibi", torch.float32, 64, 1024),
                                          ("alibi_per_head", torch.bfloat16, 64, 1024)]:
        errors = gradients(dtype, head_dim, tokens, bias=bias)
        lines.append(f"{bias:14} {str(dtype)[6:]:8} D={head_dim:<3} T={tokens:<4} "
                     + "  ".join(f"{name} {e:.1e}" for name, e in errors.items()))
    return "\n".join(lines)
# --8<-- [end:gradients]


# --8<-- [start:repeat]
def repeatability(runs=5, tokens=1024, heads=4, head_dim=64, dtype=torch.float32):
    """The same forward and backward `runs` times: which results are bitwise the same each time."""
    compiled = compiled_flex()
    q, k, v, table = inputs(tokens, heads, head_dim, dtype, "cuda")
    q, k, v, table = (x.requires_grad_() for x in (q, k, v, table))
    block_mask = create_block_mask(causal, None, None, tokens, tokens, device="cuda")
    results = []
    for _ in range(runs):
        for x in (q, k, v, table):
            x.grad = None
        out = compiled(q, k, v, score_mod=relative_bias(table), block_mask=block_mask)
        out.backward(torch.ones_like(out))
        results.append([out.detach(), q.grad, k.grad, v.grad, table.grad])
    same = [all(torch.equal(r[i], results[0][i]) for r in results) for i in range(5)]
    return dict(zip(["output", "dq", "dk", "dv", "dtable"], same))


def describe_repeatability(runs=5, dtype=torch.float32):
    same = repeatability(runs, dtype=dtype)
    return (f"{runs} runs, {str(dtype)[6:]}: "
            + ", ".join(f"{name} {'the same' if s else 'differs'}" for name, s in same.items()))
# --8<-- [end:repeat]


# --8<-- [start:flash]
def flash_answer(tokens=1024, heads=4, head_dim=128):
    """The FLASH backend (flash-attn-4) with a table that requires grad, and with the same table frozen."""
    compiled = compiled_flex()
    q, k, v, table = inputs(tokens, heads, head_dim, torch.bfloat16, "cuda")
    q.requires_grad_()
    block_mask = create_block_mask(causal, None, None, tokens, tokens, device="cuda")
    lines = []
    for name, t in (("learnable table", table.clone().requires_grad_()), ("frozen table", table)):
        try:
            out = compiled(q, k, v, score_mod=relative_bias(t), block_mask=block_mask,
                           kernel_options={"BACKEND": "FLASH"})
            out.sum().backward()
            lines.append(f"{name}: forward and backward ran")
        except Exception as e:
            # the reason, without the words in brackets after it, which vary from run to run on one machine
            # ("flash attention" or "flash attention backward")
            reason = str(e).strip().splitlines()[0].split(" (")[0]
            lines.append(f"{name}: {type(e).__name__}: {reason[:200]}")
    return "\n".join(lines)
# --8<-- [end:flash]


# --8<-- [start:cost]
def cost(batch=4, tokens=4096, heads=16, head_dim=64, dtype=torch.bfloat16):
    """Forward and backward with a learnable bias, timed by triton.testing.do_bench (median and the 20% and
    80% quantiles of 100 ms of repeats) after a warm-up, and the peak memory one step allocates beyond
    its inputs and their gradients: FlexAttention with the table, ALiBi with the slopes read in the
    score_mod, and SDPA given the table's bias as a dense (heads, T, T) tensor."""
    from triton.testing import do_bench

    import torch.nn.functional as F

    compiled = compiled_flex()
    q, k, v, table = inputs(tokens, heads, head_dim, dtype, "cuda", batch=batch)
    slopes = torch.tensor([2 ** (-8 * (h + 1) / heads) for h in range(heads)], device="cuda").to(dtype)
    params = [x.requires_grad_() for x in (q, k, v, table, slopes)]
    block_mask = create_block_mask(causal, None, None, tokens, tokens, device="cuda")
    allowed = torch.ones(tokens, tokens, dtype=torch.bool, device="cuda").tril()
    variants = {
        "flex, table": lambda: compiled(q, k, v, score_mod=relative_bias(table), block_mask=block_mask),
        "flex, alibi_per_head": lambda: compiled(q, k, v, score_mod=alibi_per_head(slopes), block_mask=block_mask),
        "SDPA, dense bias": lambda: F.scaled_dot_product_attention(
            q, k, v, attn_mask=dense_relative_bias(table, tokens).masked_fill(~allowed, -torch.inf)),
    }
    rows = {}
    for name, attention in variants.items():
        def step():
            for x in params:
                x.grad = None
            attention().sum().backward()
        step()  # compiles
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - before) / 2 ** 20
        ms = do_bench(step, warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8])
        rows[name] = (ms, peak)
    return rows


def describe_cost(rows, batch=4, tokens=4096, heads=16, head_dim=64):
    base = rows["flex, table"][0][0]
    lines = [f"forward+backward, bfloat16, batch {batch}, {tokens} tokens, {heads} heads, head dim {head_dim}, "
             f"{torch.cuda.get_device_name()}"]
    for name, ((median, low, high), peak) in rows.items():
        lines.append(f"{name:20} {median:7.2f} ms ({low:.2f}-{high:.2f})  {median / base:5.1f}x  {peak:7.0f} MiB")
    return "\n".join(lines)
# --8<-- [end:cost]


def main(argv) -> int:
    if argv:
        raise UsageError(f"unexpected arguments {' '.join(argv)!r}", "python -m snippets.biases")
    # --8<-- [start:print_cpu]
    print(cpu_forward())
    # --8<-- [end:print_cpu]
    # --8<-- [start:print_gradients]
    if torch.cuda.is_available():
        print(describe_gradients())
    # --8<-- [end:print_gradients]
    # --8<-- [start:print_repeat]
    if torch.cuda.is_available():
        print(describe_repeatability())
    # --8<-- [end:print_repeat]
    # --8<-- [start:print_flash]
    if torch.cuda.is_available():
        print(flash_answer())
    # --8<-- [end:print_flash]
    # --8<-- [start:print_cost]
    if torch.cuda.is_available():
        print(describe_cost(cost()))
    # --8<-- [end:print_cost]
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
