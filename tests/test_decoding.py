import pytest
import torch

from snippets import decoding
from tests.helpers import python


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield


# Positions on both sides of every block boundary of the 512-token cache, and its first and last.
POSITIONS = (0, 1, 127, 128, 129, 255, 256, 257, 383, 384, 511)


def hand_counted_row(position, block=128):
    """(full blocks, partial blocks) of the row of query blocks holding `position`, counted from a
    dense causal mask of that row's queries written out key by key, without the BlockMask."""
    first = position // block * block
    queries = torch.arange(first, first + block)[:, None]
    dense = queries >= torch.arange(decoding.MAX_TOKENS)[None, :]  # (128 queries, keys)
    tiles = dense.view(block, decoding.MAX_TOKENS // block, block).transpose(0, 1)  # (key blocks, 128, 128)
    full = [j for j, tile in enumerate(tiles) if tile.all()]
    partial = [j for j, tile in enumerate(tiles) if tile.any() and not tile.all()]
    return full, partial


def test_block_mask_default_block_size_and_reuse(ran):
    block_mask = decoding.cache_mask("cpu")
    assert block_mask.BLOCK_SIZE == (128, 128)
    # One row of blocks per step, for any position in that row; the full mask is not rebuilt.
    for position in POSITIONS:
        row = decoding.step_mask(block_mask, torch.tensor([position]))
        assert row.seq_lengths == (1, decoding.MAX_TOKENS)
        assert row.kv_num_blocks.shape[-1] == 1  # one row of query blocks
        full, partial = hand_counted_row(position)
        assert row.full_kv_num_blocks.item() == len(full), position
        assert row.full_kv_indices[0, 0, 0, :len(full)].tolist() == full, position
        assert row.kv_num_blocks.item() == len(partial), position
        assert row.kv_indices[0, 0, 0, :len(partial)].tolist() == partial, position
    # At 300: blocks 0 and 1 (keys 0-255) are fully visible, block 2 (keys 256-383) partly; block 3 is skipped.
    assert hand_counted_row(300) == ([0, 1], [2])
    ran(lengths=decoding.MAX_TOKENS, inputs="causal mask")


def test_building_evaluates_the_mask_mod_and_a_step_only_slices(monkeypatch):
    """Building calls the mask_mod (over the whole cache); slicing a step's row calls it not at all."""
    calls = []
    original = decoding.causal

    def counting(b, h, q_idx, kv_idx):
        calls.append(1)
        return original(b, h, q_idx, kv_idx)

    monkeypatch.setattr(decoding, "causal", counting)
    block_mask = decoding.cache_mask("cpu")
    assert calls, "create_block_mask evaluates the mask_mod"
    assert block_mask.kv_num_blocks.shape[-1] == decoding.MAX_TOKENS // 128, "one row of blocks per query block"
    calls.clear()
    decoding.step_mask(block_mask, torch.tensor([300]))
    assert not calls, "a step slices the mask built once"


def test_sliced_mask_matches_the_dense_causal_row(ran):
    """Eager: flex_attention applies the mask_mod to every key, so this checks the offset mask_mod and
    the lengths; the blocks of the row are checked compiled, below."""
    torch.manual_seed(0)
    block_mask = decoding.cache_mask("cpu")
    q = torch.randn(1, 8, 1, 16, dtype=torch.float64)
    k, v = (torch.randn(1, 2, decoding.MAX_TOKENS, 16, dtype=torch.float64) for _ in range(2))
    for position in POSITIONS:
        got = torch.nn.attention.flex_attention.flex_attention(
            q, k, v, block_mask=decoding.step_mask(block_mask, torch.tensor([position])), enable_gqa=True)
        seen = (torch.arange(decoding.MAX_TOKENS) <= position)[None, :]  # (1 query, keys)
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=seen, enable_gqa=True)
        assert (got - want).abs().max() < 1e-12, position
    ran(dtypes=torch.float64, head_dims=16, lengths=decoding.MAX_TOKENS, batch=1, heads=8, modes="eager",
        passes="forward", inputs=["causal mask", "GQA 8:2"])


