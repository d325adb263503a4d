"""Profitability of a fusion on a target: what it saves, what it costs, what the hardware forbids.

A candidate is judged on the kernel it would produce (built, simplified, then measured):

- **saved**: bytes that no longer cross a kernel boundary (an intermediate written and read
  back), plus one kernel call (``launch_bytes``: the fixed cost of a call with its OpenMP
  region, expressed as the bytes the machine would move in that time).  An intermediate that
  stays a large buffer inside the kernel still travels through memory, so it saves nothing
  beyond the call; one that is inlined, fits in cache, or is a GEMM/conv result consumed by
  its epilogue (kept in registers by the micro-kernel) saves its round trip.
- **recomputation**: decided compute by compute in ``inline.simplify_kernel`` (recompute only
  where it is cheaper than a buffer round trip), so it never makes a fusion worse.
- **hard vetoes** (hardware limits): live vector registers of a fused expression above the
  register file (spills in the innermost loop; a contraction's epilogue also shares the file
  with the accumulator tile), the cache footprint of a row of a reduction whose result is
  broadcast back to its own input above the per-core cache (the consumer could not find the
  row in cache: two trips to memory anyway, and a serial dependence in the kernel), and kernel
  size (scalar ops) above a limit that keeps compile time and the instruction cache sane.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ...dialects.structured.ops import ComputeView, KernelView
from ...ir.core import Operation, Value
from ...ir.symbolic import hint_elements, hint_nbytes
from ...ir.types import IndexType, TensorType
from .inline import reads_of
from .kinds import READ, anchors, axis_deps

CACHE_LINE = 64


@dataclass(frozen=True)
class Machine:
    """The numbers of a target the cost model reads (``Machine.of(target, **overrides)``)."""

    vector_registers: int = 16
    vector_width: int = 8
    cache_bytes: int = 1 << 20          # per-core cache a fused row must fit in (L2)
    cores: int = 1
    launch_bytes: float = 16384.0       # one kernel call, in bytes of memory traffic
    max_kernel_ops: int = 4000          # scalar ops in one fused kernel
    small_bytes: int = 65536            # outputs at most this big are "cheap" (category fusion)

    @classmethod
    def of(cls, target: Any = None, **overrides: Any) -> "Machine":
        """From a ``codegen.target.Target`` (None: this host); overrides of 0/None are ignored."""
        if target is None:
            from ...codegen.target import Target
            target = Target.host()
        base = dict(vector_registers=getattr(target, "vector_registers", 16) or 16,
                    vector_width=getattr(target, "vector_width", 8) or 8,
                    cache_bytes=getattr(target, "l2", 1 << 20) or (1 << 20),
                    cores=getattr(target, "cores", 1) or 1)
        base.update({k: v for k, v in overrides.items() if v})
        return cls(**base)

    @property
    def epilogue_registers(self) -> int:
        """Registers left to an epilogue while a GEMM accumulator tile is live (about half)."""
        return max(self.vector_registers // 2, 4)


@dataclass
class Verdict:
    """The cost model's answer for one candidate."""

    ok: bool
    reason: str
    saved_bytes: float = 0.0
    live_registers: int = 0
    footprint: int = 0
    ops: int = 0


# ---- measurements ---------------------------------------------------------------------------------
def live_values(cv: ComputeView) -> int:
    """Most non-index scalar values alive at once in the body (each a vector register once the
    innermost loop is vectorized); a reduction adds its accumulator."""
    body = list(cv.body)
    last: dict[int, int] = {}
    for i, op in enumerate(body):
        for v in op.operands:
            last[id(v)] = i
    live, peak = 0, 0
    ends: dict[int, int] = {}
    for i, op in enumerate(body):
        for r in op.results:
            if isinstance(r.type, IndexType) or id(r) not in last:
                continue
            live += 1
            ends[last[id(r)]] = ends.get(last[id(r)], 0) + 1
        peak = max(peak, live)
        live -= ends.pop(i, 0)
    return peak + (1 if cv.combiner != "none" else 0)


def kernel_ops(kernel: Operation) -> int:
    return sum(1 for op in kernel.walk() if op.name.startswith("scalar.") or op.name == READ)


def row_footprint(kernel: Operation) -> int:
    """Largest cache footprint of a reduction whose result is broadcast back over its own rows
    (read by a compute with a larger domain): the bytes of the elements one result element
    reduces (a cache line each when the innermost axis is not the reduced one), summed over the
    tensors the reduction reads.  0 when the kernel has no such reduction."""
    worst = 0
    anchor_ids = {id(cv.op) for cv in anchors(kernel)}
    for cv in KernelView(kernel).computes:
        if not cv.reduction_axes or id(cv.op) in anchor_ids:
            continue
        elems = max(hint_elements(cv.op.results[0].type.shape), 1)
        readers = [ComputeView(r.parent.parent.parent) for r in reads_of(cv.op)]
        if not any(hint_elements(c.domain) > elems for c in readers):
            continue
        reduced = [id(cv.axes[i]) for i in cv.reduction_axes]
        count = hint_elements(cv.domain[i] for i in cv.reduction_axes)
        per_row = 0
        for read in cv.reads():
            t = read.operands[0].type
            innermost = axis_deps(read.operands[-1], cv) if len(read.operands) > 1 else set()
            contiguous = any(a in innermost for a in reduced)
            per_row += count * (t.dtype.itemsize if contiguous else max(t.dtype.itemsize, CACHE_LINE))
        worst = max(worst, per_row)
    return worst


