"""Checks the Python environment in one line: the CPU setup (no CUDA wheels on a machine without a
GPU), or with --gpu the GPU tier (a CUDA GPU, a CUDA build of torch, and the packages its tests use)."""
import importlib.metadata as md
import importlib.util
import re
import sys

from guide import project
from guide.project import GuideError


def pins(text: str) -> dict:
    """{package: version} of a requirements file whose every requirement is `name==version`."""
    found = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
            if not match:
                raise GuideError(f"requirements-gpu.txt: {line!r} is not pinned as name==version",
                                 "pin it, as every other line is")
            found[match.group(1)] = match.group(2)
    return found


def unmet(wanted: dict) -> list:
    """'name==version (found X)' or '(not installed)' for each pin this Python does not have."""
    problems = []
    for package, version in wanted.items():
        try:
            found = md.version(package)
        except md.PackageNotFoundError:
            problems.append(f"{package}=={version} (not installed)")
            continue
        if found != version:
            problems.append(f"{package}=={version} (found {found})")
    return problems


def check(gpu: bool = False) -> str:
    """A line saying what was found; GuideError naming what is wrong and its fix."""
    try:
        import torch
        from torch.torch_version import TorchVersion
    except ImportError:
        raise GuideError("torch is not installed", "make setup TORCH=torch==2.13.0") from None
    if TorchVersion(torch.__version__) < (2, 5):
        raise GuideError(f"torch {torch.__version__} has no FlexAttention", "install torch 2.5 or newer")
    if gpu:
        if not torch.cuda.is_available():
            raise GuideError(f"no CUDA GPU visible to torch {torch.__version__}",
                             "run `make verify-gpu` on a CUDA machine, with GPU_PYTHON set to its CUDA Python")
        problems = unmet(pins(project.path("requirements-gpu.txt").read_text(encoding="utf-8")))
        if importlib.util.find_spec("yaml") is None:  # the CUDA machine's own, not pinned there
            problems.append("pyyaml (not installed)")
        if problems:
            shown = ", ".join(problems[:6]) + (f" and {len(problems) - 6} more" if len(problems) > 6 else "")
            raise GuideError(f"the GPU tier needs {shown}",
                             f"make gpu-setup GPU_PYTHON={sys.executable} (the pins of requirements-gpu.txt)")
        try:
            flash = importlib.util.find_spec("flash_attn.cute") is not None
        except ModuleNotFoundError:
            flash = False
        if not flash:
            raise GuideError("the GPU tier needs flash-attn-4 (the FLASH backend's tests)",
                             f"{sys.executable} -m pip install flash-attn-4")
        return f"GPU tier: {torch.cuda.get_device_name()}, torch {torch.__version__}, flash-attn-4 {md.version('flash-attn-4')}"
    cuda_wheels = sorted(d.metadata["Name"] for d in md.distributions()
                         if (d.metadata["Name"] or "").lower().startswith("nvidia-"))
    if cuda_wheels and not torch.cuda.is_available():
        raise GuideError(f"CUDA wheels installed on a machine without a GPU ({', '.join(cuda_wheels[:3])}, ...)",
                         "rm -rf .venv && make setup TORCH=torch==2.13.0 with the CPU build of torch")
    return f"setup ok: torch {torch.__version__}, Python {sys.version.split()[0]}"
