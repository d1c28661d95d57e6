import pytest
import torch

from snippets import quickstart as qs


def test_causal_flex_attention_matches_sdpa_on_cpu():
    assert qs.compare_with_sdpa("cpu", torch.float32) < 1e-5


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
