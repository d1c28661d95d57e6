"""kernel_options (snippets/kernel_options.py) against PyTorch's own declaration of the keys, compiled
FlexAttention without options, and float64 attention with each mask written out position by position."""
import math
import re

import pytest
import torch

from snippets import kernel_options as ko
from tests.helpers import python

# The keys of FlexKernelOptions, as torch/nn/attention/flex_attention.py declares them in 2.11 and 2.13.
KEYS = ["num_warps", "num_stages", "BLOCK_M", "BLOCK_N", "BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2",
        "PRESCALE_QK", "ROWS_GUARANTEED_SAFE", "BLOCKS_ARE_CONTIGUOUS", "WRITE_DQ", "FORCE_USE_FLEX_ATTENTION",
        "USE_TMA", "kpack", "matrix_instr_nonkdim", "waves_per_eu", "BACKEND"]
RULES = {"causal": lambda i, j: i >= j, "later_keys": lambda i, j: j > i or j == 511,
         "first_and_last_keys": lambda i, j: j < 128 or j >= 384}
EARLY = {  # options refused before anything compiles, on every device: (error type, words of its message)
    "{'BACKEND': 'flash'}": (ValueError, "Invalid BACKEND value 'flash'. Must be one of ('AUTO', 'TRITON', 'FLASH', "
                                         "'TRITON_DECODE')"),
    "{'OUTPUT_LOGSUMEXP': True}": (AssertionError, "OUTPUT_LOGSUMEXP must not be in kernel_options"),
}


def reference(q, k, v, mask_mod, score_mod, bias_scale=1.0):
    """float64 attention: the mask evaluated at every position in plain Python, the bias of add_bias
    written out as -0.05 (i - j) (times bias_scale), and rows with no allowed key set to zero."""
    heads, tokens, head_dim = q.shape[1:]
    allowed = torch.tensor([[RULES[mask_mod.__name__](i, j) for j in range(tokens)] for i in range(tokens)])
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(head_dim)
    if score_mod is not None:
        i, j = torch.arange(tokens).double()[:, None], torch.arange(tokens).double()[None, :]
        scores = scores + bias_scale * (-0.05 * (i - j)).to(scores.device)
    scores = scores.masked_fill(~allowed.to(scores.device), -math.inf)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0)
    return weights @ v.double()


def relative_error(got, want) -> float:
    return ((got.double() - want).norm() / want.norm()).item()


def inputs(device, dtype, head_dim):
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(1, 2, 512, head_dim, generator=generator).to(device, dtype) for _ in range(3)]


def test_the_keys_are_those_pytorch_declares(ran):
    assert ko.fields() == sorted(KEYS)
    assert set(ko.fields()) == set(ko.FlexKernelOptions.__optional_keys__)  # every key may be left out
    ran(inputs="FlexKernelOptions")


def test_the_docstring_gives_prefixes_no_guarantee_and_the_promises_the_page_quotes(ran):
    """The page quotes FlexKernelOptions' docstring: its words, read from PyTorch's source."""
    import inspect

    source = " ".join(inspect.getsource(ko.FlexKernelOptions).split())
    for words in ["The options can be prefixed with ``fwd_`` or ``bwd_`` to apply only to forward or backward pass",
                  "We currently do not provide any backward compatibility guarantees for these options",
                  "at least one value in each row is not masked out", "all blocks in the mask are contiguous",
                  "pre-scale QK by 1/sqrt(d) and change of base", "slightly faster but may have more numerical error",
                  "causal attention is guaranteed safe"]:
        assert words in source, words
    ran(inputs="FlexKernelOptions")


