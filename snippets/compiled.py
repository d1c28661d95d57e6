"""FlexAttention in a compiled model: a transformer block trained a few steps with flex_attention compiled
alone, with the whole block compiled, and with CUDA graphs; how many graphs Dynamo compiled, its graph breaks,
the first step (compiling included), the later steps, and the losses against the same block on SDPA.

    python -m snippets.compiled    # needs a CUDA GPU
"""
from snippets._cli import UsageError, run

# --8<-- [start:block]
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

DIM, HEADS, BATCH, TOKENS = 1024, 8, 4, 2048  # head dimension 128


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


class Block(nn.Module):
    """A pre-norm transformer block. attention: flex_attention, a compiled flex_attention, or "sdpa" (causal
    scaled_dot_product_attention, the reference); build_mask=True: the block builds its causal BlockMask itself."""

    def __init__(self, attention=flex_attention, build_mask=False):
        super().__init__()
        self.attention, self.build_mask = attention, build_mask
        self.norm1, self.norm2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.out = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x, block_mask=None):
        batch, tokens, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, tokens, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            if self.build_mask:
                block_mask = create_block_mask(causal, None, None, tokens, tokens, device=x.device)
            y = self.attention(q, k, v, block_mask=block_mask)
        x = x + self.out(y.transpose(1, 2).reshape(batch, tokens, DIM))
        return x + self.mlp(self.norm2(x))
# --8<-- [end:block]


# --8<-- [start:train]
import statistics
import time

from torch._dynamo.utils import counters
from torch._inductor import metrics

STEPS = 15


def train(model, lengths=(TOKENS,), mask="once", steps=STEPS) -> dict:
    """Train the block `steps` AdamW steps, in bfloat16 autocast, on one fixed batch per length (lengths taken
    in turn; a shorter one is the start of a TOKENS-long one). mask: "once" (built before the first step and
    reused), "each step" (rebuilt before every step),
    "in the block" (the block builds it), "padded" (every length padded to TOKENS, its BlockMask rebuilt
    each step to leave the padding out, the length a tensor its mask_mod reads) or "padded, int length" (the
    same, the length a Python int). Returns the losses, the seconds of each step, and what Dynamo and
    Inductor counted: graphs compiled, graph breaks, kernels generated, CUDA graphs recorded and skipped."""
    torch._dynamo.reset()
    counters.clear()
    metrics.reset()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    block_mask, losses, seconds = None, [], []
    with torch.compiler.config.patch(force_disable_caches=True):  # compiled from nothing: no earlier row's cache
        for step in range(steps):
            length = lengths[step % len(lengths)]
            tokens = TOKENS if mask.startswith("padded") else length
            g = torch.Generator(device="cuda").manual_seed(length)
            x, target = (torch.randn(BATCH, TOKENS, DIM, device="cuda", generator=g)[:, :tokens].contiguous()
                         for _ in range(2))
            torch.cuda.synchronize()
            start = time.perf_counter()
            if mask.startswith("padded"):
                valid = length if mask == "padded, int length" else torch.tensor(length, device="cuda")

                def causal_unpadded(b, h, q_idx, kv_idx):
                    return (q_idx >= kv_idx) & (kv_idx < valid)
                block_mask = create_block_mask(causal_unpadded, None, None, tokens, tokens, device="cuda")
            elif mask == "each step" or (mask == "once" and (block_mask is None or block_mask.shape[-1] != tokens)):
                block_mask = create_block_mask(causal, None, None, tokens, tokens, device="cuda")
            with torch.autocast("cuda", torch.bfloat16):
                loss = F.mse_loss(model(x, block_mask)[:, :length].float(), target[:, :length])
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
            losses.append(loss.item())
    return {"losses": losses, "seconds": seconds, "graphs": counters["stats"]["unique_graphs"],
            "breaks": sum(counters["graph_break"].values()), "kernels": metrics.generated_kernel_count,
            "recorded": counters["inductor"]["cudagraph_recorded_non_static_inputs"] > 0,
            "skips": counters["inductor"]["cudagraph_skips"]}


def new_block(**kwargs):
    torch.manual_seed(0)  # the same initial weights in every row
    return Block(**kwargs).cuda()


