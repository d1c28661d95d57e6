"""kernel_options: the keys FlexAttention takes, which ones it checks, and what its promises cost when
they are not kept.

    python -m snippets.kernel_options    # the keys, and each option tried on the CPU (and on a CUDA GPU)
"""
from snippets._cli import UsageError, run

# --8<-- [start:fields]
import torch
from torch.nn.attention.flex_attention import FlexKernelOptions, create_block_mask, flex_attention


def fields():
    """The keys kernel_options takes, as this PyTorch's FlexKernelOptions declares them."""
    return sorted(FlexKernelOptions.__annotations__)
# --8<-- [end:fields]


# --8<-- [start:tries]
import re


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def later_keys(b, h, q_idx, kv_idx):
    """Each query sees the keys after it, and the last key: every row has at least one key."""
    return (kv_idx > q_idx) | (kv_idx == 511)


def first_and_last_keys(b, h, q_idx, kv_idx):
    """Keys 0-127 and 384-511 of 512: blocks of 128 keys 0 and 3, not contiguous."""
    return (kv_idx < 128) | (kv_idx >= 384)


def add_bias(score, b, h, q_idx, kv_idx):
    return score - 0.05 * (q_idx - kv_idx)


TRIES = [  # (options, mask_mod, score_mod)
    ({"BACKEND": "flash"}, causal, None),
    ({"OUTPUT_LOGSUMEXP": True}, causal, None),
    ({"BLOCK_MM": 64}, causal, None),
    ({"backend": "FLASH"}, causal, None),
    ({"BLOCK_M": 48}, causal, None),
    ({"BLOCK_M": 64, "BLOCK_N": 64}, causal, None),
    ({}, later_keys, None),
    ({"ROWS_GUARANTEED_SAFE": True}, later_keys, None),
    ({"ROWS_GUARANTEED_SAFE": True}, causal, None),
    ({}, first_and_last_keys, None),
    ({"BLOCKS_ARE_CONTIGUOUS": True}, first_and_last_keys, None),
    ({"BLOCKS_ARE_CONTIGUOUS": True}, causal, None),
    ({}, causal, add_bias),
    ({"PRESCALE_QK": True}, causal, add_bias),
    ({"PRESCALE_QK": True}, causal, None),
]


def outcomes(device, dtype=torch.float32, head_dim=64, tokens=512, heads=2):
    """For each try: compiled FlexAttention's output with those kernel_options, or the error it raises,
    and eager FlexAttention's output without options."""
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, tokens, head_dim, generator=generator).to(device, dtype) for _ in range(3))
    rows = []
    for options, mask_mod, score_mod in TRIES:
        torch._dynamo.reset()  # a fresh compile for each set of options, whatever the try before did
        block_mask = create_block_mask(mask_mod, None, None, tokens, tokens, device=device)
        try:
            got = torch.compile(flex_attention)(q, k, v, score_mod=score_mod, block_mask=block_mask,
                                                kernel_options=options)
        except Exception as e:
            got = e
        rows.append((options, mask_mod, score_mod, got, flex_attention(q, k, v, score_mod=score_mod,
                                                                          block_mask=block_mask)))
    return rows


def result(got, want) -> str:
    """The error's type and the last error its message names, or the largest difference from eager
    FlexAttention and the rows that hold a NaN."""
    if isinstance(got, Exception):
        causes = re.findall(r"\b([A-Z]\w*Error\b(?:: |\()[^\n]*)", str(got)) or [str(got).splitlines()[0]]
        return f"{type(got).__name__}: {causes[-1][:150]}"
    nan_rows = int(got.isnan().any(dim=-1).any(dim=1).sum())
    difference = (got.float() - want.float()).nan_to_num(0).abs().max().item()
    return f"largest difference {difference:.1e}" + (f", NaN in {nan_rows} of {got.shape[2]} rows" if nan_rows else "")


def describe(rows, device, dtype=torch.float32, head_dim=64):
    where = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    lines = [f"{where}, torch {torch.__version__}, {str(dtype)[6:]}, head dim {head_dim}, "
             f"{rows[0][4].shape[2]} tokens, against eager FlexAttention"]
    for options, mask_mod, score_mod, got, want in rows:
        what = f"{options} {mask_mod.__name__}" + (f" + {score_mod.__name__}" if score_mod else "")
        lines.append(f"{what:56} {result(got, want)}")
    return "\n".join(lines)
# --8<-- [end:tries]


def main(argv) -> int:
    if argv:
        raise UsageError(f"unexpected arguments {' '.join(argv)!r}", "python -m snippets.kernel_options")
    # --8<-- [start:print_fields]
    print(len(fields()), "keys:", ", ".join(fields()))
    # --8<-- [end:print_fields]
    # --8<-- [start:print_cpu]
    print(describe(outcomes("cpu"), "cpu"))
    # --8<-- [end:print_cpu]
    # --8<-- [start:print_gpu]
    if torch.cuda.is_available():
        print(describe(outcomes("cuda"), "cuda"))
    # --8<-- [end:print_gpu]
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