def test_sliced_mask_compiled_on_both_sides_of_each_block_boundary(ran):
    """Compiled, the kernel visits only the blocks the row lists: a row taken for the wrong block
    passes eagerly and fails here. The reference is float64 SDPA over the keys up to the position,
    with no mask: no BlockMask is involved."""
    torch.manual_seed(0)
    block_mask = decoding.cache_mask("cpu")
    q = torch.randn(1, 8, 1, 16)  # float32: the CPU does not compile flex_attention in float64
    k, v = (torch.randn(1, 2, decoding.MAX_TOKENS, 16) for _ in range(2))
    attend = torch.compile(torch.nn.attention.flex_attention.flex_attention)
    position = torch.tensor([0])  # a tensor updated in place, as in the decoding loop: one compile
    for p in POSITIONS:
        position.fill_(p)
        got = attend(q, k, v, block_mask=decoding.step_mask(block_mask, position), enable_gqa=True)
        keys, values = k[:, :, :p + 1].double(), v[:, :, :p + 1].double()
        want = torch.nn.functional.scaled_dot_product_attention(q.double(), keys, values, enable_gqa=True)
        assert (got.double() - want).abs().max() < 1e-5, p
    ran(dtypes=torch.float32, head_dims=16, lengths=decoding.MAX_TOKENS, batch=1, heads=8, modes="compiled",
        passes="forward", inputs=["causal mask", "GQA 8:2"])


def test_slicing_errors(observe, ran):
    errors = decoding.slicing_errors()
    assert errors["mask_mod"].startswith("RuntimeError: Cannot use mask_mod from a sliced BlockMask")
    assert errors["seq_lengths"].startswith("ValueError: block_mask was created for")
    ran(dtypes=torch.float32, modes="eager")
    observe("decoding.slicing_errors", decoding.describe_slicing_errors(errors))


def loop_ran(ran, r):
    """What a check_generation run covered: TinyLM's shapes, and the lengths from the prompt to the last step."""
    ran(dtypes=torch.float32, head_dims=16, batch=1, heads=8, passes="forward",
        modes="compiled" if r["compiled"] else "eager", lengths=[r["prompt_tokens"], r["length"]],
        inputs=["causal mask", "GQA 8:2", "static KV cache"])


def test_decoding_loop_on_the_cpu_matches_the_whole_sequence(observe, ran):
    r = decoding.check_generation("cpu", compiled=False)
    assert r["same_tokens"] and r["error"] < 1e-5 and len(r["tokens"]) == 60
    assert r["prompt_tokens"] < 128 < r["length"], "the steps cross the first block boundary"
    loop_ran(ran, r)
    observe("decoding.loop_cpu", decoding.describe_generation(r))


def test_compiling_the_decoding_step_fails_on_the_cpu(observe, ran):
    # The page says so of PyTorch 2.13; when PyTorch fixes it, this fails and the page changes.
    from torch._inductor.exc import InductorError
    from torch.torch_version import TorchVersion

    if TorchVersion(torch.__version__) < (2, 13):
        pytest.skip(f"the claim is about PyTorch 2.13; this is {torch.__version__}")

    said = decoding.compile_on_the_cpu()  # catches an InductorError only: any other error fails here
    assert said.startswith(f"{InductorError.__name__}: LoweringException: ValueError: not enough values to unpack"), said
    ran(dtypes=torch.float32, modes="compiled", passes="forward")
    observe("decoding.cpu_compile", said)


@pytest.mark.gpu
def test_compiled_decoding_loop_on_the_gpu_compiles_once(observe, ran):
    r = decoding.check_generation("cuda")
    assert r["same_tokens"] and r["error"] < 1e-4
    assert r["compiles"] == 1, "the tensor position keeps one compiled step for every token"
    assert r["prompt_tokens"] < 128 < r["length"], "the steps cross the first block boundary"
    loop_ran(ran, r)
    observe("decoding.loop_gpu", decoding.describe_generation(r))


