"""PT2E-quantized PyTorch graphs: the ``quantized_decomposed`` ops as the graph dialect's float arithmetic.

``prepare_pt2e`` / ``convert_pt2e`` (torchao, e.g. with ``X86InductorQuantizer``) leave a model
whose int8 arithmetic is stated as float ops around float contractions, as an ONNX QDQ model is:

    conv(dequantize_per_tensor(quantize_per_tensor(x, s, z)), dequantize_per_channel(wq, sw, 0), b)

Each op is written here exactly as torch's reference (``torch/ao/quantization/fx/_decomposed.py``)
computes it, so that a compiled model equals the PT2E model run eagerly, and in the forms the
``qdq-contractions`` and ``int8-contractions`` passes recognise, so that the contractions then run
on the int8 kernels with the requantization fused, as for onnxruntime's QDQ files:

* ``quantize_per_tensor``: ``clamp(round(x * fl32(1 / s)) + z, qmin, qmax).to(dtype)``.  torch
  multiplies by the reciprocal (a Python double, rounded to float32 against a float32 tensor), not
  dividing by ``s``: ties round differently, so the reciprocal is what is kept.
* ``dequantize_per_tensor``: ``(q.to(f32) - z) * s``, in float32.
* ``dequantize_per_channel`` of a constant int8 weight: ``(wq - z) * s`` per channel, computed
  as torch does (an int64 difference times the scales' dtype, then float32).  With zero zero points
  and float32 scales that is ``cast<f32>(wq) * s``, emitted as such so that the pass reads the
  integers back without guessing a scale; otherwise the exact float32 weight as a constant.
* ``quantize_per_channel``: as the per-tensor one, per channel.

Scales and zero points must be constants (static quantization).  Dynamic quantization
(``choose_qparams``) is refused with a clear error, naming the node.
"""
from __future__ import annotations

import numpy as np

from ..ir.core import Value
from ..ir.rewrite import constant_value
from ..ir.types import DType
from .torch import FxImporter, aten, to_dtype

_NS = "quantized_decomposed"


def _constant(cx: FxImporter, v, what: str) -> np.ndarray:
    """A Python number or a constant IR value as an array; anything computed at run time is
    dynamic quantization, which is not supported."""
    if isinstance(v, Value):
        c = constant_value(v)
        if c is None:
            raise cx.unsupported(f"its {what} is computed at run time (dynamic quantization); tensorforge "
                                 f"imports statically quantized PT2E graphs (constant scales and zero points)")
        return np.asarray(c)
    return np.asarray(v)


def _one(cx: FxImporter, v, what: str) -> float:
    c = _constant(cx, v, what)
    if c.size != 1:
        raise cx.unsupported(f"its {what} has {c.size} elements where one was expected")
    return c.reshape(()).item()


def _along(values: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """Per-channel parameters shaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    shape = [1] * rank
    shape[axis] = values.size
    return values.reshape(shape)


def _quantize(cx: FxImporter, x: Value, inv_scale: Value, zero_point: Value, qmin, qmax, dtype) -> Value:
    """``clamp(round(x * inv_scale) + zero_point, qmin, qmax).to(dtype)`` in float32."""
    y = cx.g.round(cx.g.mul(cx.cast(x, DType.f32), inv_scale))
    y = cx.g.add(y, zero_point)
    return cx.cast(cx.g.clip(y, min=float(qmin), max=float(qmax)), to_dtype(dtype))


@aten(f"{_NS}.quantize_per_tensor.default", f"{_NS}.quantize_per_tensor.tensor")
def _quantize_per_tensor(cx, node, x, scale, zero_point, quant_min, quant_max, dtype):
    inv = np.float32(1.0 / _one(cx, scale, "scale"))     # 1 / scale in double, then float32
    zp = float(_one(cx, zero_point, "zero point"))
    return _quantize(cx, x, cx.scalar(float(inv), DType.f32), cx.scalar(zp, DType.f32), quant_min, quant_max, dtype)


@aten(f"{_NS}.dequantize_per_tensor.default", f"{_NS}.dequantize_per_tensor.tensor")
def _dequantize_per_tensor(cx, node, q, scale, zero_point, quant_min, quant_max, dtype, out_dtype=None):
    s, zp = float(np.float32(_one(cx, scale, "scale"))), float(_one(cx, zero_point, "zero point"))
    y = cx.g.mul(cx.g.sub(cx.cast(q, DType.f32), cx.scalar(zp, DType.f32)), cx.scalar(s, DType.f32))
    return cx.cast(y, cx.out_dtype())


@aten(f"{_NS}.quantize_per_channel.default")
def _quantize_per_channel(cx, node, x, scales, zero_points, axis, quant_min, quant_max, dtype):
    rank = x.type.rank
    axis = axis % rank
    s = _constant(cx, scales, "scales").astype(np.float64)
    inv = _along((1.0 / s).astype(np.float32), rank, axis)        # torch: input * (1.0 / scales)
    zp = _along(_constant(cx, zero_points, "zero points").astype(np.float32), rank, axis)
    return _quantize(cx, x, cx.g.constant(inv, DType.f32), cx.g.constant(zp, DType.f32), quant_min, quant_max, dtype)


@aten(f"{_NS}.dequantize_per_channel.default")
def _dequantize_per_channel(cx, node, q, scales, zero_points, axis, quant_min, quant_max, dtype, out_dtype=None):
    rank = q.type.rank
    axis = axis % rank
    s = _constant(cx, scales, "scales")
    zp = None if zero_points is None else _constant(cx, zero_points, "zero points")
    out = cx.out_dtype()
    wq = constant_value(q)
    if (s.dtype == np.float32 and (zp is None or not np.any(zp)) and out is DType.f32) or wq is None:
        # cast<f32>(q) * s: the form qdq-contractions reads the integers back from (the weight's
        # zero points are 0 in a symmetric scheme); exact when the scales are float32
        y = cx.cast(q, DType.f32)
        if zp is not None and np.any(zp):
            y = cx.g.sub(y, cx.g.constant(_along(zp.astype(np.float32), rank, axis), DType.f32))
        return cx.cast(cx.g.mul(y, cx.g.constant(_along(s.astype(np.float32), rank, axis), DType.f32)), out)
    # torch's own arithmetic on a constant: (int64 difference) * scales in their dtype, then out_dtype
    diff = np.asarray(wq).astype(np.int64) - (0 if zp is None else _along(zp.astype(np.int64), rank, axis))
    w = (diff * _along(s, rank, axis)).astype(out.np)
    return cx.g.constant(w, out)


@aten(f"{_NS}.choose_qparams.tensor", f"{_NS}.choose_qparams_symmetric.tensor",
      f"{_NS}.choose_qparams_per_token_asymmetric.default", f"{_NS}.choose_qparams_per_token.default")
def _dynamic(cx, node, *_):
    raise cx.unsupported("dynamic quantization (scales chosen at run time) is not supported; quantize the "
                         "model statically (prepare_pt2e with calibration, then convert_pt2e), or use "
                         "tensorforge.quantize")


__all__: list[str] = []
