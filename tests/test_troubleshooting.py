import re

import pytest

from snippets import troubleshooting as ts


def numbers(version: str) -> tuple:
    """'2.11.0+cu130' -> (2, 11, 0)."""
    return tuple(int(x) for x in re.match(r"(\d+)\.(\d+)\.(\d+)", version).groups())


def test_the_seed_helper_does_not_exist(observe):
    from torch.nn.attention import flex_attention as module

    text = observe("troubleshooting.missing_helper", ts.missing_helper())
    assert text.startswith("AttributeError:") and "build_flex_attention_kernels" in text
    assert not hasattr(module, "build_flex_attention_kernels") and not hasattr(module, "kernel_root")


def test_torch_version_compares_as_a_version_and_a_plain_string_does_not(observe):
    """The oracle: the type of the real torch.__version__, and versions compared as integers."""
    import importlib.metadata

    import torch
    from torch.torch_version import TorchVersion

    assert isinstance(torch.__version__, TorchVersion) and isinstance(torch.__version__, str)
    plain = importlib.metadata.version("torch")
    assert type(plain) is str and numbers(plain) >= (2, 10, 0), "the plain-string case needs torch >= 2.10"
    text = observe("troubleshooting.string_version", ts.string_version_check())
    assert text.splitlines() == [
        f"torch.__version__ = {torch.__version__!r} (TorchVersion) >= '2.5.0': True",
        f"plain str {plain!r} >= '2.5.0': False",
        f"TorchVersion({plain!r}) >= '2.5.0': True",
    ]


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


@pytest.mark.parametrize("version", ["2.5.0", "2.9.1", "2.10.0", "2.13.0+cpu", "2.11.0+cu130", "2.49.9", "2.50.0"])
def test_plain_strings_misorder_from_2_10_to_2_49_and_torch_version_does_not(version):
    """Against versions compared as integers: a plain str >= '2.5.0' is wrong exactly for 2.10 to 2.49."""
    from torch.torch_version import TorchVersion

    truth = numbers(version) >= (2, 5, 0)
    assert truth
    assert (version >= "2.5.0") is not ((2, 10, 0) <= numbers(version) < (2, 50, 0))
    assert (TorchVersion(version) >= "2.5.0") is truth


def test_program_prints_the_three_errors_a_cpu_gives():
    from tests.helpers import python

    result = python("-m snippets.troubleshooting")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "\n".join([ts.missing_helper(), ts.string_version_check(), ts.cpu_backward()]) + "\n"
