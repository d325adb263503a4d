"""Op definitions of the structured dialect and small views that read them conveniently."""
from __future__ import annotations

import math
from typing import Sequence

from ...errors import ShapeError, VerificationError
from ...ir.core import Block, Operation, OpView, Value
from ...ir.opdef import PURE, TERMINATOR, Attr, FusionKind, OpDef, expect, register
from ...ir.types import DType, IndexType, ScalarType, TensorType
from ..scalar import INDEX

COMBINERS = ("none", "add", "mul", "max", "min")
REDUCTION_IDENTITY = {"add": 0.0, "mul": 1.0, "max": -math.inf, "min": math.inf}


@register
class Kernel(OpDef):
    """One fused kernel: inputs in, results out, computes inside (isolated from above)."""

    name = "structured.kernel"
    operands = ("inputs*",)
    results = ("outputs*",)
    attrs = {"sym_name": Attr("str", "kernel")}
    fusion = FusionKind.OPAQUE

    def infer(self, types, attrs):
        raise ShapeError("cannot infer: a kernel's result types come from its structured.return")

    def verify(self, op):
        expect(len(op.regions) == 1 and len(op.regions[0].blocks) == 1, "needs one region with one block")
        body = op.regions[0].blocks[0]
        expect([a.type for a in body.args] == [v.type for v in op.operands],
               "block arguments must match the kernel's operand types")
        last = body.last
        expect(last is not None and last.name == "structured.return", "body must end with structured.return")
        expect([v.type for v in last.operands] == [r.type for r in op.results],
               "structured.return types must match the kernel's result types")


@register
class Compute(OpDef):
    """``out[p...] = combine over r... of body(p..., r...)``.

    ``domain`` lists the extent of every axis; ``iterators`` says for each axis 'p' (parallel)
    or 'r' (reduction).  The result's shape is the parallel extents in order.  ``combiner`` is
    'none' when there is no reduction axis.  ``init`` (optional, float results only) is the
    accumulator's start value when it is not the combiner's ``REDUCTION_IDENTITY``: a running sum
    that must keep the sign of a sum of only ``-0.0`` starts from ``-0.0``, the IEEE identity of
    addition (``-0.0 + x == x`` for every ``x``; from ``+0.0``, ``-0.0`` terms sum to ``+0.0``).
    """

    name = "structured.compute"
    results = ("out",)
    attrs = {"domain": Attr("dims"), "iterators": Attr("str"), "combiner": Attr("str", "none"),
             "dtype": Attr("dtype"),
             "init": Attr("float", None, "accumulator start value (default: the combiner's identity)")}
    traits = frozenset({PURE})
    fusion = FusionKind.OPAQUE

    def infer(self, types, attrs):
        dom, it = attrs["domain"], attrs["iterators"]
        expect(len(dom) == len(it) and set(it) <= {"p", "r"},
               f"iterators '{it}' must have one 'p'/'r' per domain axis ({len(dom)})")
        expect(attrs["combiner"] in COMBINERS, f"combiner must be one of {COMBINERS}")
        expect(("r" in it) == (attrs["combiner"] != "none"), "reduction axes need a combiner and vice versa")
        expect("init" not in attrs or (attrs["combiner"] != "none" and attrs["dtype"].is_float),
               "init needs a combiner and a float dtype")
        return [TensorType([d for d, k in zip(dom, it) if k == "p"], attrs["dtype"])]

    def verify(self, op):
        expect(len(op.regions) == 1, "needs one body region")
        body = op.regions[0].blocks[0]
        expect(len(body.args) == len(op.attributes["domain"]) and all(isinstance(a.type, IndexType)
                                                                      for a in body.args),
               "body block takes one index argument per domain axis")
        last = body.last
        expect(last is not None and last.name == "structured.yield" and len(last.operands) == 1,
               "body must end with structured.yield of one scalar")
        yt = last.operands[0].type
        expect(yt == ScalarType(op.attributes["dtype"]), f"yielded {yt} but the compute's dtype is "
               f"{op.attributes['dtype']}")


@register
class Read(OpDef):
    """An element of a tensor; with ``pad`` set, out-of-range indices give ``pad`` instead."""

    name = "structured.read"
    operands = ("tensor", "indices*")
    attrs = {"pad": Attr("float", None)}
    traits = frozenset({PURE})

    def infer(self, types, attrs):
        t = types[0]
        expect(isinstance(t, TensorType), f"reads a tensor, got {t}")
        expect(len(types) - 1 == t.rank, f"needs {t.rank} indices for {t}, got {len(types) - 1}")
        expect(all(isinstance(i, IndexType) for i in types[1:]), "indices must have type index")
        return [ScalarType(t.dtype)]


@register
class Yield(OpDef):
    name = "structured.yield"
    operands = ("value",)
    results = ()
    traits = frozenset({TERMINATOR})


@register
class Return(OpDef):
    name = "structured.return"
    operands = ("values*",)
    results = ()
    traits = frozenset({TERMINATOR})


class ComputeView(OpView):
    """Reads a ``structured.compute`` op: axes, body, yielded value."""

    __slots__ = ()

    @property
    def domain(self) -> tuple:
        """The extents: ints, or symbolic dims (canonical strings) of a dynamic-shape kernel."""
        return self.op.attributes["domain"]

    @property
    def iterators(self) -> str:
        return self.op.attributes["iterators"]

    @property
    def combiner(self) -> str:
        return self.op.attributes["combiner"]

    @property
    def init(self):
        """The accumulator's start value: ``init`` when set, else the combiner's identity (floats)."""
        return self.op.attributes.get("init", REDUCTION_IDENTITY.get(self.combiner))

    @property
    def axes(self) -> list[Value]:
        return self.body.args

    @property
    def parallel_axes(self) -> list[int]:
        return [i for i, k in enumerate(self.iterators) if k == "p"]

    @property
    def reduction_axes(self) -> list[int]:
        return [i for i, k in enumerate(self.iterators) if k == "r"]

    @property
    def value(self) -> Value:
        return self.body.last.operands[0]

    def reads(self) -> list[Operation]:
        return [o for o in self.body if o.name == "structured.read"]


class KernelView(OpView):
    """Reads a ``structured.kernel`` op."""

    __slots__ = ()

    @property
    def computes(self) -> list[ComputeView]:
        return [ComputeView(o) for o in self.body if o.name == "structured.compute"]

    @property
    def outputs(self) -> list[Value]:
        return list(self.body.last.operands)
