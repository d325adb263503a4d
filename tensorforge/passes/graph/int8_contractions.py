"""``int8-contractions``: integer matmuls of 8-bit operands become ``graph.qmatmul``.

ONNX ``MatMulInteger`` and ``QLinearMatMul`` (what onnxruntime's ``quantize_dynamic`` writes for
every MatMul of a transformer) import as exact graph arithmetic: the 8-bit operands widened to
int32, the zero points subtracted, an int32 ``graph.matmul``.  Const-folding then turns the
widened weights into an int32 constant.  That form is exact but runs as a generic int32 loop
nest, four times the weight bytes of the int8 original.  This pass finds

    matmul(cast<i32>(a) - zp | cast<i32>(a), W)           a: uint8/int8, zp: an int32 scalar,
                                                          W: a constant 2-D matrix of int8 values

and writes ``qmatmul(a, pack_vnni(W), colsum(W), zp)`` (``dialects/graph/quant.py``), which lowers
to the int8 kernel.  The rewrite is exact (the same integers are summed), so it is always on.  ``W`` may also be
``cast<i32>(constant)``: const-fold leaves large weights 8-bit rather than grow them fourfold.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from ...dialects.graph.elementwise import relu_epilogue
from ...dialects.graph.quant import pack_vnni
from ...ir.core import Operation, Value
from ...ir.pass_manager import Option
from ...ir.rewrite import PatternRewriter, RewriteStats, apply_patterns_greedily, constant_value, pattern
from ...ir.types import DType, TensorType
from ..registry import register_pass
from .simplify import _GreedyPass

_INT8 = (DType.u8, DType.i8)


def _widened_8bit(v: Value) -> Value | None:
    """``a`` when ``v = cast<i32>(a)`` with ``a`` uint8 or int8."""
    op = v.op
    if op is None or op.name != "graph.cast" or v.type.dtype is not DType.i32:
        return None
    a = op.operands[0]
    return a if a.type.dtype in _INT8 else None


def _scalar_i32(v: Value) -> bool:
    t = v.type
    return isinstance(t, TensorType) and t.dtype is DType.i32 and all(d == 1 for d in t.shape)


def _activation(v: Value) -> tuple[Value, Value | int] | None:
    """(8-bit activations, zero point: an int32 scalar value or a number) of a matmul's left
    operand: ``cast<i32>(a)``, ``cast<i32>(a) - zp``, or ``cast<i32>(a) + c`` with a constant
    ``c = -zp`` (what simplify makes of a constant zero point)."""
    a = _widened_8bit(v)
    if a is not None:
        return a, 0
    op = v.op
    if op is None or op.name not in ("graph.sub", "graph.add"):
        return None
    sides = [(0, 1)] if op.name == "graph.sub" else [(0, 1), (1, 0)]
    for i, j in sides:
        a, zp = _widened_8bit(op.operands[i]), op.operands[j]
        if a is None or not _scalar_i32(zp) or len(zp.type.shape) > len(v.type.shape):
            continue
        if op.name == "graph.sub":
            return a, zp
        c = constant_value(zp)
        if c is not None:
            return a, -int(np.asarray(c).reshape(()))
    return None


def _int8_weights(v: Value, ndim: int = 2) -> np.ndarray | None:
    """A constant ``ndim``-D integer tensor (a matmul's matrix, a conv's ``(O, C, kh, kw)``) whose
    values all fit int8, as int8: a constant, or the int32 widening of one that const-fold left
    alone (it would have grown the model fourfold)."""
    w = constant_value(v)
    if w is None and v.op is not None and v.op.name == "graph.cast":
        w = constant_value(v.op.operands[0])
    if w is None or w.ndim != ndim or not np.issubdtype(w.dtype, np.integer) or w.size == 0:
        return None
    if w.min() < -128 or w.max() > 127:
        return None
    return w.astype(np.int8)


@pattern("graph.matmul")
def matmul_to_qmatmul(op: Operation, rewriter: PatternRewriter) -> bool:
    lhs, rhs = op.operands
    if op.results[0].type.dtype is not DType.i32 or lhs.type.rank < 2:
        return False
    act = _activation(lhs)
    w = _int8_weights(rhs)
    if act is None or w is None:
        return False
    a, zp = act
    k, n = w.shape
    if a.type.shape[-1] != k:
        return False
    rewriter.set_insertion_point_before(op)
    zp = _zero_point(rewriter, zp)
    packed = rewriter.constant(pack_vnni(w), DType.i8)
    sums = rewriter.constant(w.astype(np.int32).sum(axis=0, dtype=np.int32), DType.i32)
    new = rewriter.create("graph.qmatmul", [a, packed, sums, zp], {"k": k, "n": n})
    if new.results[0].type != op.results[0].type:     # lhs batch dims that broadcast differently
        rewriter.erase_op(new)
        return False
    rewriter.replace_op(op, new.results)
    return True


@pattern("graph.conv")
def conv_to_qconv(op: Operation, rewriter: PatternRewriter) -> bool:
    """``conv(cast<i32>(x) - zp, W (+ bias))`` in int32 (ONNX ``ConvInteger``, ``QLinearConv``)
    -> ``qconv(x, W, zp) (+ bias)``: one group, 2-D, static channels."""
    x, w = op.operands[:2]
    if (op.results[0].type.dtype is not DType.i32 or op.attributes.get("groups", 1) != 1 or x.type.rank != 4
            or not isinstance(x.type.shape[1], int)):
        return False
    act, wq = _activation(x), _int8_weights(w, 4)
    if act is None or wq is None:
        return False
    from ...dialects.graph.quant import qconv_window, qconv_weights
    a, zp = act
    rewriter.set_insertion_point_before(op)
    zp = _zero_point(rewriter, zp)
    shifted, sums = qconv_weights(wq)
    new = rewriter.create("graph.qconv", [a, rewriter.constant(shifted, DType.u8), rewriter.constant(sums, DType.i32), zp],
                          qconv_window(op, wq.shape))
    y = new.results[0]
    if len(op.operands) == 3:                       # the int32 bias: exact, after the sum
        y = rewriter.create("graph.add", [y, rewriter.create("graph.reshape", [op.operands[2]],
                                                             {"shape": (1, wq.shape[0], 1, 1)}).results[0]]).results[0]
    if y.type != op.results[0].type:
        return False
    rewriter.replace_op(op, [y])
    return True


def _only_user(v: Value, name: str) -> Operation | None:
    """The single user of ``v`` if it is a ``name`` op."""
    uses = list(v.uses)
    if len(uses) != 1 or uses[0][0].name != name:
        return None
    return uses[0][0]


def _other(op: Operation, v: Value) -> Value:
    return op.operands[1] if op.operands[0] is v else op.operands[0]


def _per_channel(v: Value, o: int) -> np.ndarray | None:
    """A float32 constant that broadcasts per output channel of an NCHW result: (O,) values."""
    return per_channel_values(constant_value(v), o)


def per_channel_values(c: np.ndarray | None, o: int, dtype=np.float32) -> np.ndarray | None:
    """(O,) values of a ``dtype`` array that broadcasts per output channel of an NCHW result
    (one element, or the shape ``[1, O, 1, 1]`` up to leading ones); else None."""
    if c is None or c.dtype != dtype or c.ndim > 4:
        return None
    shape = (1,) * (4 - c.ndim) + c.shape
    if c.size == 1:
        return np.full(o, c.reshape(()), dtype)
    if shape[0] == 1 and shape[1] == o and shape[2:] == (1, 1):
        return c.reshape(o).astype(dtype)
    return None


def _integer_bias(acc: Value, o: int) -> tuple[np.ndarray, Value] | None:
    """(B, the sum) when the int32 ``acc``'s only use is ``acc + B``, ``B`` an int32 constant
    per output channel."""
    add = _only_user(acc, "graph.add")
    if add is None or add.results[0].type != acc.type:
        return None
    b = per_channel_values(constant_value(_other(add, acc)), o, np.int32)
    return None if b is None else (b, add.results[0])


@pattern("graph.qconv")
def dequantize_into_qconv(op: Operation, rewriter: PatternRewriter) -> bool:
    """``relu?(cast<f32>(qconv(...)) * s + b (+ r))`` (or ``clip(.., 0, max)``, ReLU6) -> one
    ``qconv`` with the float32 epilogue
    (``s``, ``b`` per output channel; ``r`` a float32 tensor of the result's shape, or a
    dequantized uint8 one, read as uint8: ``residual_scale``), so the
    convolution writes its float result once instead of int32 sums a later kernel converts.
    ``cast<f32>(qconv(...) + B) * s`` (``B`` an int32 constant per channel: ``qdq_requant``'s
    onnxruntime form) takes ``B`` as an int32 bias, added to the sums."""
    if len(op.operands) > 4:
        return False
    acc = op.results[0]
    o = acc.type.shape[1]
    int_bias = _integer_bias(acc, o)
    if int_bias is not None:
        acc = int_bias[1]
    cast = _only_user(acc, "graph.cast")
    mul = cast and cast.results[0].type.dtype is DType.f32 and _only_user(cast.results[0], "graph.mul")
    if not mul:
        return False
    scale = _per_channel(_other(mul, cast.results[0]), o)
    if scale is None or mul.results[0].type != TensorType(acc.type.shape, DType.f32):
        return False
    last, bias, residual = mul, np.zeros(o, np.float32), None
    add = _only_user(last.results[0], "graph.add")
    per_channel = None if add is None or int_bias is not None else _per_channel(_other(add, last.results[0]), o)
    if per_channel is not None:
        bias, last = per_channel, add
        add = _only_user(last.results[0], "graph.add")
    residual_attrs = {}
    if add is not None:
        r = _other(add, last.results[0])
        if r.type == last.results[0].type and add.results[0].type == r.type:
            residual, last = r, add
            dq = _dequantized(r)                        # a uint8 residual, dequantized in the epilogue
            if dq is not None:
                residual, residual_attrs = dq[0], {"residual_scale": dq[1], "residual_offset": dq[2]}
    act = _only_user(last.results[0], "graph.relu") or _only_user(last.results[0], "graph.clip")
    act_attrs = relu_epilogue(act)                  # relu, ReLU6 and other clips from 0
    if act_attrs is not None:
        last = act
    rewriter.set_insertion_point_before(last)
    bias_operand = rewriter.constant(bias, DType.f32) if int_bias is None else rewriter.constant(int_bias[0], DType.i32)
    operands = list(op.operands) + [rewriter.constant(scale, DType.f32), bias_operand]
    operands += [residual] if residual is not None else []
    attrs = {**op.attributes, "relu": False, **residual_attrs, **(act_attrs or {})}
    new = rewriter.create("graph.qconv", operands, attrs)
    rewriter.replace_op(last, new.results)
    return True


def _producer(v: Value, name: str) -> Operation | None:
    return v.op if v.op is not None and v.op.name == name else None


def _quantized_from(q: Value) -> tuple[Value, float, int, list[Operation]] | None:
    """(float32 x, multiplier m, zero point z, the chain's ops from the first) when
    ``q = cast<u8>(clip(round(x * m) (+ z), 0, 255))`` (a widening cast to float64 before the clip
    allowed; ``m`` = 1 without the multiply, which fold-inference may have moved into the
    producer's scale): the float32 QuantizeLinear of the graph."""
    cast = _producer(q, "graph.cast")
    clip = cast and _producer(cast.operands[0], "graph.clip")
    if not clip or (clip.attributes.get("min"), clip.attributes.get("max")) != (0.0, 255.0):
        return None
    chain, t = [cast, clip], clip.operands[0]
    widen = _producer(t, "graph.cast")
    if widen is not None and t.type.dtype is DType.f64:
        chain.append(widen)
        t = widen.operands[0]
    if t.type.dtype is not DType.f32:
        return None
    zp, add = 0, _producer(t, "graph.add")
    if add is not None:
        shift = next((constant_value(v) for v in add.operands if constant_value(v) is not None), None)
        if shift is None or shift.size != 1 or float(shift.reshape(())) != round(float(shift.reshape(()))):
            return None
        zp, t = int(shift.reshape(())), next(v for v in add.operands if constant_value(v) is None)
        chain.append(add)
    rnd = _producer(t, "graph.round")
    if not rnd or not 0 <= zp <= 255:
        return None
    mul = _producer(rnd.operands[0], "graph.mul")
    for x, m in ((mul.operands[0], mul.operands[1]), (mul.operands[1], mul.operands[0])) if mul else ():
        c = constant_value(m)
        if c is not None and c.size == 1 and x.type.dtype is DType.f32 and x.type.shape == q.type.shape:
            return x, float(c.reshape(())), zp, (chain + [rnd, mul])[::-1]
    x = rnd.operands[0]                  # the multiplier already folded into the producer (fold-inference)
    if x.type.dtype is DType.f32 and x.type.shape == q.type.shape:
        return x, 1.0, zp, (chain + [rnd])[::-1]
    return None


@pattern("graph.qconv")
def quantize_into_qconv(op: Operation, rewriter: PatternRewriter) -> bool:
    """``qconv(QuantizeLinear(x), ...)`` -> ``qconv(x, ..., input_scale=m)``: the kernel quantizes
    each image of float32 ``x`` as it packs it, and no kernel writes the uint8 tensor.  Not when
    ``x`` comes from a qconv that can write the uint8 tensor itself (``requantize_into_qconv``:
    one byte per element written and read instead of four), nor when another kind of op reads the
    uint8 tensor too (a dequantized residual of a QDQ model): that tensor is written anyway, and
    reading it here is a quarter of the traffic of the float32 ``x``, which then need not be
    written at all."""
    x, zp = op.operands[0], constant_value(op.operands[3])
    if x.type.dtype is not DType.u8 or zp is None or op.attributes.get("input_scale"):
        return False
    if any(user.name != "graph.qconv" for user, _ in x.uses):
        return False
    found = _quantized_from(x)
    if found is None or found[2] != int(zp.reshape(())) or _requantizable(found[0], found[3]):
        return False
    if _requantized_source(x) is not None or _poolable(found) is not None:   # reads a uint8 tensor instead
        return False
    rewriter.set_insertion_point_before(op)
    new = rewriter.create("graph.qconv", [found[0]] + list(op.operands[1:]), {**op.attributes, "input_scale": found[1]})
    rewriter.replace_op(op, new.results)
    return True


def _private(start: Value, chain: list[Operation]) -> bool:
    """Whether ``start`` and every value of ``chain`` but its last op's result have one use: the
    chain reads them alone, so rewriting it loses no other reader."""
    return all(len(list(v.uses)) == 1 for v in [start] + [o.results[0] for o in chain[:-1]])


def _replay(rewriter: PatternRewriter, chain: list[Operation], old: Value, new: Value) -> Value:
    """The ops of ``chain`` (each reading the previous one's result, the first reading ``old``)
    created again at the insertion point, reading ``new``: their last result."""
    for step in chain:
        made = rewriter.create(step.name, [new if o is old else o for o in step.operands], dict(step.attributes))
        old, new = step.results[0], made.results[0]
    return new


def _requantizable(y: Value, chain: list[Operation]) -> bool:
    """Whether ``y`` is a float32 qconv result read only by the QuantizeLinear ``chain``."""
    producer = y.op
    if producer is None or producer.name != "graph.qconv" or len(producer.operands) < 6:
        return False
    if producer.attributes.get("output_scale"):
        return False
    return _private(y, chain)


@pattern("graph.cast")
def requantize_into_qconv(op: Operation, rewriter: PatternRewriter) -> bool:
    """``QuantizeLinear(qconv(...))`` -> ``qconv(..., output_scale=m, output_zero_point=z)``: the
    convolution writes uint8, the quantized next layer's input, instead of float32."""
    if op.results[0].type.dtype is not DType.u8:
        return False
    found = _quantized_from(op.results[0])
    if found is None or not _requantizable(found[0], found[3]):
        return False
    y, m, zp, _ = found
    conv = y.op
    rewriter.set_insertion_point_before(op)
    new = rewriter.create("graph.qconv", list(conv.operands),
                          {**conv.attributes, "output_scale": m, "output_zero_point": zp})
    rewriter.replace_op(op, new.results)
    return True


def _scalar_f32(v: Value) -> float | None:
    c = constant_value(v)
    return float(c.reshape(())) if c is not None and c.dtype == np.float32 and c.size == 1 else None


def _dequantized(v: Value) -> tuple[Value, float, float, list[Operation]] | None:
    """(uint8 q, scale s, offset o, the chain's ops) when ``v = cast<f32>(q) * s (+ o)``, a
    DequantizeLinear as simplify leaves it (the zero point folded into ``o = -zp * s``); ``o`` is
    -0.0 without the add (adding it changes nothing)."""
    add = _producer(v, "graph.add")
    offset, chain = -0.0, []
    if add is not None:
        for i in (0, 1):
            o = _scalar_f32(add.operands[i])
            if o is not None:
                offset, v, chain = o, add.operands[1 - i], [add]
                break
        else:
            return None
    mul = _producer(v, "graph.mul")
    if mul is None:
        return None
    for i in (0, 1):
        s, cast = _scalar_f32(mul.operands[i]), _producer(mul.operands[1 - i], "graph.cast")
        if s is not None and cast is not None and cast.results[0].type.dtype is DType.f32 \
                and cast.operands[0].type.dtype is DType.u8 and cast.operands[0].type.shape == v.type.shape:
            return cast.operands[0], s, offset, [cast, mul] + chain
    return None


@pattern("graph.add")
def residual_into_qconv(op: Operation, rewriter: PatternRewriter) -> bool:
    """``relu?(DQ(qconv(...)) + DQ(r))`` with a uint8-writing qconv and a uint8 ``r`` (or a float32
    ``r``) -> one ``qconv`` whose epilogue rounds its result through uint8 and back
    (``requant_scale``), adds the dequantized residual (``residual_scale``) and applies the relu:
    a QDQ model's residual add (a ResNet block's tail) runs where the conv's output is in cache,
    and no kernel of its own reads two tensors and writes a third.  ``requantize_into_qconv`` then
    takes the QuantizeLinear that follows."""
    y = op.results[0]
    for i in (0, 1):
        main = _dequantized(op.operands[i])
        conv = main and main[0].op
        if conv is None or conv.name != "graph.qconv" or len(conv.operands) != 6 or y.type.dtype is not DType.f32:
            continue
        at = conv.attributes
        if not at.get("output_scale") or at.get("relu") or at.get("requant_scale") or int(at.get("groups", 1) or 1) > 1:
            continue
        if not _private(main[0], main[3] + [op]):          # the add is the chain's last op
            continue
        other = op.operands[1 - i]
        if other.type.shape != y.type.shape:
            continue
        res = _dequantized(other)
        residual, rs, ro = (res[0], res[1], res[2]) if res is not None else (other, 0.0, -0.0)
        if res is None and other.type.dtype is not DType.f32:
            continue
        act = _only_user(y, "graph.relu") or _only_user(y, "graph.clip")
        act_attrs = relu_epilogue(act)
        last = op if act_attrs is None else act
        attrs = {**at, "output_scale": 0.0, "output_zero_point": 0, "requant_scale": at["output_scale"],
                 "requant_zero_point": at.get("output_zero_point", 0), "dequant_scale": main[1],
                 "dequant_offset": main[2], "residual_scale": rs, "residual_offset": ro, "relu": False,
                 **(act_attrs or {})}
        rewriter.set_insertion_point_before(last)
        new = rewriter.create("graph.qconv", list(conv.operands) + [residual], attrs)
        rewriter.replace_op(last, new.results)
        return True
    return False


def _requantized_source(q: Value) -> Value | None:
    """``q8`` when ``q = QuantizeLinear(DequantizeLinear(q8))`` gives back every uint8 value
    unchanged (checked on all 256 through the chain's own float32 operations): the round trip of a
    QDQ model's max pool (or any op moved off the pair) is then ``q8`` itself.  Exact or nothing."""
    found = _quantized_from(q)
    source = found and _dequantized(found[0])
    if source is None:
        return None
    q8, s, o, _ = source
    _, m, zp, _ = found
    with np.errstate(invalid="ignore", over="ignore"):
        v = np.arange(256, dtype=np.float32) * np.float32(s) + np.float32(o)
        back = np.clip(np.rint(v * np.float32(m)) + np.float32(zp), np.float32(0), np.float32(255))
    return q8 if np.array_equal(back, np.arange(256, dtype=np.float32)) else None


@pattern("graph.cast")
def requantized_dequantize(op: Operation, rewriter: PatternRewriter) -> bool:
    """``Q(DQ(q8)) -> q8`` when the round trip is the identity (``_requantized_source``)."""
    if op.results[0].type.dtype is not DType.u8:
        return False
    q8 = _requantized_source(op.results[0])
    if q8 is None or q8.type != op.results[0].type:
        return False
    rewriter.replace_all_uses_with(op.results[0], q8)
    return True


@pattern("graph.max_pool")
def max_pool_before_dequantize(op: Operation, rewriter: PatternRewriter) -> bool:
    """``max_pool(DQ(q8)) -> DQ(max_pool(q8))``: dequantizing is increasing (a positive scale; float
    rounding keeps the order), so the max of the dequantized window is the dequantized max, and
    uint8 padding (0, the lowest value) never wins a window as -inf never does.  The pool reads and
    writes a quarter of the bytes, and the QuantizeLinear after it cancels (``requantized_dequantize``)."""
    found = _dequantized(op.operands[0])
    if found is None or found[1] <= 0 or not np.isfinite(found[1]) or not np.isfinite(found[2]):
        return False
    q8, _, _, chain = found
    rewriter.set_insertion_point_before(op)
    pooled = rewriter.create("graph.max_pool", [q8], dict(op.attributes)).results[0]
    y = _replay(rewriter, chain, q8, pooled)               # the same DequantizeLinear ops, after the pool
    if y.type != op.results[0].type:
        return False
    rewriter.replace_op(op, [y])
    return True


def _poolable(found) -> Operation | None:
    """The float32 max pool a QuantizeLinear chain (``_quantized_from``'s result) alone reads,
    when its multiplier is positive: ``quantize_before_max_pool`` moves the chain before it."""
    pool = found and _producer(found[0], "graph.max_pool")
    if pool is None or not (found[1] > 0 and np.isfinite(found[1])) or pool.operands[0].type.dtype is not DType.f32:
        return None
    return pool if _private(found[0], found[3]) else None


@pattern("graph.cast")
def quantize_before_max_pool(op: Operation, rewriter: PatternRewriter) -> bool:
    """``Q(max_pool(x)) -> max_pool(Q(x))`` for a float32 ``x`` whose pool only this QuantizeLinear
    reads: quantizing is non-decreasing (a positive multiplier, then round, shift and clip), so the
    quantized max is the max of the quantized window, and uint8 padding (0) is what -inf
    quantizes to.  The pool then moves a quarter of the bytes, and the QuantizeLinear before it
    joins the producing conv (``requantize_into_qconv``), as in a post-training-quantized ResNet's
    stem.  (A NaN in a window, which has no uint8 value, may quantize differently.)"""
    if op.results[0].type.dtype is not DType.u8:
        return False
    found = _quantized_from(op.results[0])
    pool = _poolable(found)
    if pool is None:
        return False
    rewriter.set_insertion_point_before(op)
    q = _replay(rewriter, found[3], found[0], pool.operands[0])   # the same QuantizeLinear ops, on the pool's input
    pooled = rewriter.create("graph.max_pool", [q], dict(pool.attributes)).results[0]
    if pooled.type != op.results[0].type:
        return False
    rewriter.replace_op(op, [pooled])
    return True


@pattern("graph.cast")
def quantize_before_concat(op: Operation, rewriter: PatternRewriter) -> bool:
    """``Q(concat(x1, x2, ...)) -> concat(Q(x1), Q(x2), ...)`` for float32 inputs of a concat that
    only this QuantizeLinear reads: quantizing is elementwise and a concat only moves elements, so
    the two commute exactly.  The concat then moves a quarter of the bytes, and where an input is
    itself a dequantized uint8 tensor of the same scale (onnxruntime's QDQ form of a concat of
    quantized branches) ``Q(DQ(q))`` cancels (``requantized_dequantize``): no float32 tensor is left
    between the branches and the concat's consumer.  Inputs of other scales keep a uint8 -> uint8
    requantization, an elementwise kernel over that input alone."""
    if op.results[0].type.dtype is not DType.u8:
        return False
    found = _quantized_from(op.results[0])
    cat = found and _producer(found[0], "graph.concat")
    if cat is None or not _private(found[0], found[3]) or any(x.type.dtype is not DType.f32 for x in cat.operands):
        return False
    rewriter.set_insertion_point_before(op)
    parts = [_replay(rewriter, found[3], found[0], x) for x in cat.operands]
    joined = rewriter.create("graph.concat", parts, dict(cat.attributes)).results[0]
    if joined.type != op.results[0].type:
        return False
    rewriter.replace_op(op, [joined])
    return True


def _zero_point(rewriter: PatternRewriter, zp: Value | int) -> Value:
    """The activations' zero point as an int32 scalar value."""
    if isinstance(zp, int):
        return rewriter.constant(np.array(zp, np.int32), DType.i32)
    if zp.type.rank:
        return rewriter.create("graph.reshape", [zp], {"shape": ()}).results[0]
    return zp


def int8_contractions(root: Operation, max_iterations: int = 4) -> RewriteStats:
    """Rewrites the 8-bit integer matmuls and convolutions under ``root`` into ``graph.qmatmul``
    and ``graph.qconv``."""
    return apply_patterns_greedily(root, (matmul_to_qmatmul, conv_to_qconv, dequantize_into_qconv, requantize_into_qconv,
                                          quantize_into_qconv, residual_into_qconv, requantized_dequantize,
                                          max_pool_before_dequantize, quantize_before_max_pool, quantize_before_concat),
                                   fold=False,
                                   max_iterations=max_iterations)


@register_pass
class Int8ContractionsPass(_GreedyPass):
    name = "int8-contractions"
    summary = ("integer matmuls and convolutions of 8-bit activations by constant int8 weights -> "
               "graph.qmatmul / graph.qconv (VNNI kernels)")
    options: ClassVar[dict[str, Option]] = {
        "max_iterations": Option(4, "greedy driver iterations before giving up"),
    }

    def run(self, module):
        return self._finish(int8_contractions(module, max_iterations=self.max_iterations))


__all__ = ["Int8ContractionsPass", "conv_to_qconv", "dequantize_into_qconv", "per_channel_values", "quantize_into_qconv",
           "requantize_into_qconv",
           "residual_into_qconv", "requantized_dequantize", "max_pool_before_dequantize", "quantize_before_max_pool",
           "quantize_before_concat",
           "int8_contractions",
           "matmul_to_qmatmul"]
