"""One-node ONNX models checked against ``onnx.reference`` on the interpreter and natively."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tensorforge  # noqa: E402

TARGETS = ("interpreter", "cpu")


def one_node_model(op_type: str, inputs: dict[str, np.ndarray], opset: int, n_outputs: int = 1,
                   constants: dict[str, np.ndarray] | None = None, **attrs):
    """A model of one ``op_type`` node; ``inputs`` are graph inputs, ``constants`` initializers
    (in the node's input order after the inputs; ``""`` names an omitted optional input)."""
    constants = constants or {}
    names = [n for n in list(inputs) + list(constants)]
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, **attrs)
    vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
          for n, a in inputs.items() if n]
    inits = [numpy_helper.from_array(a, n) for n, a in constants.items() if n]
    graph = helper.make_graph([node], "g", vi, [helper.make_tensor_value_info(o, 0, None) for o in outs],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check_against_reference(model, inputs: dict[str, np.ndarray], rtol: float = 1e-5, atol: float = 1e-6,
                            targets=TARGETS, exact: bool = False) -> None:
    feeds = {k: v for k, v in inputs.items() if k}
    want = ReferenceEvaluator(model).run(None, feeds)
    for target in targets:
        cm = tensorforge.compile(model, target=target)
        got = cm(*feeds.values())
        got = got if isinstance(got, (tuple, list)) else (got,)
        for g, w in zip(got, want):
            g = np.asarray(g)
            assert g.shape == w.shape and g.dtype == w.dtype, (target, g.shape, w.shape, g.dtype, w.dtype)
            if exact:
                np.testing.assert_array_equal(g, w, err_msg=target)
            else:
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=target)