def test_each_key_does_what_its_docstring_says_the_page_says(ran):
    """The page's table of what each key does, as words of the docstring under each key's declaration in
    PyTorch's source, read with ast: every key has one and the table covers every key (a new or removed
    key fails here)."""
    import ast
    import inspect
    import textwrap

    body = ast.parse(textwrap.dedent(inspect.getsource(ko.FlexKernelOptions))).body[0].body
    docstrings = {node.target.id: " ".join(following.value.value.split())  # the string under each key
                  for node, following in zip(body, body[1:])
                  if isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr)
                  and isinstance(following.value, ast.Constant)}
    EACH_KEY = {
        "num_warps": ["Number of warps", "Higher values may improve performance but increase register pressure",
                      "Default is determined by autotuning"],
        "num_stages": ["Number of pipeline stages", "Higher values may improve performance but increase shared memory usage",
                       "Default is determined by autotuning"],
        "BLOCK_M": ["sequence length dimension of Q in forward pass", "Must be a power of 2",
                    "Common values: 16, 32, 64, 128", "Default is determined by autotuning"],
        "BLOCK_N": ["sequence length dimension of K/V in forward pass", "Must be a power of 2",
                    "Default is determined by autotuning"],
        "BLOCK_M1": ["Q dimension in backward pass", "Use as 'bwd_BLOCK_M1'", "Default is determined by autotuning"],
        "BLOCK_N1": ["K/V dimension in backward pass", "Use as 'bwd_BLOCK_N1'", "Default is determined by autotuning"],
        "BLOCK_M2": ["second Q dimension in backward pass", "Use as 'bwd_BLOCK_M2'", "Default is determined by autotuning"],
        "BLOCK_N2": ["second K/V dimension in backward pass", "Use as 'bwd_BLOCK_N2'",
                     "Default is determined by autotuning"],
        "PRESCALE_QK": ["pre-scale QK by 1/sqrt(d) and change of base",
                        "slightly faster but may have more numerical error", "Default: False."],
        "ROWS_GUARANTEED_SAFE": ["at least one value in each row is not masked out", "Allows skipping safety checks",
                                 "Default: False."],
        "BLOCKS_ARE_CONTIGUOUS": ["all blocks in the mask are contiguous", "Allows optimizing block traversal",
                                  "Default: False."],
        "WRITE_DQ": ["Setting this to False will force this to happen in the DK loop",
                     "gradient scatters are done in the DQ iteration loop of the backward pass", "might be faster",
                     "Default: True."],
        "FORCE_USE_FLEX_ATTENTION": ["forces the use of the flex attention kernel",
                                     "flex-decoding kernel for short sequences", "debugging", "Default: False."],
        "USE_TMA": ["Tensor Memory Accelerator", "experimental", "NVIDIA GPUs Hopper+", "Default: False."],
        "kpack": ["ROCm-specific"],
        "matrix_instr_nonkdim": ["ROCm-specific"],
        "waves_per_eu": ["ROCm-specific"],
        "BACKEND": ['"AUTO"', '"TRITON"', '"TRITON_DECODE": Triton flex_decoding kernel, only available for short sequence',
                    '"FLASH": Experimental', "user needs to have flash installed",
                    "cannot be combined with legacy knobs such as ``FORCE_USE_FLEX_ATTENTION``",
                    "Raises an error if the requested backend cannot be used", 'Default: "AUTO"'],
    }
    assert sorted(docstrings) == sorted(EACH_KEY) == ko.fields()
    for key, words in EACH_KEY.items():
        for phrase in words:
            assert phrase in docstrings[key], (key, phrase)
    # The page's table: one row per key; its default as the docstring gives it; a link in the last column
    # for exactly the keys that the page's tries set (TRIES, less the misspelt keys).
    from pathlib import Path

    page = (Path(__file__).parents[1] / "docs/en/kernel_options.md").read_text(encoding="utf-8")
    table = page.split("{#each-key}")[1].split("\n## ")[0]
    rows = {key: cells for line in table.splitlines() if line.startswith("| `")
            for cells in [[c.strip() for c in line.strip("|").split("|")]] for key in re.findall(r"`(\w+)`", cells[0])}
    assert sorted(rows) == ko.fields()
    tried = {key for options, _, _ in ko.TRIES for key in options} & set(ko.fields())
    assert tried == {"BACKEND", "BLOCK_M", "BLOCK_N", "ROWS_GUARANTEED_SAFE", "BLOCKS_ARE_CONTIGUOUS", "PRESCALE_QK"}
    for key, (_, _, default, where) in rows.items():
        given = re.search(r"Default: (\S+?)\.?$", docstrings[key]) or re.search(r"Default: (\"\w+\")", docstrings[key])
        expected = ("autotuning" if "Default is determined by autotuning" in docstrings[key]
                    else f"`{given.group(1)}`" if given else "not given")
        assert default == expected, (key, default, expected)
        assert ("](#cpu), [GPU](#gpu)" in where) == (key in tried), (key, where)
    ran(inputs="FlexKernelOptions")


