"""Schedule primitives on loop-level kernels: the moves that default schedules and the auto-tuner make.

A ``Schedule`` wraps one ``loop.func`` (changed in place) and addresses its loops, computes and
buffers by the stable tags that lowering gives them (``"0.1"`` is axis 1 of compute 0, see
``structured_to_loop``); a primitive returns the tags of the loops it creates, so a schedule can be
written, recorded and replayed without holding op objects:

    s = Schedule(lower_kernel(matmul))
    s.cache_write("0", "0.0")          # accumulate row i of C in a local buffer
    s.reorder("0.2", "0.1")            # i-k-j: now legal, k no longer sits under a scalar accumulator
    jo, ji = s.split("0.1", 16)
    s.vectorize(ji); s.parallel("0.0")
    s.trace                            # what was applied, as JSON-able data (see trace.py)

Every primitive checks its legality before it changes anything and raises ``ScheduleError``
naming itself, the loop and the rule, so a failed primitive leaves the function as it was (the
auto-tuner relies on that when it samples illegal moves).  Derived tags are deterministic:
``split`` makes ``t.o``/``t.i``, ``fuse`` makes ``a+b``, ``cache_write`` clones the tile's loops as
``t.init``/``t.wb``, ``cache_read`` names its buffer and copy loops ``buf@loop`` and ``buf@loop.n``.
"""
from __future__ import annotations

import functools
import inspect
import numbers
from typing import Callable, Sequence

from ..errors import ScheduleError
from ..ir.builder import Builder, make_op
from ..ir.core import Block, Operation, Region, Value
from ..ir.types import BufferType
from ..ir.verifier import verify
from ..dialects.loop.ops import GPU_BLOCK_KINDS, GPU_KINDS, GPU_THREAD_KINDS
from ..dialects.scalar import INDEX
from ..ir.symbolic import dim_ceildiv, dim_divides, dim_mul, dims_equal
from .analysis import (ALLOC, FOR, IF, LOAD, STORE, Affine, accesses, affine, ancestors, body, const_index,
                       dce, dim_extent, dim_value, emit_affine, encloses, enclosing_loops, erase_all, extent, flat_affine,
                       find_tagged, is_symbolic_loop, symbol_table,
                       first_blocker, guard, indices, is_pure, iv, iv_deps, loop_ranges, materialize,
                       perfect_chain, perfect_child, same_index, sink_guards, tag, top_level, value_range,
                       walk_ops)
from .trace import Step, Trace

PRIMITIVES: dict[str, int | None] = {}   # name -> how many leading arguments are refs (None: all)
_COMBINERS = ("scalar.add", "scalar.mul", "scalar.max", "scalar.min")


def primitive(n_refs: int | None):
    """Records a successful top-level call in the trace (nested calls, e.g. tile's splits, are not)."""

    def deco(method: Callable) -> Callable:
        sig = inspect.signature(method)
        PRIMITIVES[method.__name__] = n_refs

        @functools.wraps(method)
        def wrapper(self: "Schedule", *args, **kwargs):
            bound = sig.bind(self, *args, **kwargs)
            bound.apply_defaults()
            values: list = []
            for name, p in sig.parameters.items():
                if name == "self":
                    continue
                v = bound.arguments.get(name, ())
                if p.kind is p.VAR_POSITIONAL:
                    values.extend(v)
                else:
                    values.append(v)
            k = len(values) if n_refs is None else n_refs
            refs = tuple(None if r is None else str(r) for r in values[:k])
            decisions = tuple(_decision(d) for d in values[k:])
            self._depth += 1
            try:
                result = method(self, *refs, *decisions)
            finally:
                self._depth -= 1
            if self._depth == 0:
                dce(self.fn)
                sink_guards(self.fn)
                if self.check:
                    verify(self.fn)
                self.trace.append(Step(method.__name__, refs, decisions))
            return result

        return wrapper

    return deco


def _fail(prim: str, what: str, rule: str) -> ScheduleError:
    return ScheduleError(f"{prim}: {what}: {rule}")


def _new_loop(extent_, tag_: str, reduction: bool = False) -> Operation:
    """A normalised loop over ``extent_`` (an int, or a symbolic dim read at run time)."""
    ub = extent_ if isinstance(extent_, str) else int(extent_)
    return make_op(FOR, [], {"lb": 0, "ub": ub, "step": 1, "kind": "serial", "reduction": reduction,
                             "tag": tag_}, regions=[Region([Block([INDEX])])])


def _redirect(uses: list[tuple[Operation, int]], old: Value, new: Value) -> None:
    """Points exactly ``uses`` (taken earlier from ``old``) at ``new``."""
    moved = {(id(op), i) for op, i in uses}
    old.uses = [(op, i) for op, i in old.uses if (id(op), i) not in moved]
    for op, i in uses:
        op.operands[i] = new
        new.uses.append((op, i))


def _lockstep(a: Operation, b: Operation) -> dict[int, Operation]:
    """id(op in ``a``) -> the op at the same place in its clone ``b``."""
    return {id(x): y for x, y in zip(a.walk(), b.walk())}


