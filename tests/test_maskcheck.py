import importlib.util
import json
import shutil
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, create_mask, flex_attention

from snippets import maskcheck
from snippets._cli import run
from tests import broken_masks
from tests.helpers import ROOT, python, section, sh

# The module the page tells the reader to save as my_masks.py, loaded from its file as `my_masks`.
MY_MASKS = ROOT / "snippets/configs/my_masks.py"
_spec = importlib.util.spec_from_file_location("my_masks", MY_MASKS)
my_masks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(my_masks)

TOKENS = broken_masks.TOKENS  # 1000: the last 128-token block is partial
GUIDE = "https://flexattention-guide.github.io/"


def report(capsys, *argv):
    """maskcheck run in this process as the command runs: (exit code, stdout lines, stderr)."""
    code = run(maskcheck.main, list(argv))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def statuses(lines) -> dict:
    """{check: status} of a text report (its last line is the summary)."""
    return {line.split()[1]: line.split()[0] for line in lines[:-1]}


def problems(found) -> list:
    return [(f["check"], f["status"]) for f in found if f["status"] in ("fail", "warn")]


@pytest.mark.parametrize("name", sorted(broken_masks.EXPECTED))
def test_each_broken_mask_is_reported_by_its_check_only(capsys, ran, name):
    check, status = broken_masks.EXPECTED[name]
    length = broken_masks.LENGTHS.get(name, TOKENS)
    code, lines, err = report(capsys, f"tests.broken_masks:{name}", "--q-len", str(length), "--kv-len", str(length),
                              *broken_masks.ARGS.get(name, []), "--no-compile")
    ran(lengths=length, modes="eager")
    assert code == 1 and not err, lines + [err]
    found = statuses(lines)
    assert {c: s for c, s in found.items() if s in ("fail", "warn")} == {check: status}, lines
    assert found["reference"] == "skip"
    line = next(line for line in lines if line.split()[1] == check)
    assert " -> " in line and line.endswith(")") and GUIDE in line
    assert lines[-1] == f"1 finding ({int(status == 'fail')} fail, {int(status == 'warn')} warn)"
    # a read past the end names the lengths, or the samples or heads where one entry each reads nothing past it
    assert (check == "bounds" and "indexed by the sample or head" in line) == (name == "two_samples_of_three")
    assert (check == "bounds" and "at the given lengths 1024 x 1024" in line) == (name.startswith("same_segment"))
    if name == "two_samples_of_three":  # the line names what was given
        assert "with --batch 3, not with one sample and head" in line, line
    if check in ("trace", "bounds"):  # nothing else can run (a read past the end stops the trace)
        assert all(s == "skip" for c, s in found.items() if c != check), lines


@pytest.mark.parametrize("name", broken_masks.CLEAN + ["causal_documents"])
def test_clean_masks_exit_0_and_say_so(capsys, monkeypatch, name):
    monkeypatch.setitem(sys.modules, "my_masks", my_masks)  # as if saved in the current folder
    module = "my_masks" if name == "causal_documents" else "tests.broken_masks"
    code, lines, err = report(capsys, f"{module}:{name}", "--q-len", str(TOKENS), "--kv-len", str(TOKENS), "--no-compile")
    assert code == 0 and not err, lines
    assert set(statuses(lines).values()) <= {"ok", "skip"}
    assert lines[-1] == f"no findings: {module}:{name} is ready for flex_attention (not compiled: --no-compile)"


