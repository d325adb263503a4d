"""ONNX ``If``, ``Loop``, ``Scan`` and ``SequenceMap``: subgraphs imported as regions of
``graph.if`` / ``graph.loop`` / ``graph.scan``, or inlined when the import decides them
(design: ``docs/control_flow.md``).

- A subgraph is imported by the same node loop as the main graph (``import_subgraph``): its
  names shadow the enclosing ones, names it does not define resolve in the enclosing scopes
  (ONNX's implicit capture, which the non-isolated regions of the graph ops express directly).
- ``If`` with a condition known at import is the chosen branch inlined; otherwise a
  ``graph.if`` whose result dims are the branches' where they agree and fresh symbols where they
  differ.  Branches that yield sequences/optionals of the same structure yield their tensors.
- ``Loop``/``Scan`` bodies get the initial values' types; when an iteration yields a carried
  value of another shape, the differing dims become fresh symbols and the body is imported again
  (at most twice).  A ``Loop`` that carries a sequence or optional is unrolled at import, which
  needs its trip count and condition at import (a trip count from a model input makes the model
  specialise on that input's value).
- ``SequenceMap`` is its body inlined once per element.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...ir.builder import Builder, make_op
from ...ir.core import Block, Region, Value
from ...ir.types import DType, TensorType
from .context import ImportContext, OnnxNode
from .dtypes import tensor_to_numpy, to_dtype
from .errors import NonConstantInputError
from .registry import handles
from .sequence import OptValue, SeqValue, flatten, rebuild

MAX_UNROLL = 4096      # iterations a sequence-carrying Loop may be unrolled to


def _graph_attr(node: OnnxNode, key: str):
    node.ignore(key)
    for a in node.proto.attribute:
        if a.name == key and a.HasField("g"):
            return a.g
    raise node.unsupported(f"required subgraph attribute '{key}' is missing")


def fresh_symbol(ctx: ImportContext) -> str:
    """A symbol no input binds: a size the control flow decides at run time."""
    n = getattr(ctx, "_cf_symbols", 0) + 1
    ctx._cf_symbols = n
    return f"cf_{n}"


def import_subgraph(ctx: ImportContext, graph, inputs: Sequence[Any], block: Block | None = None) -> list:
    """Converts the nodes of ``graph`` with its inputs bound to ``inputs``; ops go to ``block``
    (a region's body) or, when None, where the current node's ops go (inlining).  Returns the
    subgraph's outputs (values, or ``SeqValue``/``OptValue``)."""
    importer = getattr(ctx, "importer", None)
    if importer is None:
        raise ctx._unsupported("subgraphs need the importer (internal: ctx.importer is not set)")
    if len(inputs) != len(graph.input):
        raise ctx._unsupported(f"the subgraph '{graph.name}' takes {len(graph.input)} inputs, got {len(inputs)}")
    saved_values, saved_builder, saved_node = importer.values, ctx.builder, ctx.node
    importer.values = dict(saved_values)
    if block is not None:
        ctx.builder = Builder(block, None, saved_builder.loc)
    ok = False
    try:
        for t in graph.initializer:
            if to_dtype(t.data_type) is None:
                raise ctx._unsupported(f"subgraph initializer '{t.name}' has an unsupported element type")
            v = ctx.const(tensor_to_numpy(t), to_dtype(t.data_type))
            v.name_hint = t.name
            importer.values[t.name] = v
        for vi, v in zip(graph.input, inputs):
            importer.values[vi.name] = v
        for index, proto in enumerate(graph.node):
            importer._convert(ctx, proto, index)
        ctx.node = saved_node
        outs = [importer._lookup(vi.name, ctx, f"the output list of subgraph '{graph.name}'")
                for vi in graph.output]
        ok = True
        return outs
    finally:
        importer.values, ctx.builder, ctx.node = saved_values, saved_builder, saved_node
        if not ok and block is not None:
            _discard(block)


def _discard(block: Block) -> None:
    """Drops a body that will not be used (its ops' uses of enclosing values go with it)."""
    for op in block:
        op.drop_all_references()


def _known_bool(ctx: ImportContext, v: Value | None) -> bool | None:
    if v is None:
        return None
    arr = ctx.value_of(v)
    return None if arr is None else bool(np.asarray(arr).reshape(-1)[0])


def _unify(ctx: ImportContext, node: OnnxNode, a, b, what: str):
    """The type that holds both ``a`` and ``b``: equal dims kept, differing ones fresh symbols."""
    if not isinstance(a, TensorType) or not isinstance(b, TensorType):
        raise node.unsupported(f"{what}: non-tensor values")
    if a.dtype is not b.dtype or a.rank != b.rank:
        raise node.unsupported(f"{what}: {a} and {b} differ in element type or rank")
    if a == b:
        return a
    return TensorType(tuple(x if x == y else fresh_symbol(ctx) for x, y in zip(a.shape, b.shape)), a.dtype)


def _yield(block: Block, values: Sequence[Value]) -> None:
    block.append(make_op("graph.yield", list(values)))


def _structure(node: OnnxNode, v, what: str):
    """(tensors, structure) of a branch result."""
    vs, s = flatten(v)
    if any(not isinstance(x, Value) for x in vs):
        raise node.unsupported(f"{what} is not a tensor")
    return vs, s


def _count(s) -> int:
    """How many tensors a structure holds."""
    if s == "t":
        return 1
    kind, sub = s
    if kind == "s":
        return sum(_count(x) for x in sub)
    return 0 if sub is None else _count(sub)


# ---- If --------------------------------------------------------------------------------------
@handles("If")
def if_(ctx: ImportContext, node: OnnxNode):
    cond = node.required(0, "cond")
    then_g, else_g = _graph_attr(node, "then_branch"), _graph_attr(node, "else_branch")
    known = _known_bool(ctx, cond)
    if known is not None:                      # decided at import: the branch, inlined
        return import_subgraph(ctx, then_g if known else else_g, [])
    if ctx.dtype(cond) is not DType.bool or any(d != 1 for d in ctx.shape(cond)):
        raise node.unsupported(f"the condition must be a one-element bool tensor, got {cond.type}")
    blocks = (Block(), Block())
    outs = [import_subgraph(ctx, g, [], b) for g, b in zip((then_g, else_g), blocks)]
    if len(outs[0]) != len(outs[1]):
        raise node.unsupported("the branches have different numbers of outputs")
    flat: list[list[Value]] = [[], []]
    structures = []
    for i, (t, e) in enumerate(zip(*outs)):
        (tv, ts), (ev, es) = _structure(node, t, f"then output #{i}"), _structure(node, e, f"else output #{i}")
        if ts != es:
            raise node.unsupported(f"output #{i}: the branches give sequences/optionals of different "
                                   f"structure ({ts} and {es}); only the same structure is supported")
        flat[0] += tv
        flat[1] += ev
        structures.append(ts)
    types = [_unify(ctx, node, a.type, b.type, f"output {i}") for i, (a, b) in enumerate(zip(*flat))]
    for b, vs in zip(blocks, flat):
        _yield(b, vs)
    op = ctx.builder.insert(make_op("graph.if", [cond], {}, types, [Region([blocks[0]]), Region([blocks[1]])],
                                    ctx.builder.loc))
    results = list(op.results)
    out = []
    pos = 0
    for s in structures:
        n = _count(s)
        out.append(rebuild(s, iter(results[pos:pos + n]), SeqValue, OptValue))
        pos += n
    return out


# ---- Loop ------------------------------------------------------------------------------------
def _body_types(ctx, node, body, arg_types, import_body):
    """Imports ``body`` with argument types that hold every iteration: the initial types, widened
    where an iteration yields other sizes.  ``import_body(types) -> ((block, outputs), yielded carried
    types)``; returns ``(block, outputs)``."""
    types = list(arg_types)
    for _ in range(3):
        block, yielded = import_body(types)
        if all(a == y for a, y in zip(types, yielded)):
            return block
        if all(isinstance(y, TensorType) and a.rank == y.rank and a.dtype is y.dtype
               and all(isinstance(d, str) or d == e for d, e in zip(a.shape, y.shape)) for a, y in zip(types, yielded)):
            return block                          # the declared symbolic dims hold what it yields
        _discard(block[0])
        types = [_unify(ctx, node, a, y, f"carried value #{i}") for i, (a, y) in enumerate(zip(types, yielded))]
    raise node.unsupported("the loop-carried shapes do not settle")


@handles("Loop")
def loop(ctx: ImportContext, node: OnnxNode):
    body = _graph_attr(node, "body")
    max_trip, cond = node.input(0), node.input(1)
    inits = node.inputs[2:]
    if any(v is None for v in inits):
        raise node.unsupported("a loop-carried initial value is missing")
    n = len(inits)
    k = len(body.output) - 1 - n
    if len(body.input) != n + 2 or k < 0:
        raise node.unsupported(f"the body takes {len(body.input)} inputs and gives {len(body.output)} outputs "
                               f"for {n} carried values")
    if any(isinstance(v, (SeqValue, OptValue)) for v in inits):
        return _unroll(ctx, node, body, max_trip, cond, inits, n, k)
    m_const = None if max_trip is None else ctx.value_of(max_trip)
    i64 = TensorType((), DType.i64)
    b1 = TensorType((), DType.bool)
    m = max_trip if max_trip is not None else ctx.const(np.asarray(np.iinfo(np.int64).max, np.int64))
    if ctx.shape(m) != ():
        m = ctx.op("reshape", m, shape=())
    c = cond if cond is not None else ctx.const(np.asarray(True))
    if ctx.shape(c) != ():
        c = ctx.op("reshape", c, shape=())

    def import_body(types):
        block = Block([i64, b1, *types])
        outs = import_subgraph(ctx, body, block.args, block)
        if any(not isinstance(o, Value) for o in outs):
            raise node.unsupported("the body yields sequences or optionals")
        return (block, outs), [o.type for o in outs[1:1 + n]]

    try:
        block, outs = _body_types(ctx, node, body, [v.type for v in inits], import_body)
    except NonConstantInputError:
        # the body needs a value at import that it computes from the iteration number (a Slice
        # at the iteration): unrolled, when the trip count and condition are known (a trip count
        # from a model input specialises the model on its value)
        if max_trip is None:
            raise
        ctx.require_const(max_trip, "the trip count of a Loop whose body needs the iteration number at import")
        return _unroll(ctx, node, body, max_trip, cond, inits, n, k)
    cond_out = outs[0]
    if cond_out.type != b1:
        cb = Builder(block)
        cond_out = make_op("graph.reshape", [cond_out], {"shape": ()}, None, (), ctx.builder.loc)
        cb.insert(cond_out)
        cond_out = cond_out.result
    _yield(block, [cond_out, *outs[1:]])
    length = fresh_symbol(ctx)
    if m_const is not None and cond is None:
        length = int(np.asarray(m_const).reshape(-1)[0])
    carried = [a.type for a in block.args[2:]]
    scans = [TensorType((length, *o.type.shape), o.type.dtype) for o in outs[1 + n:]]
    op = ctx.builder.insert(make_op("graph.loop", [m, c, *inits], {"num_scan": k, "has_cond": cond is not None},
                                    carried + scans, [Region([block])], ctx.builder.loc))
    return list(op.results)


def _unroll(ctx, node, body, max_trip, cond, inits, n, k):
    """A loop carrying sequences/optionals: its body inlined once per iteration."""
    trips = None if max_trip is None else int(ctx.const_scalar(max_trip, "the trip count of a Loop that "
                                                                          "carries a sequence"))
    going = True if cond is None else _known_bool(ctx, cond)
    if going is None:
        ctx.require_const(cond, "the condition of a Loop that carries a sequence")
    carried = list(inits)
    scans: list[list] = [[] for _ in range(k)]
    it = 0
    c = cond if cond is not None else ctx.const(np.asarray(True))
    while going and (trips is None or it < trips):
        if it >= MAX_UNROLL:
            raise node.unsupported(f"a Loop that carries a sequence runs more than {MAX_UNROLL} iterations")
        outs = import_subgraph(ctx, body, [ctx.const(np.asarray(it, np.int64)), c, *carried])
        if cond is not None:
            c = outs[0]
            going = _known_bool(ctx, c)
            if going is None:
                ctx.require_const(c, "the condition of a Loop that carries a sequence")
        carried = list(outs[1:1 + n])
        for j in range(k):
            scans[j].append(outs[1 + n + j])
        it += 1
    results = list(carried)
    for j in range(k):
        if not scans[j]:
            raise node.unsupported("a scan output of a loop that runs no iteration")
        results.append(ctx.op("concat", [ctx.op("unsqueeze", s, axes=(0,)) for s in scans[j]], axis=0)
                       if len(scans[j]) > 1 else ctx.op("unsqueeze", scans[j][0], axes=(0,)))
    return results


# ---- Scan ------------------------------------------------------------------------------------
def _scan_op(ctx, node, body, states, xs, in_axes, in_dirs, out_axes, out_dirs):
    n, m = len(states), len(xs)
    k = len(body.output) - n
    if len(body.input) != n + m or k < 0:
        raise node.unsupported(f"the body takes {len(body.input)} inputs and gives {len(body.output)} outputs "
                               f"for {n} states and {m} scan inputs")
    axes = []
    for x, ax in zip(xs, in_axes):
        if not -ctx.rank(x) <= ax < ctx.rank(x):
            raise node.unsupported(f"scan input axis {ax} is out of range for {x.type}")
        axes.append(ax % ctx.rank(x))
    lengths = {ctx.shape(x)[ax] for x, ax in zip(xs, axes)}
    if len(lengths) != 1:
        raise node.unsupported(f"the scan inputs have different lengths {sorted(map(str, lengths))}")
    (length,) = lengths
    slices = [TensorType(x.type.shape[:ax] + x.type.shape[ax + 1:], x.type.dtype) for x, ax in zip(xs, axes)]

    def import_body(types):
        block = Block([*types, *slices])
        outs = import_subgraph(ctx, body, block.args, block)
        if any(not isinstance(o, Value) for o in outs):
            raise node.unsupported("the body yields sequences or optionals")
        return (block, outs), [o.type for o in outs[:n]]

    block, outs = _body_types(ctx, node, body, [s.type for s in states], import_body)
    _yield(block, outs)
    scans = []
    for o, ax in zip(outs[n:], out_axes):
        r = o.type.rank + 1
        if not -r <= ax < r:
            raise node.unsupported(f"scan output axis {ax} is out of range for rank {r}")
        shape = list(o.type.shape)
        shape.insert(ax % r, length)
        scans.append(TensorType(tuple(shape), o.type.dtype))
    attrs = {"num_scan_inputs": m, "scan_input_axes": tuple(axes), "scan_input_directions": tuple(in_dirs),
             "scan_output_axes": tuple(a % (o.type.rank + 1) for a, o in zip(out_axes, outs[n:])),
             "scan_output_directions": tuple(out_dirs)}
    op = ctx.builder.insert(make_op("graph.scan", [*states, *xs], attrs, [a.type for a in block.args[:n]] + scans,
                                    [Region([block])], ctx.builder.loc))
    return list(op.results)


@handles("Scan")
def scan(ctx: ImportContext, node: OnnxNode):
    body = _graph_attr(node, "body")
    m = node.attr("num_scan_inputs")
    if node.opset < 9:
        return _scan8(ctx, node, body, m)
    inputs = node.inputs
    if any(v is None for v in inputs):
        raise node.unsupported("an input is missing")
    n = len(inputs) - m
    k = len(body.output) - n
    states, xs = inputs[:n], inputs[n:]
    in_axes = node.attr("scan_input_axes", (0,) * m)
    in_dirs = node.attr("scan_input_directions", (0,) * m)
    out_axes = node.attr("scan_output_axes", (0,) * k)
    out_dirs = node.attr("scan_output_directions", (0,) * k)
    if len(in_axes) != m or len(in_dirs) != m or len(out_axes) != k or len(out_dirs) != k:
        raise node.unsupported("scan axes/directions need one entry per scan input/output")
    return _scan_op(ctx, node, body, states, xs, in_axes, in_dirs, out_axes, out_dirs)


def _scan8(ctx, node, body, m):
    """Scan-8: a leading batch axis on every state and scan input (scan axis 1); one
    ``graph.scan`` per batch element, stacked again."""
    if node.input(0) is not None:
        raise node.unsupported("Scan-8 with sequence_lens is not supported")
    inputs = node.inputs[1:]
    n = len(inputs) - m
    k = len(body.output) - n
    dirs = node.attr("directions", (0,) * m)
    batch = {ctx.shape(v)[0] for v in inputs}
    if len(batch) != 1 or not isinstance(next(iter(batch)), int):
        raise node.unsupported("Scan-8 needs one static batch size")
    (nb,) = batch
    per: list[list[Value]] = []
    for b in range(nb):
        picked = [ctx.op("squeeze", ctx.op("slice", v, starts=(b,), ends=(b + 1,), axes=(0,), steps=(1,)), axes=(0,))
                  for v in inputs]
        per.append(_scan_op(ctx, node, body, picked[:n], picked[n:], (0,) * m, dirs, (0,) * k, (0,) * k))
    results = []
    for j in range(n + k):
        parts = [ctx.op("unsqueeze", p[j], axes=(0,)) for p in per]
        results.append(parts[0] if nb == 1 else ctx.op("concat", parts, axis=0))
    return results


# ---- SequenceMap -----------------------------------------------------------------------------
@handles("SequenceMap")
def sequence_map(ctx: ImportContext, node: OnnxNode):
    body = _graph_attr(node, "body")
    first = node.required(0, "input_sequence")
    if not isinstance(first, SeqValue):
        raise node.unsupported("the first input must be a sequence")
    length = len(first.items)
    for i, v in enumerate(node.inputs):
        if isinstance(v, SeqValue) and len(v.items) != length:
            raise node.unsupported(f"input #{i} has {len(v.items)} elements, the first {length}")
    outs: list[list] = [[] for _ in body.output]
    for j in range(length):
        args = [v.items[j] if isinstance(v, SeqValue) else v for v in node.inputs]
        for o, r in zip(outs, import_subgraph(ctx, body, args)):
            o.append(r)
    return [SeqValue(o, to_dtype(vi.type.sequence_type.elem_type.tensor_type.elem_type)
                     if not o and vi.type.HasField("sequence_type") else None)
            for o, vi in zip(outs, body.output)]
