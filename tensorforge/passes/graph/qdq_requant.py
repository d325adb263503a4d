"""A QDQ convolution requantized as onnxruntime's QLinearConv computes it (part of ``qdq-contractions``).

After ``qdq_to_int8`` a QDQ conv reads

    q = u8(clip(round(act(float32(acc) * s + b) / sy) + zy, 0, 255))

(``acc`` the exact int32 sums of ``graph.qconv``, ``s = sx * sw`` per output channel, ``b`` the
float32 bias, ``act`` an optional relu or clip).  onnxruntime fuses the same QDQ nodes into one
QLinearConv that adds the int32 bias ``B`` (``quantize_static`` stores it quantized at the scale
``s``, so ``b = B * s``) to the sums and multiplies by one float32 multiplier per channel:

    q = u8(clip(round(float32(acc + B) * float32(s / sy)) + zy, 0, 255))

after removing ``act`` where the quantization's own clamp covers it (its ClipQuantFusion: the
clip's bounds within a float32 epsilon of ``sy * (0 - zy)`` and ``sy * (255 - zy)``).  Both are
roundings of the same real value.  They differ when it lies within a rounding of a half-way
point, about one output in a million; but a uint8 that differs early in a network moves
thousands of outputs of the later layers, and with them the top-1 of near-tied logits.  So a
QDQ model runs here as it runs in onnxruntime: this pattern writes the second form whenever
``b`` is exactly an integer multiple of ``s`` (the int32 bias recovered; anything else, such as
a PyTorch-quantized model's float bias, keeps the first).  It has to run here, before
``simplify-extra`` turns the division by ``sy`` into a multiply by its reciprocal and
``fold-inference`` folds that into ``s``: ``s / sy`` needs both scales as the file has them.
``int8-contractions`` then takes ``B`` into the qconv (an int32 bias operand, added to the
sums in the kernel's epilogue).
"""
from __future__ import annotations

import numpy as np

from ...ir.core import Operation, Value
from ...ir.rewrite import PatternRewriter, constant_value, pattern
from ...ir.types import DType
from .int8_contractions import per_channel_values

_EPSILON = float(np.finfo(np.float32).eps)


def _only_user(v: Value) -> Operation | None:
    uses = list(v.uses)
    return uses[0][0] if len(uses) == 1 else None


def _per_channel(v: Value, o: int) -> np.ndarray | None:
    """(O,) float32 values of a constant that broadcasts per channel of an NCHW result, also behind
    a reshape (the bias as ``int8_contraction`` leaves it), read at ``v``'s own shape: a 1-D
    constant added to an NCHW tensor broadcasts along the width, not the channels."""
    c = constant_value(v)
    if c is None and v.op is not None and v.op.name == "graph.reshape" and all(isinstance(d, int) for d in v.type.shape):
        inner = constant_value(v.op.operands[0])
        c = None if inner is None else inner.reshape(v.type.shape)
    return per_channel_values(c, o)


def _quantization(rnd: Operation) -> int | None:
    """The zero point when ``rnd``'s result is quantized to uint8: ``u8(clip(rnd (+ zy), 0, 255))``."""
    user, zy = _only_user(rnd.results[0]), 0
    if user is not None and user.name == "graph.add":
        z = next((constant_value(v) for v in user.operands if v is not rnd.results[0]), None)
        if z is None or z.size != 1 or float(z.reshape(())) != int(z.reshape(())):
            return None
        zy, user = int(z.reshape(())), _only_user(user.results[0])
    if user is None or user.name != "graph.clip" or (user.attributes.get("min"), user.attributes.get("max")) != (0.0, 255.0):
        return None
    cast = _only_user(user.results[0])
    ok = cast is not None and cast.name == "graph.cast" and cast.results[0].type.dtype is DType.u8
    return zy if ok and 0 <= zy <= 255 else None


def _covered(act: Operation, sy: np.float32, zy: int) -> bool:
    """Whether onnxruntime drops the relu or clip ``act`` before a uint8 quantization (scale sy,
    zero point zy): its bounds within float32 epsilon of the quantization's own range."""
    lo, hi = (0.0, float("inf")) if act.name == "graph.relu" else (act.attributes.get("min"), act.attributes.get("max"))
    lo = float("-inf") if lo is None else float(lo)
    hi = float("inf") if hi is None else float(hi)
    lower, upper = float(sy * np.float32(0 - zy)), float(sy * np.float32(255 - zy))
    return lo - lower <= _EPSILON and upper - hi <= _EPSILON


@pattern("graph.round")
def requantize_as_qlinear(rnd: Operation, rewriter: PatternRewriter) -> bool:
    """``round(act?(float32(acc) * s + b) / sy)`` before a uint8 quantization ->
    ``round(float32(acc + B) * float32(s / sy))`` when ``b = B * s`` exactly (module docstring)."""
    div = rnd.operands[0].op
    if div is None or div.name != "graph.div" or _only_user(div.results[0]) is not rnd:
        return False
    sy = constant_value(div.operands[1])
    if sy is None or sy.size != 1 or sy.dtype != np.float32 or not float(sy.reshape(())) > 0:
        return False
    sy = np.float32(sy.reshape(()))
    zy = _quantization(rnd)
    if zy is None:
        return False
    t = div.operands[0]
    if t.op is not None and t.op.name in ("graph.relu", "graph.clip"):
        if _only_user(t) is not div or not _covered(t.op, sy, zy):
            return False
        t = t.op.operands[0]
    if t.type.rank != 4:
        return False
    o, cast_acc = t.type.shape[1], None
    bias = np.zeros(o, np.float32)
    if t.op is not None and t.op.name == "graph.add" and _only_user(t) is not None:
        for v, other in ((t.op.operands[0], t.op.operands[1]), (t.op.operands[1], t.op.operands[0])):
            found = _per_channel(other, o)
            if found is not None and v.op is not None and v.op.name == "graph.mul":
                bias, t = found, v
                break
    mul = t.op
    if mul is None or mul.name != "graph.mul" or _only_user(t) is None:
        return False
    for v, other in ((mul.operands[0], mul.operands[1]), (mul.operands[1], mul.operands[0])):
        scale = _per_channel(other, o)
        if scale is not None and v.op is not None and v.op.name == "graph.cast" and v.op.operands[0].op is not None \
                and v.op.operands[0].op.name == "graph.qconv" and v.op.operands[0].type.dtype is DType.i32:
            cast_acc = v.op
            break
    if cast_acc is None or not (scale > 0).all():
        return False
    whole = np.rint(bias.astype(np.float64) / scale.astype(np.float64))
    if (np.abs(whole) >= 2.0 ** 24).any() or not np.array_equal((whole * scale.astype(np.float64)).astype(np.float32), bias):
        return False
    multiplier = (scale / sy).astype(np.float32)           # float32 division, as onnxruntime's
    rewriter.set_insertion_point_before(div)
    g = rewriter.graph
    acc = cast_acc.operands[0]
    summed = g.add(acc, g.constant(whole.astype(np.int32).reshape(1, o, 1, 1), DType.i32))
    y = g.mul(g.cast(summed, dtype=DType.f32), g.constant(multiplier.reshape(1, o, 1, 1)))
    rewriter.replace_op(div, [y])
    return True


__all__ = ["requantize_as_qlinear"]
