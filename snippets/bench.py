"""Benchmarks of FlexAttention against SDPA on a CUDA GPU: training, masks, decoding, and the
GPU's own ceilings, measured in one run and written as a record.

    python -m snippets.bench [--quick] [--out FILE]     # needs a CUDA GPU; make bench

Method: CUDA-event timing with triton.testing.do_bench (median; CUDA-graph replay for decoding),
after a warm-up; compilation and BlockMask creation happen before the timed region; fresh random
inputs per case; each variant's output is checked against a reference before it is timed.
"""
import json
import time
from pathlib import Path

from snippets._cli import ArgumentParser, UsageError, run

# --8<-- [start:harness]
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

DTYPE = torch.bfloat16
FLASH = {"BACKEND": "FLASH"}  # FlexAttention's FlashAttention-4 kernels (pip install flash-attn-4)
TOKENS = 16384  # tokens per batch in the training cases
HEADS = 16

# One compiled function for every case; each new shape or mask compiles once, before timing.
torch._dynamo.config.cache_size_limit = 1000
flex = torch.compile(flex_attention, dynamic=False)


def timed(fn, graph=False, rep=100) -> float:
    """Median milliseconds of fn on the GPU (CUDA events; CUDA-graph replay when graph=True)."""
    from triton.testing import do_bench, do_bench_cudagraph

    if graph:
        return do_bench_cudagraph(fn, rep=100, return_mode="median")
    return do_bench(fn, warmup=25, rep=rep, return_mode="median")


def host_ms(fn, calls=20) -> float:
    """Milliseconds of Python and launch work per call: the time to queue calls, not to run them."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e3


def relative_error(got, want) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def randn(*shape, grad=False):
    return torch.randn(*shape, device="cuda", dtype=DTYPE, requires_grad=grad)


def measure(variants, reference, inputs, flops=None, backward=True, tolerance=2e-2, graph=False):
    """Check each variant's output against reference(*inputs), then time forward (and backward).
    A variant is a function of the inputs, or (function, its own inputs) for another layout."""
    want = reference(*inputs).detach()
    dout = torch.randn_like(want)
    rows = {}
    for name, variant in variants.items():
        fn, args = variant if isinstance(variant, tuple) else (variant, inputs)
        row = {}
        try:
            got = fn(*args)
            row["error_vs_reference"] = relative_error(got, want)
            if row["error_vs_reference"] > tolerance:
                raise AssertionError(f"output differs from the reference by {row['error_vs_reference']:.1e}")
            row["forward_ms"] = timed(lambda: fn(*args), graph=graph)
            if not graph:
                row["host_ms"] = host_ms(lambda: fn(*args))
            if backward:
                grads = [x for x in args if x.requires_grad]
                fn(*args).backward(dout)  # compiles the backward before timing

                def step():
                    for x in grads:
                        x.grad = None
                    fn(*args).backward(dout)
                row["forward_backward_ms"] = timed(step)
        except Exception as e:  # a variant this GPU or version cannot run is reported, not fatal
            row["failed"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
        if flops and "forward_ms" in row:
            row["forward_tflops"] = flops / row["forward_ms"] / 1e9
            if "forward_backward_ms" in row:
                row["forward_backward_tflops"] = 3.5 * flops / row["forward_backward_ms"] / 1e9
        rows[name] = row
    return rows


def sdpa(backend, **kwargs):
    def attention(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, **kwargs)
    return attention


def causal_flops(batch, heads, tokens, head_dim) -> float:
    """Useful FLOPs of causal attention's forward pass: QK^T and PV over the lower triangle."""
    return 4 * batch * heads * tokens * tokens * head_dim / 2
# --8<-- [end:harness]


# --8<-- [start:masks]
def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding_window(window):
    def mask(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)
    return mask


def document_causal(document_ids):
    """Packed sequences: a token sees the earlier tokens of its own document only."""
    def mask(b, h, q_idx, kv_idx):
        return (document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)
    return mask
# --8<-- [end:masks]


