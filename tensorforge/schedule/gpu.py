"""The schedule every kernel gets on a GPU (docs/gpu.md).

A freshly lowered ``loop.func`` holds one top-level nest per compute.  Cheap injective producers
are inlined first (``default.inline_producers``, as on the CPU), and an elementwise consumer that
reads an intermediate at exactly the point its producer writes moves into the producer's nest
(``fuse_epilogues``).  Runs of nests over the same rows that exchange data only within a row (a
softmax, a norm) become one launch with a block per row (``row_fused``).  Every other nest becomes
one launch (a launch boundary is a grid-wide barrier, so intermediates between nests stay in
global scratch), rebuilt by the first strategy that fits it:

1. **tiled contraction**: a sum of products ``x(i, k) * y(j, k)`` with enough rows, columns and
   depth (matmul, batched matmul, dense and padded convolution): a block computes a ``tm x tn``
   output tile; its threads stage ``tk``-deep slices of ``x`` and ``y`` into shared memory
   together, wait at a barrier, and each accumulates a ``micro x micro`` register tile from them;
   the epilogue (what the nest does with the sum) runs on the registers.
2. **block reduction**: a reduction over many elements with few outputs (pooling, GEMV): one block
   per output, its threads stride over the reduced elements, then combine their partial results
   in shared memory in a tree, a barrier per level.
3. **flat**: everything else (elementwise nests, short reductions): the parallel loops are
   flattened into one index space, one thread per point (or per ``vector`` neighbours, which the
   printers load and store as vectors), blocks of ``flat_threads`` threads; a thread runs the rest
   of the nest (a short reduction) itself.

The knobs are a ``GpuConfig``.  The nests are rebuilt by construction rather than by chains of CPU
primitives: the bodies are cloned with the loop variables mapped to values computed from the
block and thread indices.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..dialects.loop.ops import GPU_BLOCK_KINDS
from ..dialects.scalar import INDEX
from ..ir.builder import Builder
from ..ir.core import Block, Operation, Region, Value
from ..ir.types import BufferType, ScalarType
from .analysis import (ALLOC, FOR, LOAD, STORE, accesses, body, buffer_of, extent, indices, is_pure, iv, iv_deps,
                       top_level)
from .default import inline_producers
from .primitives import Schedule

BARRIER = "loop.barrier"


@dataclass(frozen=True)
class GpuConfig:
    """The knobs of the GPU schedules: the auto-tuner's GPU space (``tune/gpu.py``) varies them
    per kernel; the defaults are what every kernel gets untuned."""

    tm: int = 64                       # output rows per block of the tiled contraction
    tn: int = 64                       # output columns per block
    tk: int = 16                       # depth of one shared-memory slice
    micro: int = 4                     # each thread's register tile is micro x micro
    flat_threads: int = 256            # threads per block of the flat strategy
    reduce_threads: int = 256          # most threads per block of a block reduction
    vector: int = 4                    # neighbours one thread of the flat strategy takes (vector loads)
    # One block per output pays when outputs alone would leave most threads of the GPU idle (rows
    # of a softmax or a norm), or when each output sums so many terms that one thread would run long.
    block_reduce_max_outputs: int = 4096

    def problems(self, max_threads: int) -> list[str]:
        """Why this configuration cannot be built for blocks of at most ``max_threads`` threads."""
        out = []
        if self.tm % self.micro or self.tn % self.micro:
            out.append(f"tile {self.tm}x{self.tn} is not a multiple of the {self.micro}x{self.micro} micro-tile")
        elif (self.tm // self.micro) * (self.tn // self.micro) > max_threads:
            out.append(f"a {self.tm}x{self.tn} tile takes {(self.tm // self.micro) * (self.tn // self.micro)} threads "
                       f"> {max_threads}")
        for name in ("flat_threads", "reduce_threads"):
            n = getattr(self, name)
            if n > max_threads or n & (n - 1):
                out.append(f"{name}={n} must be a power of two <= {max_threads}")
        if self.vector not in (1, 2, 4):
            out.append(f"vector={self.vector} must be 1, 2 or 4")
        return out

    def describe(self) -> str:
        return (f"tile {self.tm}x{self.tn}x{self.tk}, micro {self.micro}x{self.micro}, flat {self.flat_threads}"
                f"x{self.vector}, reduce {self.reduce_threads}")


DEFAULT_CONFIG = GpuConfig()


@dataclass
class GpuSchedule:
    """What the GPU schedule did to one kernel, for people (``explain``) and the tuner."""

    strategies: list[str]

    def describe(self) -> str:
        return "; ".join(self.strategies) or "no launches"


def gpu_schedule(fn: Operation, max_threads: int = 1024, config: GpuConfig | None = None) -> GpuSchedule:
    """Rewrites ``fn`` (a lowered ``loop.func``) in place into GPU launches; returns what it did."""
    config = config or DEFAULT_CONFIG
    s = Schedule(fn, check=False)
    inline_producers(s, set())
    fused = fuse_epilogues(fn)
    _hoist_scratch(fn)
    _wrap_loose_statements(fn)
    done = []
    for group, r in row_groups([op for op in body(fn) if op.name == FOR], config):
        threads = min(config.reduce_threads, max_threads)
        row_fused(group, r, threads)
        done.append(f"row fusion ({len(group)} nests in one launch, a block of {threads} threads per row)")
    for nest in [op for op in body(fn) if op.name == FOR and op.attributes["kind"] not in GPU_BLOCK_KINDS]:
        done.append(_schedule_nest(nest, max_threads, config))
    if fused:
        done.append(f"{fused} elementwise consumer(s) fused into their producer's epilogue")
    return GpuSchedule(done)


# ---- epilogues ----------------------------------------------------------------------------------
def fuse_epilogues(fn: Operation) -> int:
    """Moves each elementwise nest that reads an intermediate at exactly the point its producer
    writes into the producer's nest, computed on the value before it is stored, and drops the
    buffer: a GEMM's bias and activation then run on its registers instead of in a second launch
    through global memory.  Returns how many consumers moved."""
    moved = 0
    for alloc in [op for op in body(fn) if op.name == ALLOC and op.attributes["type"].rank > 0]:
        if _fuse_consumer(fn, alloc):
            moved += 1
    return moved


def _fuse_consumer(fn: Operation, alloc: Operation) -> bool:
    buf = alloc.results[0]
    loads, stores = accesses(fn, buf)
    if len(stores) != 1 or not loads:
        return False
    producer, consumer = top_level(stores[0]), top_level(loads[0])
    if producer.name != FOR or consumer.name != FOR or producer is consumer:
        return False
    if any(top_level(ld) is not consumer for ld in loads) or not producer.is_before_in_block(consumer):
        return False
    p_loops, c_loops = parallel_prefix(producer), parallel_prefix(consumer)
    store = stores[0]
    leaf = body(c_loops[-1])
    if (store.parent is not body(p_loops[-1]) or len(p_loops) != len(c_loops)
            or [extent(l) for l in p_loops] != [extent(l) for l in c_loops]
            or list(store.operands[2:]) != [iv(l) for l in p_loops]
            or any(op.name == FOR or op.regions for op in leaf)
            or any(ld.parent is not leaf or list(ld.operands[1:]) != [iv(l) for l in c_loops] for ld in loads)
            or not _nothing_between(producer, consumer, leaf)):
        return False
    mapping: dict[Value, Value] = {iv(c): iv(p) for c, p in zip(c_loops, p_loops)}
    for ld in loads:
        mapping[ld.results[0]] = store.operands[0]
    b = Builder.before(store)
    _clone_with_deps(b, [op for op in leaf if op not in loads], mapping, body(consumer))
    store.erase()
    consumer.erase()
    alloc.erase()
    return True


def _nothing_between(producer: Operation, consumer: Operation, leaf: Block) -> bool:
    """Whether the consumer may run at the producer's place: no nest in between writes what it reads
    or touches what it writes."""
    touched = {id(buffer_of(op)) for op in leaf if op.name in (LOAD, STORE)}
    cur = producer.next
    while cur is not None and cur is not consumer:
        if any(op.name in (LOAD, STORE) and id(buffer_of(op)) in touched for op in cur.walk()):
            return False
        cur = cur.next
    return True


# ---- nest structure ------------------------------------------------------------------------------
def parallel_prefix(nest: Operation) -> list[Operation]:
    """The loops at the top of ``nest`` that are perfectly nested (pure ops aside) and not reductions."""
    return _chain(nest, reduction=False)


def _chain(loop: Operation, reduction: bool) -> list[Operation]:
    """``loop`` and the loops perfectly nested under it (pure ops aside) whose ``reduction`` flag is
    ``reduction``."""
    chain = [loop]
    while True:
        inner = [op for op in body(chain[-1]) if not is_pure(op)]
        if len(inner) == 1 and inner[0].name == FOR and bool(inner[0].attributes.get("reduction")) == reduction:
            chain.append(inner[0])
        else:
            return chain


@dataclass
class Reduction:
    """A nest ``P loops { acc = init; R loops { acc = comb(acc, term) }; after(acc) }``."""

    prefix: list[Operation]
    acc: Operation                  # the rank-0 loop.alloc
    loops: list[Operation]          # the reduction loops, outermost first (perfectly nested)
    combine: Operation              # the scalar combiner op
    term: Value                     # what is combined in per iteration
    after: list[Operation]          # ops of the innermost P body after the reduction loops

    @property
    def depth(self) -> int:
        return math.prod(extent(l) for l in self.loops)


def as_reduction(nest: Operation) -> Reduction | None:
    """The reduction shape of ``nest``, or None when it is something else."""
    prefix = parallel_prefix(nest)
    ops = list(body(prefix[-1]))
    allocs = [op for op in ops if op.name == ALLOC]
    rloops = [op for op in ops if op.name == FOR]
    if len(allocs) != 1 or len(rloops) != 1 or allocs[0].attributes["type"].rank != 0:
        return None
    acc = allocs[0].results[0]
    chain = _chain(rloops[0], reduction=True)
    if not chain[0].attributes.get("reduction"):
        return None
    leaf = [op for op in body(chain[-1]) if not is_pure(op)]
    stores = [op for op in leaf if op.name == STORE and op.operands[1] is acc]
    loads = [op for op in leaf if op.name == LOAD and op.operands[0] is acc]
    if len(stores) != 1 or len(loads) != 1 or len(leaf) - 2 != _other_loads(leaf, acc):
        return None
    comb = stores[0].operands[0].op
    if comb is None or comb.name not in ("scalar.add", "scalar.mul", "scalar.max", "scalar.min"):
        return None
    cur = loads[0].results[0]
    if comb.operands[0] is cur:
        term = comb.operands[1]
    elif comb.operands[1] is cur:
        term = comb.operands[0]
    else:
        return None
    after = ops[ops.index(rloops[0]) + 1:]
    return Reduction(prefix, allocs[0], chain, comb, term, after)


def _other_loads(leaf: list[Operation], acc: Value) -> int:
    """How many of the leaf's effectful ops are loads of other buffers (allowed in a term)."""
    return sum(1 for op in leaf if op.name == LOAD and op.operands[0] is not acc)


