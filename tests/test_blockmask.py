"""The BlockMask's life (snippets/blockmask.py) against blocks worked out position by position in plain
Python, FlexAttention's own outputs, and counted builds."""
import itertools
import re

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from snippets import blockmask
from tests.helpers import python

DOCUMENTS = [0] * 300 + [1] * 450 + [2] * 274  # 1024 tokens; the first 1000 for 1000 tokens
DOCUMENT_IDS = torch.tensor(DOCUMENTS)
RULES = {  # each mask as a plain-Python rule of two ints, and as a mask_mod
    "causal": (lambda i, j: i >= j, blockmask.causal),
    "sliding window 256": (lambda i, j: 0 <= i - j < 256, lambda b, h, q, k: (q >= k) & (q - k < 256)),
    "documents": (lambda i, j: DOCUMENTS[i] == DOCUMENTS[j] and i >= j,
                  lambda b, h, q, k: (DOCUMENT_IDS[q] == DOCUMENT_IDS[k]) & (q >= k)),
}


def blocks_by_hand(rule, tokens, size):
    """(computed, full) block grids: a block is computed when one position in it is allowed, and full when
    every position is allowed and inside the length; positions past the length are masked."""
    n = -(-tokens // size)
    computed = [[False] * n for _ in range(n)]
    full = [[True] * n for _ in range(n)]
    for bi in range(n):
        for bj in range(n):
            for i in range(bi * size, (bi + 1) * size):
                for j in range(bj * size, (bj + 1) * size):
                    allowed = i < tokens and j < tokens and rule(i, j)
                    computed[bi][bj] |= allowed
                    full[bi][bj] &= allowed
    return torch.tensor(computed), torch.tensor(full)


@pytest.mark.parametrize("size", [128, 64])
@pytest.mark.parametrize("tokens", [1000, 1024])
@pytest.mark.parametrize("mask", list(RULES))
def test_the_blocks_are_those_worked_out_position_by_position(mask, tokens, size, ran):
    """to_dense() marks the computed blocks; kv_num_blocks/kv_indices hold the partial ones (mask_mod
    applied) and full_kv_num_blocks/full_kv_indices the full ones; sparsity() is 100 x (1 - computed
    blocks x block area / (tokens x tokens)): the share of blocks not computed when the length is a
    multiple of the block size, less than it otherwise."""
    rule, mask_mod = RULES[mask]
    block_mask = create_block_mask(mask_mod, None, None, tokens, tokens, device="cpu", BLOCK_SIZE=size)
    computed, full = blocks_by_hand(rule, tokens, size)
    assert torch.equal(block_mask.to_dense()[0, 0].bool(), computed)
    partial = computed & ~full
    for row in range(computed.shape[0]):
        count, full_count = int(block_mask.kv_num_blocks[0, 0, row]), int(block_mask.full_kv_num_blocks[0, 0, row])
        assert sorted(block_mask.kv_indices[0, 0, row, :count].tolist()) == partial[row].nonzero().flatten().tolist()
        assert sorted(block_mask.full_kv_indices[0, 0, row, :full_count].tolist()) == \
            full[row].nonzero().flatten().tolist()
    share = 100 * (1 - computed.float().mean().item())
    assert block_mask.sparsity() == pytest.approx(100 * (1 - computed.sum().item() * size * size / tokens ** 2))
    assert block_mask.sparsity() == pytest.approx(share) if tokens % size == 0 else block_mask.sparsity() < share
    ran(lengths=tokens, inputs=mask, batch=1, heads=1)


def test_a_block_past_the_length_is_never_full():
    """At 1000 tokens the last row and column of 128-token blocks reach past the length: none is full,
    though every position of the causal mask's first block in the last row is allowed. sparsity() of a
    mask that masks nothing is then negative, and of one that masks everything 100."""
    block_mask = create_block_mask(blockmask.causal, None, None, 1000, 1000, device="cpu")
    assert block_mask.full_kv_num_blocks[0, 0].tolist() == [0, 1, 2, 3, 4, 5, 6, 0]
    assert block_mask.kv_num_blocks[0, 0].tolist() == [1, 1, 1, 1, 1, 1, 1, 8]
    everything = create_block_mask(lambda b, h, q, k: q >= 0, None, None, 1000, 1000, device="cpu")
    assert everything.sparsity() == pytest.approx(100 * (1 - 64 * 128 * 128 / 1000 ** 2)) and everything.sparsity() < -4.8
    nothing = create_block_mask(lambda b, h, q, k: q < 0, None, None, 1000, 1000, device="cpu")
    assert nothing.sparsity() == 100


def test_flex_attention_leaves_the_block_mask_as_it_was(ran):
    """Every layer can be given the same BlockMask: FlexAttention, eager and compiled, forward, does not
    change its tensors, block size, lengths or mask_mod."""
    block_mask = create_block_mask(RULES["documents"][1], None, None, 1000, 1000, device="cpu")
    before = [t.clone() for t in block_mask.as_tuple() if isinstance(t, torch.Tensor)]
    kept = (block_mask.BLOCK_SIZE, block_mask.seq_lengths, block_mask.mask_mod)
    q = torch.randn(1, 2, 1000, 64)
    for attention in (flex_attention, torch.compile(flex_attention)):
        for _ in range(3):  # three layers
            attention(q, q, q, block_mask=block_mask)
    after = [t for t in block_mask.as_tuple() if isinstance(t, torch.Tensor)]
    assert len(after) == len(before) and all(torch.equal(a, b) for a, b in zip(after, before))
    assert (block_mask.BLOCK_SIZE, block_mask.seq_lengths, block_mask.mask_mod) == kept
    ran(lengths=1000, modes=["eager", "compiled"], passes="forward", dtypes=torch.float32, inputs="documents")


def test_the_cached_builder_builds_once_per_length(monkeypatch):
    """Counted with create_block_mask replaced by a counting wrapper: two calls at 4096 tokens build
    once and return the same object; another length builds again; 16 lengths are kept."""
    built = []
    real = blockmask.create_block_mask
    monkeypatch.setattr(blockmask, "create_block_mask", lambda *a, **k: built.append(a[3]) or real(*a, **k))
    blockmask.causal_block_mask.cache_clear()
    first = blockmask.causal_block_mask(4096)
    assert blockmask.causal_block_mask(4096) is first and built == [4096]
    assert blockmask.causal_block_mask(2048) is not first and built == [4096, 2048]
    for tokens in range(128, 128 * 15, 128):  # 14 lengths more: 16 in all, each kept
        blockmask.causal_block_mask(tokens)
    assert blockmask.causal_block_mask(4096) is first and len(built) == 16, "up to 16 kept"
    blockmask.causal_block_mask.cache_clear()


@pytest.mark.parametrize("mask", ["causal", "documents"])
@pytest.mark.parametrize("tokens", [1000, 1024])
def test_the_compiled_builder_builds_the_same_blocks(mask, tokens, ran):
    """torch.compile(create_block_mask), on its second call at a length (the first compiles), gives eager's
    BlockMask: every tensor, the block size and the shape."""
    mask_mod = RULES[mask][1]
    eager = create_block_mask(mask_mod, None, None, tokens, tokens, device="cpu")
    blockmask.compiled_create_block_mask(mask_mod, None, None, tokens, tokens, device="cpu")
    compiled = blockmask.compiled_create_block_mask(mask_mod, None, None, tokens, tokens, device="cpu")
    assert compiled.BLOCK_SIZE == eager.BLOCK_SIZE and compiled.shape == eager.shape
    pairs = [(a, b) for a, b in zip(eager.as_tuple(), compiled.as_tuple()) if isinstance(a, torch.Tensor)]
    assert len(pairs) >= 4 and all(torch.equal(a, b) for a, b in pairs)
    ran(lengths=tokens, inputs=mask)


def test_compile_true_is_deprecated_in_favour_of_torch_compile():
    with pytest.warns(Warning, match=r"we suggest doing torch\.compile\(create_block_mask\)"):
        create_block_mask(blockmask.causal, None, None, 256, 256, device="cpu", _compile=True)


def build_rows(text) -> dict:
    """{tokens: [eager median, fastest, slowest, compiled median, fastest, slowest, ratio]} from the rows
    build_times prints, after checking that each median lies between its extremes and each ratio is the
    medians' (to the printed digits)."""
    number = r"([\d.]+) \(([\d.]+)-([\d.]+)\)"
    rows = re.findall(rf"^ *(\d+) tokens: eager +{number}, torch.compile +{number}, +([\d.]+)x$", text, re.M)
    times = {int(t): [float(x) for x in rest] for t, *rest in rows}
    assert len(times) == len(text.splitlines()) - 1, text  # a header, then one row per length
    for eager, low, high, compiled, c_low, c_high, ratio in times.values():
        assert low <= eager <= high and c_low <= compiled <= c_high, text  # a median between the extremes
        assert (eager - 0.05) / (compiled + 0.05) - 0.05 <= ratio <= (eager + 0.05) / (compiled - 0.05) + 0.05, text
    return times


def test_program_prints_the_blocks_and_the_build_times(observe, ran):
    """The page's program: the causal BlockMask at 1000 tokens, the cached builder, the build times (on
    this machine, _compile=True is faster than eager at 4096 and 16384 tokens: the median of five builds,
    after one that compiles), and the rebuilt BlockMask."""
    result = python("-W ignore -m snippets.blockmask", timeout=900)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("shape (1, 1, 1000, 1000), BLOCK_SIZE (128, 128), sparsity() 41.0, skipped blocks 43.75%\n")
    assert "blocks computed with the mask_mod, per row:    [1, 1, 1, 1, 1, 1, 1, 8]" in out
    assert "True CacheInfo(hits=1, misses=1, maxsize=16, currsize=1)" in out
    lines = out.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("causal BlockMask on the CPU"))
    cpu = "\n".join(lines[start:start + 1] + list(itertools.takewhile(lambda line: " tokens: " in line,
                                                                     lines[start + 1:])))  # a GPU's may follow
    times = build_rows(cpu)
    assert set(times) == {1024, 4096, 16384}, out
    assert all(times[t][3] < times[t][0] for t in (4096, 16384)), times
    end = lines.index("(1, 1, 1000, 1000) True")
    refused, adjusted = lines[end + 1], lines[end + 2:]
    assert refused.startswith("ValueError: block_mask was created for") and "_adjust(q_len, kv_len)" in refused
    crops = [f"{name}, _adjust({q}, {kv}): " for name in ("causal", "sliding_window")
             for q, kv in ((700, 700), (500, 1024), (1024, 500))]
    assert [line[:len(crop)] for line, crop in zip(adjusted, crops)] == crops and len(adjusted) == 6, out
    for line in adjusted:
        answer = line.split("): ", 1)[1]
        if "(1024, 500)" in line:
            assert answer.startswith("IndexError: index 5 is out of bounds"), line
        else:
            assert 0 < float(answer.removeprefix("largest difference from SDPA with the mask ")) < 1e-5, line
    observe("blockmask.holds", out.split("True CacheInfo")[0].rstrip("\n"))
    observe("blockmask.once", next(line for line in out.splitlines() if "CacheInfo" in line))
    observe("blockmask.build_times", cpu)
    observe("blockmask.from_kv_blocks", lines[end])
    observe("blockmask.refused", refused)
    observe("blockmask.adjust", "\n".join(adjusted))
    ran(lengths=[1024, 4096, 16384], inputs="causal")