def boundary_bytes(v: Value) -> int:
    return hint_nbytes(v.type) if isinstance(v.type, TensorType) else 0


# ---- the model ------------------------------------------------------------------------------------
class CostModel:
    """Judges candidate kernels for one machine.

    ``mapped(kernel)``, when given, says whether the code generator runs a kernel's contraction
    on its GEMM/conv micro-kernels (``codegen.c.tensorize``); a merge that takes a contraction
    off that path is vetoed, since the loop path is several times slower than what fusion saves.
    """

    def __init__(self, machine: Machine, mapped: Callable[[Operation], bool] | None = None):
        self.m = machine
        self.mapped = mapped
        self._mapped: dict[int, tuple[Operation, bool]] = {}

    def is_mapped(self, kernel: Operation) -> bool:
        hit = self._mapped.get(id(kernel))
        if hit is None or hit[0] is not kernel:
            hit = (kernel, bool(self.mapped(kernel)))
            self._mapped[id(kernel)] = hit
        return hit[1]

    def check_mapping(self, members: Sequence[Operation], merged: Operation) -> Verdict | None:
        if self.mapped is None or not anchors(merged):
            return None
        before = [k for k in members if anchors(k) and self.is_mapped(k)]
        if before and not self.mapped(merged):
            return Verdict(False, "the merged kernel would leave the GEMM/conv micro-kernel path")
        return None

    def check_limits(self, kernel: Operation) -> Verdict | None:
        """A veto for ``kernel`` (already simplified), or None if it fits the hardware."""
        ops = kernel_ops(kernel)
        if ops > self.m.max_kernel_ops:
            return Verdict(False, f"kernel size: {ops} scalar ops > {self.m.max_kernel_ops}", ops=ops)
        anchor_ids = {id(cv.op) for cv in anchors(kernel)}
        for cv in KernelView(kernel).computes:
            if id(cv.op) in anchor_ids:
                continue
            live = live_values(cv)
            limit = self.m.epilogue_registers if anchor_ids else self.m.vector_registers
            if live > limit:
                what = "epilogue" if anchor_ids else "expression"
                return Verdict(False, f"register pressure: fused {what} keeps {live} vector values live "
                                      f"> {limit} registers", live_registers=live, ops=ops)
        foot = row_footprint(kernel)
        if foot > self.m.cache_bytes:
            return Verdict(False, f"cache footprint: a reduced row of {foot} B is broadcast back but the "
                                  f"per-core cache holds {self.m.cache_bytes} B", footprint=foot, ops=ops)
        return None

    def saved_bytes(self, members: Sequence[Operation], merged: Operation, inner: dict[int, Value]) -> float:
        """Memory traffic the merge removes, plus the calls saved.  ``inner`` maps each member
        result to the value computing it inside ``merged`` (after simplification)."""
        member_ids = {id(k) for k in members}
        anchor_ids = {id(cv.op) for cv in anchors(merged)}
        saved = self.m.launch_bytes * (len(members) - 1)
        for k in members:
            for r in k.results:
                internal = {id(u) for u, _ in r.uses if id(u) in member_ids}
                if not internal:
                    continue
                escapes = any(id(u) not in member_ids for u, _ in r.uses)
                nbytes = boundary_bytes(r)
                src = inner.get(id(r))
                op = src.op if src is not None else None
                gone = op is None or op.parent is None          # inlined into its readers
                small = nbytes <= self.m.cache_bytes
                if escapes:
                    saved += len(internal) * nbytes if (gone or small) else 0
                elif gone or small or id(op) in anchor_ids:
                    saved += (len(internal) + 1) * nbytes
        return saved

    def judge(self, members: Sequence[Operation], merged: Operation, inner: dict[int, Value]) -> Verdict:
        veto = self.check_limits(merged) or self.check_mapping(members, merged)
        if veto is not None:
            return veto
        saved = self.saved_bytes(members, merged, inner)
        live = max((live_values(cv) for cv in KernelView(merged).computes), default=0)
        return Verdict(True, f"saves {fmt_bytes(saved)}", saved_bytes=saved, live_registers=live,
                       footprint=row_footprint(merged), ops=kernel_ops(merged))


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


__all__ = ["CostModel", "Machine", "Verdict", "fmt_bytes", "kernel_ops", "live_values", "row_footprint"]
