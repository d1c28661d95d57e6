"""Checks your own mask_mod or score_mod on the CPU before you train with it.

    python -m snippets.maskcheck MODULE:NAME --q-len 1000 --kv-len 1000 [--batch B] [--heads H] [--json] [--no-compile]

Each check prints ok, warn, fail or skip, with the fix and its section of the guide. Exit code 0 when
there is no finding (no fail, no warn), 1 when there are findings, 2 for bad usage.
"""
import importlib
import inspect
import json
import os
import time
import traceback
import warnings

from snippets._cli import ArgumentParser, UsageError, run

GUIDE = "https://flexattention-guide.github.io/"  # the published guide, as in snippets.doctor
OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
BLOCK = 128  # the BlockMask's default block size: the lengths a batch padded to whole blocks has
MAX_LEN = 8192  # the checks hold dense (B, H, q_len, kv_len) masks in memory
REFERENCE_LEN = 1024  # the compiled comparison and the score_mod probe run at most this many tokens
TRAP = f"{GUIDE}gallery/#trap"
MASK_VS_SCORE = f"{GUIDE}masks/#mask-vs-score"
TROUBLESHOOTING = f"{GUIDE}troubleshooting/#symptoms-and-fixes"


def works(call) -> bool:
    try:
        call()
        return True
    except Exception:
        return False


def finding(check, status, message, fix="", link=""):
    return dict(check=check, status=status, message=message, fix=fix, link=link or f"{GUIDE}maskcheck/#{check}")


def first_line(e) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0]


def index_error(e) -> bool:
    return isinstance(e, IndexError) or "out of range" in str(e) or "out of bounds" in str(e)


def positional(fn):
    """The names of the parameters flex_attention passes positionally (those without a default)."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    try:
        return [p.name for p in inspect.signature(fn).parameters.values()
                if p.kind in kinds and p.default is inspect.Parameter.empty]
    except (TypeError, ValueError):
        return None


def load(target):
    """The mask_mod or score_mod that MODULE:NAME names; bad usage is a UsageError."""
    module_name, _, name = target.partition(":")
    if not module_name or not name:
        raise UsageError(f"{target!r} is not MODULE:NAME", "name the module and the mask in it, e.g. my_masks:causal")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and f"{module_name}.".startswith(f"{e.name}."):
            raise UsageError(f"no module {module_name!r} here", f"run the command in the folder where "
                             f"{module_name.replace('.', '/')}.py is saved, or give its dotted name") from None
        raise UsageError(f"importing {module_name} failed ({first_line(e)})", "install what it imports") from None
    except Exception as e:
        raise UsageError(f"importing {module_name} failed ({first_line(e)})",
                         f"fix it until `python -c 'import {module_name}'` runs") from None
    if not hasattr(module, name):
        found = [n for n, v in vars(module).items() if callable(v) and not isinstance(v, type)
                 and not n.startswith("_") and len(positional(v) or ()) in (4, 5)
                 and not getattr(v, "__module__", "").startswith("torch")]
        raise UsageError(f"{module_name} has no name {name!r}",
                         f"give one of {', '.join(found)}" if found else "define the mask_mod at module level")
    fn = getattr(module, name)
    if not callable(fn) or isinstance(fn, type):
        raise UsageError(f"{target} is not a function ({type(fn).__name__})",
                         "give a mask_mod (b, h, q_idx, kv_idx) or a score_mod (score, b, h, q_idx, kv_idx)")
    params = positional(fn)
    if params is None or len(params) not in (4, 5):
        n = len(params or ())
        fix = (f"give a name bound to the mask_mod itself, e.g. `my_mask = {name}(256)` at module level"
               if not {"b", "h", "q_idx", "kv_idx", "score"} & set(params or ()) else
               "write the parameters as (b, h, q_idx, kv_idx), or (score, b, h, q_idx, kv_idx) for a score_mod")
        raise UsageError(f"{target} takes {n} parameter{'s' * (n != 1)} ({', '.join(params or ())}), not the 4 of a "
                         "mask_mod (b, h, q_idx, kv_idx) or the 5 of a score_mod (score, b, h, q_idx, kv_idx)", fix)
    return fn


def user_line(e) -> str:
    """Where the error came from in the reader's code: 'my_masks.py line 12 `if q_idx > kv_idx:`'."""
    import torch

    frames = traceback.extract_tb(e.__traceback__)
    inside = [i for i, f in enumerate(frames) if f.filename.startswith(os.path.dirname(torch.__file__))]
    frames = [f for f in frames[inside[0]:] if not f.filename.startswith(os.path.dirname(torch.__file__))] if inside else []
    if not frames:  # raised before torch called the mask, or after it returned
        return ""
    f = frames[-1]
    return f"{os.path.basename(f.filename)} line {f.lineno} `{(f.line or '').strip()}`"


