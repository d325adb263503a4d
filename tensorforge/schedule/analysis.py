"""Queries and small rewrites on loop-level IR that the schedule primitives share.

The loop level keeps a few invariants that make these queries simple: every loop is normalised
(``lb = 0``, ``step = 1``), index arithmetic is pure ``scalar`` ops on ``index`` values, and the
guards that splits introduce (``loop.if``) sit around the leaf statements of a nest, never
between two loops of a perfect nest (``sink_guards`` restores that after a rewrite).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

from ..ir.builder import Builder
from ..ir.core import Block, Operation, Value
from ..ir.opdef import PURE
from ..ir.types import IndexType
from ..dialects.scalar import INDEX
from ..ir.symbolic import SYMBOLS_ATTR, SymbolTable, symbol_table_of

FOR, IF, LOAD, STORE, ALLOC = "loop.for", "loop.if", "loop.load", "loop.store", "loop.alloc"


# ---- structure --------------------------------------------------------------------------------
def body(op: Operation) -> Block:
    """The one block of a loop, guard or function."""
    return op.regions[0].blocks[0]


def iv(loop: Operation) -> Value:
    return body(loop).args[0]


def extent(loop: Operation) -> int:
    """The trip count as a number, for heuristics and cost models: a symbolic loop counts as its
    hint (``SymbolTable.hint`` with the table of the enclosing loop.func).  Never use it to decide
    legality of a symbolic loop: ``dim_extent`` is the true, possibly symbolic, count."""
    a = loop.attributes
    if isinstance(a["ub"], int):
        return max(0, -(-(a["ub"] - a["lb"]) // a["step"]))
    return symbol_table(loop).hint(dim_extent(loop))


def dim_extent(loop: Operation):
    """The true trip count: an int, or a symbolic dim (canonical text)."""
    from ..dialects.loop.ops import loop_extent
    return loop_extent(loop)


def is_symbolic_loop(loop: Operation) -> bool:
    return isinstance(loop.attributes["ub"], str)


_TABLES: dict[str, SymbolTable] = {}


def symbol_table(op: Operation) -> SymbolTable:
    """The symbols' ranges and hints of the loop.func holding ``op`` (its ``tf.symbols``
    attribute, copied there by lowering); an empty table (default hints) when it has none."""
    cur = op
    while cur is not None and cur.name != "loop.func":
        cur = cur.parent_op
    text = cur.attributes.get(SYMBOLS_ATTR) if cur is not None else None
    if not text:
        return _EMPTY_TABLE
    table = _TABLES.get(text)
    if table is None:
        table = _TABLES[text] = symbol_table_of(cur)
    return table


_EMPTY_TABLE = SymbolTable()


def dim_value(b: Builder, d) -> Value:
    """A dim as an index value at ``b``: a constant, or ``scalar.dim`` read at run time."""
    if isinstance(d, int):
        return const_index(b, d)
    return b.create("scalar.dim", [], {"dim": d}).results[0]


def tag(op: Operation) -> str | None:
    return op.attributes.get("tag")


def is_pure(op: Operation) -> bool:
    """Side-effect free and independent of memory: may be moved, cloned or dropped freely."""
    return op.has_trait(PURE)


def walk_ops(root: Operation, name: str | None = None) -> Iterator[Operation]:
    """Ops strictly inside ``root`` (pre-order), optionally only those called ``name``."""
    for op in root.walk():
        if op is not root and (name is None or op.name == name):
            yield op


def find_tagged(root: Operation, name: str, wanted: str) -> Operation | None:
    for op in walk_ops(root, name):
        if op.attributes.get("tag") == wanted:
            return op
    return None


def ancestors(op: Operation, stop: Operation | None = None) -> list[Operation]:
    """The ops enclosing ``op``, outermost first, strictly below ``stop`` (a function or loop)."""
    out = []
    cur = op.parent_op
    while cur is not None and cur is not stop and cur.name != "loop.func":
        out.append(cur)
        cur = cur.parent_op
    out.reverse()
    return out


def encloses(outer: Operation, op: Operation) -> bool:
    cur = op.parent_op
    while cur is not None:
        if cur is outer:
            return True
        cur = cur.parent_op
    return False


def enclosing_loops(op: Operation) -> list[Operation]:
    return [a for a in ancestors(op) if a.name == FOR]


def top_level(op: Operation) -> Operation:
    """The op of the function body that contains ``op`` (or ``op`` itself)."""
    cur = op
    while cur.parent_op is not None and cur.parent_op.name != "loop.func":
        cur = cur.parent_op
    return cur


def perfect_child(loop: Operation) -> Operation | None:
    """The loop directly nested in ``loop`` when its body holds that loop and only pure ops besides."""
    child = None
    for op in body(loop):
        if op.name == FOR and child is None:
            child = op
        elif not is_pure(op):
            return None
    return child


def perfect_chain(loop: Operation) -> list[Operation]:
    """``loop`` and the loops perfectly nested under it, outermost first."""
    chain = [loop]
    while (nxt := perfect_child(chain[-1])) is not None:
        chain.append(nxt)
    return chain


def first_blocker(loop: Operation) -> Operation | None:
    """Why ``loop``'s body is not a perfect nest: its first op that is neither pure nor the one loop."""
    loops_seen = 0
    for op in body(loop):
        if op.name == FOR:
            loops_seen += 1
            if loops_seen > 1:
                return op
        elif not is_pure(op):
            return op
    return None


