"""Operator reordering: transposes sink below elementwise ops and reductions (``simplify-extra``).

A model written channels-last (JAX and TensorFlow CNNs: NHWC convolutions) imports as
``transpose -> conv (NCHW) -> transpose`` with the activation, bias and residual adds between the
transposes of neighbouring convolutions.  Moving each transpose below the elementwise ops that
read it (constant operands are transposed the other way, which folding does once) lets it meet
the next one, where ``transpose-transpose`` cancels the pair, and leaves the activation right
after its convolution, where it fuses as an epilogue.  A reduction of a transposed tensor reduces
the untransposed one over the mapped axes instead (a global pool over NHWC's H and W reads NCHW).

Only single-use transposes move (a transpose other ops also read would be computed twice), and
only when every non-scalar operand is either such a transpose with the same permutation or a
constant: a transpose never moves past a value it would have to transpose at run time.
"""
from __future__ import annotations

import numpy as np

from ...ir.attributes import Dense
from ...ir.builder import make_op
from ...ir.core import Operation, Value
from ...ir.opdef import ELEMENTWISE
from ...ir.rewrite import constant_value, pattern

_REDUCTIONS = ("graph.reduce_sum", "graph.reduce_mean", "graph.reduce_max", "graph.reduce_min", "graph.reduce_prod")


def _sinkable_transpose(v: Value, op: Operation) -> tuple[int, ...] | None:
    """The permutation of ``v = transpose(x)`` when ``op`` is its only reader."""
    t = v.op
    if t is None or t.name != "graph.transpose" or any(u is not op for u in v.users):
        return None
    return tuple(t.attributes["perm"])


@pattern(None, name="sink-transpose-elementwise")
def sink_transpose_elementwise(op: Operation, rewriter) -> bool:
    """``f(transpose(a, p), transpose(b, p) | constant | scalar)`` -> ``transpose(f(a, b', ...), p)``."""
    d = op.opdef
    if d is None or ELEMENTWISE not in d.traits or op.regions or len(op.results) != 1 or not op.operands:
        return False
    out = op.results[0].type
    rank = out.rank
    perms = {_sinkable_transpose(v, op) for v in op.operands if v.type.rank == rank and tuple(v.type.shape) ==
             tuple(out.shape)}
    perms.discard(None)
    if len(perms) != 1:
        return False
    (perm,) = perms
    inverse = tuple(int(i) for i in np.argsort(perm))
    operands: list[Value] = []
    for v in op.operands:
        if v.type.rank == 0:
            operands.append(v)
        elif _sinkable_transpose(v, op) == perm and tuple(v.type.shape) == tuple(out.shape):
            operands.append(v.op.operands[0])
        else:
            c = constant_value(v)
            if c is None or c.ndim > rank:
                return False
            aligned = np.asarray(c).reshape((1,) * (rank - c.ndim) + c.shape)
            operands.append(rewriter.constant(Dense(np.ascontiguousarray(np.transpose(aligned, inverse)),
                                                    v.type.dtype)))
    new = rewriter.insert(make_op(op.name, operands, dict(op.attributes)))
    back = rewriter.insert(make_op("graph.transpose", new.results, {"perm": perm}))
    if back.results[0].type != out:
        return False
    rewriter.replace_op(op, back.results)
    return True


@pattern(_REDUCTIONS, name="sink-transpose-reduction")
def sink_transpose_reduction(op: Operation, rewriter) -> bool:
    """``reduce(transpose(x, p), axes)`` -> ``reduce(x, p[axes])``, transposed after only when the
    kept axes come out in another order."""
    perm = _sinkable_transpose(op.operands[0], op)
    if perm is None:
        return False
    x = op.operands[0].op.operands[0]
    rank = x.type.rank
    axes = tuple(a % rank for a in op.attributes.get("axes", ())) or tuple(range(rank))
    keep = bool(op.attributes.get("keepdims", False))
    mapped = tuple(sorted(perm[a] for a in axes))
    attrs = dict(op.attributes)
    attrs["axes"] = mapped
    new = rewriter.insert(make_op(op.name, [x], attrs))
    result = new.results[0]
    if keep:
        after = perm
    else:
        kept = [perm[j] for j in range(rank) if j not in axes]
        order = sorted(kept)
        after = tuple(order.index(k) for k in kept)
    if after != tuple(range(len(after))):
        result = rewriter.insert(make_op("graph.transpose", [result], {"perm": after})).results[0]
    if result.type != op.results[0].type:
        return False
    rewriter.replace_op(op, [result])
    return True


TRANSPOSE_SINKING = (sink_transpose_elementwise, sink_transpose_reduction)