NAMES = ["{'BACKEND': 'flash'} causal", "{'OUTPUT_LOGSUMEXP': True} causal", "{'BLOCK_MM': 64} causal",
         "{'backend': 'FLASH'} causal", "{'BLOCK_M': 48} causal", "{'BLOCK_M': 64, 'BLOCK_N': 64} causal",
         "{} later_keys", "{'ROWS_GUARANTEED_SAFE': True} later_keys", "{'ROWS_GUARANTEED_SAFE': True} causal",
         "{} first_and_last_keys", "{'BLOCKS_ARE_CONTIGUOUS': True} first_and_last_keys",
         "{'BLOCKS_ARE_CONTIGUOUS': True} causal", "{} causal + add_bias", "{'PRESCALE_QK': True} causal + add_bias",
         "{'PRESCALE_QK': True} causal"]
BROKEN = ["{'ROWS_GUARANTEED_SAFE': True} later_keys", "{'BLOCKS_ARE_CONTIGUOUS': True} first_and_last_keys",
          "{'PRESCALE_QK': True} causal + add_bias"]


def named(rows):
    return [(f"{options} {mask_mod.__name__}" + (f" + {score_mod.__name__}" if score_mod else ""), options, mask_mod,
             score_mod, got, want) for options, mask_mod, score_mod, got, want in rows]


def assert_printed(text, rows):
    """Each line the page prints says what the try gave: the error's type, or the largest difference from
    eager FlexAttention and the rows with a NaN, worked out here again."""
    lines = text.splitlines()[1:]
    assert len(lines) == len(rows)
    for line, (name, options, mask_mod, score_mod, got, want) in zip(lines, named(rows)):
        assert line.startswith(name + " "), (line, name)
        if isinstance(got, Exception):
            assert f" {type(got).__name__}: " in line, line
        else:
            nan_rows = int(got.isnan().any(dim=-1).any(dim=1).sum())
            most = (got.double() - want.double()).nan_to_num(0).abs().max().item()
            assert f" largest difference {most:.1e}" in line and (f"NaN in {nan_rows} of 512 rows" in line) == (nan_rows > 0)


def test_on_the_cpu_two_options_are_refused_and_every_other_key_is_ignored(observe, ran):
    """On the CPU, compiled: BACKEND's value and OUTPUT_LOGSUMEXP are refused, by a check that eager
    FlexAttention makes too; every other try (a misspelt key, a block size no GPU kernel takes, the three
    promises broken) gives bit for bit the output of compiled FlexAttention without options, which is
    float64 attention within 1e-5."""
    rows = ko.outcomes("cpu")
    assert [name for name, *_ in named(rows)] == NAMES
    q, k, v = inputs("cpu", torch.float32, 64)
    defaults = {}
    for name, options, mask_mod, score_mod, got, want in named(rows):
        if str(options) in EARLY:
            kind, words = EARLY[str(options)]
            assert isinstance(got, kind) and words in str(got), (name, got)
            with pytest.raises(kind, match=re.escape(words)):  # flex_attention's own check: eager makes it too
                ko.flex_attention(q, k, v, kernel_options=options)
            continue
        assert isinstance(got, torch.Tensor), (name, got)
        key = (mask_mod.__name__, score_mod)
        if key not in defaults:
            torch._dynamo.reset()
            block_mask = ko.create_block_mask(mask_mod, None, None, 512, 512, device="cpu")
            defaults[key] = torch.compile(ko.flex_attention)(q, k, v, score_mod=score_mod, block_mask=block_mask)
            assert relative_error(defaults[key], reference(q, k, v, mask_mod, score_mod)) < 1e-5
        assert torch.equal(got, defaults[key]), name
    text = ko.describe(rows, "cpu")
    assert_printed(text, rows)
    observe("kernel_options.cpu", text)
    ran(modes="compiled", dtypes=torch.float32, head_dims=64, lengths=512, batch=1, heads=2, passes="forward")