# ---- values -----------------------------------------------------------------------------------
def iv_deps(v: Value, memo: dict[int, frozenset[int]] | None = None) -> frozenset[int]:
    """ids of the loop induction variables that ``v`` is computed from (through any ops)."""
    memo = {} if memo is None else memo
    key = id(v)
    if key in memo:
        return memo[key]
    if v.is_block_arg:
        owner = v.owner.parent_op
        res = frozenset({key}) if owner is not None and owner.name == FOR else frozenset()
    else:
        res = frozenset().union(*(iv_deps(o, memo) for o in v.op.operands)) if v.op.operands else frozenset()
    memo[key] = res
    return res


@dataclass(frozen=True)
class Affine:
    """``const + sum(coeff * iv)``; ``terms`` maps id(iv) to (iv, coeff)."""

    terms: tuple[tuple[int, int], ...]   # (id(iv), coeff) in the order the IR names them, no zero coefficients
    const: int
    ivs: tuple[Value, ...] = ()

    def coeff(self, iv_id: int) -> int:
        return dict(self.terms).get(iv_id, 0)

    def split(self, inner: set[int]) -> tuple["Affine", "Affine"]:
        """(part over ivs not in ``inner`` plus the constant, part over ``inner``)."""
        by_id = {id(v): v for v in self.ivs}
        o = [(k, c) for k, c in self.terms if k not in inner]
        i = [(k, c) for k, c in self.terms if k in inner]
        return (Affine(tuple(o), self.const, tuple(by_id[k] for k, _ in o)),
                Affine(tuple(i), 0, tuple(by_id[k] for k, _ in i)))

    def same_form(self, other: "Affine") -> bool:
        return dict(self.terms) == dict(other.terms) and self.const == other.const


def _aff(terms: dict[int, tuple[Value, int]], const: int) -> Affine:
    # not sorted by id: ids are addresses, and emitted code must not depend on them
    items = [(k, c) for k, (_, c) in terms.items() if c != 0]
    return Affine(tuple(items), const, tuple(terms[k][0] for k, _ in items))