# --8<-- [start:training]
def training_case(batch, tokens, head_dim):
    q, k, v = (randn(batch, HEADS, tokens, head_dim, grad=True) for _ in range(3))
    block_mask = create_block_mask(causal, None, None, tokens, tokens)  # built once, outside timing
    variants = {
        "flex": lambda q, k, v: flex(q, k, v, block_mask=block_mask),
        "flex_flash": lambda q, k, v: flex(q, k, v, block_mask=block_mask, kernel_options=FLASH),
        "sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True),
        "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION, is_causal=True),
    }
    return measure(variants, sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True), (q, k, v),
                   flops=causal_flops(batch, HEADS, tokens, head_dim))
# --8<-- [end:training]


def sliding_window_case(window=1024, tokens=TOKENS, head_dim=128):
    mask_mod = sliding_window(window)
    q, k, v = (randn(1, HEADS, tokens, head_dim, grad=True) for _ in range(3))
    block_mask = create_block_mask(mask_mod, None, None, tokens, tokens)
    dense = torch.ones(tokens, tokens, device="cuda", dtype=torch.bool).tril().triu(-(window - 1))
    pairs = dense.sum().item()
    variants = {
        "flex": lambda q, k, v: flex(q, k, v, block_mask=block_mask),
        "flex_flash": lambda q, k, v: flex(q, k, v, block_mask=block_mask, kernel_options=FLASH),
        "sdpa_dense_mask": sdpa(SDPBackend.EFFICIENT_ATTENTION, attn_mask=dense),
    }
    return measure(variants, sdpa(SDPBackend.EFFICIENT_ATTENTION, attn_mask=dense), (q, k, v),
                   flops=4 * HEADS * pairs * head_dim)


def soft_cap(score, b, h, q_idx, kv_idx):
    """tanh soft-capping of the scores at 30, as in Gemma 2."""
    return 30 * torch.tanh(score / 30)


def score_mod_case(tokens=8192, head_dim=128):
    """A causal score_mod that SDPA has no argument for, against the same math written out densely."""
    q, k, v = (randn(1, HEADS, tokens, head_dim, grad=True) for _ in range(3))
    block_mask = create_block_mask(causal, None, None, tokens, tokens)

    def dense(q, k, v):
        scores = 30 * torch.tanh((q @ k.transpose(-1, -2)).float() / head_dim ** 0.5 / 30)
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
        return (scores.softmax(-1).to(q.dtype) @ v)
    variants = {
        "flex": lambda q, k, v: flex(q, k, v, score_mod=soft_cap, block_mask=block_mask),
        "flex_flash": lambda q, k, v: flex(q, k, v, score_mod=soft_cap, block_mask=block_mask, kernel_options=FLASH),
    }
    return measure(variants, dense, (q, k, v), flops=causal_flops(1, HEADS, tokens, head_dim))


def gallery_case(name, tokens=4096, head_dim=64):
    """One mask of the gallery (snippets/gallery.py, at `tokens` tokens): FlexAttention with its BlockMask
    against SDPA given the same mask as a dense boolean tensor (memory-efficient kernel)."""
    from torch.nn.attention.flex_attention import create_mask

    from snippets import gallery

    mask_mod, q_len, kv_len, batch = gallery.examples(tokens, device="cuda")[name]
    q = randn(batch, HEADS, q_len, head_dim, grad=True)
    k, v = (randn(batch, HEADS, kv_len, head_dim, grad=True) for _ in range(2))
    block_mask = create_block_mask(mask_mod, batch, None, q_len, kv_len)
    dense = create_mask(mask_mod, batch, 1, q_len, kv_len, device="cuda")
    pairs = dense.sum().item() * HEADS
    variants = {"flex": lambda q, k, v: flex(q, k, v, block_mask=block_mask),
                "sdpa_dense_mask": sdpa(SDPBackend.EFFICIENT_ATTENTION, attn_mask=dense)}
    shape = {"mask": name, "batch": batch, "q_tokens": q_len, "kv_tokens": kv_len, "heads": HEADS,
             "head_dim": head_dim}
    return measure(variants, sdpa(SDPBackend.EFFICIENT_ATTENTION, attn_mask=dense), (q, k, v),
                   flops=4 * pairs * head_dim), shape


def document_lengths(total=TOKENS, shortest=128, longest=8192, seed=0):
    """Document lengths drawn log-uniformly, as text corpora mix many short and few long documents."""
    generator = torch.Generator().manual_seed(seed)
    lengths = []
    while sum(lengths) < total:
        draw = torch.empty(1).uniform_(0, 1, generator=generator).item()
        length = int(shortest * (longest / shortest) ** draw)
        lengths.append(min(length, total - sum(lengths)))
    return lengths


