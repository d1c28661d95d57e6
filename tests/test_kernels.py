import json

import pytest

from snippets import kernels
from tests.helpers import python, section, sh


def test_cache_locations_follow_the_environment(tmp_path):
    result = python("-m snippets.kernels", env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "ind")})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["inductor", str(tmp_path / "ind"), "triton", str(tmp_path / "ind/triton/0")]


def test_default_cache_is_under_tmp_not_home_cache(tmp_path, observe):
    """Compile for real with no cache variable set: the code lands in <temp dir>/torchinductor_<user>,
    and nothing is written under the home directory (~/.cache/torch/kernels or anywhere else)."""
    import getpass

    home, temp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    temp.mkdir()
    script = ("import json, torch; from snippets.kernels import cache_locations, warm_up; "
              "warm_up([(1, 2, 256, 64)], dtype=torch.float32, device=\"cpu\", backward=False); "
              "print(json.dumps(cache_locations()))")
    result = sh(f"unset TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR; python -c '{script}'",
                env={"HOME": str(home), "TMPDIR": str(temp)})
    assert result.returncode == 0, result.stderr
    where = json.loads(result.stdout.splitlines()[-1])
    default = temp / f"torchinductor_{getpass.getuser()}"
    assert where["inductor"] == str(default)
    assert kernels.cache_files(default), "the compiled code is in the default cache"
    assert not list(home.rglob("*")), "nothing under the home directory"
    observe("kernels.where", sh("unset TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR; "
                                + section("snippets/shell/kernels.sh", "where")).stdout.strip())


def test_a_second_process_loads_the_compiled_code_from_the_cache(tmp_path, ran):
    """Inductor's FX-graph cache counters: the first process misses and compiles, a second process
    with the same shapes and cache directory hits and compiles nothing."""
    script = ("import json, torch; from torch._dynamo.utils import counters; from snippets.kernels import warm_up; "
              "warm_up([(1, 2, 256, 64)], dtype=torch.float32, device=\"cpu\", backward=False); "
              "print(json.dumps(dict(counters[\"inductor\"])))")
    runs = []
    for _ in range(2):
        result = sh(f"unset TRITON_CACHE_DIR; python -c '{script}'", env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path)})
        assert result.returncode == 0, result.stderr
        runs.append(json.loads(result.stdout.splitlines()[-1]))
    first, second = runs
    assert first.get("fxgraph_cache_miss", 0) >= 1 and first.get("fxgraph_cache_hit", 0) == 0, first
    assert second.get("fxgraph_cache_hit", 0) >= 1 and second.get("fxgraph_cache_miss", 0) == 0, second
    ran(dtypes="float32", head_dims=64, lengths=256, batch=1, heads=2, modes="compiled", passes="forward",
        inputs="causal mask")


def test_relocated_cache_receives_the_compiled_code_and_clear_removes_it(tmp_path, ran):
    """Inductor's FX-graph cache counters: after the page's command removes the cache, the next process
    with the same shapes misses the cache and compiles again."""
    script = ("import json, torch; from torch._dynamo.utils import counters; from snippets.kernels import warm_up; "
              "warm_up([(1, 2, 256, 64)], dtype=torch.float32, device=\"cpu\", backward=False); "
              "print(json.dumps(dict(counters[\"inductor\"])))")
    relocate = section("snippets/shell/kernels.sh", "relocate")

    def compile_once():
        result = sh(f"unset TRITON_CACHE_DIR; {relocate}; python -c '{script}'", env={"HOME": str(tmp_path)})
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.splitlines()[-1])

    compile_once()
    relocated = tmp_path / ".cache/torchinductor"
    assert kernels.cache_files(relocated), "compiled code was written to the relocated cache"
    assert compile_once().get("fxgraph_cache_hit", 0) >= 1, "a second process loads it from there"
    sh(relocate + "\n" + section("snippets/shell/kernels.sh", "clear"), env={"HOME": str(tmp_path)})
    assert not relocated.exists()
    again = compile_once()
    assert again.get("fxgraph_cache_miss", 0) >= 1 and again.get("fxgraph_cache_hit", 0) == 0, again
    ran(dtypes="float32", head_dims=64, lengths=256, batch=1, heads=2, modes="compiled", passes="forward",
        inputs="causal mask")


