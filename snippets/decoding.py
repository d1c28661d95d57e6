"""FlexDecoding: generating tokens with a static KV cache, on a tiny model with random weights.

    python -m snippets.decoding               # generate; check every step against the whole sequence
    python -m snippets.decoding --recompiles  # compiles of a decoding step: Python int vs tensor offset
    python -m snippets.decoding --kernels     # which kernel the compiler picks, by query length (CUDA)
"""
from snippets._cli import ArgumentParser, UsageError, run

# --8<-- [start:block_mask]
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

MAX_TOKENS = 512  # the KV cache's length: every step reads a cache of this shape


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def cache_mask(device):
    """Built once for the whole cache and reused at every step: building one costs far more
    than a decoding step."""
    return create_block_mask(causal, None, None, MAX_TOKENS, MAX_TOKENS, device=device)
# --8<-- [end:block_mask]


# --8<-- [start:offset]
def offset_by(mask_mod, offset):
    """mask_mod for queries that start at position `offset`, a tensor: query 0 is token `offset`."""
    def shifted(b, h, q_idx, kv_idx):
        return mask_mod(b, h, q_idx + offset, kv_idx)
    return shifted
# --8<-- [end:offset]


# --8<-- [start:slice]
def step_mask(block_mask, position):
    """The BlockMask of one query token at `position` (a 1-element tensor) against the whole cache."""
    row = block_mask[:, :, position // block_mask.BLOCK_SIZE[0]]  # the row of blocks holding it
    row.mask_mod = offset_by(block_mask.mask_mod, position[0])  # slicing drops the mask_mod
    row.seq_lengths = (1, block_mask.seq_lengths[1])  # one query, the whole cache
    return row
# --8<-- [end:slice]


# --8<-- [start:model]
class Attention(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wkv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        cache = (1, kv_heads, MAX_TOKENS, self.head_dim)  # allocated once: its shape never changes
        self.register_buffer("k_cache", torch.zeros(cache), persistent=False)
        self.register_buffer("v_cache", torch.zeros(cache), persistent=False)

    def forward(self, x, positions, block_mask):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.wkv(x).view(b, t, 2 * self.kv_heads, self.head_dim).transpose(1, 2).chunk(2, dim=1)
        if block_mask is None:  # the reference: the whole sequence at once, no cache
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            self.k_cache[:, :, positions] = k  # written in place at the new positions
            self.v_cache[:, :, positions] = v
            out = flex_attention(q, self.k_cache, self.v_cache, block_mask=block_mask, enable_gqa=True)
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))


class TinyLM(nn.Module):
    """Random weights: what is tested is the attention and the cache, not the words."""

    def __init__(self, vocab=256, dim=128, heads=8, kv_heads=2, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(MAX_TOKENS, dim)
        self.layers = nn.ModuleList(Attention(dim, heads, kv_heads) for _ in range(layers))
        self.out = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens, positions, block_mask=None):
        x = self.embed(tokens) + self.position(positions)
        for layer in self.layers:
            x = x + layer(F.rms_norm(x, x.shape[-1:]), positions, block_mask)
        return self.out(F.rms_norm(x, x.shape[-1:]))
# --8<-- [end:model]


# --8<-- [start:loop]
def decode_step(model, token, position, block_mask):
    return model(token, position, step_mask(block_mask, position))[:, -1]


def generate(model, prompt, new_tokens, compiled=True):
    """Greedy decoding: one compiled step, reused for every token."""
    device = prompt.device
    block_mask = cache_mask(device)  # once
    prefill_mask = create_block_mask(causal, None, None, prompt.size(1), MAX_TOKENS, device=device)
    logits = [model(prompt, torch.arange(prompt.size(1), device=device), prefill_mask)[:, -1]]
    step = torch.compile(decode_step) if compiled else decode_step
    position = torch.tensor([prompt.size(1)], device=device)  # a tensor, updated in place
    tokens = [logits[-1].argmax(-1, keepdim=True)]
    for _ in range(new_tokens - 1):
        logits.append(step(model, tokens[-1], position, block_mask))
        tokens.append(logits[-1].argmax(-1, keepdim=True))
        position += 1  # same tensor, new value: no recompile
    return torch.cat(tokens, dim=1), torch.stack(logits, dim=1)
# --8<-- [end:loop]


# --8<-- [start:check]
def tiny_model(device, seed=0):
    torch.manual_seed(seed)
    return TinyLM().to(device).eval()