# ---- building blocks ----------------------------------------------------------------------------
def _loop(b: Builder, extent_: int, kind: str, tag_: str, reduction: bool = False) -> tuple[Operation, Builder, Value]:
    region = Region([Block([INDEX])])
    op = b.create(FOR, [], {"lb": 0, "ub": int(extent_), "step": 1, "kind": kind, "reduction": reduction,
                            "tag": tag_}, regions=[region])
    blk = region.blocks[0]
    return op, Builder.at_end(blk), blk.args[0]


def _index(b: Builder, value: int) -> Value:
    return b.create("scalar.const", [], {"value": int(value), "type": INDEX}).results[0]


def _arith(b: Builder, name: str, x: Value, y: Value | int) -> Value:
    if isinstance(y, int):
        y = _index(b, y)
    return b.create(f"scalar.{name}", [x, y]).results[0]


def _linear(b: Builder, terms: Sequence[tuple[Value, int]], const: int = 0) -> Value:
    """sum(v * scale) + const over index values."""
    out = None
    for v, scale in terms:
        t = v if scale == 1 else _arith(b, "mul", v, scale)
        out = t if out is None else _arith(b, "add", out, t)
    if out is None:
        return _index(b, const)
    return out if const == 0 else _arith(b, "add", out, const)


def _delinearize(b: Builder, flat: Value, extents: Sequence[int]) -> list[Value]:
    """Row-major indices of ``flat`` over ``extents`` (``flat`` is never negative)."""
    out: list[Value] = []
    stride = math.prod(extents)
    for k, e in enumerate(extents):
        stride //= e
        q = flat if stride == 1 else _arith(b, "div", flat, stride)
        out.append(q if k == 0 else _arith(b, "mod", q, e) if e != 1 else _index(b, 0))
    if extents and extents[0] == 1:
        out[0] = _index(b, 0)
    return out


