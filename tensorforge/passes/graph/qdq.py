"""``qdq-contractions``: QDQ-quantized models (onnxruntime ``quantize_static``) run their
contractions on the int8 kernels instead of in dequantized float32.

A QDQ model states int8 arithmetic as float ops around float contractions:

    y = conv(DequantizeLinear(q, sx, zx), DequantizeLinear(wq, sw, 0), bias)

which imports as ``mul(sub(cast<f32>(q), zx), sx)`` for the activations and (after const-fold)
a float32 weight constant ``fl(wq * sw)``, or ``mul(cast<f32>(wq), sw)`` where the weight is too
big to fold.  Computed as written it is a float32 conv of dequantized values: correct, but none
of int8's speed.  This pass finds the 8-bit activations and the integer weights again and writes

    y = cast<f32>(qconv(q, wq, zx)) * (sx * sw) + bias          (qmatmul for matmul / gemm)

(``quantization.rewrite.int8_contraction``), and where a uint8 quantization follows, requantizes as
onnxruntime's QLinearConv (``qdq_requant``).  Every product and sum of integers is exact, so the
result differs from the float form by float32 rounding only (the dequantized products are exact
in float32 too, only their summation rounds), and the requantized output within 1 of
onnxruntime's.  A folded weight is accepted only when a per-output-channel scale ``s``
reproduces every element exactly, ``fl(round(w / s) * s) == w`` with ``|round(w / s)| <= 127``
(tried: ``max|w| / 127`` and its float32 neighbours, for each channel and for the whole tensor);
anything else stays float.  It runs before ``simplify-extra`` and ``fold-inference``, which
would fold the next layer's quantization scale into the weights and hide the integers.
"""
from __future__ import annotations

import numpy as np

from ...ir.core import Operation, Value
from ...ir.pass_manager import Option
from ...ir.rewrite import PatternRewriter, RewriteStats, apply_patterns_greedily, constant_value, pattern
from ...ir.types import DType
from ..registry import register_pass
from .qdq_requant import requantize_as_qlinear
from .simplify import _GreedyPass

_INT8 = (DType.u8, DType.i8)


def _scalar(v: Value) -> float | None:
    """The value of a one-element float constant."""
    c = constant_value(v)
    return float(np.asarray(c).reshape(())) if c is not None and c.size == 1 else None


def _widened(v: Value) -> Value | None:
    """``q`` when ``v = cast<f32>(q)`` with ``q`` 8-bit."""
    op = v.op
    if op is None or op.name != "graph.cast" or v.type.dtype is not DType.f32:
        return None
    return op.operands[0] if op.operands[0].type.dtype in _INT8 else None


def _shifted(v: Value) -> tuple[Value, float] | None:
    """(q, zero point) of ``cast<f32>(q)``, ``cast<f32>(q) - z`` or ``cast<f32>(q) + (-z)``."""
    q = _widened(v)
    if q is not None:
        return q, 0.0
    op = v.op
    if op is None or op.name not in ("graph.sub", "graph.add"):
        return None
    q, z = _widened(op.operands[0]), _scalar(op.operands[1])
    if q is None and op.name == "graph.add":
        q, z = _widened(op.operands[1]), _scalar(op.operands[0])
    if q is None or z is None:
        return None
    return q, (z if op.name == "graph.sub" else -z)


def _scaled(v: Value) -> tuple[Value, float] | None:
    """(t, s) of ``t * s`` with ``s`` a one-element constant (either side)."""
    op = v.op
    if op is None or op.name != "graph.mul":
        return None
    for t, s in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
        scale = _scalar(s)
        if scale is not None and scale > 0 and np.isfinite(scale):
            return t, scale
    return None


def dequantized(v: Value) -> tuple[Value, int, float] | None:
    """(8-bit q, integer zero point, scale) when ``v`` is ONNX ``DequantizeLinear(q)`` per tensor:
    ``(cast<f32>(q) - z) * s``, also with the zero point added as ``-z``."""
    scaled = _scaled(v)
    if scaled is None:
        return None
    shifted = _shifted(scaled[0])
    if shifted is None:
        return None
    (q, z), s = shifted, scaled[1]
    info = np.iinfo(q.type.dtype.np)
    if z != round(z) or not info.min <= z <= info.max:
        return None
    return q, int(round(z)), s


def _runtime_scalar(v: Value) -> bool:
    """A rank-0 float32 value computed at run time (not a constant)."""
    return v.type.rank == 0 and v.type.dtype is DType.f32 and constant_value(v) is None


def _integer_valued(v: Value) -> bool:
    """``v = cast<f32>(i)`` with ``i`` of an integer type: its value is a whole number, so the
    kernel's int32 zero point ``cast<i32>(v)`` is exact."""
    op = v.op
    return op is not None and op.name == "graph.cast" and op.operands[0].type.dtype.is_int