class Schedule:
    """Primitives over one loop.func; ``trace`` records what was applied."""

    def __init__(self, fn: Operation, check: bool = True):
        if fn.name != "loop.func":
            raise ScheduleError(f"a schedule works on a loop.func, got '{fn.name}'")
        self.fn = fn
        self.check = check          # verify the function after every primitive
        self.trace = Trace()
        self._depth = 0

    # ---- lookups ------------------------------------------------------------------------------
    @property
    def _body(self) -> Block:
        return body(self.fn)

    def loop_tags(self) -> list[str]:
        """Tags of all loops, outermost and first first."""
        return [tag(op) for op in walk_ops(self.fn, FOR)]

    def loop(self, t: str) -> Operation:
        """The loop tagged ``t``."""
        return self._loop("loop", t)

    def _loop(self, prim: str, t: str) -> Operation:
        op = find_tagged(self.fn, FOR, t)
        if op is None:
            raise _fail(prim, f"loop '{t}'", f"no such loop (loops: {', '.join(map(str, self.loop_tags()))})")
        return op

    def buffer(self, name: str) -> Value:
        """The buffer ``name``: ``inN``/``outN`` are function arguments, any other name a ``loop.alloc`` tag."""
        return self._buffer("buffer", name)

    def _buffer(self, prim: str, name: str) -> Value:
        n_in = self.fn.attributes["num_inputs"]
        args = self._body.args
        for prefix, base, count in (("in", 0, n_in), ("out", n_in, len(args) - n_in)):
            if name.startswith(prefix) and name[len(prefix):].isdigit() and int(name[len(prefix):]) < count:
                return args[base + int(name[len(prefix):])]
        op = find_tagged(self.fn, ALLOC, name)
        if op is None:
            raise _fail(prim, f"buffer '{name}'", "no such buffer (inN, outN or the tag of a loop.alloc)")
        return op.results[0]

    def fork(self) -> "Schedule":
        """An independent copy (function and trace) to try further primitives on."""
        s = Schedule(self.fn.clone(), self.check)
        s.trace = self.trace.copy()
        return s

    def _serial(self, prim: str, loop: Operation) -> None:
        k = loop.attributes["kind"]
        if k != "serial":
            raise _fail(prim, f"loop '{tag(loop)}'", f"is already '{k}'; restructure loops before annotating them")

    def _not_simd(self, prim: str, loop: Operation) -> None:
        if loop.attributes["kind"] == "vectorize":
            raise _fail(prim, f"loop '{tag(loop)}'", "is vectorized; code placed in it would make it not innermost")

    def _fresh(self, prim: str, *tags: str) -> None:
        for t in tags:
            if find_tagged(self.fn, FOR, t) is not None:
                raise _fail(prim, f"tag '{t}'", "is already used by another loop")

    # ---- dependence rules -----------------------------------------------------------------------
    def _check_writes(self, prim: str, scope: Operation, loops: Sequence[Operation]) -> None:
        """Each store under ``scope`` to a buffer from outside it must be indexed by every loop in
        ``loops`` that is not a reduction loop, and read back only at the indices it writes.

        Then distinct iterations of those loops touch distinct elements, except through associative
        reductions into one element: reordering, running in parallel or vectorizing keeps results.
        """
        memo: dict[int, frozenset[int]] = {}
        stored: dict[int, list[Operation]] = {}
        for st in walk_ops(scope, STORE):
            buf = st.operands[1]
            if buf.op is not None and encloses(scope, buf.op):
                continue
            stored.setdefault(id(buf), []).append(st)
            deps = frozenset().union(*(iv_deps(i, memo) for i in indices(st)))
            for l in loops:
                if not l.attributes.get("reduction") and id(iv(l)) not in deps:
                    raise _fail(prim, f"loop '{tag(l)}'", f"iterations write the same element of {_bufname(buf)} "
                                f"(its index does not depend on the loop), so their order matters")
        for ld in walk_ops(scope, LOAD):
            for st in stored.get(id(ld.operands[0]), ()):
                if not all(same_index(a, b) for a, b in zip(indices(ld), indices(st))):
                    raise _fail(prim, f"loop '{tag(loops[0])}'", f"reads {_bufname(ld.operands[0])} at other "
                                f"indices than it writes it (a loop-carried dependence)")

    def _chain_of(self, prim: str, loops: Sequence[Operation]) -> tuple[list[Operation], list[int]]:
        """The perfect chain holding ``loops`` and their positions in it."""
        outer = [l for l in loops if not any(encloses(o, l) for o in loops if o is not l)]
        if len(outer) != 1:
            raise _fail(prim, f"loops {_tags(loops)}", "are not nested in one another")
        chain = perfect_chain(outer[0])
        ids = [id(c) for c in chain]
        for l in loops:
            if id(l) not in ids:
                raise _fail(prim, f"loops {_tags(loops)}", f"are not a perfect nest: {_blocker_reason(chain[-1])}")
        return chain, [ids.index(id(l)) for l in loops]

    # ---- loop structure -----------------------------------------------------------------------
    @primitive(1)
    def split(self, loop: str, factor: int) -> tuple[str, str]:
        """``for i < n`` -> ``for o < ceil(n/f): for i' < f: i = o*f + i'``; guarded when f does not divide n."""
        prim = "split"
        L = self._loop(prim, loop)
        self._serial(prim, L)
        _positive(prim, L, factor)
        ot, it = f"{loop}.o", f"{loop}.i"
        self._fresh(prim, ot, it)
        n = dim_extent(L)
        outer = _new_loop(dim_ceildiv(n, factor), ot, L.attributes.get("reduction", False))
        L.parent.insert_before(outer, L)
        L.detach()
        body(outer).append(L)
        L.attributes["ub"] = factor
        L.attributes["tag"] = it
        old = iv(L)
        uses = list(old.uses)
        b = Builder(body(L), body(L).first)
        scaled = b.create("scalar.mul", [iv(outer), const_index(b, factor)]).results[0]
        full = b.create("scalar.add", [scaled, old]).results[0]
        _redirect(uses, old, full)
        _delinearize(full, factor, iv(outer), old)
        if not dim_divides(factor, n, symbol_table(self.fn)):      # a symbolic extent: unless proven
            guard(body(perfect_chain(L)[-1]),
                  lambda gb: gb.create("scalar.lt", [full, dim_value(gb, n)]).results[0])
        return ot, it

    @primitive(2)
    def tile(self, loop_a: str, loop_b: str, factor_a: int, factor_b: int) -> tuple[str, str, str, str]:
        """Splits two directly nested loops and orders the pieces ``a.o, b.o, a.i, b.i``."""
        prim = "tile"
        A, B = self._loop(prim, loop_a), self._loop(prim, loop_b)
        if perfect_child(A) is not B:
            raise _fail(prim, f"loops '{loop_a}', '{loop_b}'", f"'{loop_b}' must be nested directly in '{loop_a}' "
                        f"(a perfect nest): {_blocker_reason(A)}")
        for L, f in ((A, factor_a), (B, factor_b)):
            self._serial(prim, L)
            _positive(prim, L, f)
        self._fresh(prim, *(f"{t}.{s}" for t in (loop_a, loop_b) for s in "oi"))
        self._check_writes(prim, A, [A, B])
        ao, ai = self.split(loop_a, factor_a)
        bo, bi = self.split(loop_b, factor_b)
        self.reorder(ao, bo, ai, bi)
        return ao, bo, ai, bi

    @primitive(None)
    def reorder(self, *loops: str) -> None:
        """Permutes loops of one perfect nest: they take the positions they held, in the order given."""
        prim = "reorder"
        Ls = [self._loop(prim, t) for t in loops]
        if len({id(l) for l in Ls}) != len(Ls) or len(Ls) < 2:
            raise _fail(prim, f"loops {list(loops)}", "needs at least two distinct loops")
        for L in Ls:
            self._serial(prim, L)
        chain, pos = self._chain_of(prim, Ls)
        lo, hi = min(pos), max(pos)
        self._check_writes(prim, chain[lo], [chain[p] for p in range(lo, hi + 1)])
        slots = sorted(pos)
        new_at = {slots[k]: Ls[k] for k in range(len(Ls))}          # position -> loop identity
        # move the pure ops between the loops into the innermost position (their ivs get redefined)
        deepest = body(chain[hi])
        ins = Builder(deepest, deepest.first)
        for p in range(lo, hi):
            for op in [o for o in body(chain[p]) if o is not chain[p + 1]]:
                ins.insert(op.detach())
        attrs = {id(l): dict(l.attributes) for l in Ls}
        uses = {id(l): list(iv(l).uses) for l in Ls}
        for l in Ls:
            iv(l).uses = []
        for p, ident in new_at.items():
            holder = chain[p]
            holder.attributes = attrs[id(ident)]
            new_iv = iv(holder)
            for op, i in uses[id(ident)]:
                op.operands[i] = new_iv
                new_iv.uses.append((op, i))

    @primitive(2)
    def fuse(self, outer: str, inner: str) -> str:
        """Merges a loop and the loop directly inside it into one loop over both (``outer+inner``)."""
        prim = "fuse"
        O, I = self._loop(prim, outer), self._loop(prim, inner)
        if perfect_child(O) is not I:
            raise _fail(prim, f"loops '{outer}', '{inner}'", f"'{inner}' must be nested directly in '{outer}': "
                        f"{_blocker_reason(O)}")
        self._serial(prim, O)
        self._serial(prim, I)
        if bool(O.attributes.get("reduction")) != bool(I.attributes.get("reduction")):
            raise _fail(prim, f"loops '{outer}', '{inner}'", "cannot fuse a reduction loop with a parallel one")
        new_tag = f"{outer}+{inner}"
        self._fresh(prim, new_tag)
        eo, ei = dim_extent(O), dim_extent(I)
        o_uses, i_uses = list(iv(O).uses), list(iv(I).uses)
        b = Builder(body(O), body(O).first)
        q = b.create("scalar.floordiv", [iv(O), dim_value(b, ei)]).results[0]
        r = b.create("scalar.mod", [iv(O), dim_value(b, ei)]).results[0]
        _redirect(o_uses, iv(O), q)
        _redirect(i_uses, iv(I), r)
        for op in body(I).ops:
            op.move_before(I)
        I.erase()
        O.attributes["ub"] = dim_mul(eo, ei)
        O.attributes["tag"] = new_tag
        return new_tag

    # ---- annotations --------------------------------------------------------------------------
    @primitive(1)
    def parallel(self, loop: str) -> None:
        """Runs the loop's iterations on threads (OpenMP)."""
        prim = "parallel"
        L = self._loop(prim, loop)
        self._serial(prim, L)
        for other in ancestors(L) + list(walk_ops(L, FOR)):
            if other.name == FOR and other.attributes["kind"] == "parallel":
                raise _fail(prim, f"loop '{loop}'", f"loop '{tag(other)}' around or inside it is already "
                            f"parallel (nested parallelism is not supported)")
        if L.attributes.get("reduction"):
            self._check_extremum_reduction(prim, L)
        else:
            self._check_writes(prim, L, [L])
        L.attributes["kind"] = "parallel"

    def _check_extremum_reduction(self, prim: str, L: Operation) -> None:
        """A reduction loop runs on threads only as ``acc = max|min(acc, x)`` into rank-0
        accumulators declared outside it: the emitter gives each thread its own copy (OpenMP
        ``reduction``) and combines them.  max and min round nothing, so the threads' order changes
        no value (only which of +0.0 and -0.0 a tie keeps); a sum would round differently with the
        split, so sums stay on one thread."""
        self._check_scalar_reduction(prim, L)
        for st in walk_ops(L, STORE):
            buf, comb = st.operands[1], st.operands[0].op
            if comb.name not in ("scalar.max", "scalar.min"):
                raise _fail(prim, f"loop '{tag(L)}'", f"is a reduction loop that {comb.name.split('.')[1]}s "
                            f"into {_bufname(buf)}: only max/min reductions run on threads")
            if buf.op is not None and any(a is L for a in ancestors(buf.op)):
                raise _fail(prim, f"loop '{tag(L)}'", f"declares its accumulator {_bufname(buf)} inside")

    @primitive(1)
    def vectorize(self, loop: str) -> None:
        """Marks an innermost loop for SIMD; a reduction loop must update scalar accumulators only."""
        prim = "vectorize"
        L = self._loop(prim, loop)
        self._serial(prim, L)
        for op in walk_ops(L):
            if op.name in (FOR, ALLOC):
                raise _fail(prim, f"loop '{loop}'", f"is not innermost: it holds '{op.name}'"
                            + (f" '{tag(op)}'" if tag(op) else ""))
        if L.attributes.get("reduction"):
            self._check_scalar_reduction(prim, L)
        else:
            self._check_writes(prim, L, [L])
        L.attributes["kind"] = "vectorize"

    def _check_scalar_reduction(self, prim: str, L: Operation) -> None:
        """Only ``acc = acc (+|*|max|min) x`` into rank-0 accumulators: the emitter turns them into
        an OpenMP ``reduction`` clause; any other carried dependence would be broken by SIMD."""
        for st in walk_ops(L, STORE):
            buf = st.operands[1]
            if buf.type.rank != 0:
                can = "vectorized" if prim == "vectorize" else "reduced on threads"
                raise _fail(prim, f"loop '{tag(L)}'", f"is a reduction loop that updates {_bufname(buf)} "
                            f"(rank {buf.type.rank}); only a scalar accumulator can be {can}")
            comb = st.operands[0].op
            ok = comb is not None and comb.name in _COMBINERS and any(
                o.op is not None and o.op.name == LOAD and o.op.operands[0] is buf for o in comb.operands)
            if not ok:
                raise _fail(prim, f"loop '{tag(L)}'", f"updates accumulator {_bufname(buf)} with something "
                            f"other than add/mul/max/min of its old value")
            loads = [ld for ld in walk_ops(L, LOAD) if ld.operands[0] is buf]
            if len(loads) != 1:
                raise _fail(prim, f"loop '{tag(L)}'", f"reads accumulator {_bufname(buf)} more than once")

    @primitive(1)
    def unroll(self, loop: str, factor: int) -> None:
        """Asks the C compiler to unroll the loop ``factor`` times."""
        prim = "unroll"
        L = self._loop(prim, loop)
        self._serial(prim, L)
        _positive(prim, L, factor)
        L.attributes["kind"] = "unroll"
        L.attributes["unroll"] = factor

    @primitive(2)
    def prefetch(self, buffer: str, loop: str, chunk: int) -> tuple[str, str]:
        """Splits the innermost ``loop`` into chunks of ``chunk`` iterations and starts each chunk
        with a ``loop.prefetch`` of the elements of ``buffer`` that the same chunk reads one
        iteration later of the loop around ``loop``.  For row kernels (layer norm, softmax) over
        tensors larger than the caches: each row is read by a pass from memory and then by passes
        that compute, and without the hint the next row's stream waits for this row's arithmetic
        instead of overlapping it.  ``buffer`` must be read in ``loop`` at one address a step
        (contiguously) by an index affine in both loops; returns the tags of the chunk loop and of
        ``loop``'s remainder (which keeps its kind, e.g. ``vectorize``)."""
        prim = "prefetch"
        L = self._loop(prim, loop)
        buf = self._buffer(prim, buffer)
        _positive(prim, L, chunk)
        around = L.parent_op
        if around is None or around.name != FOR:
            raise _fail(prim, f"loop '{loop}'", "is not directly inside another loop (there is no next iteration)")
        if any(op.name in (FOR, ALLOC) for op in walk_ops(L)):
            raise _fail(prim, f"loop '{loop}'", "is not innermost")
        kind = L.attributes["kind"]
        if kind not in ("serial", "vectorize", "unroll"):
            raise _fail(prim, f"loop '{loop}'", f"runs as '{kind}'; only a loop on one thread is chunked")
        t = buf.type
        if not isinstance(t, BufferType) or not t.is_static or t.rank == 0:
            raise _fail(prim, _bufname(buf), "needs a buffer of static shape with at least one dimension")
        reads = [ld for ld in walk_ops(L, LOAD) if ld.operands[0] is buf]
        if not reads:
            raise _fail(prim, _bufname(buf), f"is not read in loop '{loop}'")
        flat = flat_affine(indices(reads[0]), t.shape)
        if flat is None or flat.coeff(id(iv(L))) != 1:
            raise _fail(prim, _bufname(buf), f"is not read contiguously in loop '{loop}' by an affine index")
        ahead = flat.coeff(id(iv(around)))
        if ahead == 0:
            raise _fail(prim, _bufname(buf), f"is read at the same place in every iteration of loop '{tag(around)}'")
        L.attributes["kind"] = "serial"
        try:
            ot, it = self.split(loop, chunk)
        finally:
            L.attributes["kind"] = kind
        outer, inner = self.loop(ot), self.loop(it)
        start, _ = flat_affine(indices(reads[0]), t.shape).split({id(iv(inner))})   # the chunk's first element
        b = Builder(body(outer), body(outer).first)
        b.create("loop.prefetch", [buf, emit_affine(b, start)], {"ahead": ahead, "span": chunk})
        return ot, it

    # ---- caching ------------------------------------------------------------------------------
    @primitive(2)
    def cache_write(self, compute: str, at_loop: str | None = None) -> str:
        """Accumulates the tile of ``compute`` under ``at_loop`` in a local buffer, written back after
        the reduction loops.  Each output element gets its own accumulator slot, so the reduction loops
        may then move outside the tile's loops (i-k-j matmul).  Returns the buffer's tag ``c.cw``."""
        prim = "cache_write"
        acc_op = find_tagged(self.fn, ALLOC, f"{compute}.acc")
        if acc_op is None:
            done = find_tagged(self.fn, ALLOC, f"{compute}.cw") is not None
            raise _fail(prim, f"compute '{compute}'", "is already cached" if done else
                        "has no reduction accumulator (only reductions are cached)")
        path = ancestors(acc_op)
        if at_loop is not None:
            AL = self._loop(prim, at_loop)
            self._not_simd(prim, AL)
            if AL not in path:
                raise _fail(prim, f"loop '{at_loop}'", f"does not enclose the accumulator of compute '{compute}'")
            chain = path[path.index(AL) + 1:]
        else:
            chain = path
        tile_loops = [op for op in chain if op.name == FOR]
        if not tile_loops:
            raise _fail(prim, "the function" if at_loop is None else f"loop '{at_loop}'",
                        "has no loop between it and the accumulator: nothing to cache")
        for a, nxt in zip(chain, chain[1:] + [acc_op]):
            if a.name == FOR and a.attributes.get("reduction"):
                raise _fail(prim, f"loop '{tag(a)}'", "is a reduction loop above the accumulator")
            if a is not chain[-1]:
                extra = [op for op in body(a) if op is not nxt and not is_pure(op)]
                if extra:
                    raise _fail(prim, f"loop '{tag(a)}'", f"holds '{extra[0].name}' besides the nest: the tile "
                                f"under '{at_loop}' is not a perfect nest")
        acc = acc_op.results[0]
        leaf = acc_op.parent
        direct = [u for u, _ in acc.uses if u.parent is leaf]
        init = [u for u in direct if u.name == STORE]
        final = [u for u in direct if u.name == LOAD]
        if len(init) != 1 or len(final) != 1 or not init[0].is_before_in_block(final[0]):
            raise _fail(prim, f"compute '{compute}'", "accumulator is not initialised once and read back once")
        s0, lf = init[0], final[0]
        after = []
        op = lf.next
        while op is not None:
            if not is_pure(op) and op.name != STORE:
                raise _fail(prim, f"compute '{compute}'", f"'{op.name}' follows the reduction in its nest")
            after.append(op)
            op = op.next
        # -- rewrite
        top = chain[0]
        cw_tag = f"{compute}.cw"
        cw = Builder.before(top).create(ALLOC, [], {"type": BufferType(tuple(dim_extent(l) for l in tile_loops),
                                                                       acc.type.dtype), "tag": cw_tag}).results[0]
        for suffix, keep_init in (("init", True), ("wb", False)):
            clone = top.clone()
            if keep_init:
                top.parent.insert_before(clone, top)
            else:
                top.parent.insert_after(clone, top)
            m = _lockstep(top, clone)
            ivs = [iv(m[id(l)]) for l in tile_loops]
            cleaf = m[id(s0)].parent
            if keep_init:
                keep = Builder.before(m[id(s0)]).create(STORE, [m[id(s0)].operands[0], cw] + ivs)
                erase_all([o for o in cleaf.ops if not is_pure(o) and o is not keep])
            else:
                ld = Builder.before(m[id(lf)]).create(LOAD, [cw] + ivs)
                m[id(lf)].results[0].replace_all_uses_with(ld.results[0])
                doomed = []
                for o in cleaf.ops:
                    if o is ld:
                        break
                    if not is_pure(o):
                        doomed.append(o)
                erase_all(doomed + [m[id(lf)]])
            for l in clone.walk():
                if l.name == FOR:
                    l.attributes["tag"] = f"{tag(l)}.{suffix}"
        ivs = [iv(l) for l in tile_loops]
        for u in [u for u, _ in acc.uses if u.parent is not leaf]:
            b = Builder.before(u)
            if u.name == LOAD:
                new = b.create(LOAD, [cw] + ivs)
                u.results[0].replace_all_uses_with(new.results[0])
            else:
                b.create(STORE, [u.operands[0], cw] + ivs)
            u.erase()
        erase_all([acc_op, s0, lf] + [o for o in after if not is_pure(o)])
        return cw_tag

    @primitive(2)
    def cache_read(self, buffer: str, at_loop: str | None = None, layout: tuple | None = None) -> str:
        """Copies the tile of ``buffer`` that ``at_loop``'s body reads into a local buffer first, and reads
        that instead.  ``layout`` permutes the tile's dimensions (a packed, e.g. transposed, copy).
        Returns the local buffer's tag ``buffer@at_loop``."""
        return self._cache_read("cache_read", buffer, at_loop, layout)

    def _cache_read(self, prim: str, buffer: str, at_loop: str | None, layout: tuple | None,
                    varying: Sequence[Operation] = ()) -> str:
        """``cache_read``; the tile also spans the loops in ``varying`` (around ``at_loop``: the
        thread loops whose threads share the tile)."""
        B = self._buffer(prim, buffer)
        scope = self.fn if at_loop is None else self._loop(prim, at_loop)
        if scope is not self.fn:
            self._not_simd(prim, scope)
        where = "the function" if at_loop is None else f"loop '{at_loop}'"
        loads, stores = accesses(scope, B)
        if stores:
            raise _fail(prim, f"buffer '{buffer}'", f"is written inside {where}; only read-only tiles are cached")
        if not loads:
            raise _fail(prim, f"buffer '{buffer}'", f"is not read inside {where}")
        if B.op is not None and scope is not self.fn and encloses(scope, B.op):
            raise _fail(prim, f"buffer '{buffer}'", f"is allocated inside {where}")
        pads = {ld.attributes.get("pad") for ld in loads}
        if len(pads) > 1:
            raise _fail(prim, f"buffer '{buffer}'", f"is read with different pad values {sorted(map(str, pads))}")
        pad = pads.pop()
        name = f"{buffer}@{at_loop or 'root'}"
        if find_tagged(self.fn, ALLOC, name) is not None:
            raise _fail(prim, f"buffer '{buffer}'", f"is already cached at {where}")
        inner = {id(iv(l)) for l in walk_ops(scope, FOR)} | {id(iv(l)) for l in varying}
        ranges = loop_ranges(self.fn)
        shape = B.type.shape
        bases: list[Affine | None] = []      # None: the whole dimension is copied
        exts: list[int] = []
        for d, n in enumerate(shape):
            forms = [affine(indices(ld)[d]) for ld in loads]
            base, ext = None, n
            if all(f is not None for f in forms):
                parts = [f.split(inner) for f in forms]
                if all(p[0].same_form(parts[0][0]) for p in parts):
                    spans = [_span(p[1], ranges) for p in parts]
                    if any(sp is None for sp in spans):      # a symbolic loop inside: whole dimension
                        spans = []
                    lo = min((sp[0] for sp in spans), default=0)
                    hi = max((sp[1] for sp in spans), default=-1)
                    if spans and hi - lo + 1 < (n if isinstance(n, int) else symbol_table(self.fn).hint(n)):
                        o = parts[0][0]
                        base, ext = Affine(o.terms, o.const + lo, o.ivs), hi - lo + 1
            bases.append(base)
            exts.append(ext)
        kept = [d for d in range(len(shape)) if not isinstance(exts[d], int) or exts[d] > 1
                or (bases[d] is None and pad is not None)]
        order = tuple(range(len(kept))) if layout is None else layout
        if not isinstance(order, tuple) or sorted(order) != list(range(len(kept))):
            raise _fail(prim, f"buffer '{buffer}'", f"layout {order} is not a permutation of the tile's "
                        f"{len(kept)} dimensions (extents {[exts[d] for d in kept]})")
        copy_pad = pad
        for d, base in enumerate(bases):
            if base is not None:
                r = _span(base, ranges)
                if r is None or not isinstance(shape[d], int) or r[0] < 0 or r[1] + exts[d] - 1 > shape[d] - 1:
                    copy_pad = 0.0 if pad is None else pad
        # -- rewrite
        blk = body(scope)
        if scope is self.fn:
            anchor = top_level(loads[0])
            for ld in loads:
                t = top_level(ld)
                if t.is_before_in_block(anchor):
                    anchor = t
        else:
            anchor = blk.first
        b = Builder(blk, anchor)
        base_vals = [None if base is None else emit_affine(b, base) for base in bases]
        cache = b.create(ALLOC, [], {"type": BufferType(tuple(exts[kept[p]] for p in order), B.type.dtype),
                                     "tag": name}).results[0]
        cb, civs = b, []
        for p in range(len(order)):
            loop = _new_loop(exts[kept[order[p]]], f"{name}.{p}")
            cb.insert(loop)
            cb = Builder.at_end(body(loop))
            civs.append(iv(loop))
        src = []
        for d in range(len(shape)):
            t = civs[order.index(kept.index(d))] if d in kept else None
            base = base_vals[d]
            if t is None:
                src.append(base if base is not None else const_index(cb, 0))
            else:
                src.append(t if base is None else cb.create("scalar.add", [base, t]).results[0])
        v = cb.create(LOAD, [B] + src, {} if copy_pad is None else {"pad": copy_pad}).results[0]
        cb.create(STORE, [v, cache] + civs)
        keep_pad = pad is not None and any(bases[d] is None for d in kept)
        for ld in loads:
            lb = Builder.before(ld)
            idx = indices(ld)
            tidx = [idx[d] if base_vals[d] is None else lb.create("scalar.sub", [idx[d], base_vals[d]]).results[0]
                    for d in kept]
            new = lb.create(LOAD, [cache] + [tidx[order[p]] for p in range(len(order))],
                            {"pad": pad} if keep_pad else {})
            ld.results[0].replace_all_uses_with(new.results[0])
            ld.erase()
        return name

    pack = cache_read   # a packed copy is a cache_read with a layout; traces record it as cache_read

    # ---- GPU (docs/gpu.md) -----------------------------------------------------------------------
    @primitive(1)
    def bind(self, loop: str, axis: str) -> None:
        """Runs the loop's iterations as the blocks of the grid (``block.x|y|z``) or as the threads of
        one block (``thread.x|y|z``).  Block loops enclose everything else of their launch; thread
        loops sit inside block loops."""
        prim = "bind"
        L = self._loop(prim, loop)
        self._serial(prim, L)
        if axis not in GPU_KINDS:
            raise _fail(prim, f"axis '{axis}'", f"is not one of {', '.join(GPU_KINDS)}")
        if L.attributes.get("reduction"):
            raise _fail(prim, f"loop '{loop}'", "is a reduction loop: its iterations update one accumulator")
        if L.attributes["lb"] != 0 or L.attributes["step"] != 1 or is_symbolic_loop(L):
            raise _fail(prim, f"loop '{loop}'", "must run from 0 by 1 over a static extent")
        outer = [a for a in ancestors(L) if a.name == FOR]
        kinds = [o.attributes["kind"] for o in outer + list(walk_ops(L, FOR))]
        if axis in kinds:
            raise _fail(prim, f"loop '{loop}'", f"a loop around or inside it is already bound to {axis}")
        if axis in GPU_BLOCK_KINDS and any(o.attributes["kind"] not in GPU_BLOCK_KINDS for o in outer):
            raise _fail(prim, f"loop '{loop}'", "only block loops may enclose a block loop (bind outer loops first)")
        if axis in GPU_THREAD_KINDS and not any(o.attributes["kind"] in GPU_BLOCK_KINDS for o in outer):
            raise _fail(prim, f"loop '{loop}'", "a thread loop needs an enclosing block loop")
        if axis in GPU_THREAD_KINDS and any(k in GPU_BLOCK_KINDS for k in kinds[len(outer):]):
            raise _fail(prim, f"loop '{loop}'", "holds a block loop; blocks enclose threads")
        self._check_writes(prim, L, [L])
        L.attributes["kind"] = axis

    @primitive(2)
    def cache_shared(self, buffer: str, at_loop: str) -> str:
        """Stages the tile of ``buffer`` that a block's threads read inside ``at_loop`` in shared memory:
        the threads copy it together (each a strided share), after a barrier (the previous iteration's
        reads are done) and before another (the copy is complete).  ``at_loop`` must sit inside thread
        loops that span the block.  Returns the shared buffer's tag ``buffer@at_loop``."""
        prim = "cache_shared"
        AL = self._loop(prim, at_loop)
        threads = [a for a in ancestors(AL) if a.name == FOR and a.attributes["kind"] in GPU_THREAD_KINDS]
        if not threads:
            raise _fail(prim, f"loop '{at_loop}'", "is not inside a thread loop: bind loops to threads first")
        name = self._cache_read(prim, buffer, at_loop, None, varying=threads)
        alloc = find_tagged(self.fn, ALLOC, name)
        alloc.attributes["space"] = "shared"
        threads[0].parent.insert_before(alloc.detach(), threads[0])
        copy = next(l for l in body(AL) if l.name == FOR and (tag(l) or "").startswith(name + "."))
        fused = tag(copy)
        for inner in perfect_chain(copy)[1:]:
            fused = self.fuse(fused, tag(inner))
        count = 1
        for t in threads:
            count *= extent(t)
        outer_tag, inner_tag = self.split(fused, count)
        inner = self._loop(prim, inner_tag)
        b = Builder.before(inner)
        lin = None
        for t in threads:
            lin = iv(t) if lin is None else b.create("scalar.add", [b.create(
                "scalar.mul", [lin, const_index(b, extent(t))]).results[0], iv(t)]).results[0]
        _redirect(list(iv(inner).uses), iv(inner), lin)
        for op in list(body(inner)):
            op.move_before(inner)
        inner.erase()
        outer = self._loop(prim, outer_tag)
        Builder.before(outer).create("loop.barrier", [])
        Builder.after(outer).create("loop.barrier", [])
        return name

    # ---- moving computes ------------------------------------------------------------------------
    def _intermediate(self, prim: str, compute: str) -> Operation:
        op = find_tagged(self.fn, ALLOC, f"{compute}.buf")
        if op is None:
            raise _fail(prim, f"compute '{compute}'", "has no intermediate buffer: it writes a kernel output "
                        "(or was inlined already)")
        if op.parent is not self._body:
            raise _fail(prim, f"compute '{compute}'", "was already moved into another nest")
        return op

    @primitive(2)
    def compute_at(self, producer: str, consumer_loop: str) -> None:
        """Computes ``producer`` inside ``consumer_loop``, only the part one iteration reads.

        Handles the case where the consumer reads the producer at fixed leading indices per iteration
        (one row, or one point, along the shared leading axes): those producer loops disappear and its
        buffer shrinks to the remaining axes, allocated per iteration (so the loop may run in parallel).
        """
        prim = "compute_at"
        alloc = self._intermediate(prim, producer)
        buf = alloc.results[0]
        CL = self._loop(prim, consumer_loop)
        self._not_simd(prim, CL)
        loads, stores = accesses(self.fn, buf)
        nests = {id(top_level(s)): top_level(s) for s in stores}
        if len(stores) != 1 or len(nests) != 1 or next(iter(nests.values())).name != FOR:
            raise _fail(prim, f"compute '{producer}'", "must be written by one store in one loop nest")
        (W,) = stores
        N = top_level(W)
        if N is CL or encloses(N, CL):
            raise _fail(prim, f"loop '{consumer_loop}'", f"is inside compute '{producer}' itself")
        if not loads:
            raise _fail(prim, f"compute '{producer}'", "is never read")
        outside = [ld for ld in loads if not encloses(CL, ld)]
        if outside:
            who = tag(top_level(outside[0])) or top_level(outside[0]).name
            raise _fail(prim, f"compute '{producer}'", f"is also read outside loop '{consumer_loop}' "
                        f"(in nest '{who}'); it would not be computed there")
        shape = buf.type.shape
        chain = perfect_chain(N)
        w = indices(W)
        k_p = 0
        while (k_p < min(len(chain), len(shape)) and w[k_p] is iv(chain[k_p])
               and dims_equal(dim_extent(chain[k_p]), shape[k_p]) and not chain[k_p].attributes.get("reduction")
               and chain[k_p].attributes["kind"] == "serial"):
            k_p += 1
        outer_ids = {id(iv(l)) for l in enclosing_loops(CL) + [CL]}
        memo: dict[int, frozenset[int]] = {}
        k_c = 0
        while k_c < len(shape):
            e0 = indices(loads[0])[k_c]
            if not (iv_deps(e0, memo) <= outer_ids and all(same_index(e0, indices(ld)[k_c]) for ld in loads)
                    and _pure_path(e0)):
                break
            k_c += 1
        k = min(k_p, k_c)
        if k == 0:
            raise _fail(prim, f"compute '{producer}'", f"no leading axis of its buffer is fixed per iteration of "
                        f"loop '{consumer_loop}' and is a plain loop of the producer (leading consumer axes "
                        f"fixed: {k_c}, producer leading loops: {k_p})")
        X = loads[0]
        while X.parent is not body(CL):
            X = X.parent_op
        for ld in loads:
            Y = ld
            while Y.parent is not body(CL):
                Y = Y.parent_op
            if Y.is_before_in_block(X):
                X = Y
        read_bufs = {id(ld.operands[0]) for ld in walk_ops(N, LOAD)}
        op = X
        while op is not None:
            for st in ([op] if op.name == STORE else []) + list(walk_ops(op, STORE)):
                if id(st.operands[1]) in read_bufs:
                    raise _fail(prim, f"compute '{producer}'", f"reads {_bufname(st.operands[1])}, which loop "
                                f"'{consumer_loop}' writes before using the producer")
            op = op.next
        # -- rewrite
        b = Builder(body(CL), X)

        def visible(v: Value) -> bool:
            return v.is_block_arg or not encloses(CL, v.op)

        evals = [materialize(indices(loads[0])[d], b, visible) for d in range(k)]
        ranges = loop_ranges(self.fn)
        below = [_provably_below(e, shape[d], ranges) for d, e in enumerate(evals)]
        nonneg = [_provably_nonneg(e, ranges) for e in evals]
        needs_guard = not all(below) or not all(nonneg)
        moved = []
        for d in range(k):
            moved.extend(o for o in body(chain[d]).ops if d + 1 >= k or o is not chain[d + 1])
        for o in moved:
            o.move_before(X)
        for d in range(k):
            iv(chain[d]).replace_all_uses_with(evals[d])
        inside = None   # the leading indices' in-range test, when a padded read needs it
        if needs_guard:
            blk = Block()
            gb = Builder.before(moved[0])
            conds = []
            for d, e in enumerate(evals):
                if not below[d]:
                    conds.append(gb.create("scalar.lt", [e, dim_value(gb, shape[d])]).results[0])
                if not nonneg[d]:
                    conds.append(gb.create("scalar.ge", [e, const_index(gb, 0)]).results[0])
            cond = conds[0]
            for c in conds[1:]:
                cond = gb.create("scalar.and", [cond, c]).results[0]
            inside = cond
            gb.create(IF, [cond], {}, regions=[Region([blk])])
            for o in moved:
                o.detach()
                blk.append(o)
        new_buf = Builder(body(CL), body(CL).first).create(
            ALLOC, [], {"type": BufferType(shape[k:], buf.type.dtype), "tag": f"{producer}.buf"}).results[0]
        Builder.before(W).create(STORE, [W.operands[0], new_buf] + w[k:])
        W.erase()
        for ld in loads:
            lb = Builder.before(ld)
            new = lb.create(LOAD, [new_buf] + indices(ld)[k:], dict(ld.attributes)).results[0]
            pad = ld.attributes.get("pad")
            if pad is not None and inside is not None:
                # a padded read whose leading (now dropped) indices may leave the buffer: those
                # positions read the pad value, as before, not the unwritten local buffer
                rt = ld.results[0].type
                padv = lb.create("scalar.const", [], {"value": float(pad) if rt.dtype.is_float else int(pad),
                                                      "type": rt}).results[0]
                new = lb.create("scalar.select", [inside, new, padv]).results[0]
            ld.results[0].replace_all_uses_with(new)
            ld.erase()
        erase_all([N, alloc])

    @primitive(1)
    def compute_inline(self, compute: str) -> None:
        """Substitutes an injective compute's expression into each of its reads and drops its buffer.

        Feasible at this level because the producer's untouched nest is one store of an expression
        of its loop indices: each read clones that expression at the read's indices.
        """
        prim = "compute_inline"
        alloc = self._intermediate(prim, compute)
        buf = alloc.results[0]
        loads, stores = accesses(self.fn, buf)
        if len(stores) != 1:
            raise _fail(prim, f"compute '{compute}'", "must be written by exactly one store")
        (W,) = stores
        N = top_level(W)
        chain = perfect_chain(N) if N.name == FOR else []
        shape = buf.type.shape
        plain = (chain and len(chain) == len(shape) and W.parent is body(chain[-1]) and all(
            indices(W)[d] is iv(l) and dims_equal(dim_extent(l), shape[d]) and not l.attributes.get("reduction")
            for d, l in enumerate(chain)))
        if not plain:
            raise _fail(prim, f"compute '{compute}'", "is not an injective expression over an unscheduled nest "
                        "(a reduction, or loops already transformed)")
        for o in body(chain[-1]):
            if o is not W and not is_pure(o) and o.name != LOAD:
                raise _fail(prim, f"compute '{compute}'", f"is not an injective expression (its nest holds "
                            f"'{o.name}')")
        if any(ld.attributes.get("pad") is not None for ld in loads):
            raise _fail(prim, f"compute '{compute}'", "is read with padding (out-of-range reads); inlining would "
                        "evaluate its expression out of range")
        expr = [o for l in chain for o in body(l) if o.name != FOR and o is not W]
        for ld in loads:
            mapping = {iv(l): i for l, i in zip(chain, indices(ld))}
            b = Builder.before(ld)
            for o in expr:
                b.insert(o.clone(mapping))
            ld.results[0].replace_all_uses_with(mapping.get(W.operands[0], W.operands[0]))
            ld.erase()
        erase_all([N, alloc])


