"""Builds one-op graph modules and runs them through the verifier and the interpreter.

Shared by the test_graph_<family>.py files of the neural-network op families.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from tensorforge.ir import DType, Module, interpret, tensor, verify


def build(opname: str, types: Sequence, **attrs):
    """A verified module whose main function applies ``graph.<opname>`` to its inputs;
    returns (module, op)."""
    m = Module()
    f = m.add_function("main", list(types))
    g = f.builder().graph
    out = getattr(g, opname)(*f.args, **attrs)
    outs = list(out) if isinstance(out, tuple) else [out]
    f.set_return(outs)
    verify(m)
    return m, outs[0].op


def run(opname: str, *inputs: np.ndarray, **attrs) -> np.ndarray:
    """Interprets ``graph.<opname>`` on ``inputs``; checks the result against the inferred type."""
    arrays = [np.asarray(x) for x in inputs]
    m, op = build(opname, [tensor(a.shape, DType.from_np(a.dtype)) for a in arrays], **attrs)
    (y,) = interpret(m, *arrays)
    t = op.results[0].type
    assert y.shape == t.shape, f"{opname}: result shape {y.shape} but inferred {t.shape}"
    assert y.dtype == t.dtype.np, f"{opname}: result dtype {y.dtype} but inferred {t.dtype}"
    return y


def result_type(opname: str, *types, **attrs):
    """The inferred result type of ``graph.<opname>`` on operand types (no data)."""
    return build(opname, types, **attrs)[1].results[0].type


def cost(opname: str, *types, **attrs):
    _, op = build(opname, types, **attrs)
    return op.opdef.cost([v.type for v in op.operands], [r.type for r in op.results], op.attributes)


def set_attr_and_verify(opname: str, types, attr: str, value, **attrs) -> None:
    """Builds a valid op, then breaks one attribute and runs the verifier on it."""
    m, op = build(opname, types, **attrs)
    op.attributes[attr] = value
    verify(m)


def rand(rng: np.random.Generator, *shape, dtype=np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def assert_close(actual, expected, rtol=1e-4, atol=1e-5):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def ort_run(op_type: str, inputs: dict[str, np.ndarray], opset: int = 19, out_dtype: int = 1,
            **attrs) -> np.ndarray:
    """Runs a single ONNX node in onnxruntime (the model of ONNX semantics we check against);
    ``out_dtype`` is the ONNX element type of the result (1 = float)."""
    import onnxruntime as ort
    from onnx import helper
    from onnx.helper import np_dtype_to_tensor_dtype
    node = helper.make_node(op_type, list(inputs), ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", out_dtype, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)[0]


__all__ = ["assert_close", "build", "cost", "ort_run", "rand", "result_type", "run", "set_attr_and_verify"]