def packed_documents(lengths, head_dim=128):
    """One packed row of documents vs the same documents padded to the longest one."""
    document_ids = torch.repeat_interleave(torch.arange(len(lengths), device="cuda"),
                                           torch.tensor(lengths, device="cuda"))
    block_mask = create_block_mask(document_causal(document_ids), None, None, sum(lengths), sum(lengths))
    return document_ids, block_mask


def documents_case(head_dim=128):
    lengths = document_lengths()
    total, longest = sum(lengths), max(lengths)
    document_ids, block_mask = packed_documents(lengths, head_dim)
    q, k, v = (randn(1, HEADS, total, head_dim, grad=True) for _ in range(3))
    dense = (document_ids[:, None] == document_ids[None, :]).tril()
    starts = [sum(lengths[:i]) for i in range(len(lengths))]

    def pad(x):  # (1, H, total, D) -> (documents, H, longest, D), zeros after each document
        out = x.new_zeros(len(lengths), HEADS, longest, head_dim)
        for i, (start, length) in enumerate(zip(starts, lengths)):
            out[i, :, :length] = x[0, :, start:start + length]
        return out.detach().requires_grad_()

    def unpad(x):
        return torch.cat([x[i, :, :length] for i, length in enumerate(lengths)], dim=1)[None]

    flash = sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True)
    variants = {
        "flex_packed": lambda q, k, v: flex(q, k, v, block_mask=block_mask),
        "flex_packed_flash": lambda q, k, v: flex(q, k, v, block_mask=block_mask, kernel_options=FLASH),
        # The padding-based approach: each document its own row, padded to the longest.
        "sdpa_padded": (lambda q, k, v: unpad(flash(q, k, v)), [pad(x) for x in (q, k, v)]),
        "sdpa_dense_mask": sdpa(SDPBackend.EFFICIENT_ATTENTION, attn_mask=dense),
    }
    useful = sum(causal_flops(1, HEADS, length, head_dim) for length in lengths)
    rows = measure(variants, sdpa(SDPBackend.EFFICIENT_ATTENTION, attn_mask=dense), (q, k, v), flops=useful)
    return rows, {"documents": len(lengths), "longest": longest, "tokens": total}


def decoding_case(batch, kv_tokens, q_heads, kv_heads, head_dim=128, settings=()):
    """One new query token per sequence against a full KV cache of kv_tokens."""
    q = randn(batch, q_heads, 1, head_dim)
    k, v = (randn(batch, kv_heads, kv_tokens, head_dim) for _ in range(2))
    block_mask = create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx >= 0, None, None, 1, kv_tokens)
    groups = q_heads // kv_heads
    whole_cache = torch.ones(1, 1, 1, kv_tokens, device="cuda", dtype=torch.bool)

    def gpt_fast_2024(q, k, v):  # repeat the KV heads and mask over the whole cache
        k, v = (x.repeat_interleave(groups, dim=1) for x in (k, v))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=whole_cache)

    variants = {
        "flex": lambda q, k, v: flex(q, k, v, block_mask=block_mask, enable_gqa=True),
        "sdpa_gqa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
        "gpt_fast_2024": gpt_fast_2024,
    }
    for options in settings:  # kernel_options of the decoding kernel, tried in the same run
        variants["flex " + json.dumps(options)] = lambda q, k, v, options=options: flex(
            q, k, v, block_mask=block_mask, enable_gqa=True, kernel_options=options)
    with torch.no_grad():
        rows = measure(variants, variants["sdpa_gqa"], (q, k, v), backward=False, graph=True)
    kv_bytes = 2 * batch * kv_heads * kv_tokens * head_dim * q.element_size()
    return rows, kv_bytes


