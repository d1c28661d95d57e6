"""The BlockMask's life: what it holds, building it once and reusing it, building it faster with
torch.compile, and building one from block indices.

    python -m snippets.blockmask      # a causal BlockMask at 1000 tokens, its blocks, and build times on the CPU
"""
from snippets._cli import UsageError, run

# --8<-- [start:holds]
import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def describe(block_mask):
    """What a BlockMask holds, per (sample, head) and row of query blocks: the key blocks to compute with
    the mask_mod (kv_num_blocks, kv_indices) and those to compute without it, every position allowed
    (full_kv_num_blocks, full_kv_indices)."""
    partial, full = block_mask.kv_num_blocks[0, 0], block_mask.full_kv_num_blocks[0, 0]
    return "\n".join([
        f"shape {tuple(block_mask.shape)}, BLOCK_SIZE {block_mask.BLOCK_SIZE}, "
        f"sparsity() {block_mask.sparsity():.1f}, skipped blocks {100 * (1 - block_mask.to_dense().float().mean()):.2f}%",
        f"blocks computed with the mask_mod, per row:    {partial.tolist()}",
        f"blocks computed without the mask_mod, per row: {full.tolist()}",
        block_mask.to_string(grid_size=(8, 8)).strip("\n"),
    ])
# --8<-- [end:holds]


# --8<-- [start:once]
import functools


@functools.lru_cache(maxsize=16)
def causal_block_mask(tokens, device="cpu"):
    """One causal BlockMask per length and device, built on the first call and returned again after:
    every layer, and every step at that length, uses the same object."""
    return create_block_mask(causal, None, None, tokens, tokens, device=device)
# --8<-- [end:once]


# --8<-- [start:build_times]
import time

compiled_create_block_mask = torch.compile(create_block_mask)  # PyTorch 2.13 deprecates _compile=True for this


def build_ms(build, tokens, repeats=5, device="cpu"):
    """Milliseconds to build a causal BlockMask with `build` on `device`: (median, fastest, slowest) of
    `repeats` builds, after one build that is not counted (where the compiled builder compiles for a new
    length). On a GPU, each build is timed until the GPU has finished it."""
    def build_once():
        start = time.perf_counter()
        build(causal, None, None, tokens, tokens, device=device)
        if device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - start) * 1e3

    build_once()
    times = sorted(build_once() for _ in range(repeats))
    return times[len(times) // 2], times[0], times[-1]


def build_times(lengths=(1024, 4096, 16384), device="cpu"):
    where = torch.cuda.get_device_name() if device == "cuda" else "the CPU"
    lines = [f"causal BlockMask on {where}, ms: median (fastest-slowest) of 5 builds, and eager / compiled"]
    for tokens in lengths:
        eager = build_ms(create_block_mask, tokens, device=device)
        compiled = build_ms(compiled_create_block_mask, tokens, device=device)
        lines.append(f"{tokens:6} tokens: eager {eager[0]:8.1f} ({eager[1]:.1f}-{eager[2]:.1f}), "
                     f"torch.compile {compiled[0]:7.1f} ({compiled[1]:.1f}-{compiled[2]:.1f}), "
                     f"{eager[0] / compiled[0]:5.1f}x")
    return "\n".join(lines)


GPU_LENGTHS = (4096, 16384, 65536)  # the lengths timed on a GPU
# --8<-- [end:build_times]


# --8<-- [start:from_kv_blocks]
def from_blocks(block_mask, mask_mod, q_len, kv_len):
    """A BlockMask from block indices alone, here another BlockMask's."""
    return BlockMask.from_kv_blocks(block_mask.kv_num_blocks, block_mask.kv_indices,
                                    block_mask.full_kv_num_blocks, block_mask.full_kv_indices,
                                    BLOCK_SIZE=block_mask.BLOCK_SIZE, mask_mod=mask_mod, seq_lengths=(q_len, kv_len))
# --8<-- [end:from_kv_blocks]


# --8<-- [start:adjust]
from torch.nn.attention.flex_attention import flex_attention


def refused(block_mask, tokens):
    """What FlexAttention answers when given a BlockMask built for more tokens."""
    q = torch.randn(1, 1, tokens, 16)
    try:
        flex_attention(q, q, q, block_mask=block_mask)
    except ValueError as e:
        return f"ValueError: {e}"
    return "no error"


def sliding_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 256)


def cropped(mask_mod, q_len, kv_len, attention=flex_attention):
    """A BlockMask built at 1024 x 1024, cropped with _adjust to q_len x kv_len and used there: the largest
    difference from SDPA given the mask at q_len x kv_len, or the error _adjust stops with."""
    q, k, v = (torch.randn(1, 2, n, 16) for n in (q_len, kv_len, kv_len))
    wanted = mask_mod(0, 0, torch.arange(q_len)[:, None], torch.arange(kv_len)[None, :])
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=wanted)
    try:
        block_mask = create_block_mask(mask_mod, None, None, 1024, 1024, device="cpu")._adjust(q_len, kv_len)
        got = attention(q, k, v, block_mask=block_mask)
    except (IndexError, ValueError) as e:  # ValueError: where _adjust keeps whole blocks (PyTorch 2.11)
        return f"{type(e).__name__}: {e}"
    return f"largest difference from SDPA with the mask {(got - sdpa).abs().max().item():.1e}"
# --8<-- [end:adjust]


def main(argv) -> int:
    if argv:
        raise UsageError(f"unexpected arguments {' '.join(argv)!r}", "python -m snippets.blockmask")
    # --8<-- [start:print_holds]
    print(describe(create_block_mask(causal, None, None, 1000, 1000, device="cpu")))
    # --8<-- [end:print_holds]
    # --8<-- [start:print_once]
    print(causal_block_mask(4096) is causal_block_mask(4096), causal_block_mask.cache_info())
    # --8<-- [end:print_once]
    # --8<-- [start:print_build_times]
    print(build_times())
    # --8<-- [end:print_build_times]
    # --8<-- [start:print_gpu_build_times]
    if torch.cuda.is_available():
        print(build_times(GPU_LENGTHS, device="cuda"))
    # --8<-- [end:print_gpu_build_times]
    # --8<-- [start:print_from_kv_blocks]
    block_mask = create_block_mask(causal, None, None, 1000, 1000, device="cpu")
    rebuilt = from_blocks(block_mask, causal, 1000, 1000)
    print(rebuilt.shape, torch.equal(rebuilt.to_dense(), block_mask.to_dense()))
    # --8<-- [end:print_from_kv_blocks]
    # --8<-- [start:print_refused]
    print(refused(create_block_mask(causal, None, None, 1024, 1024, device="cpu"), 700))
    # --8<-- [end:print_refused]
    # --8<-- [start:print_adjust]
    torch.manual_seed(0)
    compiled = torch.compile(flex_attention)
    for mask_mod in (causal, sliding_window):
        for q_len, kv_len in ((700, 700), (500, 1024), (1024, 500)):
            print(f"{mask_mod.__name__}, _adjust({q_len}, {kv_len}): {cropped(mask_mod, q_len, kv_len, compiled)}")
    # --8<-- [end:print_adjust]
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
