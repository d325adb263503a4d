"""onnxruntime sessions for single-layer benchmarks (``depthwise_layers.py``, ``pointwise_layers.py``).

A layer is ``Conv`` (+ ``Clip(0, 6)``): the form MobileNetV2's layers take once BatchNorm is folded.
onnxruntime fuses the pair, so its session is its best case for the layer.
"""
from __future__ import annotations


def conv_session(w, b, size: int, stride: int, groups: int, threads: int, clip: bool = True, batch: int = 1):
    """An onnxruntime session computing ``clip(conv2d(x, w, b), 0, 6)`` on a ``batch x C x size x size`` x."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    o, cg, k, _ = w.shape
    c = cg * groups
    out = (size + 2 * (k // 2) - k) // stride + 1
    conv_out = "y0" if clip else "y"
    nodes = [helper.make_node("Conv", ["x", "w", "b"], [conv_out], group=groups, kernel_shape=[k, k],
                              strides=[stride, stride], pads=[k // 2] * 4)]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    if clip:
        nodes.append(helper.make_node("Clip", ["y0", "lo", "hi"], ["y"]))
        inits += [numpy_helper.from_array(np.array(0, np.float32), "lo"),
                  numpy_helper.from_array(np.array(6, np.float32), "hi")]
    graph = helper.make_graph(nodes, "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, o, out, out])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def compile_with_and_without(layer, inputs: tuple, threads: int, switch: str):
    """``(tensorforge.compile(layer), the same with environment variable ``switch`` = 0)``: a
    layer's kernel against what it replaced, for the ``tf`` / ``tf-std`` columns."""
    import os

    import tensorforge

    cm = tensorforge.compile(layer, inputs, threads=threads)
    os.environ[switch] = "0"
    try:
        return cm, tensorforge.compile(layer, inputs, threads=threads)
    finally:
        del os.environ[switch]
