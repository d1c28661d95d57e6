"""Compiling FlexAttention ahead of the first real step, and where the compiled kernels are cached.

    python -m snippets.kernels            # print the cache locations
    python -m snippets.kernels warm-up    # compile for a few shapes, timing first and second calls
    python -m snippets.kernels files      # the files in Inductor's cache, counted by kind (suffix)
"""
import os
import time

from snippets._cli import ArgumentParser, run


# --8<-- [start:cache_dirs]
from torch._inductor.runtime.cache_dir_utils import cache_dir, triton_cache_dir


def cache_locations() -> dict:
    """Where torch.compile keeps what it builds for FlexAttention."""
    return {
        "inductor": cache_dir(),  # $TORCHINDUCTOR_CACHE_DIR, default <temp dir>/torchinductor_<user>
        "triton": triton_cache_dir(0),  # $TRITON_CACHE_DIR, default <inductor>/triton/0
    }
# --8<-- [end:cache_dirs]


# --8<-- [start:warm_up]
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


compiled = torch.compile(flex_attention)


def warm_up(shapes, dtype=torch.bfloat16, device="cuda", backward=True):
    """Compile for each (batch, heads, tokens, head_dim) the run will use, before step one."""
    for batch, heads, tokens, head_dim in shapes:
        q, k, v = (
            torch.randn(batch, heads, tokens, head_dim, device=device, dtype=dtype,
                        requires_grad=backward)
            for _ in range(3)
        )
        block_mask = create_block_mask(causal, None, None, tokens, tokens, device=device)
        out = compiled(q, k, v, block_mask=block_mask)
        if backward:
            out.sum().backward()
# --8<-- [end:warm_up]


def timed_calls(shape=(1, 4, 1024, 64), dtype=torch.bfloat16, device="cuda", backward=True):
    """Seconds taken by the first call (compiles) and by a second call of the same shape."""
    times = []
    for _ in range(2):
        start = time.perf_counter()
        warm_up([shape], dtype=dtype, device=device, backward=backward)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times


def cache_files(root) -> dict:
    """Count of files by suffix under a cache directory."""
    counts = {}
    for _, _, files in os.walk(root):
        for name in files:
            suffix = os.path.splitext(name)[1] or name
            counts[suffix] = counts.get(suffix, 0) + 1
    return dict(sorted(counts.items()))


def main(argv) -> int:
    parser = ArgumentParser(prog="python -m snippets.kernels")
    parser.add_argument("command", nargs="?", choices=["where", "warm-up", "files"], default="where")
    args = parser.parse_args(argv)
    for name, path in cache_locations().items():
        print(f"{name:9} {path}")
    if args.command == "warm-up":
        cuda = torch.cuda.is_available()
        first, second = timed_calls(
            device="cuda" if cuda else "cpu",
            dtype=torch.bfloat16 if cuda else torch.float32,
            backward=cuda,  # FlexAttention has no backward on CPU
        )
        print(f"first call {first:.1f} s, second call {second * 1000:.1f} ms")
    if args.command == "files":
        for suffix, count in cache_files(cache_locations()["inductor"]).items():
            if suffix.startswith("."):  # kinds of file; the others are named by their hash
                print(f"{suffix:12} {count}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
