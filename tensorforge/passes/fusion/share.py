"""Reuse inside a kernel: a reduced term that another compute evaluates again is computed once.

A softmax kernel sums ``exp(x - max)`` over a row and then evaluates ``exp(x - max) / sum`` for
every element of the same row: every exponential is computed twice.  ``share_reduction_terms``
finds such a term (the value a reduction compute accumulates, when it is expensive) again in a
later compute of the kernel, by matching expression trees with the reduction's axes as
variables, and rewrites

    sum[r]  = add over j of  T(r, j)              E[r, j] = T(r, j)
    out[i]  = ... T(i...) ...              ->     sum[r]  = add over j of E[r, j]
                                                  out[i]  = ... E[i...] ...

so one pass over the row yields the max, the exponentials and their sum, and the output reuses
the exponentials.  ``E`` is a row-sized buffer that the default schedule places inside the row
loop shared by its two readers; the cost model only shares a term whose row fits in cache and
whose recomputation (``MIN_SHARED_COST`` simple-operation units and up: a transcendental) costs
more than storing and loading it.
"""
from __future__ import annotations

from ...dialects.structured.ops import ComputeView, KernelView
from ...ir.attributes import attr_key
from ...ir.builder import Builder, make_op
from ...ir.core import Block, Operation, Region, Value
from ...ir.rules import same_dim
from ...ir.symbolic import hint_elements
from ...ir.types import ScalarType
from .inline import op_cost
from .kinds import COMPUTE, READ, anchors

MIN_SHARED_COST = 8.0


def _subtree(v: Value, stop: Block) -> list[Operation]:
    """Ops of ``stop`` (a compute body) that compute ``v``, each once."""
    seen: dict[int, Operation] = {}
    stack = [v]
    while stack:
        x = stack.pop()
        op = x.op
        if op is None or op.parent is not stop or id(op) in seen:
            continue
        seen[id(op)] = op
        stack.extend(op.operands)
    return list(seen.values())


def _same_const(a: Value, b: Value) -> bool:
    return (a.op is not None and b.op is not None and a.op.name == b.op.name == "scalar.const"
            and attr_key(a.op.attributes["value"]) == attr_key(b.op.attributes["value"]) and a.type == b.type)


def _match(p: Value, c: Value, axes: set[int], bind: dict[int, Value]) -> bool:
    """Whether ``c`` computes the same as ``p`` once the axes of ``p``'s compute are bound."""
    if id(p) in axes:
        got = bind.get(id(p))
        if got is None:
            bind[id(p)] = c
            return True
        return got is c or _same_const(got, c)
    if p is c:
        return True
    po, co = p.op, c.op
    if po is None or co is None or po.name != co.name or p.index != c.index:
        return False
    if len(po.operands) != len(co.operands) or po.regions or co.regions:
        return False
    if {k: attr_key(v) for k, v in po.attributes.items()} != {k: attr_key(v) for k, v in co.attributes.items()}:
        return False
    if po.name == READ and po.operands[0] is not co.operands[0]:
        return False
    start = 1 if po.name == READ else 0
    return all(_match(a, b, axes, bind) for a, b in zip(po.operands[start:], co.operands[start:]))


def _indices(r: ComputeView, c: ComputeView, bind: dict[int, Value]) -> list[Value] | None:
    """For each axis of ``r``: the value of ``c`` that indexes it (a ``c`` axis of the same
    extent, or a constant in range; an unbound axis must have extent 1), or None."""
    c_extent = {id(a): d for a, d in zip(c.axes, c.domain)}
    out: list[Value | None] = []
    for a, d in zip(r.axes, r.domain):
        v = bind.get(id(a))
        if v is None:
            if d != 1:
                return None
            out.append(None)
        elif id(v) in c_extent:
            if not same_dim(c_extent[id(v)], d):
                return None
            out.append(v)
        elif v.op is not None and v.op.name == "scalar.const" and isinstance(d, int) \
                and 0 <= int(v.op.attributes["value"]) < d:
            out.append(v)
        else:
            return None
    return out


def _find(r: ComputeView, term: Value, c: ComputeView) -> list[tuple[Value, list]]:
    axes = {id(a) for a in r.axes}
    found = []
    for op in c.body:
        if op.name != term.op.name:
            continue
        for res in op.results:
            bind: dict[int, Value] = {}
            if _match(term, res, axes, bind):
                idx = _indices(r, c, bind)
                if idx is not None:
                    found.append((res, idx))
    return found


def _dce(block: Block) -> None:
    for op in reversed(list(block)):
        if op.name != "structured.yield" and not any(r.uses for r in op.results):
            op.erase()


def share_reduction_terms(kernel: Operation, cache_bytes: int) -> list[str]:
    """Applies the rewrite above wherever it pays; returns a description of each sharing."""
    done: list[str] = []
    anchor_ids = {id(cv.op) for cv in anchors(kernel)}
    for r in KernelView(kernel).computes:
        if not r.reduction_axes or id(r.op) in anchor_ids:
            continue
        term = r.value
        if term.op is None or term.op.parent is not r.body:
            continue
        cost = sum(op_cost(op) for op in _subtree(term, r.body))
        row = hint_elements(r.domain[i] for i in r.reduction_axes) * ScalarType(r.op.attributes["dtype"]).dtype.itemsize
        if cost < MIN_SHARED_COST or row > cache_bytes:
            continue
        later = [ComputeView(op) for op in _after(r.op)]
        uses = [(c, hit) for c in later for hit in _find(r, term, c)]
        if not uses:
            continue
        e = _materialize(r)
        for c, (value, idx) in uses:
            b = Builder.before(value.op)
            zero = None
            operands = []
            for v in idx:
                if v is None:
                    zero = zero or b.create("scalar.const", [], {"value": 0, "type": r.axes[0].type}).results[0]
                    v = zero
                operands.append(v)
            read = b.create(READ, [e] + operands)
            value.replace_all_uses_with(read.results[0])
            _dce(c.body)
        done.append(f"{_name(term)} of a {r.combiner}-reduction reused by {len(uses)} later read(s)")
    return done


def _after(op: Operation) -> list[Operation]:
    out = []
    nxt = op.next
    while nxt is not None:
        if nxt.name == COMPUTE:
            out.append(nxt)
        nxt = nxt.next
    return out


def _name(v: Value) -> str:
    return v.op.name.split(".", 1)[-1] if v.op is not None else "value"


def _materialize(r: ComputeView) -> Value:
    """Splits reduction ``r`` into E (its term over the whole domain) and a reduction reading E;
    returns E's value."""
    op = r.op
    region = op.regions[0].clone({})
    term_dtype = r.value.type.dtype
    e = make_op(COMPUTE, [], {"domain": r.domain, "iterators": "p" * len(r.domain), "combiner": "none",
                              "dtype": term_dtype}, regions=[region])
    op.parent.insert_before(e, op)
    blk = Block([a.type for a in r.axes])
    bb = Builder.at_end(blk)
    v = bb.create(READ, [e.results[0]] + list(blk.args)).results[0]
    if v.type != ScalarType(op.attributes["dtype"]):
        v = bb.create("scalar.cast", [v], {"dtype": op.attributes["dtype"]}).results[0]
    bb.create("structured.yield", [v])
    new = make_op(COMPUTE, [], dict(op.attributes), regions=[Region([blk])])
    op.parent.insert_before(new, op)
    op.results[0].replace_all_uses_with(new.results[0])
    op.erase()
    return e.results[0]


__all__ = ["MIN_SHARED_COST", "share_reduction_terms"]
