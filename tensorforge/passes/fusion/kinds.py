"""What a kernel is, for the fusion rules: its fusion kind, its contraction computes, its index maps.

The kind comes from the op definitions: lowering records the kind of the op a kernel came from
in ``tf.fusion``, and a merged kernel records the largest kind of its members.  A kernel without
the attribute (written by hand, parsed from text) is classified from its structure, the same
way: a contraction compute makes it ``OUT_ELEMENTWISE_FUSABLE``, any other reduction
``REDUCTION``, reads at anything but the compute's own axes ``INJECTIVE``.

Index maps are classified per read index: an axis or a constant (``projection``: the read walks
the axes of the compute, maybe some of them fixed), sums and constant multiples of those
(``affine``: a window, an offset, a merged reshape dim), floordiv/mod/min/max/select
(``nonaffine``: split reshape dims, clamps), or anything computed from data (``indirect``: gather).
"""
from __future__ import annotations

from typing import Iterable

from ...dialects.structured.ops import ComputeView, KernelView
from ...ir.core import Operation, Value
from ...ir.opdef import FusionKind
from ...ir.types import IndexType
from ..lower.graph_to_kernels import FUSION_ATTR

KERNEL = "structured.kernel"
COMPUTE = "structured.compute"
READ = "structured.read"

# Index-map classes, from the easiest for a consumer to walk to the hardest.
PROJECTION, AFFINE, NONAFFINE, INDIRECT = 0, 1, 2, 3
MAP_NAMES = ("projection", "affine", "nonaffine", "indirect")

_AFFINE_OPS = {"scalar.add", "scalar.sub", "scalar.neg"}
# Ops that move or convert data without computing on it: what a prologue may hold.
_MOVEMENT_OPS = {READ, "structured.yield", "scalar.const"}


def kind_name(kind: FusionKind) -> str:
    return kind.name.lower()


def parse_kind(text: str) -> FusionKind:
    return FusionKind[text.upper()]


def kernel_kind(kernel: Operation) -> FusionKind:
    """The kernel's fusion kind: recorded by lowering / merging, else read off its structure."""
    recorded = kernel.attributes.get(FUSION_ATTR)
    if recorded is not None:
        return parse_kind(recorded)
    return structural_kind(kernel)


def structural_kind(kernel: Operation) -> FusionKind:
    kind = FusionKind.ELEMENTWISE
    for cv in KernelView(kernel).computes:
        if is_contraction(cv):
            return FusionKind.OUT_ELEMENTWISE_FUSABLE
        if cv.reduction_axes:
            kind = max(kind, FusionKind.REDUCTION)
        elif any(read_map(cv, r) != PROJECTION or not _reads_own_axes(cv, r) for r in cv.reads()):
            kind = max(kind, FusionKind.INJECTIVE)
    return kind


def _reads_own_axes(cv: ComputeView, read: Operation) -> bool:
    """True when ``read`` indexes its tensor with the compute's trailing axes in order (NumPy
    broadcasting: size-1 dims may read index 0): an elementwise read."""
    idx = read.operands[1:]
    axes = cv.axes[len(cv.axes) - len(idx):] if len(idx) <= len(cv.axes) else None
    if axes is None:
        return False
    return all(i is a or _const_index(i) == 0 for i, a in zip(idx, axes))


_INVARIANT_INDEX_OPS = ("scalar.const", "scalar.dim")
"""Index values fixed for a whole kernel call: a constant, or a symbolic size (``scalar.dim``)
read at run time.  A stride that is a symbolic size keeps an index map affine (``i*s + j``)."""


def _invariant_index(v: Value) -> bool:
    return v.op is not None and v.op.name in _INVARIANT_INDEX_OPS


def _const_index(v: Value):
    op = v.op
    return op.attributes["value"] if op is not None and op.name == "scalar.const" else None