def affine(v: Value) -> Affine | None:
    """``v`` as an affine form of loop ivs, or None when it is not one (floordiv, mod, loads...)."""
    if v.is_block_arg:
        owner = v.owner.parent_op
        if owner is None or owner.name != FOR:
            return None
        return _aff({id(v): (v, 1)}, 0)
    op = v.op
    if op.name == "scalar.const" and isinstance(v.type, IndexType):
        return _aff({}, int(op.attributes["value"]))
    if op.name not in ("scalar.add", "scalar.sub", "scalar.mul", "scalar.neg"):
        return None
    parts = [affine(o) for o in op.operands]
    if any(p is None for p in parts):
        return None
    if op.name == "scalar.neg":
        return _scale(parts[0], -1)
    a, b = parts
    if op.name == "scalar.mul":
        if not a.terms:
            return _scale(b, a.const)
        if not b.terms:
            return _scale(a, b.const)
        return None
    sign = 1 if op.name == "scalar.add" else -1
    terms = {k: (iv_, c) for (k, c), iv_ in zip(a.terms, a.ivs)}
    for (k, c), iv_ in zip(b.terms, b.ivs):
        terms[k] = (iv_, terms.get(k, (iv_, 0))[1] + sign * c)
    return _aff(terms, a.const + sign * b.const)


def _scale(a: Affine, s: int) -> Affine:
    return _aff({k: (iv_, c * s) for (k, c), iv_ in zip(a.terms, a.ivs)}, a.const * s)


def value_range(v: Value, ranges: dict[int, tuple[int, int]]) -> tuple[int, int] | None:
    """Interval of an index value given intervals of ivs (by id); None when unknown."""
    if v.is_block_arg:
        return ranges.get(id(v))
    op = v.op
    if op.name == "scalar.const" and isinstance(v.type, IndexType):
        c = int(op.attributes["value"])
        return c, c
    args = [value_range(o, ranges) for o in op.operands]
    if not args or any(a is None for a in args):
        return None
    n = op.name
    if n == "scalar.add":
        return args[0][0] + args[1][0], args[0][1] + args[1][1]
    if n == "scalar.sub":
        return args[0][0] - args[1][1], args[0][1] - args[1][0]
    if n == "scalar.neg":
        return -args[0][1], -args[0][0]
    if n in ("scalar.mul", "scalar.max", "scalar.min"):
        f = {"scalar.mul": lambda x, y: x * y, "scalar.max": max, "scalar.min": min}[n]
        c = [f(x, y) for x in args[0] for y in args[1]]
        return min(c), max(c)
    if n in ("scalar.floordiv", "scalar.mod") and args[1][0] == args[1][1] and args[1][0] > 0:
        d = args[1][0]
        if n == "scalar.floordiv":
            return args[0][0] // d, args[0][1] // d
        return (args[0][0] % d, args[0][1] % d) if args[0][1] - args[0][0] < d and \
            args[0][0] % d <= args[0][1] % d else (0, d - 1)
    return None


def loop_ranges(root: Operation) -> dict[int, tuple[int, int]]:
    """[0, extent-1] for every static loop iv in ``root`` (loops are normalised).  Symbolic loops
    are left out, so ``value_range`` of anything depending on them is unknown (None): ranges
    decide legality, and a hint is no bound."""
    return {id(iv(l)): (0, extent(l) - 1) for l in root.walk() if l.name == FOR and not is_symbolic_loop(l)}


# ---- buffers ----------------------------------------------------------------------------------
def accesses(root: Operation, buf: Value) -> tuple[list[Operation], list[Operation]]:
    """(loads, stores) of ``buf`` strictly inside ``root``."""
    loads, stores = [], []
    for op in walk_ops(root):
        if op.name == LOAD and op.operands[0] is buf:
            loads.append(op)
        elif op.name == STORE and op.operands[1] is buf:
            stores.append(op)
    return loads, stores


def indices(op: Operation) -> list[Value]:
    return list(op.operands[1:]) if op.name == LOAD else list(op.operands[2:])


def buffer_of(op: Operation) -> Value:
    return op.operands[0] if op.name == LOAD else op.operands[1]


def same_index(a: Value, b: Value) -> bool:
    """Whether two index values are equal at every point: the same affine form, or the same pure
    index op (``floordiv``/``mod`` of a flattened axis, which each read recomputes) of equal operands."""
    if a is b:
        return True
    fa, fb = affine(a), affine(b)
    if fa is not None and fb is not None:
        return fa.same_form(fb)
    return _same_index_op(a, b)


