"""The schedule every kernel gets without tuning.

Three passes over a freshly lowered ``loop.func``, each made of schedule primitives, so the
result is an ordinary, replayable trace (an auto-tuner may start from it):

1. **inline** cheap injective producers into their readers (``compute_inline``) when recomputing
   them costs less than writing and re-reading their buffer (a cast before a sum, a mean read by
   the variance and the normalisation, reshapes and transposes in a fused chain);
2. **attach** the remaining producers (row statistics of softmax and the norms, window sums of an
   average pool) to the outer loop of their one consumer (``compute_at``), so that each row is
   produced and consumed while it is in cache; an attachment that would recompute a producer, or
   leave the threads nothing to share, is skipped;
3. **nest rules** (``rules.py``) for every top-level nest: vectorize the loop that walks memory
   contiguously (a reduction loop with an OpenMP reduction clause, or the output's contiguous loop
   under a ``cache_write`` with the reductions moved outside it), tile transposes, and run the
   outer loops on threads (fused to a few iterations per thread, even static split);
4. **prefetch** the next row in row kernels over inputs larger than L2 (``prefetch.py``).

Dense contractions (matmul, batch matmul, dense convolution: see ``rules.is_contraction``) take no
part in 1 and 2 and go to ``contraction_schedule``, the hook a micro-kernel path replaces; by
default a matmul-shaped nest gets i-k-j with an 8 x 2-vector register tile of accumulators, any
other the same nest rule as every kernel.
"""
from __future__ import annotations

import math
from typing import Callable

from ..dialects.scalar import INDEX
from ..errors import ScheduleError
from ..ir.core import Operation, Value
from ..ir.symbolic import dims_equal
from .analysis import (ALLOC, FOR, LOAD, accesses, body, dim_extent, enclosing_loops, extent, find_tagged, indices, iv,
                       iv_deps, perfect_chain, same_index, symbol_table, tag, top_level, walk_ops)
from .prefetch import prefetch_rows
from .primitives import Schedule
from .rules import (PARALLEL_MIN_WORK, Context, analyze, attempt, compute_of, contraction_rule, is_contraction,
                    schedule_nest)

ContractionHook = Callable[[Schedule, str, Context], None]

# Cost, in simple-operation units, of writing an element to a buffer and reading it back.
MEMORY_ROUND_TRIP = 4.0
_EXPENSIVE = {"exp": 8, "log": 8, "tanh": 10, "erf": 10, "pow": 12, "sin": 8, "cos": 8, "sigmoid": 9,
              "silu": 9, "gelu": 12, "softplus": 12, "elu": 9, "div": 3, "sqrt": 3, "rsqrt": 4,
              "reciprocal": 3, "mod": 3, "floordiv": 3, "fmod": 6}


def default_schedule(fn: Operation, target=None, *, contraction: ContractionHook | None = None,
                     check: bool = False) -> Schedule:
    """Schedules ``fn`` (a loop.func, changed in place) for ``target``: a ``codegen.target.Target``,
    a thread count, or None for this host.  Returns the Schedule (its ``trace`` replays the result).

    ``contraction(s, compute, ctx)`` replaces ``contraction_schedule`` for dense contractions.
    ``check``: verify after every primitive and raise when a rule's move is rejected (tests); without
    it a rejected move leaves that nest as the rules had got it, which is always correct code."""
    ctx = Context.of(target)
    s = Schedule(fn, check=check)
    hook = contraction or contraction_schedule
    contractions = {n.compute for n in (analyze(r) for r in _top_loops(s)) if is_contraction(n)}
    inline_producers(s, contractions)
    attach_producers(s, ctx, contractions)
    for root in _top_loops(s):
        if root.parent is None:
            continue
        c = compute_of(root)
        try:
            if c in contractions:
                contractions.discard(c)
                hook(s, c, ctx)
            else:
                schedule_nest(s, root, ctx, top=True)
        except ScheduleError:
            if check:
                raise
            # a move the rules took for legal was not; primitives are atomic, so the nest stays correct
    prefetch_rows(s, ctx)
    return s


def contraction_schedule(s: Schedule, compute: str, ctx: Context) -> None:
    """The default for a dense contraction: for a matmul-shaped nest, i-k-j with an 8 x 2-vector
    register tile of accumulators (j vectorized, i unrolled, the tile rows on threads), else the
    generic nest rule (i-k-j with a ``cache_write`` row, or dot products when B is contiguous along
    k).  A micro-kernel path replaces this hook."""
    for root in _top_loops(s):
        if compute_of(root) == compute:
            contraction_rule(s, root, ctx)
            return


def _top_loops(s: Schedule) -> list[Operation]:
    return [op for op in body(s.fn) if op.name == FOR]


def _intermediates(s: Schedule) -> list[str]:
    """Computes whose result lives in a kernel-local buffer, in program order."""
    return [tag(op)[:-4] for op in body(s.fn) if op.name == ALLOC and (tag(op) or "").endswith(".buf")]


