"""Vertical fusion inside a kernel: substituting a parallel compute's expression into its readers.

``inline_compute(kernel, compute)`` replaces every ``structured.read`` of the compute's result
by a copy of the compute's body with its axes bound to the read's indices, so the intermediate
tensor disappears: a transpose becomes a permuted read, a pad a bounds-checked one, a relu
after a bias add one expression.  A read with a ``pad`` value keeps its meaning: the copy is
evaluated at clamped indices and ``select``-ed against the pad where the index is outside.

``simplify_kernel`` decides, compute by compute, between reuse and recomputation: a compute
is inlined when evaluating its expression at every read costs less than writing its buffer
and reading it back (``recompute_cost <= buffer_cost``), and kept as a buffer otherwise (the
exponentials of a softmax read by two computes, a statistic read across a whole row).  Into a
contraction (the GEMM/conv of the kernel) only data movement with an affine index map is
inlined: the micro-kernel packs its operands, so anything else would be recomputed per tile.
"""
from __future__ import annotations

from ...dialects.scalar import INDEX
from ...dialects.structured.ops import ComputeView, KernelView
from ...errors import PassError
from ...ir.builder import Builder
from ...ir.core import Operation, Value
from ...ir.symbolic import hint_elements
from ...ir.types import DType, ScalarType
from .kinds import AFFINE, COMPUTE, READ, anchors, axis_deps, is_data_movement, read_map

# Cost, in simple-operation units, of writing one element to a buffer and reading it back
# (the same unit as the default schedule's, so both levels agree on what recomputation costs).
MEMORY_ROUND_TRIP = 4.0
# Recomputation a contraction's epilogue may take on to stay one expression, as a share of the
# contraction's multiply-adds.
EPILOGUE_PARAM_SHARE = 0.05


def op_cost(op: Operation) -> float:
    """Simple-operation units of one body op: a read is one, a scalar op the flops its definition
    declares (exp 8, erf 12, ...), index arithmetic and constants nothing."""
    if op.name == READ:
        return 1.0
    if op.name in ("scalar.const", "structured.yield") or all(r.type == INDEX for r in op.results):
        return 0.0
    flops = getattr(op.opdef, "flops", 1.0) if op.opdef is not None else 1.0
    return float(max(flops, 1.0))


def body_cost(cv: ComputeView) -> float:
    return max(sum(op_cost(op) for op in cv.body), 1.0)


def _clone_body(b: Builder, cv: ComputeView, indices: list[Value]) -> Value:
    mapping: dict[Value, Value] = dict(zip(cv.axes, indices))
    for op in cv.body:
        if op.name == "structured.yield":
            v = op.operands[0]
            return mapping.get(v, v)
        b.insert(op.clone(mapping))
    raise PassError("compute body has no structured.yield")


def _index_const(b: Builder, value: int) -> Value:
    return b.create("scalar.const", [], {"value": int(value), "type": INDEX}).results[0]


def _guarded(b: Builder, cv: ComputeView, indices: list[Value], shape, pad: float, dtype: DType) -> Value:
    """``inside(indices) ? body(clamp(indices)) : pad``."""
    zero = _index_const(b, 0)
    inside = None
    clamped = []
    for i, n in zip(indices, shape):
        top = _index_const(b, n - 1)
        ok = b.create("scalar.and", [b.create("scalar.ge", [i, zero]).results[0],
                                     b.create("scalar.le", [i, top]).results[0]]).results[0]
        inside = ok if inside is None else b.create("scalar.and", [inside, ok]).results[0]
        clamped.append(b.create("scalar.min", [b.create("scalar.max", [i, zero]).results[0], top]).results[0])
    value = _clone_body(b, cv, clamped)
    if inside is None:
        return value
    padv = b.create("scalar.const", [], {"value": float(pad) if dtype.is_float else int(pad),
                                         "type": ScalarType(dtype)}).results[0]
    return b.create("scalar.select", [inside, value, padv]).results[0]


def reads_of(compute: Operation) -> list[Operation]:
    return [op for op, i in compute.results[0].uses if op.name == READ and i == 0]


def inline_compute(kernel: Operation, compute: Operation, keep: bool = False) -> int:
    """Substitutes ``compute`` (parallel, no reduction) into every read of its result in
    ``kernel``; erases it unless ``keep`` or the kernel returns it.  Returns the reads replaced."""
    cv = ComputeView(compute)
    if cv.combiner != "none":
        raise PassError(f"inline_compute: '{kernel.attributes.get('sym_name')}' compute reduces "
                        f"({cv.combiner}); only parallel computes can be substituted into their readers")
    res = compute.results[0]
    dtype = compute.attributes["dtype"]
    count = 0
    for read in reads_of(compute):
        b = Builder.before(read)
        idx = list(read.operands[1:])
        pad = read.attributes.get("pad")
        value = _clone_body(b, cv, idx) if pad is None else _guarded(b, cv, idx, res.type.shape, pad, dtype)
        read.results[0].replace_all_uses_with(value)
        read.erase()
        count += 1
    if not keep and not res.uses:
        compute.erase()
    return count


# ---- reuse or recompute ----------------------------------------------------------------------
def read_runs(read: Operation) -> int:
    """How often a read runs: the extents of the reader's axes down to the deepest one its indices
    depend on, in the order of the reader's loop nest (its domain order).  A compiler hoists the
    read out of the loops inside that one, not out of an axis it does not depend on that runs
    outside a dependent one: ``mean[n, h, w]`` read in a nest ``n, c, h, w`` runs C times per
    mean (a statistic over a non-innermost axis), ``scale[c]`` in the same nest once per ``(n, c)``."""
    compute = read.parent.parent.parent
    cv = ComputeView(compute)
    deps = set().union(*(axis_deps(i, cv) for i in read.operands[1:])) if len(read.operands) > 1 else set()
    # the default nest: parallel axes outside, in domain order, then the reduction axes
    order = [k for k, it in enumerate(cv.iterators) if it == "p"] + [k for k, it in enumerate(cv.iterators)
                                                                      if it != "p"]
    deepest = max((pos for pos, k in enumerate(order) if id(cv.axes[k]) in deps), default=-1)
    return hint_elements(cv.domain[k] for k in order[:deepest + 1])


