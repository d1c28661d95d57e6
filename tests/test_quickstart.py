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


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, bound", [(torch.bfloat16, 2e-2), (torch.float16, 3e-3), (torch.float32, 1e-5)])
def test_compiled_flex_attention_matches_sdpa_on_gpu(dtype, bound):
    torch.set_float32_matmul_precision("highest")
    assert qs.compare_with_sdpa("cuda", dtype, tokens=1024, attention=qs.compiled_flex_attention) < bound


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


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, bound", [(torch.bfloat16, 3e-2), (torch.float16, 5e-3), (torch.float32, 1e-4)])
def test_compiled_backward_matches_sdpa_on_gpu(dtype, bound):
    torch.set_float32_matmul_precision("highest")
    q, k, v = (torch.randn(2, 4, 1024, 64, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    qs.causal_attention(q, k, v, attention=qs.compiled_flex_attention).sum().backward()
    ref = [x.detach().double().requires_grad_() for x in (q, k, v)]
    torch.nn.functional.scaled_dot_product_attention(*ref, is_causal=True).sum().backward()
    for got, want in zip((q, k, v), ref):
        assert (got.grad.double() - want.grad).norm() / want.grad.norm() < bound


@pytest.mark.gpu
def test_tf32_precision_error_measured(observe):
    errors = {}
    for precision in ("highest", "high"):
        torch.set_float32_matmul_precision(precision)
        torch._dynamo.reset()
        errors[precision] = qs.compare_with_sdpa("cuda", torch.float32, tokens=1024,
                                                 attention=torch.compile(qs.flex_attention))
    torch.set_float32_matmul_precision("highest")
    assert errors["highest"] < 1e-4
    observe("quickstart.tf32", "\n".join(f"float32 matmul precision {p!r}: relative error vs float64 SDPA {e:.1e}"
                                         for p, e in errors.items()))