def _positive(prim: str, loop: Operation, factor) -> None:
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise _fail(prim, f"loop '{tag(loop)}'", f"factor must be a positive integer, got {factor!r}")


def _decision(d):
    """Decisions as plain JSON-able values (a tuner may hand in numpy integers or lists)."""
    if isinstance(d, (list, tuple)):
        return tuple(_decision(x) for x in d)
    if isinstance(d, numbers.Integral) and not isinstance(d, bool):
        return int(d)
    return d


def _span(form: Affine, ranges: dict[int, tuple[int, int]]) -> tuple[int, int] | None:
    """The interval of ``form`` over the loops' ranges; None when it depends on a symbolic loop."""
    lo = hi = form.const
    for (k, c) in form.terms:
        if k not in ranges:
            return None
        a, b = ranges[k]
        lo += min(c * a, c * b)
        hi += max(c * a, c * b)
    return lo, hi


def _delinearize(full: Value, factor: int, outer: Value, inner: Value) -> None:
    """``floordiv(o*f + i, f)`` is ``o`` and ``mod(o*f + i, f)`` is ``i`` (``0 <= i < f``): a split
    by the extent of a flattened axis (a reshape's ``p // W``, ``p % W``) gives back affine indices."""
    for op, _ in list(full.uses):
        if op.name not in ("scalar.floordiv", "scalar.mod") or op.operands[0] is not full:
            continue
        d = op.operands[1].op
        if d is None or d.name != "scalar.const" or d.attributes.get("value") != factor:
            continue
        op.results[0].replace_all_uses_with(outer if op.name == "scalar.floordiv" else inner)


