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
* ``choose_qparams.tensor`` (dynamic quantization, ``X86InductorQuantizer``'s ``is_dynamic``): the
  affine scale and zero point of torch's ``determine_qparams`` from the tensor's minimum and
  maximum, computed in the graph at run time; the ``.tensor`` quantize and dequantize ops then
  take them as values.  ``qdq-contractions`` runs such a linear layer on ``qmatmul`` with the
  zero point and scale read at run time.

Per-channel parameters must be constants; the other ``choose_qparams`` variants (symmetric, per
token) are refused with a clear error, naming the node.
"""
from __future__ import annotations

import numpy as np

from ..ir.core import Value
from ..ir.rewrite import constant_value
from ..ir.types import DType
from .torch import FxImporter, aten, to_dtype

_NS = "quantized_decomposed"


def _constant(cx: FxImporter, v, what: str) -> np.ndarray:
    """A Python number or a constant IR value as an array (a per-channel parameter, or a per-tensor
    one the caller found constant); one computed at run time is refused."""
    if isinstance(v, Value):
        c = constant_value(v)
        if c is None:
            raise cx.unsupported(f"its {what} is computed at run time; tensorforge imports run-time "
                                 f"parameters only per tensor (choose_qparams.tensor), per-channel ones "
                                 f"must be constants")
        return np.asarray(c)
    return np.asarray(v)


def _one(cx: FxImporter, v, what: str) -> float:
    c = _constant(cx, v, what)
    if c.size != 1:
        raise cx.unsupported(f"its {what} has {c.size} elements where one was expected")
    return c.reshape(()).item()


def _runtime(v) -> bool:
    """Whether a per-tensor parameter is computed at run time (``choose_qparams``)."""
    return isinstance(v, Value) and constant_value(v) is None


def _scalar_value(cx: FxImporter, v: Value, dtype: DType) -> Value:
    """A run-time one-element parameter as a rank-0 value of ``dtype``."""
    return cx.cast(cx.g.reshape(v, shape=()) if v.type.rank else v, dtype)


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
    if _runtime(scale) or _runtime(zero_point):
        # torch: input * (1.0 / scale.item()): the reciprocal in double, rounded to float32
        one = cx.scalar(1.0, DType.f64)
        inv = cx.cast(cx.g.div(one, _scalar_value(cx, scale, DType.f64)), DType.f32)
        return _quantize(cx, x, inv, _scalar_value(cx, zero_point, DType.f32), quant_min, quant_max, dtype)
    inv = np.float32(1.0 / _one(cx, scale, "scale"))     # 1 / scale in double, then float32
    zp = float(_one(cx, zero_point, "zero point"))
    return _quantize(cx, x, cx.scalar(float(inv), DType.f32), cx.scalar(zp, DType.f32), quant_min, quant_max, dtype)


@aten(f"{_NS}.dequantize_per_tensor.default", f"{_NS}.dequantize_per_tensor.tensor")
def _dequantize_per_tensor(cx, node, q, scale, zero_point, quant_min, quant_max, dtype, out_dtype=None):
    if _runtime(scale) or _runtime(zero_point):
        s, zp = _scalar_value(cx, scale, DType.f32), _scalar_value(cx, zero_point, DType.f32)
    else:
        s = cx.scalar(float(np.float32(_one(cx, scale, "scale"))), DType.f32)
        zp = cx.scalar(float(_one(cx, zero_point, "zero point")), DType.f32)
    y = cx.g.mul(cx.g.sub(cx.cast(q, DType.f32), zp), s)
    return cx.cast(y, cx.out_dtype())


@aten(f"{_NS}.choose_qparams.tensor")
def _choose_qparams(cx, node, x, quant_min, quant_max, eps, dtype):
    """torch's ``determine_qparams`` (per tensor, affine) in float32, from ``aminmax`` of ``x``:
    ``scale = max((max(hi, 0) - min(lo, 0)) / (qmax - qmin), eps)``, ``zero_point = clamp(qmin -
    round(min(lo, 0) / scale), qmin, qmax)``; returned as float64 and int64 tensors of one element."""
    f32 = DType.f32
    xs = cx.cast(x, f32)
    lo = cx.g.min(cx.g.reduce_min(xs, axes=(), keepdims=False), cx.scalar(0.0, f32))
    hi = cx.g.max(cx.g.reduce_max(xs, axes=(), keepdims=False), cx.scalar(0.0, f32))
    # torch divides in float32.  The default pipeline would make a float32 division by a constant a
    # multiply by its reciprocal (simplify-extra's div-splat), an ulp off; the quotient taken in
    # float64 and rounded to float32 is the correctly rounded float32 one (53 >= 2 * 24 + 2 bits),
    # and stays so with the reciprocal's error at float64's precision
    span = cx.cast(cx.g.sub(hi, lo), DType.f64)
    scale = cx.cast(cx.g.div(span, cx.scalar(float(quant_max - quant_min), DType.f64)), f32)
    scale = cx.g.max(scale, cx.scalar(float(np.float32(eps)), f32))
    zp = cx.g.sub(cx.scalar(float(quant_min), f32), cx.g.round(cx.g.div(lo, scale)))
    zp = cx.g.clip(zp, min=float(quant_min), max=float(quant_max))
    return (cx.g.reshape(cx.cast(scale, DType.f64), shape=(1,)), cx.g.reshape(cx.cast(zp, DType.i64), shape=(1,)))


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


@aten(f"{_NS}.choose_qparams_symmetric.tensor", f"{_NS}.choose_qparams_per_token_asymmetric.default",
      f"{_NS}.choose_qparams_per_token.default")
def _other_dynamic(cx, node, *_):
    raise cx.unsupported("of PT2E's dynamic quantization only the per-tensor affine choose_qparams.tensor "
                         "(X86InductorQuantizer's is_dynamic) is supported; quantize the model statically "
                         "(prepare_pt2e with calibration, then convert_pt2e), or use tensorforge.quantize")


__all__: list[str] = []
