"""Post-training int8 rewrite of the contractions by constant weights (``graph.matmul``,
``graph.gemm``, one-group and depthwise 2-D ``graph.conv``).

Each chosen contraction ``y = x @ W (+ c)`` with calibrated activation range ``[lo, hi]`` becomes

    q   = cast<u8>(clip(round(x / sa) + za, 0, 255))          per-tensor uint8, sa = (hi - lo) / 255
    acc = qmatmul(q, pack_vnni(Wq), colsum(Wq), za)            exact int32 (the VNNI kernel)
    y   = cast<f32>(acc) * (sa * sw) (+ c)                     sw per output channel

with ``Wq = clip(round(W / sw), -127, 127)`` and ``sw = max|W[:, n]| / 127`` per output column
(``per_channel=True``) or one scale for the tensor.  The quantize step is the same arithmetic as
ONNX ``QuantizeLinear``; the rescale and bias are elementwise ops the fusion pass joins to their
neighbours.  A convolution becomes ``qconv`` (``dialects/graph/quant.py``) the same way, its
weights scaled per output channel and its bias added after the rescale; depthwise ones too (a
direct loop rather than the GEMM); other grouped convolutions stay float.  Contractions whose weights are not constant, or whose activations are not float32,
stay float.
"""
from __future__ import annotations

import numpy as np

from ..dialects.graph.quant import pack_vnni, qconv_weights, qconv_window
from ..ir.builder import Builder
from ..ir.builtin import ModuleOp
from ..ir.core import Operation, Value
from ..ir.rewrite import constant_value
from ..ir.types import DType


def contraction_weights(op: Operation) -> np.ndarray | None:
    """The constant ``K x N`` float weights of a matmul/gemm, as the product reads them."""
    if op.name == "graph.matmul":
        w = constant_value(op.operands[1])
        return w if w is not None and w.ndim == 2 and op.operands[0].type.rank >= 2 else None
    if op.name == "graph.gemm" and not op.attributes.get("trans_a", False):
        w = constant_value(op.operands[1])
        if w is None or w.ndim != 2:
            return None
        return w.T if op.attributes.get("trans_b", False) else w
    return None


def int8_conv_groups(op: Operation, depthwise: bool = True) -> bool:
    """Whether ``graph.qconv`` runs this conv's grouping: one group, or (with ``depthwise``)
    one filter per channel, with static channels."""
    x = op.operands[0].type
    if x.rank != 4 or not isinstance(x.shape[1], int):
        return False
    groups = op.attributes.get("groups", 1)
    return groups == 1 or (depthwise and is_depthwise(op))


def is_depthwise(op: Operation) -> bool:
    """A depthwise conv the int8 depthwise kernel takes: one filter per channel, at most 64 taps
    (it sums them exactly in float32, ``qconv.depthwise_source``)."""
    x, w = op.operands[0].type, op.operands[1].type.shape
    groups = op.attributes.get("groups", 1)
    return groups > 1 and groups == x.shape[1] and w[0] == groups and w[2] * w[3] <= 64


def conv_weights(op: Operation) -> np.ndarray | None:
    """The constant ``(O, C/groups, kh, kw)`` weights of a one-group or depthwise 2-D convolution
    of NCHW activations with static channels (what ``graph.qconv`` runs), else None."""
    if op.name != "graph.conv" or not int8_conv_groups(op):
        return None
    w = constant_value(op.operands[1])
    if w is None or w.ndim != 4 or (len(op.operands) == 3 and constant_value(op.operands[2]) is None):
        return None
    return w


def _weights(op: Operation) -> np.ndarray | None:
    if op.name == "graph.conv":
        return conv_weights(op)
    return contraction_weights(op) if op.name in ("graph.matmul", "graph.gemm") else None