def _below(b: Builder, v: Value, bound: int) -> Value:
    return b.create("scalar.lt", [v, _index(b, bound)]).results[0]


def _and(b: Builder, x: Value, y: Value) -> Value:
    return b.create("scalar.and", [x, y]).results[0]


def _guard(b: Builder, cond: Value | None) -> Builder:
    """A builder inside ``if cond`` (or ``b`` itself when there is no condition)."""
    if cond is None:
        return b
    region = Region([Block([])])
    b.create("loop.if", [cond], {}, regions=[region])
    return Builder.at_end(region.blocks[0])


def _clone_into(b: Builder, ops: Sequence[Operation], mapping: dict[Value, Value]) -> None:
    for op in ops:
        b.insert(op.clone(mapping))


def _prefix_pure(prefix: Sequence[Operation]) -> list[Operation]:
    """The pure ops sitting between the prefix loops (index math of the outer loops)."""
    return [op for l in prefix[:-1] for op in body(l) if is_pure(op)]


def _slice(v: Value, within: Block, mapping: dict[Value, Value]) -> list[Operation]:
    """The ops of ``within`` (and of blocks nested in it) that ``v`` depends on and that ``mapping``
    does not already give a value for, in dependence order."""
    seen: set[int] = set()
    out: list[Operation] = []

    def visit(x: Value) -> None:
        op = x.op
        if x in mapping or op is None or id(op) in seen or not _inside(op, within):
            return
        seen.add(id(op))
        for o in op.operands:
            visit(o)
        out.append(op)

    visit(v)
    return out


def _inside(op: Operation, block: Block) -> bool:
    cur = op
    while cur is not None:
        if cur.parent is block:
            return True
        cur = cur.parent_op
    return False


def _clone_deps(b: Builder, values: Sequence[Value], mapping: dict[Value, Value], within: Block) -> None:
    """Clones the ops of ``within`` that ``values`` depend on (index math computed at an outer level
    of the original nest, a factor's loads) and that are not cloned yet."""
    for v in values:
        for dep in _slice(v, within, mapping):
            b.insert(dep.clone(mapping))


