"""The gallery's mask_mods and score_mods (snippets/gallery.py), each against a reference written out
here from what its comment says, position by position, without calling the code under test."""
import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, create_mask, flex_attention

from snippets import gallery

NAMES = ["key_padding", "padded_causal", "window_with_globals", "dilated_causal", "chunk_over_cache",
         "cross_padding", "neighbourhood_2d", "image_text", "tree", "documents"]
INPUTS = {"key_padding": "key padding mask", "padded_causal": "causal key padding mask",
          "window_with_globals": "sliding window with global tokens", "dilated_causal": "dilated causal window",
          "chunk_over_cache": "chunk over a KV cache", "cross_padding": "cross-attention key padding mask",
          "neighbourhood_2d": "2-D neighbourhood mask", "image_text": "image and text mask",
          "tree": "speculative decoding tree mask", "documents": "causal document mask"}
LENGTHS = (200, 256, 1000)  # 200 and 1000 end in a partial 128-token block
GRIDS = {200: (10, 20), 256: (16, 16), 1000: (25, 40), 4096: (64, 64), 16384: (128, 128)}  # height x width
TREE = [-1, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7]  # a binary tree: draft i under draft (i - 1) // 2
SHADES = {"none": "·", "under half": "░", "half or more": "▒", "all": "█"}


