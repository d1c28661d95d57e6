import json

import pytest

from snippets import kernels
from tests.helpers import python, section, sh


def test_cache_locations_follow_the_environment(tmp_path):
    result = python("-m snippets.kernels", env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "ind")})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["inductor", str(tmp_path / "ind"), "triton", str(tmp_path / "ind/triton/0")]


def test_default_cache_is_under_tmp_not_home_cache(tmp_path, observe):
    script = "import json; from snippets.kernels import cache_locations as c; print(json.dumps(c()))"
    result = sh(f"unset TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR; python -c '{script}'",
                env={"HOME": str(tmp_path)})
    where = json.loads(result.stdout)
    assert where["inductor"].startswith("/tmp/torchinductor_")
    assert not (tmp_path / ".cache/torch/kernels").exists()
    observe("kernels.where", sh("unset TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR; "
                                + section("snippets/shell/kernels.sh", "where")).stdout.strip())


def test_relocated_cache_receives_the_compiled_code_and_clear_removes_it(tmp_path):
    script = ("from snippets.kernels import warm_up; import torch; "
              "warm_up([(1, 2, 256, 64)], dtype=torch.float32, device=\"cpu\", backward=False)")
    result = sh(section("snippets/shell/kernels.sh", "relocate") + f"; python -c '{script}'",
                env={"HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    relocated = tmp_path / ".cache/torchinductor"
    assert kernels.cache_files(relocated), "compiled code was written to the relocated cache"
    sh(section("snippets/shell/kernels.sh", "relocate") + "\n" + section("snippets/shell/kernels.sh", "clear"),
       env={"HOME": str(tmp_path)})
    assert not relocated.exists()


@pytest.mark.gpu
def test_warm_up_compiles_once_and_second_call_is_fast(tmp_path, observe):
    # A fresh, empty cache; the parent test process may have exported its own TRITON_CACHE_DIR.
    result = sh("unset TRITON_CACHE_DIR; " + section("snippets/shell/kernels.sh", "warm_up"),
                env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    observe("kernels.warm_up", result.stdout.strip())
    files = kernels.cache_files(tmp_path)
    observe("kernels.cache_files", json.dumps(files))
    assert ".cubin" in files


@pytest.mark.gpu
def test_no_nvcc_needed(tmp_path):
    script = ("from snippets.kernels import warm_up; import torch; warm_up([(1, 2, 256, 64)])")
    result = sh("export PATH=$(echo $PATH | tr : '\\n' | grep -v cuda | paste -sd:); "
                "unset CUDA_HOME TRITON_CACHE_DIR; "
                f"! command -v nvcc && python -c '{script}'",
                env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.gpu
def test_triton_comes_with_the_cuda_build_of_torch():
    import importlib.metadata as md

    requires = [r.split(";")[0].strip() for r in md.requires("torch") or []]
    assert any(r.startswith(("triton", "pytorch-triton")) for r in requires), requires


def test_importing_flex_attention_compiles_nothing(tmp_path):
    cache = tmp_path / "cache"
    result = sh("unset TRITON_CACHE_DIR; python -c 'import torch.nn.attention.flex_attention'",
                env={"TORCHINDUCTOR_CACHE_DIR": str(cache)})
    assert result.returncode == 0, result.stderr
    assert not kernels.cache_files(cache), "nothing is compiled or cached on import"