def _clone_with_deps(b: Builder, ops: Sequence[Operation], mapping: dict[Value, Value], within: Block) -> None:
    """Clones ``ops`` in order, each after what its operands depend on (``_clone_deps``)."""
    for op in ops:
        _clone_deps(b, op.operands, mapping, within)
        b.insert(op.clone(mapping))


def _strided(b: Builder, count: int, step: int, start: Value, kind: str, tag_: str) -> tuple[Builder, Value]:
    """``for e < ceil(count / step): k = e*step + start; if k < count: ...``: the points a thread
    takes when a block's ``step`` threads stride over ``count``; the builder inside and ``k``."""
    _, sb, e = _loop(b, -(-count // step), kind, tag_)
    k = _linear(sb, [(e, step), (start, 1)])
    return _guard(sb, _below(sb, k, count) if count % step else None), k


def _replace(nest: Operation, new_ops: list[Operation]) -> None:
    for op in new_ops:
        nest.parent.insert_before(op.detach(), nest)
    nest.erase()


def _launch_builder(nest: Operation) -> tuple[Block, Builder]:
    """A detached block to build a launch in (moved before ``nest`` once built)."""
    blk = Block([])
    return blk, Builder.at_end(blk)


# ---- the nest before scheduling ---------------------------------------------------------------------
def _hoist_scratch(fn: Operation) -> None:
    """The global scratch buffers (top-level allocs, which take no operands) go first, so that a
    launch that merges several nests sees every buffer they use declared before it."""
    blk = body(fn)
    allocs = [op for op in blk if op.name == ALLOC]
    for op in reversed(allocs):
        op.detach()
        if blk.first is None:
            blk.append(op)
        else:
            blk.insert_before(op, blk.first)


def _wrap_loose_statements(fn: Operation) -> None:
    """Top-level statements outside any parallel loop (a reduction to a scalar, a scalar store) go
    into a loop of one iteration, so that every top-level nest is a loop the strategies handle."""
    blk = body(fn)
    run: list[Operation] = []
    wrapped = 0

    def flush() -> None:
        nonlocal wrapped
        if not run:
            return
        used_later = any(top_level(u) not in run for op in run for r in op.results for u, _ in r.uses)
        if not used_later:
            loop, _, _ = _loop(Builder.before(run[0]), 1, "serial", f"gpu.stmt{wrapped}")
            wrapped += 1
            for op in run:
                body(loop).append(op.detach())
        run.clear()

    for op in list(blk):
        scratch = op.name == ALLOC and op.attributes["type"].rank > 0
        parallel = op.name == FOR and not op.attributes.get("reduction")
        if scratch or parallel or op.name == "loop.return" or (is_pure(op) and not run):
            flush()
            continue
        run.append(op)
    flush()


def _schedule_nest(nest: Operation, max_threads: int, cfg: GpuConfig) -> str:
    red = as_reduction(nest)
    if red is not None:
        tiled = _contraction_plan(red, cfg)
        if tiled is not None:
            tiled_contraction(nest, red, tiled)
            return f"tiled contraction {tiled.describe()}"
        outputs = math.prod(extent(l) for l in red.prefix)
        if red.depth >= 64 and (outputs < cfg.block_reduce_max_outputs or red.depth >= 1024):
            threads = min(cfg.reduce_threads, max_threads, 1 << max(5, (red.depth - 1).bit_length()))
            block_reduce(nest, red, threads)
            return f"block reduction ({outputs} blocks x {threads} threads over {red.depth})"
    threads = min(cfg.flat_threads, max_threads)
    points = flat(nest, threads, cfg.vector)
    return f"flat ({points} points, {threads} threads per block)"


# ---- 3. flat ----------------------------------------------------------------------------------------
def flat(nest: Operation, threads: int, vector: int = 1) -> int:
    """One thread per point of the nest's parallel loops; returns the number of points.  With
    ``vector`` > 1 and an innermost extent it divides, each thread takes ``vector`` neighbours along
    the innermost loop in a ``vectorize`` loop (the printers turn its contiguous float loads and
    stores into vector loads and stores)."""
    prefix = parallel_prefix(nest)
    extents = [extent(l) for l in prefix]
    lanes = vector if vector > 1 and extents[-1] % vector == 0 and _straight(prefix[-1]) else 1
    groups = extents[:-1] + [extents[-1] // lanes]
    points = math.prod(groups)
    threads = min(threads, max(32, 1 << (points - 1).bit_length()))
    blocks = -(-points // threads)
    blk, b = _launch_builder(nest)
    _, bb, g = _loop(b, blocks, "block.x", "gpu.bx")
    _, tb, t = _loop(bb, threads, "thread.x", "gpu.tx")
    lin = _linear(tb, [(g, threads), (t, 1)])
    inner = _guard(tb, _below(tb, lin, points) if blocks * threads != points else None)
    mapping = {iv(l): v for l, v in zip(prefix, _delinearize(inner, lin, groups))}
    if lanes > 1:
        _, inner, lane = _loop(inner, lanes, "vectorize", "gpu.lane")
        mapping[iv(prefix[-1])] = _linear(inner, [(mapping[iv(prefix[-1])], lanes), (lane, 1)])
    _clone_into(inner, _prefix_pure(prefix), mapping)
    _clone_into(inner, list(body(prefix[-1])), mapping)
    _replace(nest, list(blk))
    return points * lanes


def _straight(loop: Operation) -> bool:
    """Whether a loop's body is straight-line code (no loops or guards): what a vector loop holds."""
    return not any(op.regions for op in body(loop))


# ---- 2. block reduction ---------------------------------------------------------------------------
def block_reduce(nest: Operation, red: Reduction, threads: int) -> None:
    """One block per output; its threads reduce strided slices, then a shared-memory tree."""
    extents = [extent(l) for l in red.prefix]
    blk, b = _launch_builder(nest)
    _, bb, g = _loop(b, math.prod(extents), "block.x", "gpu.bx")
    mapping = {iv(l): v for l, v in zip(red.prefix, _delinearize(bb, g, extents))}
    _reduce_phase(bb, red, nest, threads, mapping)
    _replace(nest, list(blk))


def _reduce_phase(bb: Builder, red: Reduction, nest: Operation, threads: int, mapping: dict[Value, Value]) -> None:
    """In a block whose output point ``mapping`` gives: the threads' strided partial results, the
    shared-memory tree, and one thread finishing the output."""
    depth_extents = [extent(l) for l in red.loops]
    depth = red.depth
    acc_t = red.acc.attributes["type"]
    _clone_into(bb, _prefix_pure(red.prefix), mapping)
    partial = bb.create(ALLOC, [], {"type": BufferType((threads,), acc_t.dtype), "tag": "gpu.partial",
                                    "space": "shared"}).results[0]
    _, tb, t = _loop(bb, threads, "thread.x", "gpu.tx")
    own = tb.create(ALLOC, [], {"type": acc_t, "tag": "gpu.acc", "space": "local"}).results[0]
    mapping[red.acc.results[0]] = own
    leaf = body(red.prefix[-1])
    before = list(leaf)[:list(leaf).index(red.loops[0])]
    _clone_into(tb, [op for op in before if op is not red.acc], mapping)       # the initial store
    inner, flat_k = _strided(tb, depth, threads, t, "serial", "gpu.stride")
    for l, v in zip(red.loops, _delinearize(inner, flat_k, depth_extents)):
        mapping[iv(l)] = v
    _clone_with_deps(inner, list(body(red.loops[-1])), mapping, body(nest))
    mine = tb.create(LOAD, [own]).results[0]
    tb.create(STORE, [mine, partial, t])
    half = threads // 2
    while half >= 1:
        bb.create(BARRIER, [])
        _, hb, h = _loop(bb, half, "thread.x", f"gpu.tree{half}")
        x = hb.create(LOAD, [partial, h]).results[0]
        y = hb.create(LOAD, [partial, _arith(hb, "add", h, half)]).results[0]
        hb.create(STORE, [hb.create(red.combine.name, [x, y]).results[0], partial, h])
        half //= 2
    bb.create(BARRIER, [])
    _, ob, _t = _loop(bb, 1, "thread.x", "gpu.out")
    total = ob.create(LOAD, [partial, _index(ob, 0)]).results[0]
    out_map = {iv(l): mapping[iv(l)] for l in red.prefix}
    _finish(ob, red, total, out_map, nest)


# ---- row fusion ------------------------------------------------------------------------------------
def row_groups(nests: list[Operation], cfg: GpuConfig) -> list[tuple[list[Operation], int]]:
    """Runs of consecutive nests that one block per row can compute together: a long reduction over
    each row (softmax's maximum, a norm's mean), then nests over the same rows (more row
    statistics, the normalisation) that exchange data only within a row.  The rows are the
    reduction's parallel loops without trailing loops of extent 1 (kept dims)."""
    groups, i = [], 0
    while i < len(nests):
        red = as_reduction(nests[i])
        r = _row_loops(red.prefix) if red is not None else 0
        rows = math.prod(extent(l) for l in red.prefix) if red is not None else 0
        if red is None or r == 0 or red.depth < 64 or rows >= cfg.block_reduce_max_outputs:
            i += 1
            continue
        extents = [extent(l) for l in red.prefix[:r]]
        j = i + 1
        while j < len(nests) and _joins(nests[j], r, extents):
            j += 1
        if j - i >= 2 and _within_rows(nests[i:j], r):
            groups.append((nests[i:j], r))
            i = j
        else:
            i += 1
    return groups


def _row_loops(prefix: list[Operation]) -> int:
    """How many leading loops of ``prefix`` index rows: all but the trailing ones of extent 1."""
    r = len(prefix)
    while r and extent(prefix[r - 1]) == 1:
        r -= 1
    return r


def _row_reduction(nest: Operation, r: int) -> Reduction | None:
    """The nest as one reduction per row (its parallel loops past the rows all of extent 1)."""
    red = as_reduction(nest)
    if red is None or len(red.prefix) < r or any(extent(l) != 1 for l in red.prefix[r:]):
        return None
    return red


def _joins(nest: Operation, r: int, extents: list[int]) -> bool:
    prefix = parallel_prefix(nest)
    if len(prefix) < r or [extent(l) for l in prefix[:r]] != extents:
        return False
    return _row_reduction(nest, r) is not None or _straight(prefix[-1])


def _within_rows(nests: list[Operation], r: int) -> bool:
    """Whether every buffer one nest of the group writes and a later one reads is addressed by the
    row (its first ``r`` indices are the nest's row loops), so a block only needs its own row."""
    written: set[int] = set()
    for nest in nests:
        rows = [iv(l) for l in parallel_prefix(nest)[:r]]
        for op in nest.walk():
            if op.name not in (LOAD, STORE):
                continue
            buf = buffer_of(op)
            if buf.op is not None and buf.op.parent is not nest.parent:
                continue                      # the nest's own accumulators and temporaries
            if (op.name == STORE or id(buf) in written) and indices(op)[:r] != rows:
                return False
            if op.name == STORE:
                written.add(id(buf))
    return True


def row_fused(nests: list[Operation], r: int, threads: int) -> None:
    """One launch for the group: a block per row runs each nest as a phase (a block reduction, or
    its threads striding over the row's points), with a barrier between phases so that a phase
    reads what the previous ones wrote."""
    first = parallel_prefix(nests[0])[:r]
    extents = [extent(l) for l in first]
    blk, b = _launch_builder(nests[0])
    _, bb, g = _loop(b, math.prod(extents), "block.x", "gpu.bx")
    rows = _delinearize(bb, g, extents)
    for k, nest in enumerate(nests):
        prefix = parallel_prefix(nest)
        mapping = {iv(l): v for l, v in zip(prefix[:r], rows)}
        red = _row_reduction(nest, r)
        if red is not None:
            mapping.update({iv(l): _index(bb, 0) for l in red.prefix[r:]})
            _reduce_phase(bb, red, nest, threads, mapping)
        else:
            _stride_phase(bb, nest, prefix, r, threads, mapping)
        if k < len(nests) - 1:
            bb.create(BARRIER, [])
    _replace(nests[0], list(blk))
    for nest in nests[1:]:
        nest.erase()


def _stride_phase(bb: Builder, nest: Operation, prefix: list[Operation], r: int, threads: int,
                  mapping: dict[Value, Value]) -> None:
    """The points of one row of an elementwise nest, the block's threads striding over them."""
    extents = [extent(l) for l in prefix[r:]]
    points = math.prod(extents)
    _, tb, t = _loop(bb, threads, "thread.x", "gpu.tx")
    inner, flat_k = _strided(tb, points, threads, t, "serial", "gpu.stride")
    mapping.update({iv(l): v for l, v in zip(prefix[r:], _delinearize(inner, flat_k, extents))})
    _clone_into(inner, _prefix_pure(prefix), mapping)
    _clone_into(inner, list(body(prefix[-1])), mapping)


def _finish(b: Builder, red: Reduction, total: Value, mapping: dict[Value, Value], nest: Operation) -> None:
    """What the nest does with the reduced value (cast, epilogue, store), reading ``total``."""
    for op in red.after:
        if op.name == LOAD and op.operands[0] is red.acc.results[0]:
            mapping[op.results[0]] = total
    _clone_with_deps(b, [op for op in red.after if not op.results or op.results[0] not in mapping],
                     mapping, body(nest))


# ---- 1. tiled contraction ---------------------------------------------------------------------------
@dataclass
class ContractionPlan:
    """How a sum of products maps onto a tiled GEMM: which parallel loops index rows (``i``), columns
    (``j``) and batches, and which factor depends on which."""

    batch: list[Operation]
    rows: list[Operation]
    cols: list[Operation]
    row_factor: Value
    col_factor: Value
    tm: int
    tn: int
    tk: int
    micro: int
    product: Value | None = None     # the term without its padding mask: what the tiles multiply
    row_mask: Value | None = None    # a padding condition of the term, staged with the row factor ...
    col_mask: Value | None = None    # ... or with the column factor (a masked-out factor stages 0)

    @property
    def m(self) -> int:
        return math.prod(extent(l) for l in self.rows)

    @property
    def n(self) -> int:
        return math.prod(extent(l) for l in self.cols)

    def describe(self) -> str:
        b = math.prod(extent(l) for l in self.batch)
        return (f"{b}x{self.m}x{self.n} output in {self.tm}x{self.tn} tiles, k-slices of {self.tk} "
                f"through shared memory, {self.micro}x{self.micro} registers per thread")


def _contraction_plan(red: Reduction, cfg: GpuConfig = DEFAULT_CONFIG) -> ContractionPlan | None:
    """A plan when the nest is a large enough sum of products of one row-only and one column-only factor."""
    if red.combine.name != "scalar.add" or not isinstance(red.term.type, ScalarType):
        return None
    core, mask = _unmasked(red.term)
    prod = core.op
    while prod is not None and prod.name == "scalar.cast":
        prod = prod.operands[0].op
    if prod is None or prod.name != "scalar.mul":
        return None
    memo: dict[int, frozenset[int]] = {}
    deps = [iv_deps(v, memo) for v in prod.operands]
    pids = [id(iv(l)) for l in red.prefix]
    only = [[l for l, p in zip(red.prefix, pids) if p in d and p not in other] for d, other in
            ((deps[0], deps[1]), (deps[1], deps[0]))]
    batch = [l for l, p in zip(red.prefix, pids) if (p in deps[0]) == (p in deps[1])]
    if not only[0] or not only[1]:
        return None
    order = {id(l): k for k, l in enumerate(red.prefix)}
    # the factor whose private loops come last indexes the output's contiguous dimension: columns
    first, second = (0, 1) if order[id(only[0][-1])] < order[id(only[1][-1])] else (1, 0)
    rows, cols = only[first], only[second]
    plan = ContractionPlan(batch, rows, cols, prod.operands[first], prod.operands[second], cfg.tm, cfg.tn,
                           cfg.tk, cfg.micro, product=core)
    if mask is not None:
        side = {p for p in pids if p in iv_deps(mask, memo)}
        if side <= {id(iv(l)) for l in rows + batch}:
            plan.row_mask = mask
        elif side <= {id(iv(l)) for l in cols + batch}:
            plan.col_mask = mask
        else:
            return None
    if plan.m < 4 * cfg.micro or plan.n < 4 * cfg.micro or red.depth < 8:
        return None
    smallest = 4 * cfg.micro
    plan.tm = min(cfg.tm, max(smallest, 1 << (plan.m - 1).bit_length()))
    plan.tn = min(cfg.tn, max(smallest, 1 << (plan.n - 1).bit_length()))
    return plan


def _unmasked(term: Value) -> tuple[Value, Value | None]:
    """``select(cond, x, 0)`` (a convolution's padding: taps outside the image add nothing) as
    ``(x, cond)``; any other term as ``(term, None)``."""
    op = term.op
    if op is not None and op.name == "scalar.select":
        cond, value, other = op.operands
        zero = other.op
        if zero is not None and zero.name == "scalar.const" and zero.attributes["value"] == 0:
            return value, cond
    return term, None


def tiled_contraction(nest: Operation, red: Reduction, plan: ContractionPlan) -> None:
    """The nest as a shared-memory tiled GEMM (see the module docstring)."""
    tm, tn, tk = plan.tm, plan.tn, plan.tk
    micro = plan.micro
    ty_n, tx_n = tm // micro, tn // micro
    nthreads = ty_n * tx_n
    m, n, depth = plan.m, plan.n, red.depth
    batch_ext = [extent(l) for l in plan.batch]
    row_ext, col_ext = [extent(l) for l in plan.rows], [extent(l) for l in plan.cols]
    depth_ext = [extent(l) for l in red.loops]
    acc_t = red.acc.attributes["type"]
    blk, b = _launch_builder(nest)
    _, b1, bz = _loop(b, math.prod(batch_ext), "block.z", "gpu.bz")
    _, b2, by = _loop(b1, -(-m // tm), "block.y", "gpu.by")
    _, b3, bx = _loop(b2, -(-n // tn), "block.x", "gpu.bx")
    base = {iv(l): v for l, v in zip(plan.batch, _delinearize(b3, bz, batch_ext))}
    a_t = plan.row_factor.type.dtype
    c_t = plan.col_factor.type.dtype
    tile_a = b3.create(ALLOC, [], {"type": BufferType((tk, tm), a_t), "tag": "gpu.tileA", "space": "shared"}).results[0]
    tile_b = b3.create(ALLOC, [], {"type": BufferType((tk, tn), c_t), "tag": "gpu.tileB", "space": "shared"}).results[0]
    _, b4, ty = _loop(b3, ty_n, "thread.y", "gpu.ty")
    _, tb, tx = _loop(b4, tx_n, "thread.x", "gpu.tx")
    acc = tb.create(ALLOC, [], {"type": BufferType((micro, micro), acc_t.dtype), "tag": "gpu.acc",
                                "space": "local"}).results[0]
    init = _init_value(red)
    for mi in range(micro):
        for mj in range(micro):
            tb.create(STORE, [tb.insert(init.clone({})).results[0], acc, _index(tb, mi), _index(tb, mj)])
    tid = _linear(tb, [(ty, tx_n), (tx, 1)])
    _, kb, ko = _loop(tb, -(-depth // tk), "serial", "gpu.ko")
    for factor, mask, tile, width, loops, exts, offset in (
            (plan.row_factor, plan.row_mask, tile_a, tm, plan.rows, row_ext, by),
            (plan.col_factor, plan.col_mask, tile_b, tn, plan.cols, col_ext, bx)):
        _stage(kb, factor, mask, tile, width, tk, nthreads, tid, ko, offset, loops, exts, red, depth_ext, base, nest)
    kb.create(BARRIER, [])
    _, ib, kk = _loop(kb, tk, "unroll", "gpu.kk")
    for mi in range(micro):
        for mj in range(micro):
            mi_v, mj_v = _index(ib, mi), _index(ib, mj)
            xa = ib.create(LOAD, [tile_a, kk, _linear(ib, [(ty, 1)], mi * ty_n)]).results[0]
            yb = ib.create(LOAD, [tile_b, kk, _linear(ib, [(tx, 1)], mj * tx_n)]).results[0]
            term = _rebuild_term(ib, plan.product, plan, xa, yb)
            cur = ib.create(LOAD, [acc, mi_v, mj_v]).results[0]
            ib.create(STORE, [ib.create(red.combine.name, _ordered(red, cur, term)).results[0], acc, mi_v, mj_v])
    kb.create(BARRIER, [])
    _epilogue(tb, red, plan, acc, ty, tx, ty_n, tx_n, by, bx, base, nest)
    _replace(nest, list(blk))


def _ordered(red: Reduction, cur: Value, term: Value) -> list[Value]:
    """The combiner's operands in the order the original update had them."""
    return [cur, term] if red.combine.operands[1] is red.term else [term, cur]


def _init_value(red: Reduction) -> Operation:
    """The constant the accumulator starts from."""
    leaf = body(red.prefix[-1])
    init = next(op for op in leaf if op.name == STORE and op.operands[1] is red.acc.results[0])
    src = init.operands[0].op
    if src is None or src.name != "scalar.const":
        raise ValueError("accumulator does not start from a constant")
    return src


def _stage(b: Builder, factor: Value, mask: Value | None, tile: Value, width: int, tk: int, nthreads: int,
           tid: Value, ko: Value, tile_index: Value, loops: list[Operation], exts: list[int], red: Reduction,
           depth_ext: list[int], base: dict[Value, Value], nest: Operation) -> None:
    """Threads copy the ``tk x width`` slice of one factor into shared memory together, zeros outside."""
    inner, lin = _strided(b, tk * width, nthreads, tid, "unroll", f"gpu.stage{width}")
    kk = _arith(inner, "div", lin, width)
    col = _arith(inner, "mod", lin, width)
    zero = inner.create("scalar.const", [], {"value": 0, "type": ScalarType(tile.type.dtype)}).results[0]
    inner.create(STORE, [zero, tile, kk, col])
    k = _linear(inner, [(ko, tk), (kk, 1)])
    pos = _linear(inner, [(tile_index, width), (col, 1)])
    inside = _and(inner, _below(inner, k, red.depth), _below(inner, pos, math.prod(exts)))
    ib = _guard(inner, inside)
    mapping = dict(base)
    mapping.update({iv(l): v for l, v in zip(loops, _delinearize(ib, pos, exts))})
    mapping.update({iv(l): v for l, v in zip(red.loops, _delinearize(ib, k, depth_ext))})
    _clone_deps(ib, [factor] if mask is None else [factor, mask], mapping, body(nest))
    value = mapping.get(factor, factor)
    if mask is not None:
        value = ib.create("scalar.select", [mapping.get(mask, mask), value, zero]).results[0]
    ib.create(STORE, [value, tile, kk, col])


def _rebuild_term(b: Builder, term: Value, plan: ContractionPlan, x: Value, y: Value) -> Value:
    """``term`` (a product, possibly cast) computed from the staged factors."""
    mapping = {plan.row_factor: x, plan.col_factor: y}
    chain = []
    op = term.op
    while op.name == "scalar.cast":
        chain.append(op)
        op = op.operands[0].op
    new = b.insert(op.clone(mapping))
    for cast in reversed(chain):
        new = b.insert(cast.clone(mapping))
    return new.results[0]


def _epilogue(b: Builder, red: Reduction, plan: ContractionPlan, acc: Value, ty: Value, tx: Value, ty_n: int,
              tx_n: int, by: Value, bx: Value, base: dict[Value, Value], nest: Operation) -> None:
    """Each thread finishes its outputs: what the nest did with the sum, on the registers."""
    row_ext, col_ext = [extent(l) for l in plan.rows], [extent(l) for l in plan.cols]
    for mi in range(plan.micro):
        for mj in range(plan.micro):
            row = _linear(b, [(by, plan.tm), (ty, 1)], mi * ty_n)
            col = _linear(b, [(bx, plan.tn), (tx, 1)], mj * tx_n)
            ib = _guard(b, _and(b, _below(b, row, plan.m), _below(b, col, plan.n)))
            mapping = dict(base)
            mapping.update({iv(l): v for l, v in zip(plan.rows, _delinearize(ib, row, row_ext))})
            mapping.update({iv(l): v for l, v in zip(plan.cols, _delinearize(ib, col, col_ext))})
            total = ib.create(LOAD, [acc, _index(ib, mi), _index(ib, mj)]).results[0]
            _finish(ib, red, total, mapping, nest)