def candidates(module: ModuleOp, convolutions: bool = True) -> list[Operation]:
    """The contractions the int8 rewrite can take, in program order: float32 activations times
    constant float32 weights (linear layers and, with ``convolutions``, one-group and depthwise 2-D
    convolutions)."""
    out = []
    for op in module.main.body:
        w = _weights(op) if convolutions or op.name != "graph.conv" else None
        if w is not None and w.dtype == np.float32 and op.operands[0].type.dtype is DType.f32:
            out.append(op)
    return out


def gemm_alpha(op: Operation) -> float:
    """The factor a contraction's product is scaled by (a gemm's ``alpha``; 1 otherwise)."""
    return float(op.attributes.get("alpha", 1.0)) if op.name == "graph.gemm" else 1.0


def add_gemm_addend(b, op: Operation, y: Value) -> Value:
    """``y + beta * c`` for a gemm with a ``c`` operand (``b``: the graph dialect builder), else ``y``."""
    if op.name != "graph.gemm" or len(op.operands) < 3:
        return y
    c = op.operands[2]
    beta = float(op.attributes.get("beta", 1.0))
    return b.add(y, c if beta == 1.0 else b.mul(c, b.constant(np.array(beta, np.float32))))


def key_of(op: Operation, index: int) -> str:
    """A stable name of the ``index``-th candidate: its place and where it came from."""
    return f"{index}:{op.name.split('.', 1)[1]}{op.location_str()}"


def weight_scales(w: np.ndarray, per_channel: bool) -> tuple[np.ndarray, np.ndarray]:
    """(int8 weights, float32 scale per output column): symmetric, 127 levels each side."""
    amax = np.abs(w).max(axis=0) if per_channel else np.full(w.shape[1], np.abs(w).max())
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    return q, scale


def activation_params(lo: float, hi: float) -> tuple[np.float32, int]:
    """(scale, uint8 zero point) covering ``[lo, hi]`` (which contains 0)."""
    scale = np.float32((hi - lo) / 255.0) if hi > lo else np.float32(1.0)
    zp = int(np.clip(np.rint(-lo / scale), 0, 255))
    return scale, zp


def quantize_activations(b, x: Value, sa: np.float32, za: int) -> Value:
    """``x`` as uint8 with scale ``sa`` and zero point ``za`` (ONNX ``QuantizeLinear``'s arithmetic)."""
    q = b.div(x, b.constant(np.array(sa, np.float32)))
    q = b.add(b.round(q), b.constant(np.array(za, np.float32)))
    return b.cast(b.clip(q, min=0.0, max=255.0), dtype=DType.u8)


def int8_contraction(b, op: Operation, q: Value, sa: float | Value, za: int | Value, wq: np.ndarray,
                     sw: np.ndarray) -> Value:
    """``op``'s result (a matmul, gemm or conv) from 8-bit activations ``q`` (scale ``sa``, zero
    point ``za``) and int8 weights ``wq`` with a float32 scale per output channel ``sw``:
    ``qmatmul``/``qconv`` in exact int32, then ``* (sa * sw)`` and the op's bias or addend in
    float32.  ``wq`` is ``(K, N)`` for a matmul/gemm (as the product reads it), ``(O, C, kh, kw)``
    for a conv.  For a matmul/gemm ``sa`` and ``za`` may be rank-0 float32 values computed at run
    time (dynamic quantization), the zero point then an integer-valued float.  Built before ``op``
    by the graph builder ``b``; ``op`` is left in place."""
    dynamic = isinstance(sa, Value)
    if dynamic and op.name == "graph.conv":
        raise ValueError("a conv's activation scale must be a constant")
    zp = b.cast(za, dtype=DType.i32) if dynamic else b.constant(np.array(za, np.int32), DType.i32)
    scale = None if dynamic else (np.float32(sa) * np.asarray(sw, np.float32)).astype(np.float32)
    if op.name == "graph.conv":
        o = wq.shape[0]
        shifted, sums = qconv_weights(wq)
        acc = b.qconv(q, b.constant(shifted, DType.u8), b.constant(sums, DType.i32), zp, **qconv_window(op, wq.shape))
        y = b.mul(b.cast(acc, dtype=DType.f32), b.constant(scale.reshape(1, o, 1, 1)))
        return b.add(y, b.reshape(op.operands[2], shape=(1, o, 1, 1))) if len(op.operands) == 3 else y
    k, n = wq.shape
    acc = b.qmatmul(q, b.constant(pack_vnni(wq), DType.i8), b.constant(wq.astype(np.int32).sum(axis=0), DType.i32),
                    zp, k=k, n=n)
    alpha = np.float32(gemm_alpha(op))
    if dynamic:             # the activation scale times a constant per column, at run time
        factor = b.mul(sa, b.constant((np.asarray(sw, np.float32) * alpha).astype(np.float32)))
    else:
        factor = b.constant((scale * alpha).astype(np.float32))
    return add_gemm_addend(b, op, b.mul(b.cast(acc, dtype=DType.f32), factor))


