"""Checks a machine for FlexAttention: each check prints ok, warn or fail, with the fix.

    python -m snippets doctor [--json] [--lang en|zh|pt|hi]

Exit code 0 when FlexAttention is usable here, 1 when it is not. A fix comes with its link to
the guide, in the language --lang names.
"""
import functools
import importlib
import importlib.util
import json
import tempfile
import warnings

from snippets._cli import ArgumentParser, run

OK, WARN, FAIL = "ok", "warn", "fail"


class TooOld(Exception):
    """This PyTorch lacks a name that a check reads; str() is one line naming the version and the name."""


def torch_name(dotted, since, instead="", of=None):
    """What a torch name stands for: torch_name("torch._dynamo.config.recompile_limit", "2.7") imports
    the modules in it and reads the rest as attributes; with `of`, its last part is read from that
    object. A PyTorch older than `since`, the first release with the name (claims/torch_api.yaml), lacks
    it: then TooOld, which names this version, the name, `since` and what this version has `instead`."""
    import torch

    parts = dotted.split(".")
    if of is not None:
        parts = parts[-1:]
    else:  # the longest part of the name that is a module
        i = len(parts)
        while of is None:
            try:
                of = importlib.import_module(".".join(parts[:i]))
            except ModuleNotFoundError as e:
                if not f"{dotted}.".startswith(f"{e.name}."):
                    raise  # a module it imports is missing: a broken install, not an old one
                i -= 1
        parts = parts[i:]
    try:
        return functools.reduce(getattr, parts, of)
    except AttributeError:
        here = f"; here: {instead}" if instead else ""
        raise TooOld(f"torch {torch.__version__} has no {dotted} (from {since}{here})") from None


def check_torch():
    if importlib.util.find_spec("torch") is None:
        return FAIL, "PyTorch is not installed", "torch_missing"
    import torch
    from torch.torch_version import TorchVersion

    if TorchVersion(torch.__version__) < (2, 5):
        return FAIL, f"torch {torch.__version__} has no FlexAttention", "torch_old"
    return OK, f"torch {torch.__version__}", ""


def check_cuda():
    import torch

    if not torch.cuda.is_available():
        return WARN, "no CUDA GPU: forward only, no backward (training needs a GPU)", "no_gpu"
    major, minor = torch.cuda.get_device_capability()
    name = torch.cuda.get_device_name()
    return OK, f"{name}, compute capability {major}.{minor}, CUDA {torch.version.cuda}", ""


def check_triton():
    import torch

    if not torch.cuda.is_available():
        return OK, "Triton not needed on CPU (the CPU kernels are C++)", ""
    if importlib.util.find_spec("triton") is None:
        return FAIL, "Triton is missing: torch.compile cannot build GPU kernels", "triton"
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
    cache_dir = torch_name("torch._inductor.runtime.cache_dir_utils.cache_dir", "2.6")
    path = cache_dir()
    try:
        with tempfile.NamedTemporaryFile(dir=path):
            pass
    except OSError as e:
        return FAIL, f"compile cache {path} is not writable ({e.strerror})", "cache"
    return OK, f"compile cache {path} is writable", ""


def check_recompile_limit():
    import torch._dynamo

    from snippets.decoding import RECOMPILE_LIMIT

    config = torch._dynamo.config
    limit = torch_name("torch._dynamo.config.recompile_limit", "2.7",
                       instead=f"cache_size_limit {config.cache_size_limit}")
    if limit < RECOMPILE_LIMIT:
        return WARN, (f"recompile limit {limit}, below PyTorch's default {RECOMPILE_LIMIT}: flex_attention "
                      "falls back to its unfused path sooner"), "recompiles"
    return OK, f"recompile limit {limit} (torch._dynamo.config.recompile_limit)", ""