def dequantized_at_run_time(v: Value) -> tuple[Value, Value, Value] | None:
    """(uint8 q, zero point, scale) when ``v = (cast<f32>(q) - z) * s`` with ``z`` and ``s`` rank-0
    float32 values computed at run time and ``z`` a cast of an integer: dynamic quantization
    (PT2E's ``choose_qparams``, ONNX's DynamicQuantizeLinear)."""
    op = v.op
    if op is None or op.name != "graph.mul" or v.type.dtype is not DType.f32:
        return None
    for t, s in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
        sub = t.op
        if not _runtime_scalar(s) or sub is None or sub.name != "graph.sub" or not _runtime_scalar(sub.operands[1]):
            continue
        if not _integer_valued(sub.operands[1]):
            continue
        q = _widened(sub.operands[0])
        if q is not None and q.type.dtype is DType.u8:
            return q, sub.operands[1], s
    return None


def _exact_rows(rows: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(``round(rows / s)``, which rows that gives back bit for bit as int8 values): ``s`` one scale
    per row."""
    s = s.reshape(-1, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.rint(rows / s)
    ok = np.all((q >= -128) & (q <= 127), axis=1) & np.all((q.astype(np.float32) * s).astype(np.float32) == rows, axis=1)
    return q, ok


def _scale_candidates(base: np.ndarray, levels):
    """Scales to try for rows whose largest magnitude is ``base``: ``base / k`` for each ``k`` of
    ``levels``, with its float32 neighbours (the division rounds)."""
    for k in levels:
        s0 = np.where(base > 0, base / np.float32(k), np.float32(1)).astype(np.float32)
        for step in (0, 1, -1, 2, -2):
            s = s0
            for _ in range(abs(step)):
                s = np.nextafter(s, np.float32(np.inf) if step > 0 else np.float32(0)).astype(np.float32)
            yield s


def recover_int8(w: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(int8 weights, float32 scale per row) with ``fl(wq * s) == w`` exactly (rows: output
    channels), or None when ``w`` is not a symmetric int8 tensor dequantized per row or per
    tensor.

    Where a row's largest magnitude is ``m`` levels of its scale, the scale is ``max|w| / m`` up to
    float32 rounding.  ``m`` is 127 for onnxruntime's scales (127 levels each side), 127 or 128 for
    PyTorch's observers (a scale of ``max|w| / 127.5`` rounds the largest magnitude to 128, kept
    as -128 on the negative side only), and less where an observer raised a row's scale to its
    minimum (``eps = 2**-12`` in torchao's X86 config: a row of small weights).  Each row takes
    the first candidate that reproduces it, trying its own largest magnitude with 127 and 128,
    then the tensor's (one scale per tensor), then the rows still left with 126 levels down to 1."""
    if w.dtype != np.float32 or w.size == 0 or not np.all(np.isfinite(w)):
        return None
    rows = w.reshape(w.shape[0], -1)
    amax = np.abs(rows).max(axis=1)
    q_out, s_out = np.zeros(rows.shape, np.int8), np.zeros(len(rows), np.float32)
    found = np.zeros(len(rows), bool)
    for base, levels in ((amax, (127, 128)), (np.full_like(amax, amax.max()), (127, 128)),
                         (amax, range(126, 0, -1))):
        for s in _scale_candidates(base, levels):
            left = np.flatnonzero(~found)
            q, ok = _exact_rows(rows[left], s[left])
            q_out[left[ok]], s_out[left[ok]] = q[ok].astype(np.int8), s[left[ok]]
            found[left[ok]] = True
            if found.all():
                return q_out.reshape(w.shape), s_out
    return None


def _symmetric(v: Value) -> Value | None:
    """``q`` of ``cast<f32>(q)``, or of ``cast<f32>(q) - z`` with ``z`` all zeros (a per-channel
    zero point of a symmetric weight, any shape)."""
    q = _widened(v)
    if q is not None or v.op is None or v.op.name not in ("graph.sub", "graph.add"):
        return q
    q, z = _widened(v.op.operands[0]), constant_value(v.op.operands[1])
    return q if z is not None and not np.any(z) else None


def _dequantized_weights(v: Value, axis: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(int8 weights, scale per output channel) of a weight operand whose output channels run
    along ``axis``: a folded float constant (``recover_int8``), or ``(cast<f32>(wq) - 0) * s``
    with ``s`` per tensor or per channel along ``axis``, or a matrix transpose of either (a
    PyTorch ``linear``'s weight too big to fold: ``transpose((cast<f32>(wq) * s))``)."""
    op = v.op
    if op is not None and op.name == "graph.transpose" and v.type.rank == 2 and tuple(op.attributes["perm"]) == (1, 0):
        got = _dequantized_weights(op.operands[0], 1 - axis)
        return None if got is None else (np.ascontiguousarray(got[0].T), got[1])
    w = constant_value(v)
    if w is not None:
        got = recover_int8(np.moveaxis(w, axis, 0)) if w.ndim >= 2 else None
        return None if got is None else (np.moveaxis(got[0], 0, axis), got[1])
    op = v.op
    if op is None or op.name != "graph.mul":
        return None
    for t, s in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
        q, scale = _symmetric(t), constant_value(s)
        if q is None or scale is None:
            continue
        wq = constant_value(q)
        if wq is None or wq.dtype != np.int8 or wq.ndim < 2:
            continue
        n = wq.shape[axis]
        if scale.size == 1:
            per = np.full(n, float(scale.reshape(())), np.float32)
        elif scale.size == n and scale.shape[axis if scale.ndim == wq.ndim else -1] == n:
            per = scale.reshape(n).astype(np.float32)
        else:
            continue
        return wq, per
    return None


def _reshaped_dequantized(v: Value, find) -> tuple[Operation, Value, object, object] | None:
    """(the reshape, q, zero point, scale) when ``v = reshape(DequantizeLinear(q))`` per tensor
    (``find``: ``dequantized`` or ``dequantized_at_run_time``): a PyTorch ``linear`` on a batch of
    sequences flattens its dequantized input to a matrix.  A per-tensor dequantization commutes
    with the reshape, so the contraction can read ``reshape(q)``."""
    op = v.op
    if op is None or op.name != "graph.reshape":
        return None
    inner = find(op.operands[0])
    return None if inner is None else (op, *inner)


def _activations(op: Operation) -> tuple[Operation | None, tuple] | None:
    """(a reshape to apply to q or None, (q, zero point, scale)) of a contraction's dequantized
    input: constant parameters, or, for a matmul/gemm, parameters computed at run time, either
    also behind a reshape."""
    x = op.operands[0]
    if op.name == "graph.conv":
        found = dequantized(x)
        return None if found is None else (None, found)
    for find in (dequantized, dequantized_at_run_time):
        found = find(x)
        if found is not None:
            return None, found
        reshaped = _reshaped_dequantized(x, find)
        if reshaped is not None:
            return reshaped[0], reshaped[1:]
    return None


@pattern(("graph.conv", "graph.matmul", "graph.gemm"))
def qdq_to_int8(op: Operation, rewriter: PatternRewriter) -> bool:
    from ...quantization.rewrite import int8_contraction
    if op.results[0].type.dtype is not DType.f32:
        return False
    found = _activations(op)
    if found is None:
        return False
    reshape, (q, zp, sx) = found
    if op.name == "graph.conv":
        from ...quantization.rewrite import int8_conv_groups
        # depthwise too: here the float alternative is a float conv behind a standalone uint8 ->
        # float32 kernel, measured 1.7x slower on onnxruntime's QDQ MobileNetV2 than int8 throughout
        if not int8_conv_groups(op, depthwise=True):
            return False
        got = _dequantized_weights(op.operands[1], 0)
    elif op.name == "graph.gemm":
        if op.attributes.get("trans_a", False) or op.operands[1].type.rank != 2:
            return False
        trans_b = op.attributes.get("trans_b", False)
        got = _dequantized_weights(op.operands[1], 0 if trans_b else 1)
        got = got if got is None or not trans_b else (got[0].T, got[1])
    else:
        if op.operands[1].type.rank != 2 or op.operands[0].type.rank < 2:
            return False
        got = _dequantized_weights(op.operands[1], 1)
    if got is None:
        return False
    wq, sw = got
    rewriter.set_insertion_point_before(op)
    if reshape is not None:
        q = rewriter.create("graph.reshape", [q], dict(reshape.attributes)).results[0]
    y = int8_contraction(rewriter.graph, op, q, sx, zp, wq, sw)
    if y.type != op.results[0].type:
        return False
    rewriter.replace_op(op, [y])
    return True


def qdq_contractions(root: Operation, max_iterations: int = 4) -> RewriteStats:
    """Rewrites the contractions of dequantized 8-bit tensors under ``root`` to the int8 kernels."""
    return apply_patterns_greedily(root, (qdq_to_int8, requantize_as_qlinear), fold=False, max_iterations=max_iterations)


@register_pass
class QdqContractionsPass(_GreedyPass):
    name = "qdq-contractions"
    summary = "conv/matmul/gemm of DequantizeLinear'd int8 activations and weights -> graph.qconv / graph.qmatmul"
    options = {"max_iterations": Option(4, "greedy driver iterations before giving up")}

    def run(self, module):
        return self._finish(qdq_contractions(module, max_iterations=self.max_iterations))


__all__ = ["QdqContractionsPass", "dequantized", "dequantized_at_run_time", "qdq_contractions", "qdq_to_int8",
           "recover_int8"]