def check_generation(device, compiled=True, prompt_tokens=100, new_tokens=60) -> dict:
    """Generate with the cache, then run the whole sequence at once (SDPA, no cache) and compare
    the logits of every generated position; count the compiles of the decoding step. The steps run
    at positions 100 to 158: across the boundary between the cache's first two blocks, at 128."""
    from torch._dynamo.utils import counters

    model = tiny_model(device)
    prompt = torch.randint(0, 256, (1, prompt_tokens), device=device)
    torch._dynamo.reset()
    counters.clear()
    with torch.no_grad():
        tokens, logits = generate(model, prompt, new_tokens, compiled)
        sequence = torch.cat([prompt, tokens[:, :-1]], dim=1)
        want = model(sequence, torch.arange(sequence.size(1), device=device))[:, prompt_tokens - 1:]
    error = ((logits - want).norm() / want.norm()).item()
    return {"tokens": tokens[0].tolist(), "error": error, "same_tokens": torch.equal(want.argmax(-1), tokens),
            "compiled": compiled, "compiles": counters["frames"]["ok"],
            "prompt_tokens": prompt_tokens, "length": sequence.size(1)}


def describe_generation(r) -> str:
    return (f"{len(r['tokens'])} tokens, same as without a cache: {r['same_tokens']}, logits differ by {r['error']:.1e}"
            + (f", compiles of the decoding step: {r['compiles']}" if r["compiled"] else ""))


def compile_on_the_cpu() -> str:
    """The compiled decoding loop on the CPU: the error it stops with, in one line."""
    from torch._inductor.exc import InductorError

    try:
        check_generation("cpu", compiled=True)
    except InductorError as e:
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"
    return "compiled on the CPU: no error"
# --8<-- [end:check]