def check_shared_memory():
    import torch

    if not torch.cuda.is_available():
        return OK, "no GPU: no shared-memory limit on kernel blocks", ""
    limit = torch_name("torch._C._CudaDeviceProperties.shared_memory_per_block_optin", "2.7",
                       of=torch.cuda.get_device_properties(0))
    if limit < HOPPER_SHARED_MEMORY:
        return WARN, (f"{limit // 1024} KiB of shared memory per block, less than the "
                      f"{HOPPER_SHARED_MEMORY // 1024} KiB of the GPUs measured: large head dimensions may "
                      "need smaller blocks"), "smem"
    return OK, f"{limit // 1024} KiB of shared memory per block", ""


# The shared memory per block of the H100 and H200 that the troubleshooting page's runs measured on
# (the "Hardware limit" of their out-of-resources message, and doctor's report on them).
HOPPER_SHARED_MEMORY = 227 * 1024


def check_flash_backend():
    import torch

    if not torch.cuda.is_available():
        return OK, "no GPU: the FLASH backend needs one", ""
    try:
        found = importlib.util.find_spec("flash_attn.cute") is not None
    except ModuleNotFoundError:  # no flash_attn package at all
        found = False
    if not found:
        return WARN, "flash-attn-4 is not installed: no BACKEND='FLASH' (FlexAttention runs its Triton kernels)", "flash"
    from importlib.metadata import version as installed_version

    version = installed_version("flash-attn-4")
    major, minor = torch.cuda.get_device_capability()
    if major not in FLASH_COMPUTE_CAPABILITIES:
        return WARN, (f"flash-attn-4 {version} on compute capability {major}.{minor}: BACKEND='FLASH' without "
                      "a BlockMask or a score_mod there"), "flash_gpus"
    return OK, f"flash-attn-4 {version}: BACKEND='FLASH' available on compute capability {major}.{minor}", ""


# The compute capabilities (major) where flash-attn-4 runs both a BlockMask and a score_mod: 8.x has
# no custom score_mod and 12.x no block sparsity (flash_attn/cute/interface.py, 4.0.0b36).
FLASH_COMPUTE_CAPABILITIES = (9, 10, 11)


def check_diffusers():
    if importlib.util.find_spec("diffusers") is None:
        return WARN, "diffusers is not installed (only needed for Diffusers/SimpleTuner)", "diffusers_missing"
    import diffusers
    from diffusers.models.attention_dispatch import AttentionBackendName, _AttentionBackendRegistry

    if AttentionBackendName.FLEX not in _AttentionBackendRegistry._backends:
        return WARN, f"diffusers {diffusers.__version__} has no usable 'flex' backend", "torch_old"
    return OK, f"diffusers {diffusers.__version__} with the 'flex' attention backend", ""


def check_precision():
    import torch

    precision = torch.get_float32_matmul_precision()
    if precision != "highest":
        return WARN, f"float32 matmul precision is {precision!r} (TF32)", "tf32"
    return OK, "float32 matmul precision is 'highest'", ""


GUIDE = "https://flexattention-guide.github.io/"  # the published guide: mkdocs.yml site_url
LANGS = ("en", "zh", "pt", "hi")

