"""Per-nest schedule rules: what a loop nest is, and which primitives make it fast without tuning.

A kernel's loop.func holds one nest per compute (see ``structured_to_loop``): leading parallel
loops (the *spine*), then either a leaf statement (an elementwise nest), or a rank-0 accumulator
with reduction loops below it (a reduction), or, once producers were moved into it with
``compute_at``, several sub-nests (a *composite* nest: its spine runs over rows, each row runs
the sub-nests in turn).

The rules choose the innermost, vectorized loop by how memory is walked: every load and store
of the nest is scored per candidate loop (contiguous +2, invariant +1, any other stride or a
data-dependent index -2), weighted by how much of a vector the loop's extent fills.
The last spine loop is always a candidate (the output is contiguous in it); so is every
reduction loop.  A reduction whose best loop is a reduction loop keeps its nest and vectorizes
that loop with an OpenMP reduction clause (rows: softmax, layer_norm, sums over the last axis,
dot products); one whose best loop is the output's contiguous loop gets ``cache_write`` and its
reduction loops moved outside that loop (columns, pooling windows, depthwise convolution, i-k-j
matmul), so the vectorized loop updates a row of accumulators.  Transposes are tiled so that
reads and writes both stay within a few cache lines.  Threads go to the outer spine: leading
loops are fused until there are a few iterations per thread, and a lone spine loop is split.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from ..errors import ScheduleError
from ..ir.core import Operation
from ..ir.symbolic import dim_divides
from .analysis import (ALLOC, FOR, LOAD, STORE, affine, body, buffer_of, dim_extent, extent, indices,
                       is_symbolic_loop, iv, iv_deps, perfect_chain, perfect_child, split_pair, symbol_table, tag,
                       walk_ops)
from .primitives import Schedule

# Work (innermost iterations) below which a nest runs on one thread: an OpenMP fork/join costs a
# few microseconds, about what one core needs for this many simple element operations.
PARALLEL_MIN_WORK = 1 << 15
# Elements per thread's chunk of a vectorized whole-tensor max/min on threads (the largest that
# divides the loop and leaves a chunk for every thread)
PARALLEL_REDUCTION_CHUNKS = (4096, 2048, 1024, 512, 256)
# Iterations per thread wanted from the fused outer loops (static split: the imbalance is at most
# one iteration, so a few per thread keep it small).
ITERATIONS_PER_THREAD = 4
# A row of accumulators (``cache_write`` of an outer-axis reduction) longer than this many elements
# is split so that the row stays in L1.
ROW_MAX_ELEMENTS = 2048
# A vectorized reduction loop ends in a horizontal reduction through memory (a store-forwarding
# stall): worth it from this many vectors per loop run; shorter ones are left to the compiler,
# which keeps a float sum or max in order, one scalar operation a latency apart.  Was 8; at 2,
# measured in one process against 8 (2 threads): softmax over rows of 96 0.53x the time, rows of
# 32 0.56x, layer norm over 64 0.60x, a 7x7 global average pool 0.71x; bert_tiny and gpt2_tiny
# 0.98x, efficientnet_b0_small 0.96x.  (Vectorized reductions reassociate, as the long ones did
# already: docs/numerics.md.)
SIMD_REDUCTION_MIN_VECTORS = 2
# A vectorized reduction's innermost loop is fused with the contiguous reduction loops around it
# until it is this long, so that the horizontal reduction above comes once per run rather than once
# per image row: EfficientNet-B0's squeeze-excitation means over 56 x 56 maps (batch 8) ran a
# 56-element loop, three vectors, a masked tail and a horizontal sum per row, at 34 GB/s.
FLAT_REDUCTION_MIN = 1024
# An elementwise nest's contiguous inner loop shorter than this is fused with the loops around it
# (when the accesses allow) so that it vectorizes as one long run.
FLAT_ELEMENTWISE_MIN = 1024
# Tiles of a transpose: a vector of the output's contiguous loop (one cache line of f32 on AVX-512)
# by this many iterations of the loop the input is contiguous in (measured: 32 to 256 are alike,
# a wider output side is slower).
TRANSPOSE_TILE = 64


@dataclass(frozen=True)
class Context:
    """What the rules need to know about the machine."""

    threads: int = 1
    lanes: int = 8                  # f32 elements per vector register
    l2: int = 1 << 20               # bytes of one core's L2 cache

    @staticmethod
    def of(target) -> "Context":
        """From a ``codegen.target.Target``, a thread count (this host's vectors and caches), or None
        (the host)."""
        if target is None:
            from ..codegen.target import Target
            target = Target.host()
        if isinstance(target, int):
            from ..codegen.target import Target
            host = Target.host()
            return Context(threads=max(1, target), lanes=host.vector_width, l2=host.l2)
        return Context(threads=max(1, target.cores), lanes=max(1, target.vector_width), l2=target.l2)


# ---- memory access analysis --------------------------------------------------------------------
@dataclass(frozen=True)
class Access:
    """One load or store: the element stride of its flat address per loop (by id of the loop's iv),
    and the loops it depends on through something that is not affine (floordiv, mod, a load)."""

    op: Operation
    strides: dict[int, int]
    irregular: frozenset[int]

    @staticmethod
    def of(op: Operation) -> "Access":
        shape = buffer_of(op).type.shape
        if not buffer_of(op).type.is_static:        # strides of a symbolic buffer at the hint sizes
            table = symbol_table(op)
            shape = tuple(table.hint(d) for d in shape)
        row = [1] * len(shape)
        for d in range(len(shape) - 2, -1, -1):
            row[d] = row[d + 1] * shape[d + 1]
        strides: dict[int, int] = {}
        irregular: set[int] = set()
        idx, d = indices(op), 0
        while d < len(idx):
            flat = split_pair(idx, buffer_of(op).type.shape, d)      # two dims read as one (fused loops)
            v, step = (flat, 2) if flat is not None else (idx[d], 1)
            form = affine(v)
            if form is None:
                irregular |= iv_deps(v)
            else:
                for k, c in form.terms:
                    strides[k] = strides.get(k, 0) + c * row[d + step - 1]
            d += step
        return Access(op, strides, frozenset(irregular))

    def score(self, loop: Operation) -> float:
        """How well a vector along ``loop`` handles this access."""
        k = id(iv(loop))
        if k in self.irregular:
            return -2.0
        s = abs(self.strides.get(k, 0))
        return 1.0 if s == 0 else 2.0 if s == 1 else -2.0

    def contiguous_in(self, loop: Operation) -> bool:
        k = id(iv(loop))
        return k not in self.irregular and abs(self.strides.get(k, 0)) == 1


def memory_accesses(root: Operation) -> list[Access]:
    """Loads and stores under ``root`` of buffers that live in memory (rank-0 buffers are registers)."""
    return [Access.of(op) for op in walk_ops(root) if op.name in (LOAD, STORE) and buffer_of(op).type.rank > 0]


def vector_score(accesses: Sequence[Access], loop: Operation, lanes: int) -> float:
    """Sum of access scores, scaled by how much of a vector the loop's extent fills."""
    fill = min(extent(loop), lanes) / lanes
    return sum(a.score(loop) for a in accesses) * fill


# ---- nests --------------------------------------------------------------------------------------
ELEMENTWISE, REDUCTION, COMPOSITE = "elementwise", "reduction", "composite"


@dataclass
class Nest:
    """The loops of one compute (or, for a composite nest, of a row loop and what it holds)."""

    compute: str
    root: Operation                           # the nest's first loop, in the block that holds it
    spine: list[Operation]                    # leading non-reduction loops of the perfect chain
    kind: str
    acc: Operation | None = None              # the reduction's rank-0 accumulator
    reduction: list[Operation] = field(default_factory=list)
    children: list[Operation] = field(default_factory=list)   # a composite nest's sub-nest roots

    @property
    def tags(self) -> list[str]:
        return [tag(l) for l in self.spine]

    @property
    def combiner(self) -> str | None:
        """add/mul/max/min of the accumulator update, or None."""
        if self.acc is None or not self.reduction:
            return None
        for st in walk_ops(self.reduction[-1], STORE):
            if st.operands[1] is self.acc.results[0] and st.operands[0].op is not None:
                return st.operands[0].op.name.split(".", 1)[1]
        return None

    def work(self) -> int:
        """Innermost iterations of the whole nest (statements executed, roughly)."""
        total = 0
        for st in walk_ops(self.root, STORE) if self.root.name == FOR else ():
            n = 1
            cur = st.parent_op
            while cur is not None and cur is not self.root.parent_op:
                if cur.name == FOR:
                    n *= extent(cur)
                cur = cur.parent_op
            total += n
        return total


def compute_of(loop: Operation) -> str:
    """The compute a loop belongs to: the first component of its tag (``"3.1.o"`` -> ``"3"``)."""
    return (tag(loop) or "").split(".", 1)[0]


def analyze(root: Operation) -> Nest:
    """Classifies the nest rooted at loop ``root``."""
    c = compute_of(root)
    if root.attributes.get("reduction"):
        acc = _acc_before(root, c)
        return Nest(c, root, [], REDUCTION, acc, _reduction_chain(root))
    spine = []
    for l in perfect_chain(root):
        if l.attributes.get("reduction"):
            break
        spine.append(l)
    blk = body(spine[-1])
    loops = [op for op in blk if op.name == FOR]
    acc = next((op for op in blk if op.name == ALLOC and tag(op) == f"{c}.acc"), None)
    if not loops:
        return Nest(c, root, spine, ELEMENTWISE)
    if acc is not None and len(loops) == 1 and loops[0].attributes.get("reduction"):
        return Nest(c, root, spine, REDUCTION, acc, _reduction_chain(loops[0]))
    return Nest(c, root, spine, COMPOSITE, children=loops)


def _acc_before(loop: Operation, compute: str) -> Operation | None:
    for op in loop.parent:
        if op.name == ALLOC and tag(op) == f"{compute}.acc":
            return op
    return None


def _reduction_chain(loop: Operation) -> list[Operation]:
    out = []
    for l in perfect_chain(loop):
        if not l.attributes.get("reduction"):
            break
        out.append(l)
    return out


def is_contraction(nest: Nest, min_extent: int = 8, min_work: int = 1 << 15) -> bool:
    """A dense contraction (matmul, batch matmul, dense conv): an add-reduction of a product of two
    loads, over at least two parallel and one reduction loop with large extents, where each operand
    is reused across some parallel loop (it does not depend on it).  Depthwise convolutions and
    pooling are not: their data operand depends on every parallel loop."""
    if nest.kind != REDUCTION or nest.combiner != "add" or len(nest.spine) < 2:
        return False
    big = [l for l in nest.spine if extent(l) >= min_extent]
    if len(big) < 2 or math.prod(extent(l) for l in nest.reduction) < min_extent or nest.work() < min_work:
        return False
    update = next((st for st in walk_ops(nest.reduction[-1], STORE) if st.operands[1] is nest.acc.results[0]), None)
    comb = update.operands[0].op if update is not None else None
    if comb is None:
        return False
    term = next((o for o in comb.operands if not (o.op is not None and o.op.name == LOAD
                                                  and o.op.operands[0] is nest.acc.results[0])), None)
    if term is None or term.op is None or term.op.name != "scalar.mul":
        return False
    loads = [_through_casts(o) for o in term.op.operands]
    if any(ld is None for ld in loads):
        return False
    for ld in loads:
        deps = frozenset().union(*(iv_deps(i) for i in indices(ld)))
        if all(id(iv(l)) in deps for l in big):
            return False
    return True


def _through_casts(v) -> Operation | None:
    while v.op is not None and v.op.name == "scalar.cast":
        v = v.op.operands[0]
    return v.op if v.op is not None and v.op.name == LOAD else None


# ---- rules --------------------------------------------------------------------------------------
@dataclass
class Plan:
    """What a rule leaves for the caller: the loop that must stay innermost (nothing at or below it
    runs on threads), how much work the nest holds, and the loops to mark ``vectorize`` (and
    ``unroll``, with factors) last, once restructuring is over."""

    inner: str | None
    work: int
    vectorize: list[str] = field(default_factory=list)
    unroll: list[tuple[str, int]] = field(default_factory=list)


def schedule_nest(s: Schedule, root: Operation, ctx: Context, top: bool) -> None:
    """Schedules the nest rooted at ``root``; ``top``: it is a top-level nest, so it may take threads."""
    nest, block = analyze(root), root.parent
    if nest.kind == COMPOSITE:
        plan = Plan(None, nest.work())
        for child in list(nest.children):
            schedule_nest(s, child, ctx, top=False)
    elif nest.kind == ELEMENTWISE:
        plan = elementwise_rule(s, nest, ctx, top)
    else:
        plan = reduction_rule(s, nest, ctx, top)
    _finish(s, block, root, plan, ctx, top)


def contraction_rule(s: Schedule, root: Operation, ctx: Context) -> None:
    """A top-level dense contraction: a register tile when the nest is matmul-shaped (see
    ``_register_tile``), else the generic nest rule."""
    nest, block = analyze(root), root.parent
    plan = _register_tile(s, nest, ctx) if nest.kind == REDUCTION else None
    if plan is None:
        schedule_nest(s, root, ctx, top=True)
    else:
        _finish(s, block, root, plan, ctx, top=True)


def _finish(s: Schedule, block, root: Operation, plan: Plan, ctx: Context, top: bool) -> None:
    """Threads (top-level nests), then the annotations: ``block`` is where the nest's root was
    before the rule ran (a split or tile may have put a new loop above it)."""
    if top:
        parallelize(s, _root_in(block, root), plan, ctx)
    for t in plan.vectorize:
        attempt(s.vectorize, t)
    for t, f in plan.unroll:
        attempt(s.unroll, t, f)


def _register_tile(s: Schedule, nest: Nest, ctx: Context) -> Plan | None:
    """i-k-j with an ``ti x tj`` block of accumulators (8 x two vectors): the last two spine loops
    ``i, j`` are tiled, the reductions move outside the tile, ``j`` is vectorized and ``i`` unrolled,
    so each loaded vector of B feeds ``ti`` accumulators (about twice the plain i-k-j row schedule,
    see tests/schedule/bench_matmul.py).  Only when every read is reused along ``i`` or ``j`` (a
    matmul, not a convolution window), is contiguous or invariant along ``j``, and the extents
    divide (no guards)."""
    if len(nest.spine) < 2:
        return None
    i, j = nest.spine[-2], nest.spine[-1]
    reads = memory_accesses(nest.reduction[-1])
    if not all(a.score(j) > 0 and (a.score(i) == 1 or a.score(j) == 1) for a in reads):
        return None
    if not any(a.contiguous_in(j) for a in reads):
        return None
    table = symbol_table(i)
    ti = next((t for t in (8, 4) if dim_divides(t, dim_extent(i), table)), None)
    tj = next((t for t in (2 * ctx.lanes, ctx.lanes) if dim_divides(t, dim_extent(j), table)), None)
    if ti is None or tj is None:
        return None
    it, jt, r_tags = tag(i), tag(j), [tag(l) for l in nest.reduction]

    def apply(x: Schedule) -> tuple[str, str]:
        _, jo, ii, ji = x.tile(it, jt, ti, tj)
        x.cache_write(nest.compute, jo)
        x.reorder(*r_tags, ii, ji)
        return ii, ji

    done = _atomically(s, apply)
    if done is None:
        return None
    ii, ji = done
    return Plan(ii, nest.work(), [ji, f"{ji}.init", f"{ji}.wb"], [(ii, ti)])


def elementwise_rule(s: Schedule, nest: Nest, ctx: Context, top: bool) -> Plan:
    """Vectorize the output's contiguous (last) loop; tile a transpose; split a lone loop for threads."""
    work = nest.work()
    v = nest.spine[-1]
    accesses = memory_accesses(v)
    tiled = _tile_transpose(s, nest, v, accesses, ctx)
    if tiled is not None:
        return Plan(tiled[0], work, [tiled[1]])
    outer, n = math.prod(extent(l) for l in nest.spine[:-1]), extent(v)
    vt = _flatten_inner(s, tag(v), FLAT_ELEMENTWISE_MIN, reduction=False)
    v = s.loop(vt)
    outer = max(1, outer * n // max(1, extent(v)))     # the spine loops left around the fused one
    factor = split_factor(extent(v), outer, work, ctx, top)
    if factor:
        vt = s.split(vt, factor)[1]
    return Plan(vt, work, [vt] if extent(s.loop(vt)) >= 4 else [])


def _tile_transpose(s: Schedule, nest: Nest, v: Operation, accesses: list[Access], ctx: Context):
    """For loads that are strided along the output's contiguous loop ``v`` but contiguous along
    another spine loop ``u``: bring ``u`` next to ``v`` and tile both (``TRANSPOSE_TILE`` x one vector),
    so that a tile's reads and writes stay within a few dozen cache lines.  Returns (first inner loop,
    loop to vectorize)."""
    strided = [a for a in accesses if a.op.name == LOAD and a.score(v) < 0]
    if not strided:
        return None
    best = None
    for u in nest.spine[:-1]:
        if extent(u) >= ctx.lanes // 2 and any(a.contiguous_in(u) for a in strided):
            best = u
    if best is None or extent(v) < ctx.lanes // 2:
        return None
    ut, vt = tag(best), tag(v)
    tags = nest.tags
    i, j = tags.index(ut), tags.index(vt)
    fu, fv = _tile_factor(best, TRANSPOSE_TILE), _tile_factor(v, ctx.lanes)

    def apply(x: Schedule) -> tuple[str, str]:
        if j - i > 1:
            x.reorder(*tags[i + 1:j], ut)    # u moves down next to v
        _, _, ui, vi = x.tile(ut, vt, fu, fv)
        return ui, vi

    return _atomically(s, apply)


def _tile_factor(loop: Operation, f: int) -> int:
    """``f``, or a nearby factor that divides the loop's extent ``n`` (no guards), or ``n`` itself
    when it is small.  A symbolic extent gets ``f`` (its split is guarded)."""
    if is_symbolic_loop(loop):
        return f
    n = extent(loop)
    if n <= f:
        return n
    for g in (f, 2 * f, f // 2):
        if n % g == 0:
            return g
    return f


def reduction_rule(s: Schedule, nest: Nest, ctx: Context, top: bool) -> Plan:
    """Inner strategy (vectorized reduction loop) or outer strategy (cache_write, reduction loops
    outside the vectorized output loop), whichever walks memory better.  The outer strategy needs
    every read to be contiguous or invariant along the output loop: strided reads (a window with a
    stride) would be gathers, slower than the plain nest (measured on pooling and depthwise
    convolution with stride 2)."""
    work = nest.work()
    leaf = nest.reduction[-1]
    reads = memory_accesses(leaf)
    accesses = reads + [Access.of(op) for op in body(nest.spine[-1]) if op.name == STORE
                        and buffer_of(op).type.rank > 0] if nest.spine else reads
    best_r = max(nest.reduction, key=lambda l: vector_score(accesses, l, ctx.lanes))
    r_score = vector_score(accesses, best_r, ctx.lanes)
    v = nest.spine[-1] if nest.spine else None
    p_score = vector_score(accesses, v, ctx.lanes) if v is not None else -math.inf
    if p_score > r_score and all(a.score(v) > 0 for a in reads):
        plan = _outer_strategy(s, nest, ctx, top, work)
        if plan is not None:
            return plan
    return _inner_strategy(s, nest, best_r, work, ctx)


def _inner_strategy(s: Schedule, nest: Nest, r: Operation, work: int, ctx: Context) -> Plan:
    rt = tag(r)
    tags = [tag(l) for l in nest.reduction]
    if tags[-1] != rt:
        attempt(s.reorder, *[t for t in tags if t != rt], rt)
    rt = _flatten_reduction(s, rt, max(FLAT_REDUCTION_MIN, SIMD_REDUCTION_MIN_VECTORS * ctx.lanes))
    return Plan(None, work, [rt] if extent(s.loop(rt)) >= SIMD_REDUCTION_MIN_VECTORS * ctx.lanes else [])


def _flatten_reduction(s: Schedule, rt: str, enough: int) -> str:
    """Fuses the innermost reduction loop ``rt`` with the reduction loops around it while it is
    shorter than ``enough`` and every access walks the pair as one contiguous run (the sum over
    H x W of a global average pool, 7 x 7 or 16 x 16: too short to vectorize one row at a time, but
    one loop over H*W elements is; the fused indices ``e floordiv W, e mod W`` address memory as
    ``e`` again, see ``analysis.split_pair``).  Returns the tag of the innermost reduction loop."""
    return _flatten_inner(s, rt, enough, reduction=True)


def _flatten_inner(s: Schedule, t: str, enough: int, reduction: bool) -> str:
    """Fuses loop ``t`` with the loops around it (reduction loops, or output loops) while it is
    shorter than ``enough`` and every access walks each pair as one contiguous run.  An
    elementwise nest over a 56 x 56 image vectorizes one row of 56 at a time otherwise: seven
    vectors and a masked tail per row, measured 3x slower than one loop over the 3136 pixels."""
    while extent(s.loop(t)) < enough:
        inner = s.loop(t)
        outer = inner.parent_op
        if (outer is None or outer.name != FOR or bool(outer.attributes.get("reduction")) != reduction
                or outer.attributes.get("kind") != "serial" or not isinstance(dim_extent(inner), int)
                or not isinstance(dim_extent(outer), int) or perfect_child(outer) is not inner):
            break
        ko, ki, n = id(iv(outer)), id(iv(inner)), extent(inner)
        accesses = memory_accesses(inner)
        if not accesses or not all(ko not in a.irregular and ki not in a.irregular and
                                   a.strides.get(ko, 0) == n * a.strides.get(ki, 0) for a in accesses):
            break
        if not any(abs(a.strides.get(ki, 0)) == 1 for a in accesses):
            break
        fused = _atomically(s, lambda x: x.fuse(tag(outer), t))
        if fused is None:
            break
        t = fused
    return t


def _outer_strategy(s: Schedule, nest: Nest, ctx: Context, top: bool, work: int) -> Plan | None:
    vt = tag(nest.spine[-1])
    outer = math.prod(extent(l) for l in nest.spine[:-1])
    factor = split_factor(extent(nest.spine[-1]), outer, work, ctx, top, row_max=ROW_MAX_ELEMENTS, exact=True)
    if factor and not dim_divides(factor, dim_extent(nest.spine[-1]), symbol_table(nest.root)):
        factor = None        # a divisor of the hint need not divide the run-time extent: no split
    r_tags = [tag(l) for l in nest.reduction]

    def apply(x: Schedule) -> str:
        v = x.split(vt, factor)[1] if factor else vt
        at = x.loop(v).parent_op
        x.cache_write(nest.compute, tag(at) if at is not None and at.name == FOR else None)
        x.reorder(*r_tags, v)                    # reductions take the outer places, v the innermost
        return v

    v = _atomically(s, apply)
    if v is None:
        return None
    return Plan(v, work, [v, f"{v}.init", f"{v}.wb"])


def split_factor(n: int, outer: int, work: int, ctx: Context, top: bool, row_max: int | None = None,
                 exact: bool = False) -> int | None:
    """How to split an innermost spine loop of extent ``n`` below ``outer`` iterations of the loops
    around it: into chunks that give the threads a few iterations each (a top-level nest with
    enough work), and, with ``row_max``, no longer than that.  None: leave it.  ``exact``: only a
    divisor of ``n`` (the nest cannot take a guard)."""
    want_threads = (top and ctx.threads > 1 and work >= PARALLEL_MIN_WORK
                    and outer < ctx.threads * ITERATIONS_PER_THREAD)
    chunk = n
    if want_threads:
        chunk = max(ctx.lanes, n // -(-ctx.threads * ITERATIONS_PER_THREAD // outer))
    if row_max is not None:
        chunk = min(chunk, row_max)
    if chunk >= n:
        return None
    factor = _divisor_near(n, chunk, ctx.lanes, exact)
    return factor if factor is not None and 1 < factor < n else None


def _divisor_near(n: int, want: int, lanes: int, exact: bool) -> int | None:
    """A factor for splitting ``n`` near ``want`` (not above it): a divisor that is a multiple of the
    vector length if one is within 8x of ``want`` (no guard, no remainder loop), else a divisor of at
    least a vector within 2x, else (unless ``exact``) ``want`` rounded to whole vectors (guarded)."""
    want = max(1, min(want, n))
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    divisors = [d for d in sorted(set(small + [n // d for d in small])) if d <= want]
    for ok in (lambda d: d % lanes == 0 and d * 8 >= want, lambda d: d >= lanes and d * 2 >= want):
        good = [d for d in divisors if ok(d)]
        if good:
            return max(good)
    return None if exact else max(lanes, want // lanes * lanes)


# ---- threads ------------------------------------------------------------------------------------
def parallelize(s: Schedule, root: Operation, plan: Plan, ctx: Context) -> str | None:
    """Fuses the leading spine loops of a top-level nest until they give every thread a few
    iterations, and runs the fused loop on threads; returns its tag (None: the nest stays serial)."""
    if ctx.threads <= 1 or plan.work < PARALLEL_MIN_WORK or root.name != FOR:
        return None
    chain = []
    for l in perfect_chain(root):
        if l.attributes.get("reduction") or tag(l) == plan.inner or l.attributes["kind"] != "serial":
            break
        chain.append(l)
    if not chain:
        return _parallel_reduction(s, root, plan, ctx)
    want = ctx.threads * ITERATIONS_PER_THREAD
    picked, total = [], 1
    for l in chain:
        picked.append(tag(l))
        total *= extent(l)
        if total >= want:
            break
    if total < 2:
        return None
    t = picked[0]
    for nxt in picked[1:]:
        try:
            t = s.fuse(t, nxt)
        except ScheduleError:
            break
    return t if attempt(s.parallel, t) else None


def _parallel_reduction(s: Schedule, root: Operation, plan: Plan, ctx: Context) -> str | None:
    """A nest that reduces everything to scalars (a dynamic quantization's max and min over a whole
    activation): its first reduction loop with iterations for every thread runs on threads, each
    thread's max/min combined at the end (``Schedule.parallel`` takes only max/min).  Serial, one
    core read the whole tensor while the other waited, much of it from the other core's cache:
    BERT-base int8 with onnxruntime's dynamic quantization spent ~3% of its samples there, its
    second thread idle as long."""
    for l in perfect_chain(root):
        if not l.attributes.get("reduction") or tag(l) == plan.inner or l.attributes["kind"] != "serial":
            return None
        if extent(l) < ctx.threads:
            continue
        t = tag(l)
        if t in plan.vectorize:
            # the loop the plan vectorizes (a flattened whole-tensor loop): threads take chunks of
            # it, each chunk still one vector loop
            chunk = next((f for f in PARALLEL_REDUCTION_CHUNKS if extent(l) % f == 0 and extent(l) // f >= ctx.threads),
                         None)
            parts = _atomically(s, lambda x: x.split(t, chunk)) if chunk else None
            if parts is None:
                return None
            plan.vectorize[plan.vectorize.index(t)] = parts[1]
            t = parts[0]
        return t if attempt(s.parallel, t) else None
    return None


def _root_in(block, old_root: Operation) -> Operation:
    """The nest's outermost loop after rules ran (a split or tile may have put a new loop above it)."""
    cur = old_root
    while cur.parent is not block and cur.parent_op is not None:
        cur = cur.parent_op
    return cur


def _atomically(s: Schedule, apply):
    """``apply(s)`` if the whole sequence of moves is legal (tried on a fork first), else None with
    ``s`` unchanged: a sequence that fails halfway would leave a nest the rule did not plan for."""
    try:
        apply(s.fork())
    except ScheduleError:
        return None
    return apply(s)


def attempt(prim, *args) -> bool:
    """Applies a primitive if it is legal; a rejected one leaves the function as it was."""
    try:
        prim(*args)
        return True
    except ScheduleError:
        return False
