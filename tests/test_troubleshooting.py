import pytest

from snippets import troubleshooting as ts


def test_the_seed_helper_does_not_exist(observe):
    text = observe("troubleshooting.missing_helper", ts.missing_helper())
    assert text.startswith("AttributeError:") and "build_flex_attention_kernels" in text


def test_string_version_comparison_is_wrong(observe):
    text = observe("troubleshooting.string_version", ts.string_version_check())
    assert text == "string comparison: False, TorchVersion comparison: True"


def test_no_backward_on_cpu(observe):
    text = observe("troubleshooting.cpu_backward", ts.cpu_backward())
    assert text.startswith("NotImplementedError:") and "backward on CPU" in text


def test_eager_flex_attention_warns_that_it_is_unfused(observe):
    text = observe("troubleshooting.eager_warning", ts.eager_warning())
    assert "without torch.compile" in text and "materializes the full scores matrix" in text


@pytest.mark.gpu
def test_autocast_with_compiled_flex_attention_runs_forward_and_backward(observe):
    text = observe("troubleshooting.autocast", ts.autocast_compiled())
    assert text.startswith("output torch.bfloat16, q.grad torch.float32,")
    assert float(text.rsplit(" ", 1)[1]) < 2e-2  # bf16's own error, as on the accuracy page


@pytest.mark.parametrize("version, string_says", [("2.5.0", True), ("2.9.1", True), ("2.10.0", False),
                                                   ("2.13.0", False), ("2.49.9", False), ("2.50.0", True)])
def test_string_comparison_is_false_from_2_10_to_2_49(version, string_says):
    from torch.torch_version import TorchVersion

    assert (version >= "2.5.0") is string_says
    assert TorchVersion(version) >= "2.5.0"