_INDEX_OPS = frozenset({"scalar.floordiv", "scalar.mod", "scalar.add", "scalar.sub", "scalar.mul", "scalar.min",
                        "scalar.max", "scalar.neg"})


def _same_index_op(a: Value, b: Value) -> bool:
    if a.is_block_arg or b.is_block_arg:
        return a is b
    oa, ob = a.op, b.op
    if oa.name != ob.name or len(oa.operands) != len(ob.operands):
        return False
    if oa.name == "scalar.const":
        return oa.attributes.get("value") == ob.attributes.get("value") and a.type == b.type
    if oa.name not in _INDEX_OPS:
        return False
    return all(same_index(x, y) for x, y in zip(oa.operands, ob.operands))


# ---- rewriting helpers --------------------------------------------------------------------------
def const_index(b: Builder, value: int) -> Value:
    return b.create("scalar.const", [], {"value": int(value), "type": INDEX}).results[0]


def emit_affine(b: Builder, form: Affine) -> Value:
    """Index ops computing ``form`` at ``b``."""
    acc: Value | None = None
    for (_, c), v in zip(form.terms, form.ivs):
        term = v if c == 1 else b.create("scalar.mul", [v, const_index(b, c)]).results[0]
        acc = term if acc is None else b.create("scalar.add", [acc, term]).results[0]
    if acc is None:
        return const_index(b, form.const)
    if form.const:
        acc = b.create("scalar.add", [acc, const_index(b, form.const)]).results[0]
    return acc


def materialize(v: Value, b: Builder, visible: Callable[[Value], bool]) -> Value:
    """``v`` recomputed at ``b`` by cloning its pure defining ops down to values ``visible`` there."""
    if visible(v):
        return v
    op = v.op
    if op is None or not is_pure(op):
        raise ValueError("value is not a pure function of visible values")
    new = op.clone({o: materialize(o, b, visible) for o in op.operands})
    b.insert(new)
    return new.results[v.index]


def erase_all(ops: Iterable[Operation]) -> None:
    """Erases ``ops`` and, transitively, every op that uses one of their results."""
    doomed: dict[int, Operation] = {}
    stack = list(ops)
    while stack:
        op = stack.pop()
        if id(op) in doomed:
            continue
        doomed[id(op)] = op
        for inner in op.walk():
            for r in inner.results:
                stack.extend(u for u, _ in r.uses)
    for op in doomed.values():
        op.drop_all_references()
    for op in doomed.values():
        if op.parent is not None and not any(id(a) in doomed for a in ancestors(op)):
            op.detach()


def dce(root: Operation) -> None:
    """Drops pure ops whose results are unused, innermost and last first."""
    changed = True
    while changed:
        changed = False
        for op in reversed(list(walk_ops(root))):
            if is_pure(op) and op.results and not any(r.uses for r in op.results) and op.parent is not None:
                op.erase()
                changed = True


def leading_pure(block: Block) -> list[Operation]:
    out = []
    for op in block:
        if not is_pure(op):
            break
        out.append(op)
    return out


def guard(block: Block, make_cond: Callable[[Builder], Value]) -> Operation | None:
    """Wraps the statements of ``block`` after its leading pure ops in ``loop.if``; None if there are none."""
    from ..ir.core import Region
    rest = block.ops[len(leading_pure(block)):]
    if not rest:
        return None
    b = Builder.before(rest[0])
    cond = make_cond(b)
    inner = Block()
    g = b.create(IF, [cond], {}, regions=[Region([inner])])
    for op in rest:
        op.detach()
        inner.append(op)
    return g