def test_no_release_from_2_5_to_2_13_has_the_build_helper(ran):
    """claims/torch_api.yaml `absent`: names of older guides that no file of each release's source has
    (read from its wheel); and the installed release's own source, read here."""
    import pathlib

    import torch
    import yaml
    from torch.nn.attention import flex_attention as module

    from tests.helpers import ROOT

    api = yaml.safe_load((ROOT / "claims" / "torch_api.yaml").read_text(encoding="utf-8"))
    releases = [f"2.{minor}" for minor in range(5, 14)]
    here = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    sources = [path.read_text(encoding="utf-8", errors="replace")
               for path in pathlib.Path(torch.__file__).parent.rglob("*.py*") if path.suffix in (".py", ".pyi")]
    for name in ("build_flex_attention_kernels", "kernel_root"):
        assert api["absent"][f"torch.nn.attention.flex_attention.{name}"] == releases, name
        assert not any(name in names for names in api["names"].values()), name
        assert here in releases and not hasattr(module, name), name
        assert not any(name in text for text in sources), f"{name} in the installed torch {here}"
    ran(torch_api=releases)


@pytest.mark.gpu
def test_warm_up_compiles_once_and_second_call_is_fast(tmp_path, observe, alone):
    import re
    import threading

    # A fresh, empty cache, and a reader's compile settings: the parent test process may have exported
    # its own TRITON_CACHE_DIR and TORCHINDUCTOR_COMPILE_THREADS.
    printed = ""
    with alone():  # the page shows the times it measures: the program runs alone until it has printed them
        command = sh("unset TRITON_CACHE_DIR TORCHINDUCTOR_COMPILE_THREADS; "
                     + section("snippets/shell/kernels.sh", "warm_up"),
                     env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}, start=True)
        stop = threading.Timer(300, command.kill)  # a program that hangs is stopped, and the test fails
        stop.start()
        while (line := command.stdout.readline()) and not line.startswith("first call"):
            printed += line
        printed += line
    rest, errors = command.communicate()  # its exit (the compile workers stop) runs beside other tests
    stop.cancel()
    printed += rest
    assert command.returncode == 0, errors
    observe("kernels.warm_up", printed.strip())
    first, second = re.search(r"first call ([\d.]+) s, second call ([\d.]+) ms", printed).groups()
    assert float(first) >= 1.0, "the first call compiles: seconds"
    assert float(second) < 100, "the second call reuses the kernels: milliseconds"
    listed = sh(section("snippets/shell/kernels.sh", "files"), env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path)})
    assert listed.returncode == 0, listed.stderr
    counts = dict(line.split() for line in listed.stdout.splitlines()[2:])  # after the two cache locations
    cubins = [p for p in tmp_path.rglob("*.cubin")]
    assert cubins and counts[".cubin"] == str(len(cubins)), "the GPU binaries Triton produced, counted"
    observe("kernels.cache_files", "\n".join(listed.stdout.splitlines()[2:]))


@pytest.mark.gpu
def test_warm_up_compiles_once_per_shape():
    """Counted by torch._dynamo: the second warm-up of the same shape compiles nothing new."""
    import torch
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    kernels.warm_up([(1, 2, 512, 64)])
    compiled = counters["frames"]["ok"]
    assert compiled >= 1
    kernels.warm_up([(1, 2, 512, 64)])
    assert counters["frames"]["ok"] == compiled


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
    """Every place a build would go stays empty through the import: Inductor's and Triton's caches, the
    folder of PyTorch's C++/CUDA extension builds (TORCH_EXTENSIONS_DIR) and its default under the home
    directory (~/.cache/torch_extensions), and ~/.cache/torch; and torch._dynamo compiles no frame."""
    folders = {name: tmp_path / name for name in ("inductor", "triton", "extensions", "home")}
    for folder in folders.values():
        folder.mkdir()
    script = ("import torch.nn.attention.flex_attention; from torch._dynamo.utils import counters; "
              "print(sum(counters[\"frames\"].values()))")
    result = sh(f"python -c '{script}'",
                env={"TORCHINDUCTOR_CACHE_DIR": str(folders["inductor"]), "TRITON_CACHE_DIR": str(folders["triton"]),
                     "TORCH_EXTENSIONS_DIR": str(folders["extensions"]), "HOME": str(folders["home"])})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == "0", "no frame compiled"
    for name in ("inductor", "triton", "extensions"):
        assert not list(folders[name].rglob("*")), f"nothing is compiled or cached on import ({name})"
    for default in (".cache/torch_extensions", ".cache/torch"):
        assert not (folders["home"] / default).exists(), default
    result = sh(f"unset TORCH_EXTENSIONS_DIR; python -c '{script}'",
                env={"TORCHINDUCTOR_CACHE_DIR": str(folders["inductor"]), "TRITON_CACHE_DIR": str(folders["triton"]),
                     "HOME": str(folders["home"])})
    assert result.returncode == 0, result.stderr
    assert not (folders["home"] / ".cache/torch_extensions").exists(), "nor in the default extensions folder"