# --8<-- [start:int_offset]
def step_mask_int(block_mask, position: int):
    """The same mask with the position as a Python int: compiled code specializes on its value."""
    row = block_mask[:, :, position // block_mask.BLOCK_SIZE[0]]
    row.mask_mod = offset_by(block_mask.mask_mod, position)
    row.seq_lengths = (1, block_mask.seq_lengths[1])
    return row
# --8<-- [end:int_offset]


# --8<-- [start:count_compiles]
RECOMPILE_LIMIT = 8  # PyTorch's default torch._dynamo.config.recompile_limit; the benchmarks raise it


def count_compiles(offset, dynamic=None, steps=12, device="cpu") -> dict:
    """Run compiled flex_attention for `steps` decoding steps, the position held in a tensor
    updated in place or passed as a Python int; count Dynamo's compiles."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    block_mask = cache_mask(device)
    q = torch.randn(1, 8, 1, 16, device=device)
    k, v = (torch.randn(1, 2, MAX_TOKENS, 16, device=device) for _ in range(2))
    torch._dynamo.reset()
    counters.clear()
    attend = torch.compile(flex_attention, dynamic=dynamic)
    position = torch.tensor([0], device=device)
    with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
        for i in range(steps):
            if offset == "tensor":
                position.fill_(i)
                mask = step_mask(block_mask, position)
            else:
                mask = step_mask_int(block_mask, i)
            attend(q, k, v, block_mask=mask, enable_gqa=True)
    return {"compiles": counters["frames"]["ok"],
            "recompile_limit_hit": any("recompile_limit" in k for k in counters["unimplemented"])}


def compile_table(device="cpu", steps=10) -> str:
    lines = [f"position        dynamic  compiles in {steps} steps  recompile limit hit"]
    for offset in ("tensor", "int"):
        for dynamic in (None, False):
            r = count_compiles(offset, dynamic, steps, device)
            lines.append(f"{offset + ' offset':14}  {str(dynamic):7}  {r['compiles']:>19}  {r['recompile_limit_hit']}")
    return "\n".join(lines)
# --8<-- [end:count_compiles]


# --8<-- [start:slicing_errors]
def slicing_errors(device="cpu") -> dict:
    """What flex_attention says when a sliced BlockMask keeps what slicing gave it."""
    block_mask = cache_mask(device)
    position = torch.tensor([300], device=device)
    q = torch.randn(1, 8, 1, 16, device=device)
    k = torch.randn(1, 8, MAX_TOKENS, 16, device=device)
    as_sliced = block_mask[:, :, position // block_mask.BLOCK_SIZE[0]]
    with_mask_mod = block_mask[:, :, position // block_mask.BLOCK_SIZE[0]]
    with_mask_mod.mask_mod = offset_by(block_mask.mask_mod, position[0])
    errors = {}
    for name, mask in (("mask_mod", as_sliced), ("seq_lengths", with_mask_mod)):
        try:
            flex_attention(q, k, k, block_mask=mask)
            errors[name] = "no error"
        except Exception as e:
            errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return errors


def describe_slicing_errors(errors) -> str:
    """Each error in one line, cut at 160 characters."""
    return "\n".join(f"without {name}: {error[:160]}" for name, error in errors.items())
# --8<-- [end:slicing_errors]


# --8<-- [start:kernels]
def kernel_for(q_tokens, q_heads=8, kv_heads=8, mask_heads=1, kv_tokens=1024) -> str:
    """Compile flex_attention for these shapes and read which kernel the compiler generated:
    the decoding kernel splits the KV cache (SPLIT_KV) and adds a kernel that joins the splits."""
    from torch._inductor.utils import run_and_get_code

    q = torch.randn(1, q_heads, q_tokens, 64, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, kv_heads, kv_tokens, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    last_queries = offset_by(causal, kv_tokens - q_tokens)  # the queries are the newest tokens
    block_mask = create_block_mask(last_queries, 1, mask_heads, q_tokens, kv_tokens, device="cuda")
    torch._dynamo.reset()
    _, code = run_and_get_code(torch.compile(flex_attention), q, k, v, block_mask=block_mask,
                               enable_gqa=q_heads != kv_heads)
    return "FlexDecoding" if "SPLIT_KV" in "".join(code) else "FlexAttention"


KERNEL_CASES = [  # (query tokens, query heads, KV heads, BlockMask heads)
    (1, 8, 8, 1), (2, 8, 8, 1), (16, 8, 8, 1), (64, 8, 8, 1), (127, 8, 8, 1), (128, 8, 8, 1), (256, 8, 8, 1),
    (1, 8, 8, 8), (1, 32, 8, 1), (16, 32, 8, 1), (1, 24, 8, 1), (1, 32, 8, 32),
]


def kernel_table() -> str:
    lines = ["query tokens  query heads  KV heads  BlockMask heads  kernel"]
    for q_tokens, q_heads, kv_heads, mask_heads in KERNEL_CASES:
        kernel = kernel_for(q_tokens, q_heads, kv_heads, mask_heads)
        lines.append(f"{q_tokens:>12}  {q_heads:>11}  {kv_heads:>8}  {mask_heads:>15}  {kernel}")
    return "\n".join(lines)
# --8<-- [end:kernels]


def main(argv) -> int:
    parser = ArgumentParser(prog="python -m snippets.decoding", description=__doc__.splitlines()[0])
    parser.add_argument("--recompiles", action="store_true", help="count compiles: int vs tensor offset")
    parser.add_argument("--kernels", action="store_true", help="which kernel each query length gets (CUDA)")
    args = parser.parse_args(argv)
    if args.kernels:
        if not torch.cuda.is_available():
            raise UsageError("no CUDA GPU: the kernel choice is made by the GPU compiler",
                             "run `python -m snippets.decoding --kernels` on a machine with an NVIDIA GPU")
        # --8<-- [start:print_kernels]
        if torch.cuda.is_available():
            print(kernel_table())
        # --8<-- [end:print_kernels]
    elif args.recompiles:
        # --8<-- [start:print_recompiles_gpu]
        if torch.cuda.is_available():
            print(compile_table("cuda"))
        # --8<-- [end:print_recompiles_gpu]
        # --8<-- [start:print_recompiles_cpu]
        print(compile_table("cpu"))
        # --8<-- [end:print_recompiles_cpu]
    else:
        # --8<-- [start:print_slicing_errors]
        print(describe_slicing_errors(slicing_errors()))
        # --8<-- [end:print_slicing_errors]
        # --8<-- [start:print_loop_gpu]
        if torch.cuda.is_available():
            print(describe_generation(check_generation("cuda")))
        # --8<-- [end:print_loop_gpu]
        # --8<-- [start:print_cpu_compile]
        print(compile_on_the_cpu())
        # --8<-- [end:print_cpu_compile]
        # --8<-- [start:print_loop_cpu]
        print(describe_generation(check_generation("cpu", compiled=False)))
        # --8<-- [end:print_loop_cpu]
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