def sink_guards(root: Operation) -> None:
    """Pushes each guard whose body is one loop (plus pure ops) into that loop, repeatedly.

    ``if c { p; for x { B } }`` equals ``p; for x { if c { B } }`` because ``c`` does not depend on
    ``x`` and pure ops may run unguarded; this keeps guards at the leaves, so they never break a
    perfect nest.
    """
    changed = True
    while changed:
        changed = False
        for g in [op for op in walk_ops(root, IF)]:
            blk = body(g)
            pure = leading_pure(blk)
            rest = blk.ops[len(pure):]
            for op in pure:
                op.move_before(g)
            if len(rest) == 1 and rest[0].name == FOR:
                loop = rest[0]
                loop.move_before(g)
                g.detach()
                lb = body(loop)
                for op in lb.ops[len(leading_pure(lb)):]:
                    op.detach()
                    blk.append(op)
                lb.append(g)
                changed = True
                break
            if not rest:
                g.erase()
                changed = True
                break


def _const_int(v: Value) -> int | None:
    op = v.op
    if op is None or op.name != "scalar.const":
        return None
    val = op.attributes.get("value")
    return int(val) if isinstance(val, numbers.Integral) and not isinstance(val, bool) else None


def _joined(q: Value, r: Value, extent) -> Value | None:
    """``e`` when ``q, r`` are ``floordiv(e, d)`` and ``mod(e, d)`` with ``extent == d`` (a constant
    ``d > 0``); else None."""
    qo, ro = q.op, r.op
    if qo is None or ro is None or qo.name != "scalar.floordiv" or ro.name != "scalar.mod":
        return None
    e = qo.operands[0]
    if ro.operands[0] is not e and not same_index(ro.operands[0], e):
        return None
    d, d2 = _const_int(qo.operands[1]), _const_int(ro.operands[1])
    if d is None or d <= 0 or d != d2 or not isinstance(extent, int) or extent != d:
        return None
    return e


def split_pair(idx: list[Value], shape, k: int) -> Value | None:
    """``e`` when ``idx[k], idx[k+1]`` are ``floordiv(e, d)`` and ``mod(e, d)`` and ``shape[k+1] == d``
    (a constant ``d > 0``); else None.  Such a pair addresses the two dims as one flat index ``e``
    (``floor(e/d)*d + mod(e, d) == e``): the C emitter writes ``e`` itself, and the access analysis
    sees ``e``'s affine form, so a fused reshape or a fused pair of loops stays contiguous."""
    if k + 1 >= len(idx):
        return None
    return _joined(idx[k], idx[k + 1], shape[k + 1])


def flat_runs(idx: list[Value], shape) -> list[tuple[Value, int, int]]:
    """``idx`` over ``shape`` as runs of dims each addressed by one index: (index, first dim, dims).
    ``split_pair``'s pairs join, and joins nest: the ``mod`` side may be a run already joined, of
    static extent ``d`` (``e // 196, (e % 196) // 14, e % 14`` over ``[C, 14, 14]`` is one run
    addressed by ``e``, as a flat loop over fused channel, row and column loops reads)."""
    runs: list[tuple[Value, int, int]] = []
    for k, v in enumerate(idx):
        runs.append((v, k, 1))
        while len(runs) >= 2:
            (q, k0, n0), (r, k1, n1) = runs[-2], runs[-1]
            dims = shape[k1:k1 + n1]
            e = _joined(q, r, math.prod(dims)) if all(isinstance(d, int) for d in dims) else None
            if e is None:
                break
            runs[-2:] = [(e, k0, n0 + n1)]
    return runs


def flat_affine(idx: Sequence[Value], shape) -> Affine | None:
    """The row-major element offset of ``idx`` in a buffer of static ``shape`` as one affine form,
    or None where a run of dims is not affine (``flat_runs``: a ``floordiv``/``mod`` pair counts
    as the index it splits)."""
    terms: dict[int, tuple[Value, int]] = {}
    const = 0
    for v, k, n in flat_runs(list(idx), shape):
        form = affine(v)
        if form is None:
            return None
        stride = math.prod(int(d) for d in shape[k + n:])
        for (key, c), x in zip(form.terms, form.ivs):
            terms[key] = (x, terms.get(key, (x, 0))[1] + c * stride)
        const += form.const * stride
    return _aff(terms, const)