# --8<-- [start:gqa]
def peak_mib(fn, args, backward) -> float:
    """GPU memory one call allocates beyond its inputs, at its peak."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = fn(*args)
    if backward:
        out.backward(torch.ones_like(out))
        for x in args:
            x.grad = None
    del out
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2 ** 20


def gqa_case(batch, q_tokens, kv_tokens, q_heads=32, kv_heads=8, head_dim=128):
    """enable_gqa=True against repeat_interleave, which copies each KV head for its query heads."""
    training = q_tokens > 1
    q = randn(batch, q_heads, q_tokens, head_dim, grad=training)
    k, v = (randn(batch, kv_heads, kv_tokens, head_dim, grad=training) for _ in range(2))
    block_mask = create_block_mask(causal, None, None, q_tokens, kv_tokens) if training else \
        create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx >= 0, None, None, 1, kv_tokens)
    groups = q_heads // kv_heads
    variants = {
        "flex_enable_gqa": lambda q, k, v: flex(q, k, v, block_mask=block_mask, enable_gqa=True),
        "flex_repeat_interleave": lambda q, k, v: flex(
            q, k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1), block_mask=block_mask),
    }
    reference = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=training, enable_gqa=True)
    with torch.set_grad_enabled(training):
        rows = measure(variants, reference, (q, k, v), backward=training, graph=not training)
        for variant, fn in variants.items():
            if "failed" not in rows[variant]:
                rows[variant]["peak_mib"] = peak_mib(fn, (q, k, v), training)
    return rows
# --8<-- [end:gqa]


# --8<-- [start:end_to_end]
class Block(torch.nn.Module):
    """A pre-norm transformer block whose attention is a function of (q, k, v)."""

    def __init__(self, dim, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.norm1, self.norm2 = torch.nn.RMSNorm(dim), torch.nn.RMSNorm(dim)
        self.qkv, self.out = torch.nn.Linear(dim, 3 * dim, bias=False), torch.nn.Linear(dim, dim, bias=False)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim, bias=False), torch.nn.GELU(),
                                       torch.nn.Linear(4 * dim, dim, bias=False))

    def forward(self, x):
        batch, tokens, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, tokens, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        x = x + self.out(self.attention(q, k, v).transpose(1, 2).reshape(batch, tokens, dim))
        return x + self.mlp(self.norm2(x))


def language_model(attention, layers=4, dim=1024, heads=8, vocab=8192, seed=0):
    torch.manual_seed(seed)  # the same weights for every variant
    return torch.nn.Sequential(torch.nn.Embedding(vocab, dim), *(Block(dim, heads, attention) for _ in range(layers)),
                               torch.nn.RMSNorm(dim), torch.nn.Linear(dim, vocab, bias=False)).cuda()


def training_step(model, optimizer, tokens, labels):
    """One step: forward in bfloat16 autocast, next-token loss over the real tokens, backward, AdamW."""
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(tokens)
    loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def packed_and_padded(lengths, vocab=8192, seed=0):
    """The same documents as one packed row (labels: next token within each document) and padded
    to the longest, one row each (labels -100 past each document's end)."""
    generator = torch.Generator().manual_seed(seed)
    documents = [torch.randint(vocab, (n,), generator=generator) for n in lengths]
    ignore = torch.tensor([-100])
    packed = torch.cat(documents)[None]
    packed_labels = torch.cat([torch.cat([d[1:], ignore]) for d in documents])[None]
    padded = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    padded_labels = torch.full_like(padded, -100)
    for i, d in enumerate(documents):
        padded[i, :len(d)], padded_labels[i, :len(d) - 1] = d, d[1:]
    return [x.cuda() for x in (packed, packed_labels, padded, padded_labels)]
# --8<-- [end:end_to_end]


def end_to_end_case(lengths=None, kernel_options=None):
    """Training steps of a small language model on packed documents (FlexAttention, document mask)
    and on the same documents padded (SDPA, causal): the first loss of each must agree, then the
    step is timed; tokens/s counts the documents' tokens only."""
    lengths = lengths or document_lengths()
    packed, packed_labels, padded, padded_labels = packed_and_padded(lengths)
    document_ids, block_mask = packed_documents(lengths)
    variants = {
        "flex_packed": (lambda q, k, v: flex(q, k, v, block_mask=block_mask), packed, packed_labels),
        "flex_packed_flash": (lambda q, k, v: flex(q, k, v, block_mask=block_mask, kernel_options=FLASH),
                              packed, packed_labels),
        "sdpa_padded": (sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True), padded, padded_labels),
    }
    rows, first_losses = {}, {}
    for name, (attention, tokens, labels) in variants.items():
        row, model, optimizer = {}, None, None
        try:
            model = language_model(attention)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
            first_losses[name] = training_step(model, optimizer, tokens, labels).item()
            reference = first_losses.get("flex_packed", first_losses[name])
            row["loss"], row["loss_vs_reference"] = first_losses[name], abs(first_losses[name] - reference)
            if row["loss_vs_reference"] > 1e-2:
                raise AssertionError(f"first loss {first_losses[name]:.4f} differs from {reference:.4f}")
            row["step_ms"] = timed(lambda: training_step(model, optimizer, tokens, labels), rep=2000)
            row["tokens_per_s"] = sum(lengths) / row["step_ms"] * 1e3
            row["tokens_computed"] = tokens.numel()
        except Exception as e:
            row["failed"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
        rows[name] = row
        del model, optimizer
    return rows, {"documents": len(lengths), "longest": max(lengths), "tokens": sum(lengths),
                  "layers": 4, "dim": 1024, "heads": 8}


def ceilings(quick=False) -> dict:
    """The GPU's own limits, measured in the same run: dense bf16 matmul and device-to-device copy."""
    n = 4096 if quick else 8192
    a, b = randn(n, n), randn(n, n)
    matmul_ms = timed(lambda: a @ b)
    x = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    copy_ms = timed(lambda: y.copy_(x))
    return {"matmul_bf16_tflops": 2 * n ** 3 / matmul_ms / 1e9, "matmul_size": n,
            "copy_gb_per_s": 2 * x.numel() / copy_ms / 1e6}


# Forward-only settings of the flex kernel (the fwd_ prefix leaves the backward kernel as it is).
KERNEL_OPTIONS = [
    {"fwd_BLOCK_M": 128, "fwd_BLOCK_N": 128, "fwd_num_warps": 8, "fwd_num_stages": 2},
    {"fwd_BLOCK_M": 128, "fwd_BLOCK_N": 64, "fwd_num_warps": 8, "fwd_num_stages": 3},
    {"fwd_BLOCK_M": 64, "fwd_BLOCK_N": 128, "fwd_num_warps": 4, "fwd_num_stages": 3},
    {"USE_TMA": True},  # Hopper's tensor memory accelerator for the loads
    {"fwd_BLOCK_M": 128, "fwd_BLOCK_N": 128, "fwd_num_warps": 8, "fwd_num_stages": 2, "USE_TMA": True},
]


# The decoding kernel splits the KV cache over SPLIT_KV blocks (default: 2 per SM over batch x KV
# heads) and walks it in tiles of BLOCK_N keys.
DECODING_SETTINGS = [{"SPLIT_KV": 64}, {"SPLIT_KV": 128}, {"BLOCK_N": 128}, {"SPLIT_KV": 64, "BLOCK_N": 128}, FLASH]


def forward_settings_case(batch=4, tokens=4096, head_dim=128):
    """Causal forward: FlexAttention's default, kernel_options, max-autotune, against cuDNN SDPA."""
    q, k, v = (randn(batch, HEADS, tokens, head_dim) for _ in range(3))
    block_mask = create_block_mask(causal, None, None, tokens, tokens)
    autotuned = torch.compile(flex_attention, dynamic=False, mode="max-autotune-no-cudagraphs")
    variants = {"flex_default": lambda q, k, v: flex(q, k, v, block_mask=block_mask)}
    for options in KERNEL_OPTIONS:
        variants["flex " + json.dumps(options)] = \
            lambda q, k, v, options=options: flex(q, k, v, block_mask=block_mask, kernel_options=options)
    variants["flex_max_autotune"] = lambda q, k, v: autotuned(q, k, v, block_mask=block_mask)
    variants["sdpa_cudnn"] = sdpa(SDPBackend.CUDNN_ATTENTION, is_causal=True)
    with torch.no_grad():
        return measure(variants, sdpa(SDPBackend.FLASH_ATTENTION, is_causal=True), (q, k, v),
                       flops=causal_flops(batch, HEADS, tokens, head_dim), backward=False)


def suite(quick=False, log=print, save=lambda result: None) -> dict:
    """Every case in one run; save(result) after each, so that a run cut short keeps what it measured."""
    start = time.perf_counter()
    torch.manual_seed(0)
    result = {"quick": quick, "ceilings": ceilings(quick), "cases": []}
    peak, bandwidth = result["ceilings"]["matmul_bf16_tflops"], result["ceilings"]["copy_gb_per_s"]
    log(f"ceilings: matmul {peak:.0f} TFLOP/s, copy {bandwidth:.0f} GB/s")

    def add(group, shape, rows, floor_ms=None):
        for variant, row in rows.items():
            if floor_ms and "forward_ms" in row:
                row["fraction_of_floor"] = floor_ms / row["forward_ms"]
            elif "forward_tflops" in row:
                row["fraction_of_floor"] = row["forward_tflops"] / peak
            result["cases"].append({"group": group, "shape": shape, "variant": variant, **row})
            log(f"{group:12} {json.dumps(shape):60} {variant:16} "
                + " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
        result["seconds"] = time.perf_counter() - start
        save(result)

    shapes = [(4, 4096)] if quick else [(16, 1024), (8, 2048), (4, 4096), (2, 8192), (1, 16384)]
    for head_dim in (64, 128):
        for batch, tokens in shapes:
            add("training", {"batch": batch, "tokens": tokens, "heads": HEADS, "head_dim": head_dim},
                training_case(batch, tokens, head_dim))
    add("sliding", {"tokens": TOKENS, "window": 1024, "heads": HEADS, "head_dim": 128}, sliding_window_case())
    rows, shape = documents_case()
    add("documents", {**shape, "heads": HEADS, "head_dim": 128}, rows)
    if not quick:
        add("score_mod", {"tokens": 8192, "heads": HEADS, "head_dim": 128, "score_mod": "soft_cap"},
            score_mod_case())
        rows, shape = end_to_end_case()
        add("end_to_end", shape, rows)
        from snippets import gallery

        for mask in gallery.examples(4096):
            rows, shape = gallery_case(mask)
            add("gallery", shape, rows)
    models = {"8B": (32, 8)} if quick else {"8B": (32, 8), "70B": (64, 8)}
    for model, (q_heads, kv_heads) in models.items():
        for kv_tokens in ((16384,) if quick else (4096, 16384, 65536)):
            for batch in ((1,) if quick else (1, 8)):
                rows, kv_bytes = decoding_case(batch, kv_tokens, q_heads, kv_heads)
                add("decoding", {"model": model, "q_heads": q_heads, "kv_heads": kv_heads, "head_dim": 128,
                                 "kv_tokens": kv_tokens, "batch": batch, "kv_bytes": kv_bytes},
                    rows, floor_ms=kv_bytes / bandwidth / 1e6)
    for batch, q_tokens, kv_tokens in ((4, 4096, 4096), (8, 1, 16384)):
        add("gqa", {"batch": batch, "q_tokens": q_tokens, "kv_tokens": kv_tokens, "q_heads": 32, "kv_heads": 8,
                    "head_dim": 128}, gqa_case(batch, q_tokens, kv_tokens))
    if not quick:
        rows, kv_bytes = decoding_case(1, 16384, 32, 8, settings=DECODING_SETTINGS)
        add("decoding_settings", {"model": "8B", "q_heads": 32, "kv_heads": 8, "head_dim": 128,
                                  "kv_tokens": 16384, "batch": 1, "kv_bytes": kv_bytes},
            rows, floor_ms=kv_bytes / bandwidth / 1e6)
        add("forward_settings", {"batch": 4, "tokens": 4096, "heads": HEADS, "head_dim": 128},
            forward_settings_case())
    result["complete"] = True
    save(result)
    return result


def main(argv) -> int:
    parser = ArgumentParser(prog="python -m snippets.bench",
                            description="Runs the benchmark suite and prints each result; "
                                        "`make bench` records it for the performance page.")
    parser.add_argument("--quick", action="store_true", help="one shape per group (under 2 minutes)")
    parser.add_argument("--json", metavar="FILE", help="also write the results to FILE as JSON")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise UsageError("no CUDA GPU", "run the benchmarks on a machine with an NVIDIA GPU (make bench)")

    def save(result):
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")

    result = suite(args.quick, save=save)
    print(f"{len(result['cases'])} results in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
