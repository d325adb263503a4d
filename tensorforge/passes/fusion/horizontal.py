"""Horizontal fusion: kernels that share an input run as one.

Two levels:

- **graph level, before lowering** (``concat_sibling_contractions``): GEMMs, matmuls or convs
  that read the same activation with constant weights of compatible shapes become one
  contraction over the weights concatenated at compile time, followed by one ``graph.slice``
  per original result: the Q, K and V projections of attention become one GEMM with three
  times the columns.  The slices are data movement, so each then folds into the loads of its
  consumer (the attention's batch matmuls) instead of being copied.  A group is left alone
  when a sibling's result feeds an epilogue (an activation, a normalisation): after the
  concatenation that epilogue could no longer fuse into its own GEMM/conv.
- **kernel level** (``fuse_siblings``): non-contraction kernels reading the same tensor, with
  the same number of output elements, merge into one multi-output kernel (one call; the
  shared input is still in cache for the second nest when it fits).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ...ir.builder import Builder
from ...ir.builtin import FuncOp
from ...ir.core import Operation, Value
from ...ir.opdef import FusionKind
from ...ir.symbolic import dim_prod
from .engine import Fusion
from .kinds import KERNEL, kernel_kind
from .log import FusionLog
from .rules import sibling_rule

_CONTRACTIONS = ("graph.gemm", "graph.matmul", "graph.conv")
DATA_MOVEMENT_OPS = frozenset(f"graph.{n}" for n in ("reshape", "transpose", "squeeze", "unsqueeze", "flatten",
                                                     "slice", "split", "expand", "pad", "tile", "concat"))


def _const(v: Value) -> np.ndarray | None:
    op = v.op
    if op is None or op.name != "graph.constant":
        return None
    return op.attributes["value"].array


def _layout(op: Operation) -> tuple[int, int, int] | None:
    """(weight concat axis, result slice axis, weight rank) of a contraction whose weights are a
    constant and whose result is split along its output features; None when it cannot join."""
    w = _const(op.operands[1]) if len(op.operands) > 1 else None
    if w is None:
        return None
    rank = len(op.results[0].type.shape)
    if op.name == "graph.gemm":
        return (0 if op.attributes.get("trans_b") else 1), 1, 2
    if op.name == "graph.matmul":
        if w.ndim != 2 or rank < 2:
            return None
        return 1, rank - 1, 2
    if op.name == "graph.conv":
        if op.attributes.get("groups", 1) != 1:
            return None
        return 0, 1, w.ndim
    return None


def _signature(op: Operation) -> tuple | None:
    lay = _layout(op)
    if lay is None:
        return None
    w = _const(op.operands[1])
    axis = lay[0]
    wshape = tuple(d for i, d in enumerate(w.shape) if i != axis)
    bias = None
    if len(op.operands) > 2:
        b = _const(op.operands[2])
        if b is None or b.ndim != 1 or b.shape[0] != w.shape[axis]:
            return None
        bias = str(b.dtype)
    attrs = tuple(sorted((k, repr(v)) for k, v in op.attributes.items() if not k.startswith(("_", "tf."))))
    return (op.name, attrs, wshape, str(w.dtype), bias, op.results[0].type.dtype)


def _epilogue_users(op: Operation) -> list[str]:
    """Users of ``op``'s result that would fuse into it as an epilogue: graph ops that compute
    (not data movement, not another contraction or reduction)."""
    found = []
    for u, _ in op.results[0].uses:
        d = u.opdef
        if (d is not None and u.dialect == "graph" and u.name not in DATA_MOVEMENT_OPS
                and d.fusion <= FusionKind.INJECTIVE):
            found.append(u.short_name)
    return found


def concat_sibling_contractions(func: FuncOp, log: FusionLog) -> int:
    """Concatenates the weights of sibling contractions on a shared input (graph level);
    returns how many groups were rewritten."""
    groups: dict[tuple, list[Operation]] = {}
    where: dict[int, int] = {}
    for i, op in enumerate(func.body):
        where[id(op)] = i
        if op.name in _CONTRACTIONS and op.operands:
            sig = _signature(op)
            if sig is not None:
                groups.setdefault((id(op.operands[0]),) + sig, []).append(op)
    done = 0
    for members in groups.values():
        if len(members) < 2:
            continue
        names = tuple(f"{m.short_name}@{where[id(m)]}" for m in members)     # @ position in the function
        blocked = {m.short_name: _epilogue_users(m) for m in members if _epilogue_users(m)}
        if blocked:
            users = sorted({u for us in blocked.values() for u in us})
            log.record("concat", names, False, f"results feed epilogues ({', '.join(users)}) that fuse into each "
                                               f"{members[0].short_name} separately")
            continue
        _concat(func, members)
        log.record("concat", names, True, f"{len(members)} {members[0].short_name}s on one input: weights "
                                          f"concatenated at compile time, results sliced")
        done += 1
    return done


def _concat(func: FuncOp, members: Sequence[Operation]) -> Operation:
    first = members[0]                   # program order
    axis, out_axis, _ = _layout(first)
    b = Builder.before(first)
    g = b.graph
    ws = [_const(m.operands[1]) for m in members]
    operands = [first.operands[0], g.constant(np.concatenate(ws, axis=axis))]
    if len(first.operands) > 2:
        operands.append(g.constant(np.concatenate([_const(m.operands[2]) for m in members])))
    attrs = {k: v for k, v in first.attributes.items()}
    big = b.create(first.name, operands, attrs)
    start = 0
    for m, w in zip(members, ws):
        n = w.shape[axis]
        piece = b.create("graph.slice", [big.results[0]], {"starts": (start,), "ends": (start + n,),
                                                           "axes": (out_axis,), "steps": (1,)})
        m.results[0].replace_all_uses_with(piece.results[0])
        start += n
    old_consts = {id(v.op): v.op for m in members for v in m.operands[1:]}
    for m in members:
        m.erase()
    for c in old_consts.values():
        if not c.results[0].uses:
            c.erase()
    return big


# ---- kernel level ----------------------------------------------------------------------------------
def _sizes(k: Operation) -> set:
    """Element counts of a kernel's results (its iteration spaces): ints, or canonical
    expressions (``"64*b*s"``) that are equal exactly when the counts provably are."""
    return {dim_prod(r.type.shape) for r in k.results}


def fuse_siblings(fz: Fusion, strategy: str, accept: Callable[[Operation, Operation], str | None]) -> int:
    """Merges kernels that read a common non-constant tensor, pairwise in program order, when
    ``accept(a, b)`` gives no reason against; returns how many merges were made."""
    total = 0
    changed = True
    while changed:
        changed = False
        for v in _shared_values(fz.func):
            users = sorted({id(u): u for u, _ in v.uses if u.name == KERNEL}.values(), key=fz.graph.position)
            if len(users) < 2:
                continue
            base = users[0]
            for other in users[1:]:
                if base.parent is None or other.parent is None:
                    break

                def rule(ms, a=base, b=other):
                    return sibling_rule(a, b) or accept(a, b)

                merged = fz.try_merge([base, other], strategy, rule)
                if merged is not None:
                    base, changed = merged, True
                    total += 1
            if changed:
                break
    return total


def _shared_values(func: FuncOp) -> list[Value]:
    vals = [a for a in func.args]
    for op in func.body:
        if op.name == KERNEL:
            vals.extend(op.results)
    return [v for v in vals if sum(1 for u, _ in v.uses if u.name == KERNEL) >= 2]


def horizontal_accept(a: Operation, b: Operation) -> str | None:
    """Siblings run as one kernel when they walk iteration spaces of the same size."""
    if kernel_kind(a) == FusionKind.REDUCTION or kernel_kind(b) == FusionKind.REDUCTION:
        return "reductions on a shared input are the reuse strategy's"
    sizes = _sizes(a) | _sizes(b)
    if len(sizes) > 1:
        return f"different iteration spaces ({' vs '.join(sorted(str(n) for n in sizes))} elements)"
    return None


def fuse_horizontal(fz: Fusion) -> int:
    return fuse_siblings(fz, "horizontal", horizontal_accept)


__all__ = ["concat_sibling_contractions", "fuse_horizontal", "fuse_siblings", "horizontal_accept"]