def test_without_seq_lengths_the_rebuilt_mask_has_the_block_grid_shape_and_flex_refuses_it(ran):
    """from_kv_blocks without seq_lengths: shape 1024 x 1024 for 1000 tokens, and FlexAttention at 1000
    tokens raises ValueError, eager and compiled; with seq_lengths it gives the original's output."""
    block_mask = create_block_mask(blockmask.causal, None, None, 1000, 1000, device="cpu")
    bare = type(block_mask).from_kv_blocks(block_mask.kv_num_blocks, block_mask.kv_indices,
                                           block_mask.full_kv_num_blocks, block_mask.full_kv_indices,
                                           mask_mod=blockmask.causal)
    assert bare.shape == (1, 1, 1024, 1024)
    q = torch.randn(1, 2, 1000, 64)
    rebuilt = blockmask.from_blocks(block_mask, blockmask.causal, 1000, 1000)
    torch._dynamo.reset()
    for attention in (flex_attention, torch.compile(flex_attention)):  # the compiled one fresh: its first calls
        assert torch.equal(attention(q, q, q, block_mask=rebuilt), attention(q, q, q, block_mask=block_mask))
        with pytest.raises(ValueError, match="block_mask was created for"):  # (a refused call may leave it eager)
            attention(q, q, q, block_mask=bare)
    ran(lengths=1000, modes=["eager", "compiled"], passes="forward", dtypes=torch.float32, inputs="causal")


