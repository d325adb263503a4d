"""structured.kernel -> loop.func with the default (unscheduled) loop nest.

Each compute becomes a nest: parallel axes outside, reduction axes inside, a rank-0 accumulator
between them.  Intermediate computes get local buffers; computes that are returned write
straight into the output buffers.  Schedules (tensorforge.schedule) transform the result.

Schedules address loops and buffers by stable tags rather than by object identity, so that a
recorded schedule replays on a freshly lowered copy: the loop of axis ``a`` of the ``c``-th
compute is tagged ``"c.a"``, its accumulator ``"c.acc"``, an intermediate's buffer ``"c.buf"``,
and the loops copying a returned input to an output ``"copyK.d"``.
"""
from __future__ import annotations

from ...errors import IRError
from ...ir.builder import Builder, make_op
from ...ir.core import Block, Operation, Region, Value
from ...ir.symbolic import SYMBOLS_ATTR, canonical, enclosing_symbols_text
from ...ir.types import BufferType, DType, ScalarType
from ...dialects.scalar import INDEX
from ...dialects.structured.ops import ComputeView, KernelView


def buffer_of(t) -> BufferType:
    return BufferType(t.shape, t.dtype)


def _ub(extent) -> int | str:
    """A loop bound: an int, or a symbolic dim in canonical form (run-time extent)."""
    return canonical(extent) if isinstance(extent, str) else int(extent)


def _loop(b: Builder, extent, tag: str, reduction: bool = False) -> tuple[Operation, Builder, Value]:
    region = Region([Block([INDEX])])
    op = b.create("loop.for", [], {"lb": 0, "ub": _ub(extent), "step": 1, "kind": "serial",
                                   "reduction": reduction, "tag": tag}, regions=[region])
    blk = region.blocks[0]
    return op, Builder.at_end(blk), blk.args[0]


def _const(b: Builder, value, dtype) -> Value:
    return b.create("scalar.const", [], {"value": value, "type": ScalarType(dtype)}).results[0]


# Half-precision sums accumulate in f32 (as NumPy's and every BLAS's half sums do): rounding the
# running sum to 11 (f16) or 8 (bf16) bits at every step loses a bit per few terms.
_WIDE_SUM = {DType.f16: DType.f32, DType.bf16: DType.f32}


def accumulator_dtype(dtype: DType, combiner: str) -> DType:
    """The element type a reduction with ``combiner`` accumulates in, for results of ``dtype``."""
    return _WIDE_SUM.get(dtype, dtype) if combiner == "add" else dtype


def _cast(b: Builder, v: Value, dtype: DType) -> Value:
    return v if v.type.dtype is dtype else b.create("scalar.cast", [v], {"dtype": dtype}).results[0]


def _widen_term(b: Builder, val: Value, dtype: DType) -> Value:
    """``val`` as a ``dtype`` term of a widened sum: a product is formed from widened factors (as a
    half-precision matmul does in NumPy and BLAS), anything else is widened after it is computed."""
    if val.type.dtype is dtype:
        return val
    mul = val.op
    if mul is not None and mul.name == "scalar.mul" and len(val.uses) == 0:
        a, c = (_cast(b, x, dtype) for x in mul.operands)
        mul.erase()
        return b.create("scalar.mul", [a, c]).results[0]
    return _cast(b, val, dtype)


def _emit_body(b: Builder, cv: ComputeView, axis_values: list[Value], buffers: dict[int, Value]) -> Value:
    """Copies a compute body to ``b``: axes become loop ivs, tensor reads become buffer loads."""
    mapping: dict[int, Value] = {id(a): v for a, v in zip(cv.axes, axis_values)}
    for op in cv.body:
        if op.name == "structured.yield":
            return mapping[id(op.operands[0])]
        if op.name == "structured.read":
            buf = buffers.get(id(op.operands[0]))
            if buf is None:
                raise IRError("structured.read of a tensor that is neither a kernel input nor an earlier compute")
            idx = [mapping[id(v)] for v in op.operands[1:]]
            new = b.create("loop.load", [buf] + idx, dict(op.attributes))
        else:
            new = b.insert(make_op(op.name, [mapping[id(v)] for v in op.operands], dict(op.attributes),
                                   [r.type for r in op.results]))
        for r_old, r_new in zip(op.results, new.results):
            mapping[id(r_old)] = r_new
    raise IRError("compute body has no structured.yield")