def row(name, model, reference, **kwargs) -> str:
    """One line of a table: `model` trained, against `reference` (the SDPA block's losses, same lengths)."""
    result = train(model, **kwargs)
    # after each length's first three steps: compiling, and warming up and recording CUDA graphs
    later = [s * 1e3 for s in result["seconds"][3 * len(set(kwargs.get("lengths", [TOKENS]))):]]
    gap = max(abs(a - b) / b for a, b in zip(result["losses"], reference, strict=True))
    return (f"{name:44} {result['graphs']:>6} {result['breaks']:>6} {result['kernels']:>7} "
            f"{'yes' if result['recorded'] else 'no':>11} {result['skips']:>5} "
            f"{result['seconds'][0]:>8.1f} {statistics.median(later):>7.1f} {min(later):>5.1f}-{max(later):<5.1f} "
            f"{result['losses'][0]:.3f} -> {result['losses'][-1]:.3f}  {gap:.0e}")


HEADER = (f"{'':44} {'graphs':>6} {'breaks':>6} {'kernels':>7} {'CUDA graphs':>11} {'skips':>5} {'first s':>8} "
          f"{'later ms, median':>19} {'loss':14}  vs SDPA")
# --8<-- [end:train]


# --8<-- [start:ways]
WAYS = {
    "not compiled": lambda: new_block(),
    "flex_attention compiled alone": lambda: new_block(attention=torch.compile(flex_attention)),
    "whole block compiled": lambda: torch.compile(new_block()),
    "whole block, CUDA graphs": lambda: torch.compile(new_block(), mode="reduce-overhead"),
}


def ways_table() -> str:
    reference = train(new_block(attention="sdpa"))["losses"]
    return "\n".join([HEADER] + [row(name, make(), reference) for name, make in WAYS.items()])
# --8<-- [end:ways]


# --8<-- [start:changes]
LENGTHS = (1024, 1536, 2048)
CHANGES = {  # name: (the model, how train() varies the BlockMask and the lengths)
    "CUDA graphs, BlockMask each step": (lambda: torch.compile(new_block(), mode="reduce-overhead"),
                                         {"mask": "each step"}),
    "CUDA graphs, BlockMask in the block": (
        lambda: torch.compile(new_block(build_mask=True), mode="reduce-overhead"), {"mask": "in the block"}),
    "compiled, 3 lengths": (lambda: torch.compile(new_block()), {"lengths": LENGTHS}),
    "CUDA graphs, 3 lengths": (lambda: torch.compile(new_block(), mode="reduce-overhead"), {"lengths": LENGTHS}),
    "CUDA graphs, 3 lengths, BlockMask in block": (
        lambda: torch.compile(new_block(build_mask=True), mode="reduce-overhead"),
        {"lengths": LENGTHS, "mask": "in the block"}),
    "CUDA graphs, 3 lengths padded": (lambda: torch.compile(new_block(), mode="reduce-overhead"),
                                      {"lengths": LENGTHS, "mask": "padded"}),
    "CUDA graphs, 3 lengths padded, int": (lambda: torch.compile(new_block(), mode="reduce-overhead"),
                                           {"lengths": LENGTHS, "mask": "padded, int length"}),
}


def changes_table() -> str:
    references = {}
    lines = [HEADER]
    for name, (make, kwargs) in CHANGES.items():
        lengths = kwargs.get("lengths", (TOKENS,))
        if lengths not in references:
            references[lengths] = train(new_block(attention="sdpa"), lengths)["losses"]
        try:
            lines.append(row(name, make(), references[lengths], **kwargs))
        except Exception as error:
            lines.append(f"{name:44} {type(error).__name__}: {str(error).split(':')[0].strip()}")  # its kind
    return "\n".join(lines)
# --8<-- [end:changes]


def main(argv) -> int:
    if argv:
        raise UsageError(f"unexpected arguments {' '.join(argv)!r}", "python -m snippets.compiled")
    if not torch.cuda.is_available():
        raise UsageError("no CUDA GPU", "run it on a machine with an NVIDIA GPU")
    # --8<-- [start:run]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(ways_table())
    print(changes_table())
    # --8<-- [end:run]
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