def test_the_recompile_limit_shown_is_pytorchs_default():
    # In a fresh process: the benchmarks raise the limit when they are imported.
    result = python("-c 'import torch; print(torch._dynamo.config.recompile_limit)'")
    assert result.stdout.strip() == str(decoding.RECOMPILE_LIMIT), result.stderr


def recompiles(device, observe, ran, name):
    table = decoding.compile_table(device)
    rows = [line.split() for line in table.splitlines()[1:]]
    counts = {(r[0], r[2]): (int(r[3]), r[4] == "True") for r in rows}
    assert counts[("tensor", "None")] == (1, False) and counts[("tensor", "False")] == (1, False)
    assert counts[("int", "None")][0] == 2, "automatic dynamic shapes: one recompile, then the int is symbolic"
    assert counts[("int", "False")] == (decoding.RECOMPILE_LIMIT, True)
    ran(dtypes=torch.float32, head_dims=16, lengths=decoding.MAX_TOKENS, batch=1, heads=8, modes="compiled",
        passes="forward", inputs=["Python int in the mask_mod's closure", "tensor offset"])
    observe(name, table)


def test_recompiles_int_vs_tensor_offset_cpu(observe, ran):
    recompiles("cpu", observe, ran, "decoding.recompiles_cpu")


@pytest.mark.gpu
def test_recompiles_int_vs_tensor_offset_gpu(observe, ran):
    recompiles("cuda", observe, ran, "decoding.recompiles_gpu")


@pytest.mark.gpu
def test_kernel_selection_rule(observe):
    table = decoding.kernel_table()
    kernels = {tuple(int(x) for x in line.split()[:4]): line.split()[4] for line in table.splitlines()[1:]}
    for (q_tokens, q_heads, kv_heads, mask_heads), kernel in kernels.items():
        ratio = q_heads // kv_heads
        # The rule of torch/_inductor/kernel/flex/flex_decoding.py: fewer than 128 query tokens, a
        # power-of-two group of query heads per KV head, and a BlockMask with one head (or one per
        # query head without GQA).
        decodes = q_tokens < 128 and ratio & (ratio - 1) == 0 and (
            mask_heads == 1 or (ratio == 1 and mask_heads == q_heads))
        assert kernel == ("FlexDecoding" if decodes else "FlexAttention"), (q_tokens, q_heads, kv_heads, mask_heads)
    observe("decoding.kernels", table)


def test_program_generates_and_refuses_kernels_without_a_gpu():
    result = python("-W ignore -m snippets.decoding")
    assert result.returncode == 0, result.stderr
    assert "60 tokens, same as without a cache: True" in result.stdout
    if not torch.cuda.is_available():
        result = python("-m snippets.decoding --kernels")
        assert result.returncode == 2 and result.stderr.count("\n") == 1 and "Fix:" in result.stderr


def test_the_kernel_rule_is_the_one_in_the_installed_pytorch_source():
    """The page's rule, read in the installed PyTorch's own decision (flex_decoding._use_flex_decoding): fewer
    than 128 query tokens, a power-of-two number of query heads per KV head, and a BlockMask with one head, or
    without GQA one per query head."""
    import inspect

    from torch._inductor.kernel.flex import flex_decoding

    source = "".join(inspect.getsource(flex_decoding._use_flex_decoding).split())
    conditions = ["sympy.Lt(query.get_size()[-2],128)",                                    # < 128 query tokens
                  "sympy.Eq(ratio&(ratio-1),0)",                                            # a power of two
                  "ifenable_gqa:", "sympy.Eq(kv_indices.get_size()[1],1)",                  # GQA: one head
                  "sympy.Eq(kv_indices.get_size()[1],query.get_size()[1])"]                 # else: or one per head
    assert all(condition in source for condition in conditions), source
    assert all(name in source.split("out=(")[1] for name in
               ("short_query_length", "valid_block_mask_num_heads", "pw_of_two")), source
