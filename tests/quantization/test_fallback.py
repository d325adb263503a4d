"""The accuracy-driven fallback (``quantize(..., max_error=e)``, ``quantization/fallback.py``): the
layer that adds the most error on the held-out samples goes back to float32 first, the held-out
error shrinks, what was done is recorded, and the result still compiles to the exact int8 kernels."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

import tensorforge  # noqa: E402
from tensorforge.errors import TensorforgeError  # noqa: E402
from tensorforge.ir.interpreter import run_function  # noqa: E402
from tensorforge.quantization.fallback import relative_error  # noqa: E402

from .test_quantize_conv import _block, _inputs


def _skewed_block() -> onnx.ModelProto:
    """``_block`` whose second conv has one output channel 300x the others: with one weight scale
    per tensor, that conv's other channels keep about one int8 level."""
    model = _block()
    for t in model.graph.initializer:
        if t.name == "w1":
            w = numpy_helper.to_array(t).copy()
            w[0] *= 300.0
            t.CopyFrom(numpy_helper.from_array(w, "w1"))
    return model


def test_the_worst_layer_goes_back_to_float_first():
    model = _skewed_block()
    plain = tensorforge.quantize(model, _inputs(10, 100), keep_first_last=False, per_channel=False)
    assert "tf.fallback" not in plain.attributes
    q = tensorforge.quantize(model, _inputs(10, 100), keep_first_last=False, per_channel=False, max_error=1e-4)
    promoted = q.attributes["tf.fallback"]
    assert promoted[0] == "1:conv at Conv_2"                  # the skewed conv adds the most error
    assert not set(promoted) & set(q.attributes["tf.quantized"])
    first, final = q.attributes["tf.holdout_error"]
    assert final < first
    cm = tensorforge.compile(q)
    x = _inputs(1, 3000)[0]
    np.testing.assert_array_equal(np.asarray(cm(x)[0]), run_function(q.main, [x])[0])
    # and the float32 layer shows on unseen inputs too
    f32 = tensorforge.compile(model)
    with_fallback = relative_error(np.asarray(cm(x)[0]), np.asarray(f32(x)[0]))
    without = relative_error(np.asarray(tensorforge.compile(plain)(x)[0]), np.asarray(f32(x)[0]))
    assert with_fallback < without


def test_a_met_target_promotes_nothing():
    q = tensorforge.quantize(_block(), _inputs(10, 100), keep_first_last=False, max_error=0.5)
    assert q.attributes["tf.fallback"] == ()
    first, final = q.attributes["tf.holdout_error"]
    assert first == final <= 0.5 and len(q.attributes["tf.quantized"]) == 4


def test_fallback_needs_held_out_samples():
    with pytest.raises(TensorforgeError, match="at least 2 calibration samples"):
        tensorforge.quantize(_block(), _inputs(1, 100), max_error=0.01)