def test_flex_attention_refuses_a_mask_built_for_more_tokens_and_its_message_names_adjust(ran):
    """Eager and compiled, for fewer queries, fewer keys or both; the page's refused() gives the eager message."""
    block_mask = create_block_mask(blockmask.causal, None, None, 1024, 1024, device="cpu")
    assert blockmask.refused(block_mask, 700).startswith("ValueError: block_mask was created for block_mask.shape="
                                                         "(1, 1, 1024, 1024) but got q_len=700 and kv_len=700.")
    assert blockmask.refused(create_block_mask(blockmask.causal, None, None, 700, 700, device="cpu"), 700) == \
        "no error"
    torch._dynamo.reset()
    for attention in (flex_attention, torch.compile(flex_attention)):
        for q_len, kv_len in ((700, 700), (1024, 700), (700, 1024)):
            q, kv = torch.randn(1, 1, q_len, 16), torch.randn(1, 1, kv_len, 16)
            with pytest.raises(ValueError, match=re.escape("by calling block_mask._adjust(q_len, kv_len)")):
                attention(q, kv, kv, block_mask=block_mask)
    ran(lengths=[700, 1024], modes=["eager", "compiled"], passes="forward", dtypes=torch.float32, inputs="causal")


ADJUST_LENGTHS = (1, 127, 128, 500, 700, 1024)
DENSE = {  # the two masks at 1024 x 1024, written with tril instead of a mask_mod
    "causal": torch.ones(1024, 1024, dtype=torch.bool).tril(),
    "sliding_window": torch.ones(1024, 1024, dtype=torch.bool).tril() & ~torch.ones(1024, 1024, dtype=torch.bool).tril(-256),
}