# ---- 1. inline ----------------------------------------------------------------------------------
def inline_producers(s: Schedule, skip: set[str]) -> None:
    """Inlines each injective intermediate whose recomputation is cheaper than its buffer (last
    first, so a producer's cost is judged on the readers it finally has)."""
    for c in reversed(_intermediates(s)):
        if c in skip:
            continue
        buf = s.buffer(f"{c}.buf")
        loads, stores = accesses(s.fn, buf)
        if len(stores) != 1 or not loads:
            continue
        nest = top_level(stores[0])
        if nest.name != FOR or any(l.attributes.get("reduction") for l in walk_ops(nest, FOR)):
            continue
        if len(loads) > 1 and any(_in_extremum_reduction(ld) for ld in loads) \
                and not _exact(stores[0].parent, stores[0]):
            continue
        cost = expression_cost(stores[0].parent, stores[0])
        runs = sum(executions(ld) for ld in loads)
        if runs * cost <= _hint_elements(buf) * (cost + MEMORY_ROUND_TRIP):
            attempt(s.compute_inline, c)


# Scalar ops whose result has no rounding: every copy of a statement made of these gives the same bits.
_EXACT_OPS = {"scalar.const", "scalar.neg", "scalar.abs", "scalar.max", "scalar.min", "scalar.select"}


def _exact(block, store: Operation) -> bool:
    """Whether the statement ``store`` computes its value without rounding (loads, moves, min/max)."""
    for op in block:
        if op is store:
            return True
        if op.name.startswith("scalar.") and op.name not in _EXACT_OPS \
                and not all(r.type == INDEX for r in op.results):
            return False
    return True


def _in_extremum_reduction(load: Operation) -> bool:
    """Whether ``load`` is read inside a max/min reduction loop.

    A rounded value that a max is taken of and that is read again elsewhere stays in its buffer
    (the fusion engine's ``decide_inline`` keeps the same rule one level up): copies of it in
    different loops may round differently under -ffast-math, and softmax's ``exp(x - max(x))``
    then sees every x an ulp below the max -- 512 at |x| ~ 4e9 -- so all exponentials underflow
    and the row is 0/0."""
    loops = enclosing_loops(load)
    if not loops or not loops[-1].attributes.get("reduction"):
        return False
    return any(op.name in ("scalar.max", "scalar.min") for op in walk_ops(loops[-1]))


def expression_cost(block, store: Operation) -> float:
    """Simple-operation units of the statement ``store`` and the ops before it in ``block``."""
    total = 0.0
    for op in block:
        if op is store:
            break
        if op.name == LOAD:
            total += 1
        elif op.name.startswith("scalar.") and op.name != "scalar.const":
            total += _EXPENSIVE.get(op.name.split(".", 1)[1], 1)
    return max(total, 1.0)


def executions(load: Operation) -> int:
    """How often a load runs, counting only loops down to the deepest one its index depends on
    (the compiler hoists it out of the loops inside that)."""
    deps = frozenset().union(*(iv_deps(i) for i in indices(load))) if indices(load) else frozenset()
    loops = enclosing_loops(load)
    deepest = max((k for k, l in enumerate(loops) if id(iv(l)) in deps), default=-1)
    return math.prod(extent(l) for l in loops[:deepest + 1])


# ---- 2. attach ----------------------------------------------------------------------------------
def attach_producers(s: Schedule, ctx: Context, skip: set[str]) -> None:
    """``compute_at`` of each intermediate into the deepest outer loop of its single consumer nest
    that fixes (part of) its index without recomputation, last producer first."""
    for c in reversed(_intermediates(s)):
        if c in skip:
            continue
        alloc = find_tagged(s.fn, ALLOC, f"{c}.buf")
        if alloc is None or alloc.parent is not body(s.fn):
            continue
        buf = alloc.results[0]
        loads, stores = accesses(s.fn, buf)
        if not loads or len(stores) != 1:
            continue
        readers = {id(top_level(ld)): top_level(ld) for ld in loads}
        if len(readers) != 1:
            continue
        (consumer,) = readers.values()
        if consumer.name != FOR or compute_of(consumer) in skip:
            continue
        reorder_for_attach(s, buf, loads, consumer)
        for loop in reversed(attach_candidates(buf, loads, stores[0], consumer, ctx)):
            if attempt(s.compute_at, c, tag(loop)):
                break


