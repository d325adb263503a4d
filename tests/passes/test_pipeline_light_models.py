"""The default pipeline on the nine ``light_*`` ONNX models: nothing constant-only survives (their
weights are ConstantOfShape), no BatchNorm survives, and the logits still match onnxruntime.

Weights are replaced by seeded random ones (as in ``tests/frontends/test_onnx_light_models.py``,
whose helpers this reuses) so that every channel differs and a wrong BatchNorm fold shows; the
comparison is on the logits (the Softmax is cut off), which a saturated softmax would hide.
About 25 s for all nine on one core.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

from tensorforge.frontends.onnx import import_onnx  # noqa: E402
from tensorforge.ir.interpreter import run_function  # noqa: E402
from tensorforge.ir.rewrite import constant_value  # noqa: E402
from tensorforge.passes.pipeline import default_pipeline  # noqa: E402
from tests.frontends.test_onnx_light_models import NAMES, _data_input, _load, _randomize, _rel_err  # noqa: E402

WITH_BATCH_NORM = ("densenet121", "inception_v2", "resnet50", "shufflenet")
MAX_REL_ERR = 1e-4


def _logits(model):
    """The model with its final Softmax removed (its input becomes the output)."""
    g = model.graph
    softmax = [n for n in g.node if n.op_type == "Softmax" and n.output[0] == g.output[0].name]
    if softmax:
        (sm,) = softmax
        g.node.remove(sm)
        del g.output[:]
        g.output.append(helper.make_tensor_value_info(sm.input[0], TensorProto.FLOAT, None))
    return model


def _onnxruntime(model, name: str, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    (out,) = sess.run(None, {name: x})
    return out


@pytest.mark.parametrize("name", NAMES)
def test_pipeline_on_light_model(name):
    rng = np.random.default_rng(sum(map(ord, name)))
    model = _logits(_randomize(_load(name), rng))
    vi, shape = _data_input(model)
    x = rng.standard_normal(shape).astype(np.float32)
    module = import_onnx(model)
    imported = [op.name for op in module.main.body]
    assert "graph.expand" in imported                                   # ConstantOfShape weights
    assert ("graph.batch_norm" in imported) is (name in WITH_BATCH_NORM)
    default_pipeline(verify_each=True).run(module)
    ops = [op for op in module.main.body if op.name not in ("graph.constant", "func.return")]
    constant_only = [op.name for op in ops if all(constant_value(v) is not None for v in op.operands)]
    assert not constant_only, f"{name}: ops computing only constants survived: {constant_only}"
    assert not {"graph.batch_norm", "graph.identity", "graph.expand"} & {op.name for op in ops}
    assert len(ops) < sum(n not in ("graph.constant", "func.return") for n in imported)
    (out,) = run_function(module.main, [x])
    assert _rel_err(out, _onnxruntime(model, vi.name, x)) < MAX_REL_ERR


@pytest.mark.parametrize("name", ["resnet50", "inception_v2"])
def test_layout_pipeline_on_light_model_keeps_numerics(name):
    """The (default-off) blocked layout on real CNNs: every conv blocked where the channels
    allow, conversions only at the edges, same logits."""
    rng = np.random.default_rng(sum(map(ord, name)))
    model = _logits(_randomize(_load(name), rng))
    vi, shape = _data_input(model)
    x = rng.standard_normal(shape).astype(np.float32)
    module = import_onnx(model)
    default_pipeline(layout=True).run(module)
    names = [op.name for op in module.main.body]
    assert names.count("graph.conv_nchwc") > 0.9 * (names.count("graph.conv_nchwc") + names.count("graph.conv"))
    assert names.count("graph.layout_transform") <= 4
    (out,) = run_function(module.main, [x])
    assert _rel_err(out, _onnxruntime(model, vi.name, x)) < MAX_REL_ERR