@pytest.mark.parametrize("mask", list(DENSE))
def test_adjust_crops_to_a_fresh_build_up_to_as_many_queries_as_keys_and_stops_at_the_tested_pairs_with_more(mask,
                                                                                                        ran):
    """Built at 1024 x 1024 and cropped to each of the 36 pairs of lengths from ADJUST_LENGTHS. With no more
    queries than keys, the crop computes the blocks a BlockMask built at those lengths computes (to_dense);
    at the three pairs with more queries than keys and more than 128 keys, _adjust raises IndexError."""
    mask_mod = getattr(blockmask, mask)
    built = create_block_mask(mask_mod, None, None, 1024, 1024, device="cpu")
    for q_len, kv_len in itertools.product(ADJUST_LENGTHS, ADJUST_LENGTHS):
        if q_len > kv_len > 128:
            assert (q_len, kv_len) in {(700, 500), (1024, 500), (1024, 700)}
            with pytest.raises(IndexError, match="out of bounds"):
                built._adjust(q_len, kv_len)
            continue
        cropped = built._adjust(q_len, kv_len)
        assert cropped.seq_lengths == (q_len, kv_len)
        if q_len <= kv_len:
            fresh = create_block_mask(mask_mod, None, None, q_len, kv_len, device="cpu")
            assert torch.equal(cropped.to_dense(), fresh.to_dense()), (q_len, kv_len)
    ran(lengths=list(ADJUST_LENGTHS), inputs=mask, passes="forward")


