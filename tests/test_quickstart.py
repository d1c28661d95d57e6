import pytest
import torch

from snippets import quickstart as qs


def test_causal_flex_attention_matches_sdpa_on_cpu(ran, monkeypatch, capsys):
    """The comparison and the program, on the CPU: the shapes the page names, and eager FlexAttention (the
    program compiles only on a GPU)."""
    shapes, real = [], qs.causal_attention

    def watched(q, k, v, attention=qs.flex_attention):
        assert attention is not qs.compiled_flex_attention, "compiled on the CPU"
        shapes.append(tuple(q.shape))
        return real(q, k, v, attention=attention)
    monkeypatch.setattr(qs, "causal_attention", watched)
    assert qs.compare_with_sdpa("cpu", torch.float32) < 1e-5
    assert shapes == [(2, 4, 256, 64)]
    if not torch.cuda.is_available():
        assert qs.main([]) == 0 and "device cpu" in capsys.readouterr().out
        assert shapes == [(2, 4, 256, 64)] * 3  # the call shown, then the comparison
    ran(dtypes=torch.float32, head_dims=64, lengths=256, batch=2, heads=4, modes="eager", passes="forward",
        inputs="causal mask")


def relative_error(out, want):
    return ((out.double() - want).norm() / want.norm()).item()


def test_causal_mask_mod_matches_sdpa_eager_and_compiled_with_fewer_queries_than_keys(ran):
    """The oracle: SDPA's own causal attention in float64 (is_causal=True: query i sees keys 0 to i, also
    when there are more keys than queries). Eager, and compiled to C++ by torch.compile on the CPU; 128
    queries and 256 keys, so a BlockMask built for the wrong lengths fails."""
    from torch._inductor.utils import run_and_get_code

    q = torch.randn(2, 4, 128, 64)
    k, v = (torch.randn(2, 4, 256, 64) for _ in range(2))
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    assert relative_error(qs.causal_attention(q, k, v), want) < 1e-5, "eager"
    ran(dtypes=torch.float32, head_dims=64, lengths=[128, 256], batch=2, heads=4, modes="eager", passes="forward",
        inputs="causal mask")
    torch._dynamo.reset()
    out, code = run_and_get_code(qs.causal_attention, q, k, v, torch.compile(qs.flex_attention))
    assert relative_error(out, want) < 1e-5, "compiled"
    assert any('extern "C"' in c for c in code), "compiled to C++"
    ran(dtypes=torch.float32, head_dims=64, lengths=[128, 256], batch=2, heads=4, modes="compiled",
        passes="forward", inputs="causal mask")


def test_no_backward_on_the_cpu_eager_or_compiled(ran):
    torch._dynamo.reset()
    for mode, attention in [("eager", qs.flex_attention), ("compiled", torch.compile(qs.flex_attention))]:
        q, k, v = (torch.randn(1, 2, 128, 64, requires_grad=True) for _ in range(3))
        with pytest.raises(NotImplementedError, match="does not support backward on CPU"):
            qs.causal_attention(q, k, v, attention=attention).sum().backward()
        assert q.grad is None, mode
        ran(dtypes=torch.float32, head_dims=64, lengths=128, batch=1, heads=2, modes=mode, passes="backward",
            inputs="causal mask")


def test_without_the_mask_the_result_differs():
    # The comparison above would catch a wrong mask: full attention is far from causal.
    q, k, v = (torch.randn(1, 2, 256, 64) for _ in range(3))
    full = qs.flex_attention(q, k, v)
    assert (full - qs.causal_attention(q, k, v)).norm() / full.norm() > 0.1


@pytest.mark.parametrize("version, expected", [("2.13.0", True), ("2.5.0", True), ("2.10.1+cu128", True),
                                               ("2.4.1", False), ("1.13.1", False)])
def test_version_check(version, expected):
    assert qs.has_flex_attention(version) is expected


def test_quickstart_program_as_shown(observe):
    from tests.helpers import section, sh

    result = sh(section("snippets/shell/quickstart.sh", "run"))
    assert result.returncode == 0, result.stderr
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert f"device {device}" in result.stdout
    error = float(result.stdout.split("relative error vs SDPA:")[1])
    assert error < (2e-2 if device == "cuda" else 1e-5)
    observe("quickstart.run_gpu" if device == "cuda" else "quickstart.run", result.stdout.strip())


def test_flex_attention_is_still_documented_as_a_prototype():
    assert "is a prototype feature" in qs.flex_attention.__doc__


@pytest.mark.parametrize("version", ["2.4.1", "2.5.0", "2.9.1", "2.10.0", "2.13.0+cpu", "2.11.0+cu130", "3.0.0"])
def test_has_flex_attention_agrees_with_diffusers(version):
    """The oracle: Diffusers' own version comparison against its required FlexAttention version."""
    from diffusers.models.attention_dispatch import _REQUIRED_FLEX_VERSION
    from diffusers.utils.import_utils import compare_versions
    from packaging.version import parse

    assert qs.has_flex_attention(version) is compare_versions(parse(version), ">=", _REQUIRED_FLEX_VERSION)


def test_the_version_floors_on_the_page_are_the_first_releases_with_those_names(ran):
    """claims/torch_api.yaml records which names each release's source has; the index page names the first
    release of each (and a wrong version on the page, or a name that moved, fails here)."""
    import re

    import yaml

    from tests.helpers import ROOT

    api = yaml.safe_load((ROOT / "claims" / "torch_api.yaml").read_text(encoding="utf-8"))

    def first(name):
        return min((v for v, names in api["names"].items() if name in (names or [])),
                   key=lambda v: tuple(map(int, v.split("."))))

    floors = {  # what the page says, by name
        "torch.nn.attention.flex_attention.BlockMask.seq_lengths": "2.6",
        "torch.nn.attention.experimental._paged_attention.PagedAttention": "2.6",
        "torch._inductor.runtime.cache_dir_utils.cache_dir": "2.6",
        "torch._dynamo.config.recompile_limit": "2.7",
        "torch.nn.attention.flex_attention.AuxRequest": "2.9",
    }
    for name, version in floors.items():
        assert first(name) == version, name
    assert api["compiled_on_cpu"] == "2.6"
    assert api["keywords"]["flex_attention(return_aux=)"] == "2.9"
    assert api["keywords"]['kernel_options["BACKEND"]="FLASH"'] == "2.10"
    assert "torch.nn.attention.flex_attention.flex_attention" in api["names"]["2.5"]
    page = (ROOT / "docs" / "en" / "index.md").read_text(encoding="utf-8")
    sentence = page[:page.index("<!-- claim: version-floors -->")].rsplit("\n\n", 1)[1]
    assert re.findall(r"needs? (2\.\d+)", sentence) == ["2.6", "2.7", "2.9", "2.10"]
    ran(torch_api=sorted(api["names"]))
