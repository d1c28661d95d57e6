"""Checks the Python environment in one line: the CPU setup (no CUDA wheels on a machine without a
GPU), or with --gpu the GPU tier (a CUDA GPU, a CUDA build of torch, and the packages its tests use)."""
import importlib.metadata as md
import importlib.util
import sys

try:
    import torch
    from torch.torch_version import TorchVersion
except ImportError:
    sys.exit("error: torch is not installed. Fix: make setup TORCH=torch==2.13.0")

if TorchVersion(torch.__version__) < (2, 5):
    sys.exit(f"error: torch {torch.__version__} has no FlexAttention. Fix: install torch 2.5 or newer")
if sys.argv[1:] == ["--gpu"]:
    if not torch.cuda.is_available():
        sys.exit(f"error: no CUDA GPU visible to torch {torch.__version__}. "
                 "Fix: run `make verify-gpu` on a CUDA machine, with GPU_PYTHON set to its CUDA Python")
    missing = [m for m in ("pytest", "diffusers", "hypothesis", "yaml") if importlib.util.find_spec(m) is None]
    if missing:
        sys.exit(f"error: the GPU tier needs {', '.join(missing)}. Fix: {sys.executable} -m pip install "
                 + " ".join("pyyaml" if m == "yaml" else m for m in missing) + " -c constraints.txt")
    print(f"GPU tier: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    sys.exit(0)
cuda_wheels = sorted(d.metadata["Name"] for d in md.distributions()
                     if (d.metadata["Name"] or "").lower().startswith("nvidia-"))
if cuda_wheels and not torch.cuda.is_available():
    sys.exit(f"error: CUDA wheels installed on a machine without a GPU ({', '.join(cuda_wheels[:3])}, ...). "
             "Fix: rm -rf .venv && make setup TORCH=torch==2.13.0 with the CPU build of torch")
print(f"setup ok: torch {torch.__version__}, Python {sys.version.split()[0]}")