def lower_compute(b: Builder, cv: ComputeView, out_buf: Value, buffers: dict[int, Value], index: int = 0) -> None:
    """Emits the default nest of ``cv``, the ``index``-th compute of its kernel (which names its tags)."""
    dom, its = cv.domain, cv.iterators
    dtype = cv.op.attributes["dtype"]
    axis_values: list[Value | None] = [None] * len(dom)
    inner = b
    for i in cv.parallel_axes:
        _, inner, iv = _loop(inner, dom[i], f"{index}.{i}")
        axis_values[i] = iv
    out_idx = [axis_values[i] for i in cv.parallel_axes]
    if cv.combiner == "none":
        val = _emit_body(inner, cv, axis_values, buffers)
        inner.create("loop.store", [val, out_buf] + out_idx)
        return
    acc_dtype = accumulator_dtype(dtype, cv.combiner)
    acc = inner.create("loop.alloc", [], {"type": BufferType((), acc_dtype), "tag": f"{index}.acc"}).results[0]
    init = cv.init
    if not dtype.is_float:
        lo, hi = acc_dtype.int_range if acc_dtype is not DType.bool else (0, 1)
        init = {"add": 0, "mul": 1, "max": lo, "min": hi}[cv.combiner]
        if dtype.name == "bool":
            init = cv.combiner in ("mul", "min")
    inner.create("loop.store", [_const(inner, init, acc_dtype), acc])
    red = inner
    for i in cv.reduction_axes:
        _, red, iv = _loop(red, dom[i], f"{index}.{i}", reduction=True)
        axis_values[i] = iv
    val = _emit_body(red, cv, axis_values, buffers)
    if acc_dtype is not dtype:
        val = _widen_term(red, val, acc_dtype)
    cur = red.create("loop.load", [acc]).results[0]
    comb = red.create(f"scalar.{cv.combiner}", [cur, val]).results[0]
    red.create("loop.store", [comb, acc])
    res = inner.create("loop.load", [acc]).results[0]
    if acc_dtype is not dtype:
        res = _cast(inner, res, dtype)
    inner.create("loop.store", [res, out_buf] + out_idx)


def _copy(b: Builder, src: Value, dst: Value, index: int) -> None:
    """out = in, element by element (a kernel that returns its input unchanged)."""
    t = src.type
    inner, ivs = b, []
    for k, d in enumerate(t.shape):
        _, inner, iv = _loop(inner, d, f"copy{index}.{k}")
        ivs.append(iv)
    v = inner.create("loop.load", [src] + ivs).results[0]
    inner.create("loop.store", [v, dst] + ivs)


def lower_kernel(kernel: Operation, name: str | None = None) -> Operation:
    """Returns a new ``loop.func`` computing ``kernel`` (the kernel itself is left untouched)."""
    kv = KernelView(kernel)
    in_types = [buffer_of(a.type) for a in kv.body.args]
    out_types = [buffer_of(v.type) for v in kv.outputs]
    block = Block(in_types + out_types)
    fn = make_op("loop.func", [], {"sym_name": name or kernel.attributes.get("sym_name", "kernel"),
                                   "num_inputs": len(in_types)}, regions=[Region([block])])
    symbols = _symbols_text(kernel)
    if symbols is not None:
        fn.attributes[SYMBOLS_ATTR] = symbols
    b = Builder.at_end(block)
    buffers: dict[int, Value] = {id(a): block.args[i] for i, a in enumerate(kv.body.args)}
    out_args = block.args[len(in_types):]
    returned: dict[int, Value] = {}
    for v, buf in zip(kv.outputs, out_args):
        if v.op is not None and v.op.name == "structured.compute" and id(v) not in returned:
            returned[id(v)] = buf
    for ci, cv in enumerate(kv.computes):
        res = cv.op.results[0]
        out = returned.get(id(res))
        if out is None:
            out = b.create("loop.alloc", [], {"type": buffer_of(res.type), "tag": f"{ci}.buf"}).results[0]
        buffers[id(res)] = out
        lower_compute(b, cv, out, buffers, ci)
    copies = 0
    for v, buf in zip(kv.outputs, out_args):
        if returned.get(id(v)) is not buf:
            _copy(b, buffers[id(v)], buf, copies)
            copies += 1
    b.create("loop.return", [])
    return fn


def _symbols_text(kernel: Operation) -> str | None:
    """The ``tf.symbols`` attribute of the kernel's function (its symbols' ranges and hints), for a
    kernel over symbolic shapes; the loop.func carries it so that schedules read hints from it and
    the C emitter knows the model's symbol order.  None for a static kernel, which stays unchanged."""
    if not _has_symbols(kernel):
        return None
    return enclosing_symbols_text(kernel)


def _has_symbols(kernel: Operation) -> bool:
    types = [v.type for v in kernel.operands] + [r.type for r in kernel.results]
    if any(not t.is_static for t in types if hasattr(t, "is_static")):
        return True
    return any(isinstance(d, str) for op in kernel.walk() if op.name == "structured.compute"
               for d in op.attributes["domain"])