def trace_failure(e):
    """What a mask_mod did that vmap cannot trace, read from the error PyTorch raises."""
    text, where = str(e), user_line(e)
    line = where.partition("`")[2]
    if "data-dependent control flow" in text:
        if any(f" {word} " in f" {line} " for word in ("and", "or", "not")):
            cause, fix = "Python `and`/`or`/`not` on tensors", "write `&`, `|`, `~` with parentheses: (q_idx >= kv_idx) & (...)"
        elif line.startswith(("if ", "elif ", "while ")) or " if " in line:
            cause, fix = "Python `if` on a tensor", "torch.where(condition, a, b), or combine conditions with `&` and `|`"
        else:
            cause, fix = ("Python control flow on a tensor (`bool()`, `min()`/`max()`, `in`)",
                          "tensor operations: `&`, `|`, `~`, torch.where, torch.minimum, torch.maximum")
    elif ".item()" in text or "doesn't have storage" in text:
        cause, fix = ("a Python number from a tensor (`.item()`, `.tolist()`, NumPy)",
                      "keep it a tensor: precompute the tensor outside the mask_mod and index it with q_idx, kv_idx")
    elif "must only return Tensors" in text:
        cause, fix = "it returns no tensor", "return a tensor built from the indices, e.g. `q_idx >= kv_idx`"
    elif "mask.dtype must be torch.bool" in text:
        cause, fix = "it returns no boolean tensor", "return a comparison (`>=`, `==`) or combine them with `&`, `|`"
    elif "positional arg" in text or isinstance(e, TypeError) and "argument" in text:
        cause, fix = "a wrong signature", "a mask_mod takes (b, h, q_idx, kv_idx), a score_mod (score, b, h, q_idx, kv_idx)"
    else:
        cause, fix = "an error", "fix the line it names"
    return finding("trace", FAIL, f"{cause}{', ' + where if where else ''} ({first_line(e)})", fix)