# The commands of snippets/shell/maskcheck.sh, run as the page runs them: in the folder where the reader
# saved my_masks.py, each through a shell, their output observed for the page.
COMMANDS = {"causal_documents": 0, "unpadded_documents": 1, "recent_tokens": 1}
LENGTHS = {"unpadded_documents": 1024}  # the batch padded to 1024 past its 1000 ids; the others at 1000


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_commands_as_shown(tmp_path, observe, ran, name):
    shutil.copy(MY_MASKS, tmp_path / "my_masks.py")
    command = section("snippets/shell/maskcheck.sh", name)
    length = LENGTHS.get(name, 1000)
    assert command == f"python -m snippets.maskcheck my_masks:{name} --q-len {length} --kv-len {length}"
    result = sh(command, cwd=tmp_path)
    assert result.returncode == COMMANDS[name], result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr and not result.stderr
    lines = result.stdout.splitlines()
    found = statuses(lines)
    assert list(found) == ["trace", "bounds", "empty-rows", "batch-heads", "sparsity", "reference"]
    if name == "causal_documents":
        ran(lengths=1000, modes="compiled", dtypes=torch.float32, head_dims=16, batch=1, heads=1)
        assert set(found.values()) == {"ok"}, lines
        assert "relative error" in lines[5] and "compiled and ran in" in lines[5]
        assert lines[-1] == "no findings: my_masks:causal_documents is ready for flex_attention"
    elif name == "unpadded_documents":
        assert found == {**dict.fromkeys(found, "skip"), "bounds": "fail"}, lines
        assert lines[1].startswith("fail  bounds       reads past the end of a tensor at the given lengths 1024 x 1024 "
                                   "(IndexError: index 1000 is out of bounds for dimension 0 with size 1000, my_masks.py "
                                   "line "), lines[1]
        assert lines[1].endswith(f"or clamp the index ({GUIDE}gallery/#trap)")
    else:
        assert found == {**dict.fromkeys(found, "skip"), "trace": "fail"}, lines
        assert "Python `if` on a tensor, my_masks.py line" in lines[0] and "`if q_idx - kv_idx >= 256:`" in lines[0]
    observe(f"maskcheck.{name}", result.stdout.strip())


def test_every_gallery_mask_is_clean(ran):
    """snippets.gallery's examples(tokens) -> {name: (mask_mod, q_len, kv_len, batch)}: no finding, eager."""
    from snippets import gallery

    examples = gallery.examples(TOKENS)
    assert examples
    for name, (mask_mod, q_len, kv_len, batch) in examples.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = maskcheck.check(mask_mod, q_len, kv_len, batch=batch, compile=False)
        assert not problems(found), (name, found)
        ran(lengths=[q_len, kv_len], modes="eager")


def test_one_gallery_mask_compiled_matches_sdpa(ran):
    from snippets import gallery

    examples = gallery.examples(TOKENS)
    name = next((n for n, e in examples.items() if e[3] > 1), next(iter(examples)))  # one with a batch, if any
    mask_mod, q_len, kv_len, batch = examples[name]
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = maskcheck.check(mask_mod, q_len, kv_len, batch=batch)
    ran(lengths=[min(q_len, 1024), min(kv_len, 1024)], modes="compiled", dtypes=torch.float32, head_dims=16)
    assert not problems(found), (name, found)
    assert found[-1]["check"] == "reference" and found[-1]["status"] == "ok", found[-1]


BAD_USAGE = [
    (["my_masks", "--q-len", "10", "--kv-len", "10"], "is not MODULE:NAME"),
    (["no_such_module:causal", "--q-len", "10", "--kv-len", "10"], "no module 'no_such_module' here"),
    (["tests.broken_masks:no_such_mask", "--q-len", "10", "--kv-len", "10"], "has no name 'no_such_mask'. Fix: give one of"),
    (["tests.broken_masks:TOKENS", "--q-len", "10", "--kv-len", "10"], "is not a function (int)"),
    (["tests.broken_masks:sliding_window", "--q-len", "10", "--kv-len", "10"],
     "takes 1 parameter (window), not the 4 of a mask_mod (b, h, q_idx, kv_idx) or the 5 of a score_mod (score, b, h, "
     "q_idx, kv_idx). Fix: give a name bound to the mask_mod itself, e.g. `my_mask = sliding_window(256)` at module level"),
    (["tests.broken_masks:three_parameters", "--q-len", "10", "--kv-len", "10"],
     "takes 3 parameters (q_idx, kv_idx, h), not the 4 of a mask_mod (b, h, q_idx, kv_idx)"),
    (["tests.broken_masks:causal", "--q-len", "0", "--kv-len", "10"], "--q-len 0 is out of range"),
    (["tests.broken_masks:causal", "--q-len", "10", "--kv-len", "9000"], "--kv-len 9000 is out of range"),
    (["tests.broken_masks:causal", "--q-len", "10", "--kv-len", "10", "--heads", "-1"], "--heads -1 is out of range"),
    (["tests.broken_masks:causal", "--q-len", "ten", "--kv-len", "10"], "invalid int value: 'ten'"),
    (["tests.broken_masks:causal", "--q-len", "10"], "the following arguments are required: --kv-len"),
]


