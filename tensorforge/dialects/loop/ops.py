"""Op definitions of the loop dialect."""
from __future__ import annotations

from ...ir.core import Operation, OpView, Value
from ...ir.opdef import TERMINATOR, Attr, OpDef, expect, register
from ...ir.types import BufferType, DType, IndexType, ScalarType

GPU_BLOCK_KINDS = ("block.x", "block.y", "block.z")      # iv = the work-group (block) index on that axis
GPU_THREAD_KINDS = ("thread.x", "thread.y", "thread.z")   # iv = the work-item (thread) index within its group
GPU_KINDS = GPU_BLOCK_KINDS + GPU_THREAD_KINDS
LOOP_KINDS = ("serial", "parallel", "vectorize", "unroll") + GPU_KINDS
MEMORY_SPACES = ("default", "shared", "local")


@register
class LoopFunc(OpDef):
    """A kernel over buffers; ``num_inputs`` leading arguments are read-only."""

    name = "loop.func"
    results = ()
    attrs = {"sym_name": Attr("str"), "num_inputs": Attr("int")}

    def verify(self, op):
        body = op.regions[0].blocks[0]
        expect(all(isinstance(a.type, BufferType) for a in body.args), "arguments must be buffers")
        expect(0 <= op.attributes["num_inputs"] <= len(body.args), "num_inputs out of range")


@register
class For(OpDef):
    """``for iv in range(lb, ub, step)``; the body block's one argument is ``iv``."""

    name = "loop.for"
    results = ()
    # ``ub`` is a dim: an int, or a symbolic expression (canonical text) read at run time
    attrs = {"lb": Attr("int", 0), "ub": Attr("any"), "step": Attr("int", 1),
             "kind": Attr("str", "serial"), "unroll": Attr("int", 0),
             "reduction": Attr("bool", False), "tag": Attr("str", None)}

    def verify(self, op):
        a = op.attributes
        expect(a["step"] > 0, "step must be positive")
        ub = a["ub"]
        expect((isinstance(ub, int) and not isinstance(ub, bool)) or (isinstance(ub, str) and bool(ub)),
               f"ub must be an int or a symbolic dim, got {ub!r}")
        if isinstance(ub, str):
            from ...ir.symbolic import canonical
            expect(canonical(ub) == ub, f"ub '{ub}' is not in canonical form (write '{canonical(ub)}')")
        expect(a["kind"] in LOOP_KINDS, f"kind must be one of {LOOP_KINDS}")
        body = op.regions[0].blocks[0]
        expect(len(body.args) == 1 and isinstance(body.args[0].type, IndexType),
               "body takes one index argument (the induction variable)")


@register
class Load(OpDef):
    """An element of a buffer; with ``pad`` set, out-of-range indices give ``pad``."""

    name = "loop.load"
    operands = ("buffer", "indices*")
    attrs = {"pad": Attr("float", None)}

    def infer(self, types, attrs):
        t = types[0]
        expect(isinstance(t, BufferType), f"loads from a buffer, got {t}")
        expect(len(types) - 1 == t.rank, f"needs {t.rank} indices for {t}, got {len(types) - 1}")
        return [ScalarType(t.dtype)]


@register
class Prefetch(OpDef):
    """A hint that ``span`` elements of ``buffer`` from element ``offset + ahead`` (row-major,
    from the start of the buffer) will be read soon: the C emitter asks the cache for their lines
    (``__builtin_prefetch``), other targets drop it.  Not a memory access: the address may lie
    past the buffer (the row after the last one), which a prefetch never faults on, and nothing
    is ordered around it."""

    name = "loop.prefetch"
    operands = ("buffer", "offset")
    results = ()
    attrs = {"ahead": Attr("int", 0), "span": Attr("int", 1)}

    def verify(self, op):
        t, o = op.operands[0].type, op.operands[1].type
        expect(isinstance(t, BufferType), f"prefetches from a buffer, got {t}")
        expect(isinstance(o, IndexType), f"the offset is an index, got {o}")
        expect(op.attributes["span"] > 0, "span must be positive")


@register
class Store(OpDef):
    name = "loop.store"
    operands = ("value", "buffer", "indices*")
    results = ()

    def verify(self, op):
        buf = op.operands[1].type
        expect(isinstance(buf, BufferType), f"stores to a buffer, got {buf}")
        expect(len(op.operands) - 2 == buf.rank, f"needs {buf.rank} indices for {buf}")
        expect(op.operands[0].type == ScalarType(buf.dtype),
               f"stores {op.operands[0].type} into {buf}")


@register
class Alloc(OpDef):
    """A buffer local to the kernel (a temporary or, at rank 0, an accumulator).

    ``space`` says where it lives on a GPU (docs/gpu.md): unset (``"default"``) is a C local or heap buffer
    on the CPU, and on a GPU global scratch when it is outside every block loop, else per-thread
    registers; ``"shared"`` is one copy per work-group (``__local`` / ``__shared__``), declared
    outside the thread loops; ``"local"`` is per thread (private memory / registers)."""

    name = "loop.alloc"
    operands = ()
    attrs = {"type": Attr("type"), "tag": Attr("str", None), "space": Attr("str", None)}

    def verify(self, op):
        expect(op.attributes.get("space") in (None,) + MEMORY_SPACES, f"space must be one of {MEMORY_SPACES}")

    def infer(self, types, attrs):
        expect(isinstance(attrs["type"], BufferType), "type must be a memref")
        return [attrs["type"]]


@register
class If(OpDef):
    """Runs its one block when ``cond`` holds: the guard of a split whose factor does not divide the extent."""

    name = "loop.if"
    operands = ("cond",)
    results = ()

    def verify(self, op):
        expect(op.operands[0].type == ScalarType(DType.bool), f"condition must be i1, got {op.operands[0].type}")
        expect(len(op.regions) == 1 and len(op.regions[0].blocks) == 1 and not op.regions[0].blocks[0].args,
               "needs one region with one block without arguments")


@register
class Barrier(OpDef):
    """A work-group barrier on a GPU: every thread of the group waits here until all have arrived,
    and their writes to shared (and global) memory before it are visible to reads after it.  Every
    thread of the group must reach it (docs/gpu.md: not under a thread-dependent condition)."""

    name = "loop.barrier"
    results = ()


@register
class Return(OpDef):
    name = "loop.return"
    results = ()
    traits = frozenset({TERMINATOR})


class ForView(OpView):
    __slots__ = ()

    @property
    def iv(self) -> Value:
        return self.body.args[0]

    @property
    def extent(self):
        """The trip count: an int, or a symbolic dim when ``ub`` is one (see ``loop_extent``)."""
        return loop_extent(self.op)

    @property
    def kind(self) -> str:
        return self.op.attributes["kind"]


def loop_extent(loop: Operation):
    """The trip count of a ``loop.for`` as a dim: an int for a static loop, else the symbolic
    ``ceil((ub - lb) / step)`` (sizes are never negative, so no clamp at 0 is needed there)."""
    from ...ir.symbolic import dim_ceildiv, dim_sub
    a = loop.attributes
    ub, lb, step = a["ub"], a["lb"], a["step"]
    if isinstance(ub, int):
        return max(0, -(-(ub - lb) // step))
    return dim_ceildiv(dim_sub(ub, lb), step)
