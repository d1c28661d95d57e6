"""Released wheels that `make upstream` fetches into build/upstream, read by the tests as oracles and
never installed: SimpleTuner's (the configuration check) and flash-attn-4's (the GPUs it serves)."""
import functools
import hashlib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SIMPLETUNER = ("simpletuner", "4.10.1", "c6682347f9b5bdcbdf5b254e816671c219b78b6c3570425e51e9aa470022845f")
FLASH_ATTN_4 = ("flash_attn_4", "4.0.0b36", "b6f0e2a264334cb1b59289ddd309c7c76d3a8d184268316b43403e51ba8795d2")


def upstream_wheel(release) -> Path:
    """The path of a released wheel (name, version, sha256), checked to be that release."""
    name, version, sha256 = release
    wheel = ROOT / "build/upstream" / f"{name}-{version}-py3-none-any.whl"
    if not wheel.exists():
        pytest.fail(f"{wheel.relative_to(ROOT)} is missing. Fix: make upstream (make test fetches it)")
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == sha256, f"{wheel.name} is not the released wheel"
    return wheel


@functools.cache
def flash_attn_4_source(path="flash_attn/cute/interface.py") -> str:
    with zipfile.ZipFile(upstream_wheel(FLASH_ATTN_4)) as z:
        return z.read(path).decode()
