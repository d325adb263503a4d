"""Differential-fuzzer regression: LayerNormalization of a row whose squared deviations overflow.

Found by python -m tensorforge.testing.fuzz --seed 4242 --cases 20000 --jobs 2 (29 cases, e.g.):
    s4242b483c7 [cpu] nan s4242b483c7_layern3: 4/24 differ, e.g. at [0, 1, 0]: got np.float32(nan), expected np.float32(-0.0) (ops LayerNormalization; specials -denorm,huge,inf,nan)
"""
import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

from tensorforge.testing.fuzz_check import check_model  # noqa: E402

nan, inf = np.nan, np.inf


def build():
    nodes = [helper.make_node('LayerNormalization', ['x', 'scale'], ['y'], axis=-1)]
    inputs = [helper.make_tensor_value_info('x', 1, [3, 4])]
    outputs = [helper.make_tensor_value_info('y', 1, [3, 4])]
    inits = [numpy_helper.from_array(np.array([-1.524, 0.5306, 0.7597, -0.1858], np.float32), 'scale')]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


FEEDS = [np.array([[1e30, -0.4949, -0.5648, 0.2908],
                   [-3e30, 2e30, 0.1, -0.2],
                   [0.45, 0.106, -0.152, -0.455]], dtype=np.float32)]


# The native norms use corrected two-pass statistics, var = mean(d*d) - corr**2 with d = x - mean
# and corr = mean(d).  With |d| ~ 1e30, mean(d*d) overflows to +inf and so does corr**2 (corr is
# d's rounding residue, ~1e23): inf - inf gave a NaN variance and a NaN row, where onnxruntime's
# variance is +inf and the row is (x - mean) * 0 = +-0.  The variance now stays +inf there.
def test_fuzz_layernorm_variance_overflow():
    assert check_model(build(), FEEDS, targets=('cpu', 'interpreter')) == []