def params(t):
    """The parameters the gallery's examples give at t tokens (its comments), here for any t."""
    return {"lengths": [t, 3 * t // 4, t // 2], "window": t // 16, "globals": t // 64, "dilation": 4,
            "cached": 3 * t // 4, "grid": GRIDS[t], "kernel": 7, "prefix": t - 16,
            "segments": [(t // 4, t // 8), (t // 4, t // 8), (t // 8, t // 8)],
            "documents": [3 * t // 16, 5 * t // 16, t // 8, t - 3 * t // 16 - 5 * t // 16 - t // 8]}


def shapes(t):
    """name -> (q_len, kv_len, batch) at t tokens."""
    p = params(t)
    return {"key_padding": (t, t, 3), "padded_causal": (t, t, 3), "window_with_globals": (t, t, 1),
            "dilated_causal": (t, t, 1), "chunk_over_cache": (t - p["cached"], t, 1), "cross_padding": (t // 2, t, 3),
            "neighbourhood_2d": (t, t, 1), "image_text": (t, t, 1), "tree": (len(TREE), t, 1), "documents": (t, t, 1)}


def mask_mods(t, device="cpu"):
    """The gallery's functions called with params(t)."""
    p = params(t)
    lengths = torch.tensor(p["lengths"], device=device)
    document_ids = torch.repeat_interleave(torch.arange(4), torch.tensor(p["documents"])).to(device)
    return {"key_padding": gallery.key_padding(lengths), "padded_causal": gallery.padded_causal(lengths),
            "window_with_globals": gallery.window_with_globals(p["window"], p["globals"]),
            "dilated_causal": gallery.dilated_causal(p["window"], p["dilation"]),
            "chunk_over_cache": gallery.chunk_over_cache(p["cached"]), "cross_padding": gallery.cross_padding(lengths),
            "neighbourhood_2d": gallery.neighbourhood_2d(*p["grid"], p["kernel"]),
            "image_text": gallery.image_text(p["segments"], device),
            "tree": gallery.tree_mask(p["prefix"], TREE, device), "documents": gallery.documents(document_ids)}


# The references, written out row by row from the definitions: (batch, q_len, kv_len) boolean tensors.
def ref_key_padding(lengths, q_len, kv_len):
    allowed = torch.zeros(len(lengths), q_len, kv_len, dtype=torch.bool)
    for b, length in enumerate(lengths):
        for i in range(q_len):
            allowed[b, i, :length] = True  # the sample's real keys, and no padding key
    return allowed


def ref_padded_causal(lengths, tokens):
    allowed = torch.zeros(len(lengths), tokens, tokens, dtype=torch.bool)
    for b, length in enumerate(lengths):
        for i in range(tokens):
            allowed[b, i, :min(i + 1, length)] = True  # itself and earlier keys, real ones only
    return allowed


def ref_window_with_globals(window, globals_, tokens):
    allowed = torch.zeros(1, tokens, tokens, dtype=torch.bool)
    for i in range(tokens):
        allowed[0, i, max(0, i - window + 1):i + window] = True  # |i - j| <= window - 1
        allowed[0, i, :globals_] = True                          # the global tokens, seen by all
        if i < globals_:
            allowed[0, i, :] = True                              # a global token sees all
    return allowed


def ref_dilated_causal(window, dilation, tokens):
    allowed = torch.zeros(1, tokens, tokens, dtype=torch.bool)
    for i in range(tokens):
        keys = [i - m * dilation for m in range(window) if i - m * dilation >= 0]  # i, i - d, ..., window of them
        allowed[0, i, keys] = True
    return allowed


def ref_chunk_over_cache(cached, q_len):
    allowed = torch.zeros(1, q_len, cached + q_len, dtype=torch.bool)
    for i in range(q_len):
        allowed[0, i, :cached + i + 1] = True  # query i is token cached + i: keys up to it
    return allowed


def ref_neighbourhood(height, width, kernel):
    allowed = torch.zeros(1, height * width, height * width, dtype=torch.bool)
    for row in range(height):
        for col in range(width):
            top = min(max(row - kernel // 2, 0), height - kernel)
            left = min(max(col - kernel // 2, 0), width - kernel)
            for r in range(top, top + kernel):  # kernel rows of the image, kernel pixels of each
                allowed[0, row * width + col, r * width + left:r * width + left + kernel] = True
    return allowed


def ref_image_text(segments):
    tokens = sum(image + text for image, text in segments)
    allowed = torch.zeros(1, tokens, tokens, dtype=torch.bool)
    start = 0
    for image, text in segments:
        for i in range(start, start + image + text):
            allowed[0, i, start:start + image] = True  # its segment's image, for image and text tokens
            if i >= start + image:
                allowed[0, i, start + image:i + 1] = True  # a text token: its caption up to itself
        start += image + text
    return allowed


def ref_tree(prefix, parents):
    allowed = torch.zeros(1, len(parents), prefix + len(parents), dtype=torch.bool)
    for i in range(len(parents)):
        allowed[0, i, :prefix] = True
        j = i
        while j >= 0:  # itself, its parent, its parent's parent, ... up to a child of the prefix
            allowed[0, i, prefix + j] = True
            j = parents[j]
    return allowed


def ref_documents(sizes):
    tokens = sum(sizes)
    allowed = torch.zeros(1, tokens, tokens, dtype=torch.bool)
    start = 0
    for size in sizes:
        for i in range(start, start + size):
            allowed[0, i, start:i + 1] = True  # its own document, up to itself
        start += size
    return allowed


def written_out(name, t):
    p = params(t)
    q_len, kv_len, _ = shapes(t)[name]
    return {"key_padding": lambda: ref_key_padding(p["lengths"], t, t),
            "padded_causal": lambda: ref_padded_causal(p["lengths"], t),
            "window_with_globals": lambda: ref_window_with_globals(p["window"], p["globals"], t),
            "dilated_causal": lambda: ref_dilated_causal(p["window"], p["dilation"], t),
            "chunk_over_cache": lambda: ref_chunk_over_cache(p["cached"], q_len),
            "cross_padding": lambda: ref_key_padding(p["lengths"], q_len, kv_len),
            "neighbourhood_2d": lambda: ref_neighbourhood(*p["grid"], p["kernel"]),
            "image_text": lambda: ref_image_text(p["segments"]),
            "tree": lambda: ref_tree(p["prefix"], TREE),
            "documents": lambda: ref_documents(p["documents"])}[name]()


def qkv(batch, q_len, kv_len, heads=4, head_dim=32, dtype=torch.float64, device="cpu", seed=0):
    torch.manual_seed(seed)
    q = torch.randn(batch, heads, q_len, head_dim, dtype=dtype, device=device)
    k, v = (torch.randn(batch, heads, kv_len, head_dim, dtype=dtype, device=device) for _ in range(2))
    return q, k, v


def sdpa(q, k, v, allowed):
    """SDPA with the written-out mask (batch, q_len, kv_len); a row with no key gives 0 (its keys all allowed
    for SDPA, and the row zeroed), as FlexAttention gives."""
    rows = allowed.any(-1, keepdim=True)[:, None]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=(allowed[:, None] | ~rows))
    return out * rows


def relative_error(got, want) -> float:
    return ((got.double() - want.double()).norm() / want.double().norm()).item()


def test_the_written_out_references_are_the_rows_their_definitions_say():
    """The references themselves, on small cases read off by hand."""
    assert ref_window_with_globals(2, 1, 6)[0].int().tolist() == [
        [1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0],
        [1, 0, 1, 1, 1, 0], [1, 0, 0, 1, 1, 1], [1, 0, 0, 0, 1, 1]]
    assert ref_dilated_causal(2, 3, 7)[0, 6].int().tolist() == [0, 0, 0, 1, 0, 0, 1]
    assert ref_chunk_over_cache(3, 2)[0].int().tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    # 4 x 5 image, kernel 3: pixel (0, 0) sees rows 0-2, columns 0-2; pixel (2, 4) rows 1-3, columns 2-4
    grid = ref_neighbourhood(4, 5, 3)[0]
    assert grid[0].reshape(4, 5).int().tolist() == [[1, 1, 1, 0, 0]] * 3 + [[0, 0, 0, 0, 0]]
    assert grid[2 * 5 + 4].reshape(4, 5).int().tolist() == [[0, 0, 0, 0, 0]] + [[0, 0, 1, 1, 1]] * 3
    assert (grid.sum(1) == 9).all()
    # image of 2 then caption of 2: image tokens see the image; caption tokens the image and causal text
    assert ref_image_text([(2, 2)])[0].int().tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    # prefix 2, drafts 0 <- 1 <- 3 and 0 <- 2, and a second root 4
    assert ref_tree(2, [-1, 0, 0, 1, -1])[0].int().tolist() == [
        [1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 1, 0, 0], [1, 1, 1, 1, 0, 1, 0],
        [1, 1, 0, 0, 0, 0, 1]]
    assert ref_documents([2, 1])[0].int().tolist() == [[1, 0, 0], [1, 1, 0], [0, 0, 1]]
    assert ref_padded_causal([3, 2], 3)[1].int().tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 0]]
    assert TREE == [-1] + [(i - 1) // 2 for i in range(1, 16)] == gallery.TREE


@pytest.mark.parametrize("name", NAMES)
def test_each_mask_is_its_definition_and_matches_sdpa(name, ran):
    """At 200, 256 and 1000 tokens, create_mask gives the written-out mask for every sample; at 200 and 256,
    eager flex_attention with a BlockMask built with B=batch matches float64 SDPA given the written-out mask."""
    for t in LENGTHS:
        q_len, kv_len, batch = shapes(t)[name]
        mask_mod, allowed = mask_mods(t)[name], written_out(name, t)
        assert allowed.shape == (batch, q_len, kv_len)
        assert torch.equal(create_mask(mask_mod, batch, 1, q_len, kv_len, device="cpu")[:, 0], allowed), (name, t)
        ran(lengths=[q_len, kv_len], batch=batch, inputs=INPUTS[name])
        if t == 1000:
            continue  # eager attention at 200 and 256 tokens
        q, k, v = qkv(batch, q_len, kv_len)
        block_mask = create_block_mask(mask_mod, batch, None, q_len, kv_len, device="cpu")
        assert relative_error(flex_attention(q, k, v, block_mask=block_mask), sdpa(q, k, v, allowed)) < 1e-12, t
        ran(modes="eager", dtypes=torch.float64, lengths=[q_len, kv_len], heads=4, head_dims=32, batch=batch,
            passes="forward")


def test_masks_compiled_match_sdpa_and_padding_needs_its_batch(ran):
    """Compiled (one graph, one compile: each mask is a kernel of its own), float32, 4 heads of 32: every mask
    at 200 tokens (a partial last block), each BlockMask built with its batch; and the key padding mask
    at 256 tokens, lengths 256, 192, 128, its BlockMask built with B=None (sample 0's blocks, all full, for
    every sample: samples 1 and 2 attend to their padding) and with B=3. Eager, B=None gives the right answer:
    eager flex_attention applies the mask_mod to every score."""
    t = 200
    cases = []
    for name in NAMES:  # every mask, each a kernel of its own, in one graph
        q_len, kv_len, batch = shapes(t)[name]
        cases.append((qkv(batch, q_len, kv_len, dtype=torch.float32),
                      create_block_mask(mask_mods(t)[name], batch, None, q_len, kv_len, device="cpu")))
    padding = gallery.key_padding(torch.tensor([256, 192, 128]))
    padded_qkv = qkv(3, 256, 256, dtype=torch.float32)
    one_pattern, per_sample = (create_block_mask(padding, batch, None, 256, 256, device="cpu") for batch in (None, 3))
    cases += [(padded_qkv, one_pattern), (padded_qkv, per_sample)]

    def every_mask(cases):
        return [flex_attention(q, k, v, block_mask=block_mask) for (q, k, v), block_mask in cases]

    torch._dynamo.reset()
    outputs = torch.compile(every_mask, dynamic=False, fullgraph=True)(cases)
    for name, ((q, k, v), _), out in zip(NAMES, cases, outputs):
        assert relative_error(out, sdpa(q, k, v, written_out(name, t))) < 1e-5, name
        ran(lengths=[q.shape[2], k.shape[2]], batch=q.shape[0], inputs=INPUTS[name])
    want = sdpa(*padded_qkv, ref_key_padding([256, 192, 128], 256, 256))
    with_none, with_batch = outputs[-2:]
    assert relative_error(with_none[0], want[0]) < 1e-5  # sample 0: its own pattern
    assert all(relative_error(with_none[b], want[b]) > 0.1 for b in (1, 2)), "B=None: padding attended to"
    assert relative_error(with_batch, want) < 1e-5
    assert relative_error(flex_attention(*padded_qkv, block_mask=one_pattern), want) < 1e-5  # eager
    ran(modes=["compiled", "eager"], dtypes=torch.float32, lengths=256, heads=4, head_dims=32, batch=3,
        passes="forward", inputs=INPUTS["key_padding"])


def test_the_score_mod_is_read_at_masked_positions_and_the_fix_covers_them(ran):
    """Eager, float64, 4 heads of 32, 200 real keys of 256 (and 1000 of 1024): a per-key bias of the real keys
    alone, read by a score_mod beside a mask that keeps the padding keys out, raises an IndexError at the first
    padding key; the bias padded to every key gives attention written out by hand over the real keys."""
    for real, t in ((200, 256), (1000, 1024)):
        q, k, v = qkv(1, t, t)
        key_bias = torch.linspace(-1, 1, real, dtype=torch.float64)
        block_mask = create_block_mask(gallery.real_keys(real), None, None, t, t, device="cpu")
        with pytest.raises(IndexError, match=f"index {real} is out of bounds for dimension 0 with size {real}"):
            flex_attention(q, k, v, score_mod=gallery.key_bias_trap(key_bias), block_mask=block_mask)
        got = flex_attention(q, k, v, score_mod=gallery.key_bias_padded(key_bias, t), block_mask=block_mask)
        scores = q @ k.transpose(-2, -1) / 32 ** 0.5
        bias = torch.full((t,), -float("inf"), dtype=torch.float64)
        for j in range(real):  # the bias of each real key; the padding keys masked
            bias[j] = key_bias[j]
        want = torch.softmax(scores + bias, dim=-1) @ v
        assert relative_error(got, want) < 1e-12, t
        ran(modes="eager", dtypes=torch.float64, lengths=t, heads=4, head_dims=32, batch=1, passes="forward",
            inputs="per-key bias score_mod")
    # The Triton template applies the score_mod (subgraph 0) to the block's scores before the mask_mod
    # (subgraph 1), which only partly masked blocks evaluate.
    forward = installed_template("common.py.jinja")
    score_mod, mask_mod = forward.index("subgraph_number=0"), forward.index("subgraph_number=1")
    assert score_mod < forward.index("if not IS_FULL_BLOCKS:") < mask_mod
    assert "post_mod_scores = tl.where(mask_mod_output, post_mod_scores, float(\"-inf\"))" in forward[mask_mod:]
    ran(backends="triton")


def installed_template(name):
    """The source of one of the installed PyTorch's FlexAttention Triton templates."""
    from pathlib import Path

    import torch._inductor.kernel.flex as flex

    return (Path(flex.__file__).parent / "templates" / name).read_text(encoding="utf-8")


def test_the_triton_kernel_evaluates_the_last_block_at_positions_modulo_the_length(ran):
    """The installed PyTorch's Triton templates, read as source: in a block that reaches past the length, the
    forward and both halves of the backward give the mask_mod and score_mod the positions modulo Q_LEN and
    KV_LEN, and get_bounded_indices is `indices % max_len`."""
    assert ("def get_bounded_indices(indices, max_len=None):\n"
            "    return indices % max_len if max_len is not None else indices") in installed_template(
        "utilities.py.jinja")
    forward = installed_template("common.py.jinja")
    assert "m = get_bounded_indices(offs_m, Q_LEN if CHECK_BLOCK_BOUNDARY else None)" in forward
    assert "n = get_bounded_indices(offs_n, KV_LEN if CHECK_BLOCK_BOUNDARY else None)" in forward
    backward = installed_template("flex_backwards.py.jinja")
    for line in ("n = get_bounded_indices(offs_n2[None, :], KV_LEN if not IS_DIVISIBLE else None)",
                 "m = get_bounded_indices(offs_m2[:, None], Q_LEN if not IS_DIVISIBLE else None)",
                 "m = get_bounded_indices(offs_m1[None, :], Q_LEN if not IS_DIVISIBLE else None)",
                 "n = get_bounded_indices(offs_n1[:, None], KV_LEN if not IS_DIVISIBLE else None)"):
        assert line in backward, line
    ran(backends="triton", passes=["forward", "backward"])


def test_a_tensor_shorter_than_the_positions_evaluated_is_read_past_its_end(ran):
    """On the CPU: the packed-documents mask with its 1000 ids, evaluated over 1024 positions (the batch padded
    to a multiple of 128), indexes entry 1000 and raises; over the 1000 real positions it gives the written-out
    mask."""
    sizes = [300, 500, 200]
    ids = torch.repeat_interleave(torch.arange(3), torch.tensor(sizes))
    mask = gallery.documents(ids)
    with pytest.raises(IndexError, match="index 1000 is out of bounds for dimension 0 with size 1000"):
        create_mask(mask, None, None, 1024, 1024, device="cpu")
    assert torch.equal(create_mask(mask, None, None, 1000, 1000, device="cpu")[0, 0], ref_documents(sizes)[0])
    ran(lengths=[1000, 1024], inputs="causal document mask")


def softmax_with_sink(q, k, v, sinks, allowed=None):
    """Attention written out with one more column in the softmax holding sinks[h], which has no value."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if allowed is not None:
        scores = scores.masked_fill(~allowed[:, None], -float("inf"))
    column = sinks[None, :, None, None].expand(*scores.shape[:3], 1)
    weights = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)
    return weights[..., :-1] @ v


def test_sinks_match_a_softmax_with_an_extra_column(ran):
    """Float64, eager, heads 4: forward, without a mask and with a padded causal mask (batch 3), at 200 and 256
    tokens; and the gradient of the sinks. flex_attention on the CPU has no backward (NotImplementedError when
    q, k or v requires grad), so the gradients of q, k and v are checked on the GPU only."""
    for t in (200, 256):
        sinks = torch.tensor([-2.0, 0.0, 1.5, 4.0], dtype=torch.float64, requires_grad=True)
        lengths = [t, 3 * t // 4, t // 2]
        mask = gallery.padded_causal(torch.tensor(lengths))
        q, k, v = qkv(3, t, t)
        for block_mask, allowed in ((None, None), (create_block_mask(mask, 3, None, t, t, device="cpu"),
                                                   ref_padded_causal(lengths, t))):
            got = gallery.attention_with_sinks(q, k, v, sinks, block_mask)
            want = softmax_with_sink(q, k, v, sinks, allowed)
            assert got.dtype == torch.float64 and relative_error(got, want) < 1e-12
            grad = torch.randn_like(want)
            (got_sinks,), (want_sinks,) = (torch.autograd.grad(out, [sinks], grad) for out in (got, want))
            assert relative_error(got_sinks, want_sinks) < 1e-10
        # the sink takes attention away: the output is smaller than without it
        assert gallery.attention_with_sinks(q, k, v, sinks).norm() < flex_attention(q, k, v).norm()
        ran(modes="eager", dtypes=torch.float64, lengths=t, heads=4, head_dims=32, batch=3, passes="forward",
            inputs=["attention sinks", "causal key padding mask"])
    with pytest.raises(NotImplementedError, match="backward on CPU"):
        gallery.attention_with_sinks(q.requires_grad_(), k, v, sinks)


def t5_bucket(relative, buckets, max_distance, bidirectional):
    """T5's relative position bucket of one distance (key position - query position), with Python ints and
    math, after transformers' T5Attention._relative_position_bucket."""
    bucket = 0
    if bidirectional:
        buckets //= 2
        bucket += buckets if relative > 0 else 0
        relative = abs(relative)
    else:
        relative = -min(relative, 0)
    exact = buckets // 2
    if relative < exact:
        return bucket + relative
    large = exact + int(math.log(relative / exact) / math.log(max_distance / exact) * (buckets - exact))
    return bucket + min(large, buckets - 1)


def bias_by_loops(table, t, index):
    """bias[h, i, j] = table[h, index(i, j)], the index of each query i and key j computed by a loop."""
    indices = torch.tensor([[index(i, j) for j in range(t)] for i in range(t)])
    return table[:, indices]


def test_score_mods_match_biases_written_out(ran):
    """relative_bias and t5_bias (bidirectional or not, two settings) against a bias built position by position,
    float64, eager, at 200 and 256 tokens (heads 4), with the gradient of each table."""
    torch.manual_seed(0)
    for t in (200, 256):
        q, k, v = qkv(1, t, t)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        settings = [("relative", 16, None)] + [
            ("t5", buckets, (max_distance, bidirectional))
            for buckets, max_distance, bidirectional in ((32, 128, True), (32, 128, False), (16, 64, True))]
        for kind, size, extra in settings:
            if kind == "relative":
                table = torch.randn(4, 2 * size + 1, dtype=torch.float64, requires_grad=True)
                score_mod = gallery.relative_bias(table, size)

                def index(i, j, size=size):
                    return min(max(i - j, -size), size) + size
            else:
                table = torch.randn(4, size, dtype=torch.float64, requires_grad=True)
                score_mod = gallery.t5_bias(table, size, *extra)

                def index(i, j, size=size, extra=extra):
                    return t5_bucket(j - i, size, *extra)
            got = flex_attention(q, k, v, score_mod=score_mod)
            want = torch.softmax(scores + bias_by_loops(table, t, index), dim=-1) @ v
            assert relative_error(got, want) < 1e-12, (kind, size, extra, t)
            grad = torch.randn_like(want)
            (got_table,), (want_table,) = (torch.autograd.grad(out, [table], grad) for out in (got, want))
            assert relative_error(got_table, want_table) < 1e-10, (kind, size, extra, t)
        ran(modes="eager", dtypes=torch.float64, lengths=t, heads=4, head_dims=32, batch=1,
            inputs=["relative position bias", "T5 relative position buckets"])


def test_t5_buckets_are_those_of_the_t5_paper():
    """The bucket function written out above, on the values the T5 code gives (32 buckets, 128, both ways)."""
    before = [t5_bucket(-d, 32, 128, True) for d in (0, 1, 7, 8, 12, 16, 32, 64, 127, 128, 1000)]
    assert before == [0, 1, 7, 8, 9, 10, 12, 14, 15, 15, 15]
    assert [t5_bucket(d, 32, 128, True) for d in (1, 8, 1000)] == [17, 24, 31]
    assert [t5_bucket(d, 32, 128, False) for d in (-1, -16, -32, 5)] == [1, 16, 21, 0]


# At 16384 tokens a written-out reference takes too long in Python: each mask built by broadcasting its
# definition, one row of 128-query blocks at a time: queries a column (R, 1), keys a row (1, kv_len).
def broadcast(name, t):
    p = params(t)
    q_len, kv_len, _ = shapes(t)[name]
    k = torch.arange(kv_len, dtype=torch.int32)[None, :]
    lengths, window, globals_, dilation, cached, prefix = (p[x] for x in ("lengths", "window", "globals", "dilation",
                                                                           "cached", "prefix"))
    height, width = p["grid"]
    kernel = p["kernel"]
    k_row, k_col = k // width, k % width
    segment = torch.repeat_interleave(torch.arange(3), torch.tensor([i + x for i, x in p["segments"]]))
    is_image = torch.cat([torch.arange(i + x) < i for i, x in p["segments"]])
    document = torch.repeat_interleave(torch.arange(4), torch.tensor(p["documents"]))
    ancestor = ref_tree(0, TREE)[0]  # (16, 16): draft j is draft i or one of its ancestors
    draft = (k - prefix).clamp(0, 15)

    def neighbours(q):
        top = torch.minimum(torch.maximum(q // width - kernel // 2, torch.tensor(0)), torch.tensor(height - kernel))
        left = torch.minimum(torch.maximum(q % width - kernel // 2, torch.tensor(0)), torch.tensor(width - kernel))
        return (k_row >= top) & (k_row < top + kernel) & (k_col >= left) & (k_col < left + kernel)

    return {"key_padding": lambda b, q: k < lengths[b],
            "padded_causal": lambda b, q: (k <= q) & (k < lengths[b]),
            "window_with_globals": lambda b, q: ((q - k).abs() < window) | (q < globals_) | (k < globals_),
            # a multiple of the dilation apart: the same remainder
            "dilated_causal": lambda b, q: (k <= q) & (q - k < window * dilation) & (q % dilation == k % dilation),
            "chunk_over_cache": lambda b, q: k <= cached + q,
            "cross_padding": lambda b, q: k < lengths[b],
            "neighbourhood_2d": lambda b, q: neighbours(q),
            "image_text": lambda b, q: ((segment[q] == segment[k])
                                        & (is_image[k] | (~is_image[q] & (k <= q)))),
            "tree": lambda b, q: (k < prefix) | ((k >= prefix) & ancestor[q, draft]),
            "documents": lambda b, q: (document[q] == document[k]) & (k <= q)}[name]


def skipped_by_broadcast(name, t, block=128):
    """The share of empty block x block squares, in percent, of the mask built by broadcasting."""
    q_len, kv_len, batch = shapes(t)[name]
    assert kv_len % block == 0
    allowed_at = broadcast(name, t)
    empty = total = 0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # for these small operations, on a shared 2-core machine: 3 times faster than 2 threads
    try:
        for b in range(batch):
            for start in range(0, q_len, block):
                rows = allowed_at(b, torch.arange(start, min(start + block, q_len), dtype=torch.int32)[:, None])
                by_block = rows.reshape(rows.shape[0], kv_len // block, block).any(2).any(0)  # (kv blocks,)
                empty += int((~by_block).sum())
                total += len(by_block)
    finally:
        torch.set_num_threads(threads)
    return 100 * empty / total


def skipped_written_out(allowed, block=128):
    """The share of empty block x block squares, in percent, of a written-out (batch, q, kv) mask."""
    batch, q_len, kv_len = allowed.shape
    padded = F.pad(allowed, (0, -kv_len % block, 0, -q_len % block))
    empty = ~padded.reshape(batch, padded.shape[1] // block, block, -1, block).any(4).any(2)
    return 100 * int(empty.sum()) / empty.numel()


def shade(share):
    return SHADES["none" if share == 0 else "under half" if share < 0.5 else "half or more" if share < 1 else "all"]


def drawn_from(allowed, cells=32):
    """The picture of a written-out (q_len, kv_len) mask, cell by cell: the share of allowed positions."""
    q_len, kv_len = allowed.shape
    size = max(q_len, kv_len) // cells
    return "\n".join("".join(shade(allowed[r * size:(r + 1) * size, c * size:(c + 1) * size].double().mean().item())
                             for c in range(kv_len // size)) for r in range(q_len // size))


@pytest.fixture(scope="module")
def program():
    """`python -m snippets.gallery`, run once for this module's tests. THP_MEM_ALLOC_ENABLE=1 lets PyTorch's CPU
    allocator use huge pages for the 16384-token masks (gigabytes each): it changes no value, and on a 2-core
    virtual machine, where page faults dominate, it cut the run from 44-61 s to 22-26 s."""
    from tests.helpers import python

    result = python("-W ignore -m snippets.gallery", env={"THP_MEM_ALLOC_ENABLE": "1"})
    assert result.returncode == 0, result.stderr
    return result.stdout


def entries(stdout):
    """name -> the lines the program printed for it: its first line, then its picture."""
    found, name = {}, None
    for line in stdout.splitlines():
        match = re.match(r"(\w+): ", line)
        name = match.group(1) if match else name
        found.setdefault(name, []).append(line)
    return found


def test_program_prints_every_mask(program):
    """`python -m snippets.gallery` prints an entry for each mask, then the sinks and t5_bias lines."""
    assert list(entries(program)) == NAMES + ["sinks", "t5_bias"]
    from snippets._cli import run  # and it takes no argument

    assert run(gallery.main, ["extra"]) == 2


def test_pictures_and_sparsity(program, observe, ran):
    """Each entry's first line: the share of skipped blocks at 4096 tokens, against a count of the empty blocks
    of the written-out mask (and gallery.sparsity itself, not rounded), and at 16384 against a count from
    the mask built by broadcasting; then its picture at 256 tokens, cell by cell against the written-out mask's
    shares (the padding masks: sample 2; the tree: at its own size, 16 prefix keys and its 16 drafts)."""
    printed = entries(program)
    big = gallery.examples(4096)
    for name in NAMES:
        first, *drawing = printed[name]
        found = re.fullmatch(rf"{name}: (\d+\.\d)% of the blocks skipped at 4096 tokens, (\d+\.\d)% at 16384", first)
        assert found, first
        s4 = skipped_written_out(written_out(name, 4096))
        assert gallery.sparsity(*big[name]) == pytest.approx(s4, abs=1e-9), name
        assert abs(float(found.group(1)) - s4) <= 0.05 + 1e-9, name
        assert abs(float(found.group(2)) - skipped_by_broadcast(name, 16384)) <= 0.05 + 1e-9, name
        q_len, kv_len, batch = shapes(256)[name]
        allowed = ref_tree(16, TREE)[0] if name == "tree" else written_out(name, 256)[batch - 1]
        assert "\n".join(drawing) == drawn_from(allowed), name
        rows, cols = {"chunk_over_cache": (8, 32), "cross_padding": (16, 32), "tree": (16, 32)}.get(name, (32, 32))
        assert len(drawing) == rows and {len(row) for row in drawing} == {cols}, name
        assert set("".join(drawing)) <= set(SHADES.values()), name
        observe(f"gallery.{name}", "\n".join(printed[name]))
    ran(lengths=[256, 4096, 16384])
    # The comment on sparsity(): BlockMask.sparsity() counts 128 x 128 positions a block, so with 16 queries
    # (one block of 16 rows, all 32 blocks computed) it says 100 * (1 - 32 * 128 * 128 / (16 * 4096)) = -700.
    tree = create_block_mask(big["tree"][0], None, None, 16, 4096, device="cpu")
    assert tree.sparsity() == -700.0 and gallery.sparsity(*big["tree"]) == 0.0


def test_sinks_and_t5_lines(program, observe):
    """The sinks line: a sink logit of 0 with equal scores is one more key, so a query over n keys gives it
    1 / (n + 1); the t5_bias line: the buckets of the written-out bucket function."""
    printed = entries(program)
    [sinks] = printed["sinks"]
    a, b, c = (f"{100 / (n + 1):.1f}%" for n in (1, 4, 256))
    assert a == "50.0%" and b == "20.0%" and c == "0.4%"
    assert sinks == (f"sinks: equal scores, sink logit 0: the sink takes {a} of the attention of a query over 1 key, "
                     f"{b} over 4 keys, {c} over 256 keys")
    [t5] = printed["t5_bias"]
    distances = (1, 7, 8, 12, 16, 32, 64, 127, 1000)
    assert t5 == ("t5_bias: buckets by distance, key before the query: "
                  + " ".join(f"{d}:{t5_bucket(-d, 32, 128, True)}" for d in distances) + "; key after it: "
                  + " ".join(f"{d}:{t5_bucket(d, 32, 128, True)}" for d in distances))
    observe("gallery.sinks", sinks)
    observe("gallery.t5_buckets", t5)


def test_examples_are_the_masks_their_comments_say():
    """examples(256): the padding lengths 256, 192 and 128 (sample 2 the most padded), window 16 and 4 global
    tokens, dilation 4, a 16 x 16 image with kernel 7, ... every sample equal to the written-out mask."""
    for name, (mask_mod, q_len, kv_len, batch) in gallery.examples(256).items():
        assert (q_len, kv_len, batch) == shapes(256)[name], name
        assert torch.equal(create_mask(mask_mod, batch, 1, q_len, kv_len, device="cpu")[:, 0], written_out(name, 256))


# GPU: compiled FlexAttention, forward and backward, bfloat16, against float64 SDPA with the written-out mask.
GPU_TOKENS = 1000


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_every_mask_forward_and_backward_on_gpu(name, ran):
    """Each mask at 1000 tokens (its own q and kv lengths: 250 queries over 750 cached keys, 500 queries over
    1000 keys, 16 drafts over 984 + 16 keys; a 25 x 40 image), batch 3 for the padding masks, 4 heads of 64:
    compiled flex_attention in bfloat16, output and gradients of q, k and v, against float64 SDPA."""
    t = GPU_TOKENS
    q_len, kv_len, batch = shapes(t)[name]
    mask_mod = mask_mods(t, device="cuda")[name]
    allowed = written_out(name, t).cuda()
    rows = allowed.any(-1, keepdim=True)[:, None]  # (batch, 1, q_len, 1): rows with a key
    block_mask = create_block_mask(mask_mod, batch, None, q_len, kv_len, device="cuda")
    q, k, v = qkv(batch, q_len, kv_len, heads=4, head_dim=64, dtype=torch.float32, device="cuda")
    grad_out = torch.randn_like(q) * rows

    def forward_backward(attention, dtype):
        inputs = [x.detach().to(dtype).requires_grad_() for x in (q, k, v)]
        out = attention(*inputs)
        return [out * rows, *torch.autograd.grad(out, inputs, grad_out.to(dtype))]

    torch._dynamo.reset()
    flex = torch.compile(flex_attention, dynamic=False)
    got = forward_backward(lambda q, k, v: flex(q, k, v, block_mask=block_mask), torch.bfloat16)
    want = forward_backward(lambda q, k, v: sdpa(q, k, v, allowed), torch.float64)
    for what, g, w in zip(("output", "dq", "dk", "dv"), got, want):
        assert relative_error(g, w) < 2e-2, (name, what)
    ran(modes="compiled", dtypes=torch.bfloat16, lengths=sorted({q_len, kv_len}), heads=4, head_dims=64,
        batch=batch, passes=["forward", "backward"], backends="triton", inputs=INPUTS[name])


@pytest.mark.gpu
def test_sinks_forward_and_backward_on_gpu(ran):
    """attention_with_sinks compiled as a whole (fullgraph), bfloat16, 1000 tokens, batch 2, 4 heads of 64,
    with a causal BlockMask: output and the gradients of q, k, v and the sinks against float64 autograd of the
    softmax written out with the extra column."""
    t = GPU_TOKENS
    causal = create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None, t, t, device="cuda")
    allowed = torch.ones(t, t, dtype=torch.bool, device="cuda").tril().expand(2, t, t)
    q, k, v = qkv(2, t, t, heads=4, head_dim=64, dtype=torch.float32, device="cuda")
    sinks = torch.tensor([-2.0, 0.0, 1.5, 4.0], device="cuda")
    grad_out = torch.randn_like(q)

    def forward_backward(attention, dtype, sinks_dtype):
        inputs = [x.detach().to(dtype).requires_grad_() for x in (q, k, v)]
        inputs.append(sinks.detach().to(sinks_dtype).requires_grad_())
        out = attention(*inputs)
        return [out, *torch.autograd.grad(out, inputs, grad_out.to(dtype))]

    torch._dynamo.reset()
    compiled = torch.compile(gallery.attention_with_sinks, dynamic=False, fullgraph=True)
    got = forward_backward(lambda q, k, v, s: compiled(q, k, v, s, causal), torch.bfloat16, torch.float32)
    want = forward_backward(lambda q, k, v, s: softmax_with_sink(q, k, v, s, allowed), torch.float64, torch.float64)
    assert got[0].dtype == torch.bfloat16
    for what, g, w in zip(("output", "dq", "dk", "dv", "dsinks"), got, want):
        assert relative_error(g, w) < 2e-2, what
    ran(modes="compiled", dtypes=torch.bfloat16, lengths=t, heads=4, head_dims=64, batch=2,
        passes=["forward", "backward"], backends="triton", inputs=["attention sinks", "causal mask"])
