"""Loop-invariant code motion (schedule/licm.py): the squeeze-excitation gate is computed once per
channel, not once per pixel; results are unchanged, NaN and Inf included; nothing is hoisted out
of a loop that may run zero times."""
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.export import Dim  # noqa: E402

import tensorforge  # noqa: E402


class Gate(torch.nn.Module):
    """x * sigmoid(s + b) with s per channel: the gate of a squeeze-excitation block."""

    def __init__(self, channels: int):
        super().__init__()
        self.b = torch.nn.Parameter(torch.linspace(-1.0, 1.0, channels).reshape(1, channels, 1))

    def forward(self, x, s):
        return x * torch.sigmoid(s + self.b)


def _kernel_with(src: str, needle: str) -> str:
    """The text of the generated C function that contains ``needle``."""
    for m in re.finditer(r"static void k\d+_\w+\(.*?\n}\n", src, re.S):
        if needle in m.group(0):
            return m.group(0)
    raise AssertionError(f"no kernel calls {needle}")


def _depth_of(text: str, needle: str) -> int:
    """How many ``for`` loops are open at the first line holding ``needle``."""
    depth = 0
    for line in text.splitlines():
        if needle in line:
            return depth
        depth += line.count("for (") - line.strip().startswith("}")
    raise AssertionError(needle)


def _loops_around_store(text: str) -> int:
    return _depth_of(text, "out0[")


def test_gate_is_computed_once_per_channel_with_the_same_results():
    x = torch.randn(2, 8, 64)
    s = torch.randn(2, 8, 1)
    x[0, 0, :3] = torch.tensor([float("nan"), float("inf"), -0.0])
    s[1, 2, 0] = float("inf")
    s[1, 3, 0] = float("nan")
    s[0, 4, 0] = -float("inf")
    module = Gate(8).eval()
    cm = tensorforge.compile(module, (x, s))
    kernel = _kernel_with(cm.source, "tf_sigmoidf")
    # the sigmoid runs outside the loop over the 64 positions, the store inside it
    assert _depth_of(kernel, "tf_sigmoidf") < _loops_around_store(kernel)
    want = module(x, s).detach().numpy()
    got = np.asarray(cm(x, s))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


def test_nothing_leaves_a_loop_that_may_run_zero_times():
    module = Gate(8).eval()
    n = Dim("n", min=0, max=64)
    cm = tensorforge.compile(module, (torch.randn(1, 8, 5), torch.randn(1, 8, 1)),
                             dynamic_shapes={"x": {2: n}, "s": None})
    for length in (0, 1, 7):
        x, s = torch.randn(1, 8, length), torch.randn(1, 8, 1)
        got = np.asarray(cm(x, s))
        assert got.shape == (1, 8, length)
        np.testing.assert_allclose(got, module(x, s).detach().numpy(), rtol=1e-6, atol=0)