@pytest.mark.parametrize("mask", list(DENSE))
@pytest.mark.parametrize("q_len, kv_len", [(700, 700), (500, 1024), (1024, 128)])
def test_compiled_flex_attention_with_a_cropped_mask_gives_the_masks_attention(mask, q_len, kv_len, ran):
    """Compiled (the cropped BlockMask's skipped blocks matter there), float32, against float64 SDPA given the
    mask written with tril, cut to q_len x kv_len."""
    mask_mod = getattr(blockmask, mask)
    cropped = create_block_mask(mask_mod, None, None, 1024, 1024, device="cpu")._adjust(q_len, kv_len)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 16, generator=g) for n in (q_len, kv_len, kv_len))
    torch._dynamo.reset()
    got = torch.compile(flex_attention)(q, k, v, block_mask=cropped)
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                            attn_mask=DENSE[mask][:q_len, :kv_len])
    assert (got.double() - want).abs().max() < 1e-5
    ran(lengths=[q_len, kv_len], inputs=mask, modes="compiled", passes="forward", dtypes=torch.float32, heads=2,
        head_dims=16)


def test_build_times_are_the_median_fastest_and_slowest_of_the_counted_builds():
    """build_ms against a builder whose build times are known: a first build of 200 ms, not counted,
    then 40, 10, 50, 20 and 30 ms (median 30, fastest 10, slowest 50)."""
    import time

    sleeps = iter([0.2, 0.04, 0.01, 0.05, 0.02, 0.03])

    def build(*args, **kwargs):
        time.sleep(next(sleeps))

    median, fastest, slowest = blockmask.build_ms(build, 1000)
    assert 29 < median < 39 and 9 < fastest < 19 and 49 < slowest < 59, (median, fastest, slowest)


@pytest.mark.gpu
def test_on_the_gpu_the_compiled_builder_builds_the_same_blocks_faster_from_16384_tokens(observe, ran):
    """On a CUDA GPU: build_times at 4096, 16384 and 65536 tokens (the medians of five builds, each timed
    until the GPU has finished it), the compiled builder faster than eager at 16384 and 65536; and its
    BlockMask at 65536 tokens, the GPU's, is eager's."""
    text = blockmask.build_times(blockmask.GPU_LENGTHS, device="cuda")
    assert text.startswith(f"causal BlockMask on {torch.cuda.get_device_name()}, ms:"), text
    times = build_rows(text)
    assert set(times) == {4096, 16384, 65536}, text
    assert all(times[t][3] < times[t][0] for t in (16384, 65536)), text
    eager = create_block_mask(blockmask.causal, None, None, 65536, 65536, device="cuda")
    compiled = blockmask.compiled_create_block_mask(blockmask.causal, None, None, 65536, 65536, device="cuda")
    pairs = [(a, b) for a, b in zip(eager.as_tuple(), compiled.as_tuple()) if isinstance(a, torch.Tensor)]
    assert len(pairs) >= 4 and all(torch.equal(a, b) for a, b in pairs)
    assert compiled.shape == eager.shape and compiled.BLOCK_SIZE == eager.BLOCK_SIZE
    observe("blockmask.gpu_build_times", text)
    ran(lengths=[4096, 16384, 65536], inputs="causal", modes=["eager", "compiled"])