def replace_result(op: Operation, y: Value) -> None:
    """``op``'s uses read ``y`` instead; ``op`` is erased."""
    if y.type != op.results[0].type:
        raise AssertionError(f"int8 rewrite of {op.name}{op.location_str()}: {y.type} != {op.results[0].type}")
    op.results[0].replace_all_uses_with(y)
    op.erase()


def quantize_contraction(op: Operation, lo: float, hi: float, per_channel: bool) -> tuple[Value, Value, float, int, Value]:
    """Replaces ``op`` by its int8 form (module docstring) in place; returns (float input x, its
    uint8 form q, scale, zero point, the float result that replaced op's)."""
    sa, za = activation_params(lo, hi)
    x = op.operands[0]
    b = Builder.before(op).graph
    q = quantize_activations(b, x, sa, za)
    if op.name == "graph.conv":
        w = conv_weights(op)
        wq, sw = weight_scales(w.reshape(w.shape[0], -1).T.astype(np.float64), per_channel)
        wq = wq.T.reshape(w.shape)
    else:
        wq, sw = weight_scales(contraction_weights(op).astype(np.float64), per_channel)
    y = int8_contraction(b, op, q, sa, za, wq, sw)
    replace_result(op, y)
    return x, q, float(sa), int(za), y


def dequantize_residuals(quantized: list[tuple]) -> int:
    """Residual adds of 4-D tensors that int8 convolutions also read take the uint8 form those
    convolutions use, dequantized (``q * s - zp * s``), instead of the float32 tensor: a ResNet
    block's input then travels as uint8 (the previous block's conv writes it in its epilogue,
    the next block's conv adds it in its own), a quarter of the bytes, as in onnxruntime's QDQ
    models (whose residuals are quantized the same way).  Returns the number of adds changed."""
    changed = 0
    firsts: dict[int, tuple] = {}
    for record in quantized:
        firsts.setdefault(id(record[0]), record)
    where: dict[int, int] = {}                 # program position of each op, for "after q"
    for x, q, sa, za, *_ in firsts.values():
        if x.type.rank != 4 or q.op is None:
            continue
        if id(q.op) not in where:
            where = {id(op): i for i, op in enumerate(q.op.parent)}
        for user, index in list(x.uses):
            if user.name != "graph.add" or where.get(id(user), -1) < where[id(q.op)] or user.results[0].type != x.type:
                continue
            b = Builder.before(user).graph
            d = b.mul(b.cast(q, dtype=DType.f32), b.constant(np.array(sa, np.float32)))
            if za:
                d = b.add(d, b.constant(np.array(np.float32(-za) * np.float32(sa), np.float32)))
            user.set_operand(index, d)
            changed += 1
    return changed


__all__ = ["activation_params", "dequantize_residuals", "int8_conv_groups", "is_depthwise", "add_gemm_addend", "candidates", "contraction_weights", "conv_weights", "gemm_alpha",
           "int8_contraction", "key_of", "quantize_activations", "quantize_contraction", "replace_result", "weight_scales"]
