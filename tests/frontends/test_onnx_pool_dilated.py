"""AveragePool with dilations and ceil_mode (a depthwise convolution of ones over a zero-padded
input; the counts exclude the ceil-mode overhang) on both targets.

Checked against a direct loop over the ONNX definition: onnx's ReferenceEvaluator disagrees with
it (and with the conformance cases, which pass) for dilated windows with asymmetric pads."""
from __future__ import annotations

import numpy as np
import pytest

from tests.frontends.onnx_ref_util import TARGETS, one_node_model

import tensorforge


def _expected(x, include):
    """kernel (2, 3), strides (2, 3), dilations (2, 2), pads (1, 0, 1, 1), ceil mode: 5 x 3 windows."""
    h, w = x.shape
    out = np.zeros((5, 3), np.float64)
    for i in range(5):
        for j in range(3):
            taps = [(r, c) for r in (2 * i - 1, 2 * i + 1) for c in (3 * j, 3 * j + 2, 3 * j + 4)]
            real = [x[r, c] for r, c in taps if 0 <= r < h and 0 <= c < w]
            padded = [t for t in taps if -1 <= t[0] < h + 1 and 0 <= t[1] < w + 1]
            out[i, j] = sum(real) / (len(padded) if include else len(real))
    return out


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("include", [0, 1])
def test_average_pool_dilated_ceil_mode(include, target):
    x = np.random.default_rng(5).standard_normal((1, 2, 9, 8)).astype(np.float32)
    m = one_node_model("AveragePool", {"x": x}, 22, kernel_shape=[2, 3], strides=[2, 3], dilations=[2, 2],
                       pads=[1, 0, 1, 1], ceil_mode=1, count_include_pad=include)
    got = np.asarray(tensorforge.compile(m, target=target)(x))
    assert got.shape == (1, 2, 5, 3)
    for c in range(2):
        np.testing.assert_allclose(got[0, c], _expected(x[0, c], include), rtol=1e-5, atol=1e-6)
