import pytest
import torch

from snippets import decoding
from tests.helpers import python


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield


def test_block_mask_default_block_size_and_reuse():
    block_mask = decoding.cache_mask("cpu")
    assert block_mask.BLOCK_SIZE == (128, 128)
    # One row of blocks per step, for any position in that row; the full mask is not rebuilt.
    row = decoding.step_mask(block_mask, torch.tensor([300]))
    assert row.seq_lengths == (1, decoding.MAX_TOKENS)
    assert row.kv_num_blocks.shape[-1] == 1  # one row of query blocks
    # Blocks 0 and 1 (keys 0-255) are fully visible, block 2 (keys 256-383) partly; block 3 is skipped.
    assert (row.full_kv_num_blocks.item(), row.kv_num_blocks.item()) == (2, 1)


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


def test_sliced_mask_matches_the_dense_causal_row():
    torch.manual_seed(0)
    block_mask = decoding.cache_mask("cpu")
    q = torch.randn(1, 8, 1, 16, dtype=torch.float64)
    k, v = (torch.randn(1, 2, decoding.MAX_TOKENS, 16, dtype=torch.float64) for _ in range(2))
    for position in (0, 127, 128, 300, decoding.MAX_TOKENS - 1):
        got = torch.nn.attention.flex_attention.flex_attention(
            q, k, v, block_mask=decoding.step_mask(block_mask, torch.tensor([position])), enable_gqa=True)
        seen = (torch.arange(decoding.MAX_TOKENS) <= position)[None, :]  # (1 query, keys)
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=seen, enable_gqa=True)
        assert (got - want).abs().max() < 1e-12, position


def test_slicing_errors(observe):
    errors = decoding.slicing_errors()
    assert errors["mask_mod"].startswith("RuntimeError: Cannot use mask_mod from a sliced BlockMask")
    assert errors["seq_lengths"].startswith("ValueError: block_mask was created for")
    observe("decoding.slicing_errors", "\n".join(f"without {k}: {v[:160]}" for k, v in errors.items()))


def test_decoding_loop_on_the_cpu_matches_the_whole_sequence(observe):
    r = decoding.check_generation("cpu", compiled=False)
    assert r["same_tokens"] and r["error"] < 1e-5 and len(r["tokens"]) == 24
    observe("decoding.loop_cpu", f"{len(r['tokens'])} tokens, same as without a cache: {r['same_tokens']}, "
                                 f"logits differ by {r['error']:.1e}")


def test_compiling_the_decoding_step_fails_on_the_cpu(observe):
    # The page says so of PyTorch 2.13; when PyTorch fixes it, this fails and the page changes.
    from torch._inductor.exc import InductorError
    from torch.torch_version import TorchVersion

    if TorchVersion(torch.__version__) < (2, 13):
        pytest.skip(f"the claim is about PyTorch 2.13; this is {torch.__version__}")

    with pytest.raises(InductorError, match="LoweringException: ValueError: not enough values to unpack") as failure:
        decoding.check_generation("cpu", compiled=True)
    first = str(failure.value).strip().splitlines()[0]
    observe("decoding.cpu_compile", f"{type(failure.value).__name__}: {first}")


@pytest.mark.gpu
def test_compiled_decoding_loop_on_the_gpu_compiles_once(observe):
    r = decoding.check_generation("cuda")
    assert r["same_tokens"] and r["error"] < 1e-4
    assert r["compiles"] == 1, "the tensor position keeps one compiled step for every token"
    observe("decoding.loop_gpu", f"{len(r['tokens'])} tokens, same as without a cache: {r['same_tokens']}, "
                                 f"logits differ by {r['error']:.1e}, compiles of the decoding step: {r['compiles']}")


def test_the_recompile_limit_shown_is_pytorchs_default():
    # In a fresh process: the benchmarks raise the limit when they are imported.
    result = python("-c 'import torch; print(torch._dynamo.config.recompile_limit)'")
    assert result.stdout.strip() == str(decoding.RECOMPILE_LIMIT), result.stderr


def recompiles(device, observe, name):
    table = decoding.compile_table(device)
    rows = [line.split() for line in table.splitlines()[1:]]
    counts = {(r[0], r[2]): (int(r[3]), r[4] == "True") for r in rows}
    assert counts[("tensor", "None")] == (1, False) and counts[("tensor", "False")] == (1, False)
    assert counts[("int", "None")][0] == 2, "automatic dynamic shapes: one recompile, then the int is symbolic"
    assert counts[("int", "False")] == (decoding.RECOMPILE_LIMIT, True)
    observe(name, table)


def test_recompiles_int_vs_tensor_offset_cpu(observe):
    recompiles("cpu", observe, "decoding.recompiles_cpu")


@pytest.mark.gpu
def test_recompiles_int_vs_tensor_offset_gpu(observe):
    recompiles("cuda", observe, "decoding.recompiles_gpu")


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
    assert "same tokens as the whole sequence without a cache: True" in result.stdout
    if not torch.cuda.is_available():
        result = python("-m snippets.decoding --kernels")
        assert result.returncode == 2 and result.stderr.count("\n") == 1 and "Fix:" in result.stderr