@pytest.mark.parametrize("argv, said", BAD_USAGE, ids=[" ".join(a[:2]) for a, _ in BAD_USAGE])
def test_bad_usage_is_one_line_and_exit_2(capsys, argv, said):
    try:
        code = run(maskcheck.main, argv)
    except SystemExit as e:  # argparse's own errors: one line and exit 2, through ArgumentParser.error
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2 and not out and err.count("\n") == 1 and err.startswith("error: "), err
    assert said in err and ". Fix: " in err, err


def test_a_module_that_fails_to_import_is_one_line_in_a_shell(tmp_path):
    (tmp_path / "my_masks.py").write_text("def causal(b, h, q_idx, kv_idx)\n    return q_idx >= kv_idx\n")
    result = python("-m snippets.maskcheck my_masks:causal --q-len 10 --kv-len 10", cwd=tmp_path)
    assert result.returncode == 2 and not result.stdout and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: importing my_masks failed (SyntaxError: ") and result.stderr.count("\n") == 1
    missing = python("-m snippets.maskcheck my_masks:causal --q-len 10 --kv-len 10")  # run from elsewhere
    assert missing.returncode == 2 and missing.stderr.startswith("error: no module 'my_masks' here. Fix: run the "
                                                                 "command in the folder where my_masks.py is saved")


def test_json_shape(capsys):
    code, lines, _ = report(capsys, "tests.broken_masks:strictly_causal", "--q-len", "300", "--kv-len", "300",
                            "--no-compile", "--json")
    result = json.loads("\n".join(lines))
    assert set(result) == {"target", "findings", "exit"} and code == result["exit"] == 1
    assert result["target"] == "tests.broken_masks:strictly_causal"
    assert [f["check"] for f in result["findings"]] == ["trace", "bounds", "empty-rows", "batch-heads", "sparsity",
                                                        "reference"]
    for f in result["findings"]:
        assert set(f) == {"check", "status", "message", "fix", "link"} and f["status"] in ("ok", "warn", "fail", "skip")
        assert f["link"] == f"{GUIDE}maskcheck/#{f['check']}" and bool(f["fix"]) == (f["status"] in ("warn", "fail"))
    clean = json.loads(python("-m snippets.maskcheck tests.broken_masks:causal_score_mod --q-len 200 --kv-len 200 "
                              "--no-compile --json").stdout)
    assert clean["exit"] == 1 and [f["check"] for f in clean["findings"]][-2:] == ["score-mod", "reference"]
    assert clean["findings"][-2]["link"] == f"{GUIDE}masks/#mask-vs-score"


# The trace check names the cause from PyTorch's own error: these are the real messages of torch's vmap,
# so that a change in them shows up here.
NUMBER = "a Python number from a tensor (`.item()`, `.tolist()`, NumPy)"
TRACE_ERRORS = {
    "window_with_if": ("data-dependent control flow", "Python `if` on a tensor", "`if q_idx - kv_idx > 128:`", "torch.where"),
    "causal_window_and": ("data-dependent control flow", "Python `and`/`or`/`not` on tensors",
                          "`return q_idx >= kv_idx and q_idx - kv_idx < 256`", "`&`, `|`, `~`"),
    "causal_item": ("calling .item() on a Tensor", NUMBER, "`return kv_idx.item() <= q_idx`", "precompute"),
    "prefix_tolist": ("Cannot access data pointer of Tensor that doesn't have storage", NUMBER, "kv_idx.tolist() < 100",
                      "precompute"),
    "everything_python": ("must only return Tensors, got type <class 'bool'>", "it returns no tensor", "", "q_idx >= kv_idx"),
    "causal_as_int": ("mask.dtype must be torch.bool, got torch.int64", "it returns no boolean tensor", "", "comparison"),
}


@pytest.mark.parametrize("name", list(TRACE_ERRORS))
def test_trace_classification_against_the_real_error(name):
    real, cause, line, fix = TRACE_ERRORS[name]
    with pytest.raises(Exception) as raised:
        create_block_mask(getattr(broken_masks, name), None, None, 256, 256, device="cpu")
    assert real in str(raised.value)
    got = maskcheck.trace_failure(raised.value)
    assert got["status"] == "fail" and got["message"].startswith(cause) and fix in got["fix"], got
    assert f"({type(raised.value).__name__}: {str(raised.value).splitlines()[0]})" in got["message"]
    assert (f"broken_masks.py line " in got["message"] and line in got["message"]) if line else "line" not in got["message"]


def test_a_wrong_call_inside_the_mask_is_named():
    def helper(q_idx, kv_idx):
        return q_idx >= kv_idx

    def mask(b, h, q_idx, kv_idx):
        return helper(q_idx)

    with pytest.raises(TypeError) as raised:
        create_block_mask(mask, None, None, 128, 128, device="cpu")
    got = maskcheck.trace_failure(raised.value)
    assert got["message"].startswith("a wrong signature") and "missing 1 required positional argument" in got["message"]


def test_what_the_empty_rows_warning_says(ran):
    """FlexAttention (eager, CPU) returns zeros and a log-sum-exp of -inf for a row with no key; a softmax
    written out returns NaN. SDPA on the CPU returns zeros there too (not NaN): the warning does not say NaN."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 256, 16) for _ in range(3))
    mask_mod = broken_masks.strictly_causal
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out, aux = flex_attention(q, k, v, block_mask=create_block_mask(mask_mod, None, None, 256, 256, device="cpu"),
                                  return_aux=AuxRequest(lse=True))
    ran(modes="eager", dtypes=torch.float32, lengths=256, head_dims=16)
    assert (out[:, :, 0] == 0).all() and torch.isneginf(aux.lse[:, :, 0]).all() and torch.isfinite(aux.lse[:, :, 1:]).all()
    dense = create_mask(mask_mod, None, None, 256, 256, device="cpu")
    by_hand = torch.softmax((q @ k.transpose(-1, -2)).masked_fill(~dense, float("-inf")), -1) @ v
    assert by_hand[:, :, 0].isnan().all() and not by_hand[:, :, 1:].isnan().any()
    assert (F.scaled_dot_product_attention(q, k, v, attn_mask=dense)[:, :, 0] == 0).all()
    message = next(f["message"] for f in maskcheck.check(mask_mod, 256, 256, compile=False) if f["check"] == "empty-rows")
    assert message == ("1 of 256 query rows have no allowed key (q_idx 0): FlexAttention returns zeros for them and a "
                       "log-sum-exp of -inf; a softmax written out by hand returns NaN")


def test_what_an_index_past_the_tensor_does_under_vmap():
    """What the bounds check relies on, on this PyTorch: an index past the end raises IndexError inside
    create_mask; a negative one wraps around to the end without an error (which no check can see)."""
    ids = torch.arange(TOKENS) // 300
    with pytest.raises(IndexError, match="index 1000 is out of bounds for dimension 0 with size 1000"):
        create_mask(lambda b, h, q_idx, kv_idx: ids[q_idx] == ids[kv_idx], None, None, 1024, 1024, device="cpu")
    wrapped = create_mask(lambda b, h, q_idx, kv_idx: ids[q_idx - 1] == ids[kv_idx], None, None, TOKENS, TOKENS,
                          device="cpu")
    assert torch.equal(wrapped[0, 0, 0], ids == ids[-1])  # q_idx 0 read ids[-1]


def test_bounds_at_multiples_of_128_and_with_a_padded_table():
    at_896 = maskcheck.check(broken_masks.same_segment, 896, 896, compile=False)
    assert at_896[1] == maskcheck.finding("bounds", "ok", "the lengths are multiples of 128: no padding")
    for length in (TOKENS, 1024):  # the ids padded to 1024: clean at the 1000 real tokens and at the padded batch
        padded = maskcheck.check(my_masks.causal_documents, length, length, compile=False)
        assert not problems(padded), padded
    assert maskcheck.check(my_masks.causal_documents, TOKENS, TOKENS, compile=False)[1]["message"] == \
        "nothing read out of range up to 1024 x 1024"


def test_a_table_of_one_entry_per_token_is_safe_at_its_length(ran):
    """A table of exactly q_len entries at 1000 tokens: read past its end only at 1024, where PyTorch's Triton
    kernel does not read (its templates give the mask_mod and score_mod the position modulo the length in a
    block that reaches past it). Kills: an index error past the given lengths reported as a finding again."""
    from pathlib import Path

    templates = Path(torch.__file__).parent / "_inductor/kernel/flex/templates"
    common = (templates / "common.py.jinja").read_text(encoding="utf-8")
    assert "return indices % max_len if max_len is not None else indices" in \
        (templates / "utilities.py.jinja").read_text(encoding="utf-8")
    assert "m = get_bounded_indices(offs_m, Q_LEN if CHECK_BLOCK_BOUNDARY else None)" in common
    assert "n = get_bounded_indices(offs_n, KV_LEN if CHECK_BLOCK_BOUNDARY else None)" in common
    found = maskcheck.check(broken_masks.same_segment, TOKENS, TOKENS, compile=False)
    ran(lengths=TOKENS, modes="eager")
    assert not problems(found), found
    assert found[0]["status"] == "ok" and found[1] == maskcheck.finding(
        "bounds", "ok", "reads past the end of a tensor only past the given lengths (1024 x 1024); PyTorch's Triton "
        "kernel evaluates a last, partial block at positions modulo the length, so 1000 x 1000 is safe; if you pad "
        "the inputs to a multiple of 128, pad this tensor too")


def test_a_table_shorter_than_the_given_lengths_fails_bounds_not_trace(ran):
    """The same table of 1000 entries with the batch padded to 1024, for a mask_mod and for a score_mod (traced
    by create_mask): bounds fails at the given lengths, trace is skipped, nothing else runs. Kills: the trace's
    index error read as a tracing failure (trace fail, bounds skip)."""
    def biased(score, b, h, q_idx, kv_idx):
        return score + broken_masks.segment[kv_idx]

    for fn in (broken_masks.same_segment, biased):
        found = maskcheck.check(fn, 1024, 1024, compile=False)
        ran(lengths=1024, modes="eager")
        later = ["empty-rows", "batch-heads", "sparsity"] + ["score-mod"] * (fn is biased) + ["reference"]
        assert [(f["check"], f["status"]) for f in found] == [("trace", "skip"), ("bounds", "fail")] + [
            (c, "skip") for c in later]
        assert found[0]["message"] == "stopped by a read past the end of a tensor: see bounds"
        where = "test_maskcheck.py" if fn is biased else "broken_masks.py"
        assert found[1]["message"].startswith("reads past the end of a tensor at the given lengths 1024 x 1024 "
                                              "(IndexError: index 1000 is out of bounds for dimension 0 with size "
                                              f"1000, {where} line "), found[1]
        assert found[1]["fix"] == ("give the tensor an entry for every position the kernel sees (the length of the "
                                   "queries or keys), or clamp the index")
        assert found[1]["link"] == f"{GUIDE}gallery/#trap"


def test_the_batch_and_heads_the_mask_needs():
    """The finding names the batch given; B=None gives every sample the block pattern of sample 0 (the
    oracle: the BlockMask's own block counts); a tensor with one entry per batch falls back and says so."""
    given = {f["check"]: f for f in maskcheck.check(broken_masks.padded_batch, TOKENS, TOKENS, batch=2, compile=False)}
    assert given["batch-heads"] == maskcheck.finding("batch-heads", "ok", "depends on b: build the BlockMask with B=2 "
                                                     "(with B=None every sample gets sample 0's block pattern)")
    unsaid = {f["check"]: f for f in maskcheck.check(broken_masks.padded_batch, TOKENS, TOKENS, compile=False)}
    assert unsaid["batch-heads"]["status"] == "warn" and "with B=your batch size (" in unsaid["batch-heads"]["fix"]
    heads = {f["check"]: f for f in maskcheck.check(broken_masks.window_per_head, TOKENS, TOKENS, heads=2, compile=False)}
    assert heads["batch-heads"]["status"] == "ok" and "depends on h: build the BlockMask with H=2 (with H=None every " \
        "head gets head 0's block pattern)" == heads["batch-heads"]["message"]
    only_batch = {f["check"]: f for f in maskcheck.check(broken_masks.window_per_head, TOKENS, TOKENS, batch=4,
                                                          compile=False)}
    assert only_batch["batch-heads"]["status"] == "warn"  # it depends on h, and --heads was not given
    one, two = (create_block_mask(broken_masks.padded_batch, B, None, TOKENS, TOKENS, device="cpu") for B in (None, 2))
    assert one.kv_num_blocks.shape[0] == 1 and two.kv_num_blocks.shape[0] == 2
    assert torch.equal(one.full_kv_num_blocks[0], two.full_kv_num_blocks[0])
    assert not torch.equal(one.full_kv_num_blocks[0], two.full_kv_num_blocks[1])
    fallback = {f["check"]: f for f in maskcheck.check(broken_masks.padded_one_length, TOKENS, TOKENS, compile=False)}
    assert fallback["batch-heads"]["message"].startswith("not checked: with B=2, H=2 it fails (IndexError: index 1 is out of bounds")
    assert fallback["batch-heads"]["fix"] == "pass --batch/--heads as in training"
    as_trained = maskcheck.check(broken_masks.padded_one_length, TOKENS, TOKENS, batch=1, heads=8, compile=False)
    assert not problems(as_trained)


def test_sparsity_counts_whole_blocks():
    """Causal at 1000 tokens: 8 x 8 blocks, 36 computed, 28 skipped (43.75%); BlockMask.sparsity() divides by
    1000 x 1000 instead, and gives a full mask a negative share."""
    found = {f["check"]: f for f in maskcheck.check(broken_masks.causal, TOKENS, TOKENS, compile=False)}
    assert found["sparsity"]["message"] == "43.8% of the 128 x 128 blocks skipped at 1000 x 1000"
    full = create_block_mask(broken_masks.full_attention, None, None, TOKENS, TOKENS, device="cpu")
    assert full.sparsity() < 0
    padding = {f["check"]: f for f in maskcheck.check(lambda b, h, q_idx, kv_idx: kv_idx < 990, TOKENS, TOKENS,
                                                      compile=False)}
    assert padding["sparsity"] == maskcheck.finding("sparsity", "ok", "0.0% of the 128 x 128 blocks skipped at 1000 x "
                                                    "1000: every block has an allowed position, the mask_mod masks inside them")
    one_block = maskcheck.check(broken_masks.full_attention, 100, 100, compile=False)
    assert not problems(one_block)  # one block: nothing to skip, nothing to warn about


@pytest.mark.parametrize("factor, status", [(1.0, "ok"), (1.00001, "ok"), (1.001, "fail")])
def test_the_reference_check_fails_past_1e_4(monkeypatch, factor, status):
    """Without compiling: torch.compile replaced by the eager call scaled by `factor` (relative error
    factor - 1), so that the comparison itself is what is tested; the compiled path runs in
    test_the_commands_as_shown and test_one_gallery_mask_compiled_matches_sdpa."""
    compile = torch.compile  # eager flex_attention compiles parts of itself
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: (lambda *a, **k: fn(*a, **k) * factor)
                        if fn is flex_attention else compile(fn, **kw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = maskcheck.reference(broken_masks.strictly_causal, False, 1, 2, False, True, 300, 300, 300, 300)
    assert got["status"] == status, got
    assert "1 rows with no key left out" not in got["message"] and "2 rows with no key left out" in got["message"]
    assert "at 300 x 300, float32, head dim 16, B=1, H=2" in got["message"]


def test_the_reference_check_leaves_out_rows_with_no_key(monkeypatch):
    """A row with no key is left out of the comparison: whatever the kernel writes there (here NaN) is no error."""
    compile = torch.compile

    def nan_in_row_0(*a, **k):
        out = flex_attention(*a, **k)
        out[:, :, 0] = float("nan")
        return out

    monkeypatch.setattr(torch, "compile", lambda fn, **kw: nan_in_row_0 if fn is flex_attention else compile(fn, **kw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = maskcheck.reference(broken_masks.strictly_causal, False, 1, 1, False, False, 200, 200, 200, 200)
    assert got["status"] == "ok" and "1 rows with no key left out" in got["message"], got


def test_the_reference_check_for_a_score_mod_and_a_failing_compile(monkeypatch):
    compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn if fn is flex_attention else compile(fn, **kw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = maskcheck.reference(broken_masks.relative_bias, True, 1, 1, False, False, 200, 300, 2000, 300)
    assert got["status"] == "ok" and "a softmax of the changed scores at 200 x 300 (capped from 2000 x 300)" in got["message"]

    def broken(*a, **k):
        raise RuntimeError("backend failed\ndetails")

    monkeypatch.setattr(torch, "compile", lambda fn, **kw: broken if fn is flex_attention else compile(fn, **kw))
    got = maskcheck.reference(broken_masks.causal, False, 1, 1, False, False, 200, 200, 200, 200)
    assert (got["status"], got["message"]) == ("fail", "compiled flex_attention fails (RuntimeError: backend failed)")


def test_the_guide_links_are_sections_of_its_pages():
    """Every anchor the checker links to is a heading of the English page it names (the maskcheck and
    gallery pages are written beside this checker)."""
    import re

    links = {f"{GUIDE}maskcheck/#{c}" for c in ("trace", "bounds", "empty-rows", "batch-heads", "sparsity", "score-mod",
                                                "reference")}
    links |= {maskcheck.TRAP, maskcheck.MASK_VS_SCORE, maskcheck.TROUBLESHOOTING}
    for url in links:
        page, anchor = url.removeprefix(GUIDE).split("/#")
        text = (ROOT / "docs/en" / f"{page}.md").read_text(encoding="utf-8")
        assert re.search(rf"^#+ .*\{{#{anchor}\}}$", text, re.M), f"docs/en/{page}.md has no section #{anchor}"


def test_without_batch_and_heads_the_check_says_how_far_it_looked(capsys):
    """A per-head window whose first two heads agree: with no --heads, B=2 and H=2 cannot tell, and the line says
    so; with --heads 8 the dependence on h is found. And a dense mask is not called dense unless every sample and
    head was checked."""
    code, lines, _ = report(capsys, "tests.broken_masks:window_by_head_pairs", "--q-len", "1000", "--kv-len", "1000",
                            "--no-compile")
    line = next(line for line in lines if line.split()[1] == "batch-heads")
    assert line.split()[0] == "ok" and "samples and heads 0 to 1 (checked B=2, H=2; pass --batch and --heads" in line
    code, lines, _ = report(capsys, "tests.broken_masks:window_by_head_pairs", "--q-len", "1000", "--kv-len", "1000",
                            "--heads", "8", "--no-compile")
    assert statuses(lines)["batch-heads"] == "ok" and "depends on h" in "\n".join(lines)
    code, lines, _ = report(capsys, "tests.broken_masks:full_attention", "--q-len", "1000", "--kv-len", "1000",
                            "--no-compile")
    assert statuses(lines)["sparsity"] == "ok" and code == 0


@pytest.mark.parametrize("widths", [(128, 512), (512, 128), (256, 256)])
def test_a_head_whose_mask_lies_inside_head_0s_still_depends_on_h(widths):
    """Sliding windows of two widths, one per head: whichever head has the narrower window, the mask depends on h
    (the oracle: the dense masks of the two heads, written out position by position, differ iff the widths do)."""
    windows = torch.tensor(widths)

    def window(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < windows[h])

    written = [[[0 <= q - k < w for k in range(TOKENS)] for q in range(TOKENS)] for w in widths]
    found = {f["check"]: f for f in maskcheck.check(window, TOKENS, TOKENS, heads=2, compile=False)}["batch-heads"]
    assert found["message"].startswith("depends on h: ") == (written[0] != written[1])
    assert found["status"] == "ok"


def test_the_missing_name_hint_lists_the_mask_mods_and_score_mods(tmp_path, monkeypatch):
    """A name that is not in the module: the fix lists its functions of 4 parameters (mask_mods) and of 5
    (score_mods), in the module's order, and leaves out other functions, classes and imported torch functions."""
    (tmp_path / "reader_masks.py").write_text(
        "from torch import where\n\n\n"
        "def causal(b, h, q_idx, kv_idx):\n    return q_idx >= kv_idx\n\n\n"
        "def soft_cap(score, b, h, q_idx, kv_idx):\n    return score\n\n\n"
        "def helper(x):\n    return x\n\n\n"
        "def three(b, q_idx, kv_idx):\n    return q_idx\n\n\n"
        "def with_default(b, h, q_idx, kv_idx, window=8):\n    return q_idx - kv_idx < window\n\n\n"
        "class Mask:\n    def __init__(self, b, h, q_idx):\n        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(maskcheck.UsageError) as said:
        maskcheck.load("reader_masks:causl")
    assert str(said.value) == "reader_masks has no name 'causl'. Fix: give one of causal, soft_cap, with_default"