def _pure_path(v: Value) -> bool:
    """``v`` is computed from ivs and constants by pure ops only (so it can be recomputed elsewhere)."""
    if v.is_block_arg:
        return True
    return is_pure(v.op) and all(_pure_path(o) for o in v.op.operands)


def _bufname(buf: Value) -> str:
    if buf.op is not None and buf.op.attributes.get("tag"):
        return f"buffer '{buf.op.attributes['tag']}'"
    if buf.is_block_arg:
        fn = buf.owner.parent_op
        n_in = fn.attributes["num_inputs"] if fn is not None else 0
        return f"buffer 'in{buf.index}'" if buf.index < n_in else f"buffer 'out{buf.index - n_in}'"
    return f"buffer {buf.type}"


def _tags(loops: Sequence[Operation]) -> list[str]:
    return [tag(l) for l in loops]


def _blocker_reason(loop: Operation) -> str:
    """Why the nest stops being perfect at ``loop``, in terms a schedule writer can act on."""
    blocker = first_blocker(loop)
    if blocker is None:
        return f"loop '{tag(loop)}' is the innermost loop"
    t = blocker.attributes.get("tag") or ""
    if blocker.name == ALLOC and t.endswith(".acc"):
        c = t[:-4]
        return (f"loop '{tag(loop)}' holds the scalar accumulator of compute '{c}' between its loops; "
                f"apply cache_write('{c}', ...) first so that reduction loops can move")
    return f"loop '{tag(loop)}' holds '{blocker.name}'" + (f" '{t}'" if t else "") + " besides the nested loop"


def _provably_below(e: Value, bound, ranges: dict[int, tuple[int, int]]) -> bool:
    """Whether index ``e`` is < ``bound`` (a dim) for every iteration: by its value range when it
    only depends on static loops, or, for a symbolic bound, when ``e`` is the iv of a loop whose
    (symbolic) trip count is exactly ``bound``."""
    if e.is_block_arg and e.owner.parent_op is not None and e.owner.parent_op.name == FOR \
            and dims_equal(dim_extent(e.owner.parent_op), bound):
        return True
    r = value_range(e, ranges)
    return r is not None and isinstance(bound, int) and r[1] <= bound - 1


def _provably_nonneg(e: Value, ranges: dict[int, tuple[int, int]]) -> bool:
    if e.is_block_arg and e.owner.parent_op is not None and e.owner.parent_op.name == FOR:
        return True
    r = value_range(e, ranges)
    return r is not None and r[0] >= 0
