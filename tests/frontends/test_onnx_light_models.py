"""The nine ``light_*`` CNNs that onnx ships: import, run in the interpreter, compare.

Their weights are all 0.02, which hides many bugs (every channel computes the same thing), so
each model is also run with seeded random weights (He-scaled convolutions and GEMMs, positive
BatchNorm variances) against onnxruntime on the same modified model.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import numpy_helper  # noqa: E402

from tensorforge.frontends.onnx import import_onnx  # noqa: E402
from tensorforge.ir.interpreter import run_function  # noqa: E402
from tensorforge.ir.verifier import verify  # noqa: E402

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
# Measured: the whole file takes ~20 s on one core (vgg19 ~7 s for both tests, the rest
# 0.3-2.7 s), under the ~60 s at which the slowest would be marked ``slow``.
NAMES = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
         "squeezenet", "vgg19", "zfnet512"]
MAX_REL_ERR = 1e-4


def _load(name: str):
    return onnx.load(os.path.join(LIGHT_DIR, f"light_{name}.onnx"))


def _data_input(model):
    inits = {t.name for t in model.graph.initializer}
    (vi,) = [i for i in model.graph.input if i.name not in inits]
    return vi, tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)


def _rel_err(actual: np.ndarray, expected: np.ndarray) -> float:
    assert actual.shape == expected.shape
    return float(np.abs(actual.astype(np.float64) - expected).max() / np.abs(expected).max())


def _run(model, x: np.ndarray) -> np.ndarray:
    module = import_onnx(model)
    verify(module)
    (out,) = run_function(module.main, [x])
    return out


@pytest.mark.parametrize("name", NAMES)
def test_shipped_output(name):
    """The runner's input (arange / n) against the output file shipped next to the model."""
    model = _load(name)
    _, shape = _data_input(model)
    n = int(np.prod(shape))
    x = (np.arange(n).reshape(shape) / n).astype(np.float32)
    ref = numpy_helper.to_array(onnx.load_tensor(os.path.join(LIGHT_DIR, f"light_{name}_output_0.pb")))
    assert _rel_err(_run(model, x), ref) < MAX_REL_ERR


def _randomize(model, rng: np.random.Generator):
    """Replaces float initializers with random values of the same shape, scaled like a trained net."""
    bn_role = {}
    for node in model.graph.node:
        if node.op_type == "BatchNormalization":
            for role, name in zip(("scale", "bias", "mean", "var"), node.input[1:5]):
                bn_role[name] = role
    for t in model.graph.initializer:
        if t.data_type != onnx.TensorProto.FLOAT:
            continue  # shapes and other integer tensors keep their values
        shape = tuple(t.dims)
        role = bn_role.get(t.name)
        if role == "scale":
            value = rng.uniform(0.5, 1.5, shape)
        elif role == "var":
            value = rng.uniform(0.5, 1.5, shape)
        elif role in ("bias", "mean"):
            value = rng.normal(0.0, 0.1, shape)
        elif len(shape) >= 2:
            fan_in = int(np.prod(shape[1:]))
            value = rng.normal(0.0, np.sqrt(2.0 / fan_in), shape)
        else:
            value = rng.normal(0.0, 0.05, shape)
        t.CopyFrom(numpy_helper.from_array(value.astype(np.float32), t.name))
    return model


def _strip_final_softmax(model) -> None:
    """Make the logits the output: random weights drive some nets' logits to ~1e9, where a
    softmax is all exact 0s and 1s (or, computed in float32 with the max subtracted by a
    separately rounded pass, all 0s), which says nothing about the convolutions before it."""
    graph = model.graph
    last = graph.node[-1]
    if last.op_type == "Softmax" and last.output[0] == graph.output[0].name:
        graph.output[0].name = last.input[0]
        graph.node.remove(last)


def random_case(name: str, logits: bool = False):
    """(model with seeded random weights, its input, onnxruntime's output): shared with the native
    test (test_onnx_light_models_native.py); ``logits`` drops a final softmax."""
    rng = np.random.default_rng(sum(map(ord, name)))
    model = _randomize(_load(name), rng)
    if logits:
        _strip_final_softmax(model)
    vi, shape = _data_input(model)
    x = rng.standard_normal(shape).astype(np.float32)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, {vi.name: x})
    assert np.isfinite(ref).all() and np.abs(ref).max() > 0
    return model, x, ref


@pytest.mark.parametrize("name", NAMES)
def test_random_weights_vs_onnxruntime(name):
    model, x, ref = random_case(name)
    assert _rel_err(_run(model, x), ref) < MAX_REL_ERR