def check(fn, q_len, kv_len, batch=None, heads=None, compile=True):
    """Every check, in order: a list of findings (check, status, message, fix, link)."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, create_mask

    score = len(positional(fn)) == 5

    def dense_mask(B, H, Q, KV):  # for a score_mod, where it returns -inf (as create_mask reads it)
        return create_mask(fn, B, H, Q, KV, device="cpu")

    def trace(B, H, Q, KV):  # what the reader's code would call first
        return dense_mask(B, H, Q, KV) if score else create_block_mask(fn, B, H, Q, KV, device="cpu")

    later = ["bounds", "empty-rows", "batch-heads", "sparsity"] + ["score-mod"] * score + ["reference"]
    call = "create_mask" if score else "create_block_mask"
    try:  # 1. trace
        trace(batch, heads, q_len, kv_len)
        found = [finding("trace", OK, f"{call}(..., {batch}, {heads}, {q_len}, {kv_len}, device=\"cpu\") works")]
    except Exception as e:
        if not index_error(e):
            return [trace_failure(e)] + [finding(c, SKIP, "not run: the mask does not trace") for c in later]
        # 2. bounds, at the given lengths: a tensor shorter than the queries or keys the kernel sees, or than
        # the samples or heads given (then sample 0 and head 0 alone read nothing out of range)
        where = f"{first_line(e)}{', ' + user_line(e) if user_line(e) else ''}"
        if (batch, heads) != (None, None) and works(lambda: trace(None, None, q_len, kv_len)):
            given = " ".join(f"--{n} {v}" for n, v in (("batch", batch), ("heads", heads)) if v is not None)
            bad = finding("bounds", FAIL, f"reads past the end of a tensor indexed by the sample or head: with "
                          f"{given}, not with one sample and head ({where})",
                          "give the tensor an entry for every sample and head, or give the --batch and --heads "
                          "your model runs with", f"{GUIDE}maskcheck/#batch-heads")
        else:
            bad = finding("bounds", FAIL, f"reads past the end of a tensor at the given lengths {q_len} x {kv_len} "
                          f"({where})", "give the tensor an entry for every position the kernel sees (the length "
                          "of the queries or keys), or clamp the index", TRAP)
        return [finding("trace", SKIP, "stopped by a read past the end of a tensor: see bounds"), bad] + \
            [finding(c, SKIP, "not run: the mask reads past the end of a tensor") for c in later[1:]]

    # 2. bounds, past the given lengths: PyTorch's Triton kernel evaluates the mask_mod and score_mod in a last,
    # partial block at positions modulo the length (get_bounded_indices in its templates), so a read past the end
    # only there is no error; a batch padded to a multiple of 128 would read there
    q_pad, kv_pad = (-(-n // BLOCK) * BLOCK for n in (q_len, kv_len))
    try:
        dense_mask(1, 1, q_pad, kv_pad)
        found.append(finding("bounds", OK, f"nothing read out of range up to {q_pad} x {kv_pad}"
                             if (q_pad, kv_pad) != (q_len, kv_len) else "the lengths are multiples of 128: no padding"))
    except Exception as e:
        if index_error(e):
            found.append(finding("bounds", OK, f"reads past the end of a tensor only past the given lengths ({q_pad} x "
                                 f"{kv_pad}); PyTorch's Triton kernel evaluates a last, partial block at positions "
                                 f"modulo the length, so {q_len} x {kv_len} is safe; if you pad the inputs to a "
                                 "multiple of 128, pad this tensor too"))
        else:
            found.append(finding("bounds", FAIL, f"fails at the padded lengths {q_pad} x {kv_pad}, not at {q_len} x "
                                 f"{kv_len} ({first_line(e)}{', ' + user_line(e) if user_line(e) else ''})",
                                 "make the mask work at every position of the last block"))

    # 4. batch-heads, computed first: the dense mask over every sample and head, for checks 3 and 5
    B, H, probed = batch or 2, heads or 2, None
    try:
        dense = dense_mask(B, H, q_len, kv_len)
    except Exception as e:  # a tensor indexed by b or h with one entry; (batch or 1, heads or 1) traced above
        probed, B, H = e, batch or 1, heads or 1
        dense = dense_mask(B, H, q_len, kv_len)
    by_b, by_h = not (dense == dense[:1]).all(), not (dense == dense[:, :1]).all()
    if probed is not None:
        bh = finding("batch-heads", WARN, f"not checked: with B={batch or 2}, H={heads or 2} it fails "
                     f"({first_line(probed)})", "pass --batch/--heads as in training")
    elif by_b or by_h:
        said = " and ".join(x for x, y in (("b", by_b), ("h", by_h)) if y)
        if score:
            bh = finding("batch-heads", OK, f"depends on {said}: a score_mod gets each sample's b and each head's h")
        else:
            fixes = [f"build the BlockMask with {n}={v or s} (with {n}=None every {w} gets {w} 0's block pattern)"
                     for n, v, s, w, y in (("B", batch, "your batch size", "sample", by_b),
                                           ("H", heads, "your number of heads", "head", by_h)) if y]
            if (batch or not by_b) and (heads or not by_h):  # the reader gave the sizes it depends on
                bh = finding("batch-heads", OK, f"depends on {said}: " + "; ".join(fixes))
            else:
                bh = finding("batch-heads", WARN, f"depends on {said}", "; ".join(fixes))
    else:
        bh = finding("batch-heads", OK, f"the same mask for every sample and head (checked B={B}, H={H})" if batch
                     and heads else f"the same mask for samples and heads 0 to 1 (checked B={B}, H={H}; pass "
                     "--batch and --heads as in training to check them all)")

    # 3. empty-rows
    empty = (~dense.any(-1)).any(0).any(0).nonzero().flatten().tolist()
    if empty:
        shown = ", ".join(map(str, empty[:5])) + (", ..." if len(empty) > 5 else "")
        found.append(finding("empty-rows", WARN, f"{len(empty)} of {q_len} query rows have no allowed key (q_idx "
                             f"{shown}): FlexAttention returns zeros for them and a log-sum-exp of -inf; a "
                             "softmax written out by hand returns NaN",
                             "nothing to do for padding queries; otherwise let each query see at least one key"))
    else:
        found.append(finding("empty-rows", OK, "every query row has at least one allowed key"))
    found.append(bh)

    # 5. sparsity
    if score:
        found.append(finding("sparsity", SKIP, "a score_mod gets no BlockMask: no block is skipped"))
    else:
        block_mask = create_block_mask(fn, B if by_b else None, H if by_h else None, q_len, kv_len, device="cpu")
        # not BlockMask.sparsity(): it divides by q_len x kv_len, not by whole blocks (-4.9% for a full 1000 x 1000)
        blocks = block_mask.kv_num_blocks.numel() * block_mask.kv_indices.shape[-1]
        computed = block_mask.kv_num_blocks.sum() + block_mask.full_kv_num_blocks.sum()
        skipped = 100 * (1 - computed.item() / blocks)
        if skipped == 0 and blocks > 1 and dense.all() and batch and heads:  # all of them checked
            found.append(finding("sparsity", WARN, f"0% of the 128 x 128 blocks skipped at {q_len} x {kv_len}: every "
                                 "block is computed, and every position allowed", "a dense mask gains nothing from a "
                                 "BlockMask: call flex_attention with no block_mask"))
        else:
            inside = ": every block has an allowed position, the mask_mod masks inside them" if skipped == 0 else ""
            found.append(finding("sparsity", OK, f"{skipped:.1f}% of the 128 x 128 blocks skipped at {q_len} x "
                                 f"{kv_len}{inside}"))

    # 6. score-mod: on random scores at every position, does it only keep a score or make it -inf?
    Lq, Lkv = min(q_len, REFERENCE_LEN), min(kv_len, REFERENCE_LEN)
    if score:
        scores = torch.randn(B, H, Lq, Lkv, generator=torch.Generator().manual_seed(0))

        def kept_or_masked(b, h, q_idx, kv_idx):
            out = fn(scores[b, h, q_idx, kv_idx], b, h, q_idx, kv_idx)
            return (out == scores[b, h, q_idx, kv_idx]) | torch.isneginf(out)

        if create_mask(kept_or_masked, B, H, Lq, Lkv, device="cpu").all():
            found.append(finding("score-mod", WARN, f"every score comes back unchanged or -inf (at {Lq} x {Lkv}): it "
                                 "only masks", "write it as a mask_mod: a BlockMask then skips the masked blocks",
                                 MASK_VS_SCORE))
        else:
            found.append(finding("score-mod", OK, f"it changes scores (at {Lq} x {Lkv}), not only masks them"))

    # 7. reference: compiled flex_attention (which skips blocks) against SDPA with the dense mask
    if not compile:
        found.append(finding("reference", SKIP, "not run (--no-compile): eager flex_attention ignores the BlockMask's "
                             "blocks, so it would prove nothing"))
    elif any(f["status"] == FAIL for f in found):
        found.append(finding("reference", SKIP, "not run: fix the failures above first"))
    else:
        B, H = (B, H) if score else (B if by_b else 1, H if by_h else 1)  # a score_mod's values may depend on b, h
        found.append(reference(fn, score, B, H, by_b, by_h, Lq, Lkv, q_len, kv_len))
    return found


def reference(fn, score, B, H, by_b, by_h, Lq, Lkv, q_len, kv_len):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import create_block_mask, create_mask, flex_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, n, 16, generator=g) for n in (Lq, Lkv, Lkv))
    if score:  # the scores as flex_attention computes them, changed by the score_mod, then a softmax
        scores = q @ k.transpose(-1, -2) / 16 ** 0.5
        modded = create_mask(lambda b, h, i, j: fn(scores[b, h, i, j], b, h, i, j), B, H, Lq, Lkv, device="cpu")
        keep = ~torch.isneginf(modded).all(-1)
        want = torch.softmax(modded, -1).nan_to_num() @ v
        kwargs = dict(score_mod=fn)
    else:
        dense = create_mask(fn, B, H, Lq, Lkv, device="cpu")
        keep = dense.any(-1)
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
        kwargs = dict(block_mask=create_block_mask(fn, B if by_b else None, H if by_h else None, Lq, Lkv, device="cpu"))
    start = time.perf_counter()
    try:
        got = torch.compile(flex_attention, dynamic=False)(q, k, v, **kwargs)
    except Exception as e:
        return finding("reference", FAIL, f"compiled flex_attention fails ({first_line(e)})",
                       "look the error up in the table of symptoms", TROUBLESHOOTING)
    seconds = time.perf_counter() - start
    error = ((got - want)[keep].norm() / want[keep].norm()).item() if keep.any() else 0.0
    against = "a softmax of the changed scores" if score else "SDPA with the dense mask"
    at = f"{Lq} x {Lkv}" + (f" (capped from {q_len} x {kv_len})" if (Lq, Lkv) != (q_len, kv_len) else "")
    said = (f"compiled flex_attention against {against} at {at}, float32, head dim 16, B={B}, H={H}: relative error "
            f"{error:.1e}" + (f", {int((~keep).sum())} rows with no key left out" if not keep.all() else "")
            + f"; compiled and ran in {seconds:.1f} s")
    if error < 1e-4:
        return finding("reference", OK, said)
    return finding("reference", FAIL, said + " (more than 1e-4)", "check that the mask reads no state that changes "
                   "between calls; if not, report it to PyTorch with this mask", TROUBLESHOOTING)


def main(argv) -> int:
    parser = ArgumentParser(prog="python -m snippets.maskcheck", description=__doc__.splitlines()[0])
    parser.add_argument("target", help="MODULE:NAME, e.g. my_masks:causal_documents")
    for flag, required in (("--q-len", True), ("--kv-len", True), ("--batch", False), ("--heads", False)):
        parser.add_argument(flag, type=int, required=required)
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled comparison with SDPA")
    args = parser.parse_args(argv)
    for flag, value, most in (("--q-len", args.q_len, MAX_LEN), ("--kv-len", args.kv_len, MAX_LEN),
                              ("--batch", args.batch, 64), ("--heads", args.heads, 256)):
        if value is not None and not 1 <= value <= most:
            raise UsageError(f"{flag} {value} is out of range", f"give a {flag} from 1 to {most}")
    fn = load(args.target)
    with warnings.catch_warnings():  # eager flex_attention's warning that it is unfused is expected here
        warnings.simplefilter("ignore")
        found = check(fn, args.q_len, args.kv_len, args.batch, args.heads, compile=not args.no_compile)
    findings = [f for f in found if f["status"] in (FAIL, WARN)]
    code = 1 if findings else 0
    if args.json:
        print(json.dumps({"target": args.target, "findings": found, "exit": code}, indent=2))
        return code
    for f in found:
        print(f"{f['status']:4}  {f['check']:11}  {f['message']}" + (f" -> {f['fix']} ({f['link']})" if f["fix"] else ""))
    fails = sum(f["status"] == FAIL for f in findings)
    print(f"{len(findings)} finding{'s' * (len(findings) > 1)} ({fails} fail, {len(findings) - fails} warn)" if findings else
          f"no findings: {args.target} is ready for flex_attention"
          + (" (not compiled: --no-compile)" if args.no_compile else ""))
    return code


if __name__ == "__main__":
    raise SystemExit(run(main))