def decide_inline(compute: Operation, returned: bool, anchor_computes: list[ComputeView]) -> tuple[bool, str]:
    """Whether to substitute ``compute`` into its readers, and why.  ``anchor_computes``: the
    kernel's contraction (if any), whose operands take only data movement."""
    cv = ComputeView(compute)
    reads = reads_of(compute)
    if cv.combiner != "none":
        return False, "reduction: computed once"
    if not reads:
        return False, "not read inside the kernel"
    anchor_ids = {id(a.op) for a in anchor_computes}
    if {id(r.parent.parent.parent) for r in reads} & anchor_ids:
        if returned or not is_data_movement(cv):
            return False, "a contraction reads it: only data movement folds into GEMM/conv loads"
        if max(_composed_map(cv, r) for r in reads) > AFFINE:
            return False, "a contraction reads it through a non-affine index map"
        return True, "data movement folded into the contraction's loads"
    if _rounds(cv) and len(reads) > 1 and any(ComputeView(r.parent.parent.parent).combiner in ("max", "min")
                                              for r in reads):
        return False, "a max/min reduction and other readers must see the same rounded values: computed once"
    cost = body_cost(cv)
    runs = sum(read_runs(r) for r in reads)
    elems = max(hint_elements(compute.results[0].type.shape), 1)
    if anchor_computes and not returned and not _reads_any(compute, anchor_ids):
        # a per-channel parameter of an epilogue: recomputing it per output element is noise next
        # to the contraction, and keeps the epilogue one expression the micro-kernel can apply
        # (at least 1, as elems: a contraction over an empty domain, Gemm with N = 0, does no work)
        work = max(max(hint_elements(a.domain) for a in anchor_computes), 1)
        if runs * cost <= EPILOGUE_PARAM_SHARE * work:
            return True, f"epilogue parameter recomputed per element ({runs * cost / work:.1%} of the contraction)"
    if not is_data_movement(cv) and any(r.attributes.get("pad") is not None for r in reads):
        return False, "a bounds-checked reader would recompute a non-trivial body at every tap"
    if returned:
        # the buffer is written anyway; inlining only saves reading it back
        if runs <= elems and runs * cost <= elems * MEMORY_ROUND_TRIP / 2:
            return True, f"recompute ({runs}x{cost:g}) for internal readers, buffer still returned"
        return False, "returned: readers reuse the written buffer"
    if runs * cost <= elems * (cost + MEMORY_ROUND_TRIP):
        return True, f"recompute {runs / elems:.3g}x of cost {cost:g} < buffer round trip"
    return False, f"reuse: recomputing {runs / elems:.3g}x at cost {cost:g} exceeds a buffer round trip"


# Body ops whose result has no rounding: every copy of an expression made of these gives the same bits.
_EXACT = {"scalar.const", "scalar.neg", "scalar.abs", "scalar.max", "scalar.min", "scalar.select", "structured.yield"}


def _rounds(cv: ComputeView) -> bool:
    """Whether ``cv``'s value involves rounding arithmetic.  Copies of such an expression in
    different loops may round differently under -ffast-math (gcc vectorizes each loop on its own,
    e.g. a division as reciprocal + Newton step).  For a value that a max is taken of and that is
    read again elsewhere that is fatal: softmax's ``exp(x - max(x))`` then sees every x an ulp
    below the max, which at |x| ~ 4e9 is 512, every exponential underflows and 0 is divided by 0."""
    return any(op.name != READ and op.name not in _EXACT and not all(r.type == INDEX for r in op.results)
               for op in cv.body)


def _reads_any(compute: Operation, targets: set[int]) -> bool:
    """Whether ``compute`` reads (transitively, through other computes) one of ``targets``."""
    seen: set[int] = set()
    stack = [compute]
    while stack:
        c = stack.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        for op in c.regions[0].blocks[0]:
            if op.name == READ and op.operands[0].op is not None:
                src = op.operands[0].op
                if id(src) in targets:
                    return True
                if src.name == COMPUTE:
                    stack.append(src)
    return False


def _composed_map(cv: ComputeView, read: Operation) -> int:
    """The index-map class a reader would see after substitution: the harder of the read's own
    map and the compute's reads (a transpose read through an affine slice stays affine)."""
    inner = max((read_map(cv, r) for r in cv.reads()), default=0)
    return max(inner, read_map(None, read))


def simplify_kernel(kernel: Operation) -> int:
    """Inlines, last first, every compute of ``kernel`` whose recomputation is cheaper than its
    buffer (see ``decide_inline``); returns how many computes were substituted."""
    kv = KernelView(kernel)
    returned = {id(v) for v in kv.outputs}
    anchor_computes = anchors(kernel)
    done = 0
    for op in reversed([op for op in kv.body if op.name == COMPUTE]):
        is_ret = id(op.results[0]) in returned
        ok, _ = decide_inline(op, is_ret, anchor_computes)
        if ok:
            inline_compute(kernel, op, keep=is_ret)
            done += 1
    return done


__all__ = ["MEMORY_ROUND_TRIP", "body_cost", "decide_inline", "inline_compute", "op_cost",
           "read_runs", "reads_of", "simplify_kernel"]