def is_contraction(cv: ComputeView) -> bool:
    """An add-reduction of a product of two tensor reads, each reused across some parallel axis
    (it does not depend on every parallel axis): matmul, batch matmul, dense convolution.  A
    depthwise convolution or a dot of two same-shaped tensors is not."""
    if cv.combiner != "add" or not cv.reduction_axes or not cv.parallel_axes:
        return False
    prod = _through_casts(cv.value)
    if prod.op is None or prod.op.name != "scalar.mul":
        return False
    reads = [_through_casts(v).op for v in prod.op.operands]
    if any(r is None or r.name != READ for r in reads):
        return False
    parallel = {id(cv.axes[i]) for i in cv.parallel_axes}
    for r in reads:
        deps = set().union(*(axis_deps(i, cv) for i in r.operands[1:])) if len(r.operands) > 1 else set()
        if parallel <= deps:
            return False
    return True


def _through_casts(v: Value) -> Value:
    while v.op is not None and v.op.name == "scalar.cast":
        v = v.op.operands[0]
    return v


def axis_deps(v: Value, cv: ComputeView) -> set[int]:
    """ids of the compute axes an index (or scalar) value depends on."""
    axes = {id(a) for a in cv.axes}
    out: set[int] = set()
    stack, seen = [v], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if id(x) in axes:
            out.add(id(x))
        elif x.op is not None:
            stack.extend(x.op.operands)
    return out


def index_class(v: Value, memo: dict[int, int] | None = None) -> int:
    """PROJECTION, AFFINE, NONAFFINE or INDIRECT for one index value of a read."""
    memo = {} if memo is None else memo
    got = memo.get(id(v))
    if got is not None:
        return got
    op = v.op
    if op is None or op.name in _INVARIANT_INDEX_OPS:
        c = PROJECTION
    elif op.name == READ or not isinstance(v.type, IndexType):
        c = INDIRECT
    elif op.name in _AFFINE_OPS:
        c = max(AFFINE, *(index_class(o, memo) for o in op.operands))
    elif op.name == "scalar.mul":
        ops = op.operands
        consts = [o for o in ops if _invariant_index(o)]
        c = max(AFFINE, *(index_class(o, memo) for o in ops)) if consts else NONAFFINE
    elif op.name == "scalar.index_cast":
        c = INDIRECT
    else:
        c = max(NONAFFINE, *(index_class(o, memo) for o in op.operands))
    memo[id(v)] = c
    return c


def read_map(cv: ComputeView | None, read: Operation, memo: dict[int, int] | None = None) -> int:
    """The class of a read's index map (the hardest of its indices)."""
    return max((index_class(i, memo) for i in read.operands[1:]), default=PROJECTION)


def is_data_movement(cv: ComputeView) -> bool:
    """A parallel compute that only moves data: one read at an index map that does not depend
    on data (a pad, transpose, broadcast, slice, reshape), no arithmetic on the value."""
    if cv.combiner != "none":
        return False
    reads = 0
    for op in cv.body:
        if op.name == READ:
            reads += 1
            if read_map(cv, op) == INDIRECT:
                return False
        elif op.name in _MOVEMENT_OPS:
            continue
        elif not all(isinstance(r.type, IndexType) for r in op.results):
            return False
    return reads == 1


def anchors(kernel: Operation) -> list[ComputeView]:
    """The contraction computes of a kernel whose kind says it holds one (its GEMM/conv)."""
    if kernel_kind(kernel) < FusionKind.OUT_ELEMENTWISE_FUSABLE:
        return []
    cvs = KernelView(kernel).computes
    found = [cv for cv in cvs if is_contraction(cv)]
    return found or [cv for cv in cvs if cv.reduction_axes]


def combined_kind(kernels: Iterable[Operation]) -> FusionKind:
    return max(kernel_kind(k) for k in kernels)


__all__ = ["AFFINE", "INDIRECT", "MAP_NAMES", "NONAFFINE", "PROJECTION", "anchors", "axis_deps", "combined_kind",
           "index_class", "is_contraction", "is_data_movement", "kernel_kind", "kind_name", "parse_kind",
           "read_map", "structural_kind"]