def test_warm_up_compiles_for_the_causal_mask():
    import torch

    from snippets import masks

    assert torch.equal(masks.dense(kernels.causal, 8), torch.ones(8, 8, dtype=torch.bool).tril())


def test_cache_files_counts_the_files_under_a_folder_by_suffix(tmp_path):
    for name in ["a.py", "b.py", "c.cubin", "sub/d.py", "sub/LOCK"]:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).touch()
    assert list(kernels.cache_files(tmp_path).items()) == [(".cubin", 1), (".py", 3), ("LOCK", 1)]


def test_warm_up_runs_the_backward_pass_by_default(monkeypatch):
    import torch

    calls = []

    class Output:
        def sum(self):
            return self

        def backward(self):
            calls.append("backward")

    monkeypatch.setattr(kernels, "create_block_mask", lambda *args, **kwargs: None)
    monkeypatch.setattr(kernels, "compiled", lambda q, k, v, block_mask: Output())
    kernels.warm_up([(1, 1, 128, 16)], dtype=torch.float32, device="cpu")
    assert calls == ["backward"]


def test_which_calls_generate_kernels(ran):
    """Counted by torch._dynamo on the CPU: the first call compiles, the same call again does not,
    a new dtype, mask_mod or score_mod compiles again, a second sequence length compiles once more and
    a third on the same side of 128 tokens does not, while one on the other side compiles once more
    (both ways: shorter after longer, longer after shorter); a new number of heads or head dimension
    compiles again, each time."""
    import torch
    from torch._dynamo.utils import counters
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(flex_attention)

    def call(tokens=128, dtype=torch.float32, mask_mod=kernels.causal, heads=2, head_dim=64, score_mod=None):
        q = torch.randn(1, heads, tokens, head_dim, dtype=dtype)
        compiled(q, q, q, score_mod=score_mod,
                 block_mask=create_block_mask(mask_mod, None, None, tokens, tokens, device="cpu"))
        ran(dtypes=dtype, lengths=tokens, heads=heads, head_dims=head_dim, batch=1, modes="compiled",
            passes="forward", inputs="causal mask" if mask_mod is kernels.causal else "new mask_mod")
        return counters["frames"]["ok"]

    with torch._dynamo.config.patch(recompile_limit=16):  # more than the default 8 compiles of one function
        assert call() == 1
        assert call() == 1, "same shapes, dtype and mask: reused"
        assert call(dtype=torch.bfloat16) == 2, "new dtype: compiled again"
        assert call(dtype=torch.bfloat16, mask_mod=lambda b, h, q, k: q - k < 64) == 3, "new mask_mod: compiled again"
        assert call(tokens=256) == 4, "a second length: compiled once more, dynamic"
        assert call(tokens=384) == 4, "a third length: reused"
        assert call(tokens=129) == 4, "a length above 128 tokens, as the second: reused"
        assert call(tokens=100) == 5, "a length at or below 128 tokens, unlike the second: compiled once more"
        assert call(tokens=64) == 5, "another length at or below 128: reused"
        assert call(heads=4) == 6, "a second number of heads: compiled again"
        assert call(heads=8) == 7, "a third number of heads: compiled again (heads do not become dynamic)"
        assert call(head_dim=32) == 8, "a second head dimension: compiled again"
        assert call(head_dim=16) == 9, "a third head dimension: compiled again"
        assert call(score_mod=lambda score, b, h, q, k: score * 0.5) == 10, "new score_mod: compiled again"
        assert call(tokens=512) == 10, "a fourth length: still reused"

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(flex_attention)
    assert [call(tokens) for tokens in (256, 384, 128, 1000)] == [1, 2, 3, 3], \
        "lengths above 128 first: 128 compiles once more, and then 1000 reuses one of the two"
