"""Fails the setup, in one line, if it pulled CUDA wheels onto a machine without a GPU or a too-old torch."""
import importlib.metadata as md
import sys

try:
    import torch
    from torch.torch_version import TorchVersion
except ImportError:
    sys.exit("error: torch is not installed. Fix: make setup TORCH=torch==2.13.0")

if TorchVersion(torch.__version__) < (2, 5):
    sys.exit(f"error: torch {torch.__version__} has no FlexAttention. Fix: install torch 2.5 or newer")
cuda_wheels = sorted(d.metadata["Name"] for d in md.distributions()
                     if (d.metadata["Name"] or "").lower().startswith("nvidia-"))
if cuda_wheels and not torch.cuda.is_available():
    sys.exit(f"error: CUDA wheels installed on a machine without a GPU ({', '.join(cuda_wheels[:3])}, ...). "
             "Fix: rm -rf .venv && make setup TORCH=torch==2.13.0 with the CPU build of torch")
print(f"setup ok: torch {torch.__version__}, Python {sys.version.split()[0]}")