# The fix for each problem, from the guide, and the section of the guide that explains it.
FIXES = {
    "torch_missing": ("index.md#what-it-needs", {
        "en": "install PyTorch 2.5 or newer", "zh": "安装 PyTorch 2.5 或更新版本",
        "pt": "instale o PyTorch 2.5 ou mais recente", "hi": "PyTorch 2.5 या नया संस्करण इंस्टॉल करें"}),
    "torch_old": ("troubleshooting.md#an-old-pytorch", {
        "en": "upgrade PyTorch to 2.5 or newer", "zh": "将 PyTorch 升级到 2.5 或更新版本",
        "pt": "atualize o PyTorch para a versão 2.5 ou mais recente",
        "hi": "PyTorch को 2.5 या नए संस्करण में अपग्रेड करें"}),
    "torch_newer": ("index.md#what-it-needs", {
        "en": "upgrade PyTorch to the version named here, or newer",
        "zh": "将 PyTorch 升级到这里所说的版本或更新版本",
        "pt": "atualize o PyTorch para a versão indicada aqui, ou mais recente",
        "hi": "PyTorch को यहाँ बताए गए संस्करण या उससे नए संस्करण में अपग्रेड करें"}),
    "no_gpu": ("troubleshooting.md#gradients-on-the-cpu", {
        "en": "train on a machine with a CUDA GPU", "zh": "在有 CUDA GPU 的机器上训练",
        "pt": "treine em uma máquina com GPU CUDA", "hi": "CUDA GPU वाली मशीन पर ट्रेनिंग करें"}),
    "triton": ("kernels.md#there-is-no-build-step", {
        "en": "install the Triton version your PyTorch wheel requires",
        "zh": "安装与你的 PyTorch wheel 相匹配的 Triton 版本",
        "pt": "instale a versão do Triton que o seu wheel do PyTorch exige",
        "hi": "आपके PyTorch wheel को जिस Triton संस्करण की ज़रूरत है, वही इंस्टॉल करें"}),
    "cache": ("kernels.md#where-the-compiled-kernels-are-cached", {
        "en": "point TORCHINDUCTOR_CACHE_DIR to a writable directory",
        "zh": "将 TORCHINDUCTOR_CACHE_DIR 指向一个可写的目录",
        "pt": "aponte TORCHINDUCTOR_CACHE_DIR para um diretório com permissão de escrita",
        "hi": "TORCHINDUCTOR_CACHE_DIR को किसी लिखने-योग्य डायरेक्टरी पर सेट करें"}),
    "diffusers_missing": ("backend_config.md#diffusers-the-attention-dispatcher", {
        "en": "pip install diffusers (only for Diffusers and SimpleTuner)",
        "zh": "pip install diffusers（仅 Diffusers 和 SimpleTuner 需要）",
        "pt": "pip install diffusers (só para Diffusers e SimpleTuner)",
        "hi": "pip install diffusers (केवल Diffusers और SimpleTuner के लिए)"}),
    "tf32": ("accuracy.md#tf32", {
        "en": "torch.set_float32_matmul_precision('highest'), or compute in bfloat16",
        "zh": "torch.set_float32_matmul_precision('highest')，或改用 bfloat16 计算",
        "pt": "torch.set_float32_matmul_precision('highest'), ou calcule em bfloat16",
        "hi": "torch.set_float32_matmul_precision('highest'), या bfloat16 में गणना करें"}),
    "recompiles": ("troubleshooting.md#recompiles", {
        "en": "leave torch._dynamo.config.recompile_limit at its default, and keep changing numbers in tensors",
        "zh": "将 torch._dynamo.config.recompile_limit 保持为默认值，并把每次都会变化的数值放进张量",
        "pt": "mantenha torch._dynamo.config.recompile_limit no padrão e guarde em tensores os números que mudam",
        "hi": "torch._dynamo.config.recompile_limit को डिफ़ॉल्ट पर रहने दें, और बदलने वाली संख्याएँ टेंसर में रखें"}),
    "smem": ("troubleshooting.md#out-of-resources", {
        "en": "for large head dimensions, pass smaller blocks in kernel_options",
        "zh": "头维度较大时，通过 kernel_options 传入更小的块",
        "pt": "para dimensões de head grandes, passe blocos menores em kernel_options",
        "hi": "बड़े हेड डायमेंशन के लिए kernel_options में छोटे ब्लॉक दें"}),
    "flash": ("flash.md#select", {
        "en": "pip install flash-attn-4, for the FLASH backend (optional)",
        "zh": "pip install flash-attn-4，以使用 FLASH 后端（可选）",
        "pt": "pip install flash-attn-4, para o backend FLASH (opcional)",
        "hi": "FLASH बैकएंड के लिए pip install flash-attn-4 (वैकल्पिक)"}),
    "flash_gpus": ("flash.md#gpus", {
        "en": "keep the Triton backend (the default) on this GPU",
        "zh": "在这块 GPU 上继续使用 Triton 后端（默认）",
        "pt": "mantenha o backend Triton (o padrão) nesta GPU",
        "hi": "इस GPU पर Triton बैकएंड (डिफ़ॉल्ट) ही रखें"}),
    "maskcheck": ("maskcheck.md#run-it", {
        "en": "checks your own mask_mod for the mistakes behind wrong results, NaN and illegal memory accesses",
        "zh": "检查你自己的 mask_mod，找出导致结果错误、NaN 和非法内存访问的错误",
        "pt": "procura na sua própria mask_mod os erros por trás de resultados errados, NaN e "
              "acessos ilegais à memória",
        "hi": "आपके अपने mask_mod को जाँचता है और गलत नतीजों, NaN और अवैध मेमोरी एक्सेस के पीछे की गलतियाँ ढूँढता है"}),
    "broken": ("troubleshooting.md#symptoms-and-fixes", {
        "en": "look the error up in the table of symptoms", "zh": "在症状表中查找这个错误",
        "pt": "procure o erro na tabela de sintomas", "hi": "लक्षणों की तालिका में यह त्रुटि देखें"}),
}