def reorder_for_attach(s: Schedule, buf: Value, loads: list[Operation], consumer: Operation) -> bool:
    """Moves the loops of an elementwise consumer that index ``buf`` outside those that do not
    (keeping the innermost loop innermost, where it is vectorized), so that ``compute_at`` can
    produce one slice of ``buf`` per iteration of the outer loops.

    The case is a statistic over a non-innermost axis: a LayerNorm over the channels of NCHW reads
    ``mean[n, h, w]`` from a nest ``n, c, h, w``; as ``n, h, c, w`` each row ``(n, h)`` gets its
    statistics (vectorized along ``w``, reduced across the channel planes) right before the channels
    of that row are normalised, while the row is in cache, instead of a pass over all of ``x`` per
    statistic.  When a reshape flattened the pixels (``c, p`` reading ``mean[p // W, p % W]``), the
    pixel loop is first split by ``W`` (``split`` gives back ``h, w`` as the indices).  Only perfect
    nests of plain parallel loops whose loads of ``buf`` index by loop variables of the nest
    qualify; False when no loop was moved."""
    chain = perfect_chain(consumer)
    if any(l.attributes.get("reduction") or l.attributes["kind"] != "serial" for l in chain):
        return False
    if any(op.name == FOR for op in walk_ops(chain[-1])):
        return False
    ids = {id(iv(l)) for l in chain}
    for ld in loads:
        if ld.parent is not body(chain[-1]) or not all(iv_deps(e) <= ids for e in indices(ld)):
            return False
    d = _flattened_divisor(loads, chain[-1])
    if d is not None and len(chain) >= 2 and attempt(s.split, tag(chain[-1]), d):
        chain = perfect_chain(consumer)
    if len(chain) < 3:
        return False
    used: set[int] = set()
    for ld in loads:
        for e in indices(ld):
            used |= iv_deps(e)
    outer = chain[:-1]
    order = [l for l in outer if id(iv(l)) in used] + [l for l in outer if id(iv(l)) not in used]
    if order == outer or not any(id(iv(l)) in used for l in outer):
        return False
    return attempt(s.reorder, *[tag(l) for l in order])


# A flattened axis is split back into rows of at least this many elements (an AVX2 vector of f32).
MIN_SPLIT_ROW = 8


def _flattened_divisor(loads: list[Operation], inner: Operation) -> int | None:
    """``d`` when a load indexes by ``inner // d`` and ``inner % d`` (a reshape flattened a
    (rows, d) pair of axes into the innermost loop) and ``d`` divides the loop's extent: split by
    ``d``, the loop gives back the row index, which a statistic over the other axes can be attached to."""
    n = dim_extent(inner)
    if not isinstance(n, int):
        return None
    i = iv(inner)
    for ld in loads:
        for e in indices(ld):
            op = e.op
            if op is None or op.name != "scalar.floordiv" or op.operands[0] is not i:
                continue
            c = op.operands[1].op
            d = c.attributes.get("value") if c is not None and c.name == "scalar.const" else None
            if isinstance(d, int) and MIN_SPLIT_ROW <= d < n and n % d == 0:
                return d
    return None


def attach_candidates(buf: Value, loads: list[Operation], store: Operation, consumer: Operation,
                      ctx: Context) -> list[Operation]:
    """Loops of the consumer, outermost first, where ``compute_at`` computes each producer element
    once: every loop down to it fixes a leading index of the buffer, and the producer has plain
    loops over those dimensions.  Innermost loops are left out (they get vectorized), and so are
    loops with fewer iterations than threads when the consumer is worth running on threads."""
    common = enclosing_loops(loads[0])
    for ld in loads[1:]:
        mine = enclosing_loops(ld)
        k = 0
        while k < min(len(common), len(mine)) and common[k] is mine[k]:
            k += 1
        common = common[:k]
    shape = buf.type.shape
    k_p = _plain_leading_loops(store, shape)
    producer = top_level(store)
    work = analyze(consumer).work() + (analyze(producer).work() if producer.name == FOR else 1)
    busy = ctx.threads > 1 and work >= PARALLEL_MIN_WORK
    out, runs, outer = [], 1, set()
    for loop in common:
        if loop.attributes.get("reduction") or loop.attributes["kind"] != "serial":
            break
        if not any(op.name == FOR for op in walk_ops(loop)):
            break
        outer.add(id(iv(loop)))
        runs *= extent(loop)
        k_c = _fixed_leading_dims(loads, outer)
        k = min(k_c, k_p)
        if k == 0 or runs > math.prod(symbol_table(buf.op or consumer).hint(d) for d in shape[:k]):
            break
        if not busy or runs >= ctx.threads:
            out.append(loop)
    return out


def _fixed_leading_dims(loads: list[Operation], outer: set[int]) -> int:
    k = 0
    rank = len(indices(loads[0]))
    while k < rank:
        first = indices(loads[0])[k]
        # the criterion of ``compute_at``: every read fixes the same index per iteration (else the
        # primitive fixes fewer dims than counted here and recomputes the producer each iteration)
        if not all(iv_deps(indices(ld)[k]) <= outer and same_index(first, indices(ld)[k]) for ld in loads):
            break
        k += 1
    return k


def _plain_leading_loops(store: Operation, shape) -> int:
    """How many leading dimensions of the producer's buffer its nest writes with one plain loop each."""
    nest = top_level(store)
    if nest.name != FOR:
        return 0
    chain = perfect_chain(nest)
    w = indices(store)
    k = 0
    while (k < min(len(chain), len(shape)) and w[k] is iv(chain[k]) and dims_equal(dim_extent(chain[k]), shape[k])
           and not chain[k].attributes.get("reduction")):
        k += 1
    return k


def _hint_elements(buf: Value) -> int:
    """Elements of a buffer, symbolic dims at their hints (a cost, not a size)."""
    if buf.type.is_static:
        return buf.type.num_elements
    table = symbol_table(buf.op) if buf.op is not None else symbol_table(buf.owner.parent_op)
    return math.prod(table.hint(d) for d in buf.type.shape)