CASES = [(torch.float32, 64), (torch.bfloat16, 64), (torch.float32, 128), (torch.bfloat16, 128)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,head_dim", CASES, ids=[f"{str(d)[6:]}-{h}" for d, h in CASES])
def test_on_the_gpu_a_broken_promise_gives_wrong_output_without_an_error(dtype, head_dim, observe, ran):
    """On the GPU (Triton kernels), PyTorch's default float32 matmul precision: BACKEND's value and
    OUTPUT_LOGSUMEXP are refused as on the CPU; a misspelt key with an int value is ignored, one with a
    text value stops the compile (InductorError, from a NameError); a BLOCK_M that does not divide the
    BlockMask's block size, 128, stops it (InductorError, from a ValueError); block sizes of 64, each
    mask without options and each promise kept are float64 attention within 1e-5 (float32) or 2e-2
    (bfloat16); each promise broken runs and is wrong: NaN in rows that have keys (ROWS_GUARANTEED_SAFE
    with later_keys, where every row has a key), or a relative error above 0.1 (BLOCKS_ARE_CONTIGUOUS
    with key blocks 0 and 3; PRESCALE_QK with a bias, whose output in float32 is that of the bias times
    ln 2 within 1e-5)."""
    from torch._inductor.exc import InductorError

    rows = ko.outcomes("cuda", dtype, head_dim)
    assert [name for name, *_ in named(rows)] == NAMES
    q, k, v = inputs("cuda", dtype, head_dim)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    for name, options, mask_mod, score_mod, got, want in named(rows):
        if str(options) in EARLY:
            kind, words = EARLY[str(options)]
            assert isinstance(got, kind) and words in str(got), (name, got)
        elif options in ({"backend": "FLASH"}, {"BLOCK_M": 48}):
            words = "NameError('FLASH is not defined')" if "backend" in options else \
                "ValueError: Q and KV block size must be divisible by BLOCK_M and BLOCK_N. We got Q_BLOCK_SIZE=128 " \
                "and KV_BLOCK_SIZE=128"
            assert isinstance(got, InductorError) and words in str(got), (name, got)
        else:
            assert isinstance(got, torch.Tensor), (name, got)
            error = relative_error(got.nan_to_num(0), reference(q, k, v, mask_mod, score_mod))
            nan_rows = int(got.isnan().any(dim=-1).any(dim=1).sum())
            if name == BROKEN[0]:
                assert nan_rows > 0, (name, nan_rows)  # every row of later_keys has a key
            elif name in BROKEN:
                assert nan_rows == 0 and error > 0.1, (name, error)
                if "PRESCALE_QK" in name and dtype == torch.float32:  # the score_mod saw scores times log2(e)
                    assert relative_error(got, reference(q, k, v, mask_mod, score_mod, math.log(2))) < tolerance
            else:
                assert nan_rows == 0 and error < tolerance, (name, error)
    text = ko.describe(rows, "cuda", dtype, head_dim)
    assert_printed(text, rows)
    if (dtype, head_dim) == (torch.float32, 64):
        observe("kernel_options.gpu", text)
    ran(modes="compiled", dtypes=dtype, head_dims=head_dim, lengths=512, batch=1, heads=2, passes="forward",
        backends="triton")


def test_program_prints_the_keys_and_the_cpu_tries(observe):
    result = python("-m", "snippets.kernel_options", timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    first = result.stdout.splitlines()[0]
    assert first == f"18 keys: {', '.join(sorted(KEYS))}"
    observe("kernel_options.fields", first)
    assert "{'BLOCKS_ARE_CONTIGUOUS': True} first_and_last_keys" in result.stdout


def test_unexpected_arguments_are_refused_in_one_line():
    result = python("-m", "snippets.kernel_options", "--gpu")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "snippets.kernel_options" in result.stderr