def link(target: str, lang: str) -> str:
    """The guide's URL of a section, in the reader's language: 'kernels.md#x' -> .../zh/kernels/#x."""
    page, anchor = target.split("#")
    path = "" if page == "index.md" else page[:-3] + "/"
    return f"{GUIDE}{'' if lang == 'en' else lang + '/'}{path}#{anchor}"


def fix_text(key: str, lang: str) -> str:
    return f"{FIXES[key][1][lang]} ({link(FIXES[key][0], lang)})" if key else ""


CHECKS = {
    "torch": check_torch, "cuda": check_cuda, "triton": check_triton,
    "flex_attention": check_flex_call, "compile_cache": check_cache,
    "recompile_limit": check_recompile_limit, "shared_memory": check_shared_memory,
    "flash_backend": check_flash_backend, "diffusers": check_diffusers, "float32_precision": check_precision,
}
# Without these, FlexAttention is not usable; the others only warn.
ESSENTIAL = {"torch", "flex_attention"}


def diagnose(lang="en") -> list:
    """Run every check; a check that raises is a failure, never a traceback (one that reads a name this
    PyTorch is too old to have is a warning)."""
    results = []
    for name, check in CHECKS.items():
        if results and results[0]["status"] == FAIL:
            results.append(dict(check=name, status=FAIL, message="skipped: torch is not usable", fix=""))
            continue
        try:
            status, message, fix = check()
        except TooOld as e:  # an older PyTorch: this check cannot run, FlexAttention still can
            status, message, fix = WARN, str(e), "torch_newer"
        except Exception as e:  # a broken install must still get an answer
            status, message, fix = FAIL, f"{type(e).__name__}: {e}".splitlines()[0], "broken"
        results.append(dict(check=name, status=status, message=message, fix=fix_text(fix, lang)))
    return results


# After the checks of the machine, the next tool: the checker of the reader's own mask (its page: maskcheck.md).
MASKCHECK = "python -m snippets.maskcheck MODULE:NAME --q-len N --kv-len N"


def usable(results) -> bool:
    return all(r["status"] != FAIL for r in results if r["check"] in ESSENTIAL)


def main(argv) -> int:
    parser = ArgumentParser(prog="python -m snippets doctor")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--lang", choices=LANGS, default="en", help="language of the fixes and their links")
    args = parser.parse_args(argv)
    results = diagnose(args.lang)
    after = {"command": MASKCHECK, "fix": fix_text("maskcheck", args.lang)}
    if args.json:
        print(json.dumps({"usable": usable(results), "checks": results, "next": after}, indent=2))
    else:
        for r in results:
            print(f"{r['status']:4}  {r['check']:17} {r['message']}" + (f" -> {r['fix']}" if r["fix"] else ""))
        print(f"{'next':4}  {'your_mask':17} {after['command']} -> {after['fix']}")
    return 0 if usable(results) else 1


if __name__ == "__main__":
    raise SystemExit(run(main))
