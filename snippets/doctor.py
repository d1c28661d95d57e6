"""Checks a machine for FlexAttention: each check prints ok, warn or fail, with the fix.

    python -m snippets doctor [--json]

Exit code 0 when FlexAttention is usable here, 1 when it is not.
"""
import importlib.util
import json
import tempfile
import warnings

from snippets._cli import ArgumentParser, run

OK, WARN, FAIL = "ok", "warn", "fail"


def check_torch():
    if importlib.util.find_spec("torch") is None:
        return FAIL, "PyTorch is not installed", "pip install torch (2.5 or newer)"
    import torch
    from torch.torch_version import TorchVersion

    if TorchVersion(torch.__version__) < (2, 5):
        return FAIL, f"torch {torch.__version__} has no FlexAttention", "upgrade to torch 2.5 or newer"
    return OK, f"torch {torch.__version__}", ""


def check_cuda():
    import torch

    if not torch.cuda.is_available():
        return WARN, "no CUDA GPU: forward only, no backward (training needs a GPU)", \
            "run training on a CUDA machine"
    major, minor = torch.cuda.get_device_capability()
    name = torch.cuda.get_device_name()
    return OK, f"{name}, compute capability {major}.{minor}, CUDA {torch.version.cuda}", ""


def check_triton():
    import torch

    if not torch.cuda.is_available():
        return OK, "Triton not needed on CPU (the CPU kernels are C++)", ""
    if importlib.util.find_spec("triton") is None:
        return FAIL, "Triton is missing: torch.compile cannot build GPU kernels", \
            "install the triton version your torch wheel requires"
    import triton

    return OK, f"triton {triton.__version__}", ""


def check_flex_call():
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    if torch.cuda.is_available():
        q = torch.randn(1, 1, 128, 64, device="cuda", dtype=torch.bfloat16)
        out = torch.compile(flex_attention)(q, q, q)
        torch.cuda.synchronize()
        return OK, "compiled flex_attention ran on the GPU", ""
    q = torch.randn(1, 1, 128, 64)
    with warnings.catch_warnings():  # the eager path warns that it is unfused; expected on CPU
        warnings.simplefilter("ignore")
        out = flex_attention(q, q, q)
    return (OK if torch.isfinite(out).all() else FAIL), "flex_attention ran on the CPU (eager)", ""


def check_cache():
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    path = cache_dir()
    try:
        with tempfile.NamedTemporaryFile(dir=path):
            pass
    except OSError as e:
        return FAIL, f"compile cache {path} is not writable ({e.strerror})", \
            "set TORCHINDUCTOR_CACHE_DIR to a writable directory"
    return OK, f"compile cache {path} is writable", ""


def check_diffusers():
    if importlib.util.find_spec("diffusers") is None:
        return WARN, "diffusers is not installed (only needed for Diffusers/SimpleTuner)", \
            "pip install diffusers"
    import diffusers
    from diffusers.models.attention_dispatch import AttentionBackendName, _AttentionBackendRegistry

    if AttentionBackendName.FLEX not in _AttentionBackendRegistry._backends:
        return WARN, f"diffusers {diffusers.__version__} has no usable 'flex' backend", \
            "upgrade torch to 2.5 or newer"
    return OK, f"diffusers {diffusers.__version__} with the 'flex' attention backend", ""


def check_precision():
    import torch

    precision = torch.get_float32_matmul_precision()
    if precision != "highest":
        return WARN, f"float32 matmul precision is {precision!r} (TF32)", \
            "torch.set_float32_matmul_precision('highest'), or run in bfloat16"
    return OK, "float32 matmul precision is 'highest'", ""


CHECKS = {
    "torch": check_torch, "cuda": check_cuda, "triton": check_triton,
    "flex_attention": check_flex_call, "compile_cache": check_cache,
    "diffusers": check_diffusers, "float32_precision": check_precision,
}
# Without these, FlexAttention is not usable; the others only warn.
ESSENTIAL = {"torch", "flex_attention"}


def diagnose() -> list:
    """Run every check; a check that raises is a failure, never a traceback."""
    results = []
    for name, check in CHECKS.items():
        if results and results[0]["status"] == FAIL:
            results.append(dict(check=name, status=FAIL, message="skipped: torch is not usable", fix=""))
            continue
        try:
            status, message, fix = check()
        except Exception as e:  # a broken install must still get an answer
            status, message, fix = FAIL, f"{type(e).__name__}: {e}".splitlines()[0], \
                "see the troubleshooting page"
        results.append(dict(check=name, status=status, message=message, fix=fix))
    return results


def usable(results) -> bool:
    return all(r["status"] != FAIL for r in results if r["check"] in ESSENTIAL)


def main(argv) -> int:
    parser = ArgumentParser(prog="python -m snippets doctor")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    results = diagnose()
    if args.json:
        print(json.dumps({"usable": usable(results), "checks": results}, indent=2))
    else:
        for r in results:
            print(f"{r['status']:4}  {r['check']:17} {r['message']}" + (f" -> {r['fix']}" if r["fix"] else ""))
    return 0 if usable(results) else 1


if __name__ == "__main__":
    raise SystemExit(run(main))
