"""Creating ops: ``make_op`` (checked construction) and ``Builder`` (insertion point + sugar).

    m = Module()
    f = m.add_function("main", [tensor((1, 784))])
    b = f.builder()
    g = b.graph                      # ops of the graph dialect as methods
    h = g.relu(g.matmul(f.args[0], g.constant(w)))
    f.set_return([h])
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import IRError, TensorforgeError
from .attributes import Dense
from .core import Block, Operation, Region, Value
from .opdef import OpDef, lookup
from .types import Type


def make_op(name: str, operands: Sequence[Value] = (), attrs: dict[str, Any] | None = None,
            result_types: Sequence[Type] | None = None, regions: Sequence[Region] = (),
            loc: Any = None, allow_unregistered: bool = False) -> Operation:
    """Builds an op: attributes checked against its definition, result types inferred if absent."""
    opdef = lookup(name)
    if opdef is None:
        if not allow_unregistered:
            raise IRError(f"unknown op '{name}'")
        return Operation(name, operands, result_types or (), attrs or {}, regions, loc, None)
    lo, hi = opdef.operand_range()
    if len(operands) < lo or (hi is not None and len(operands) > hi):
        want = f"{lo}" if lo == hi else f"{lo}..{'' if hi is None else hi}"
        raise IRError(f"'{name}' takes {want} operands ({', '.join(opdef.operands)}), got {len(operands)}")
    attrs = opdef.normalize_attrs(attrs or {})
    if result_types is None:
        try:
            result_types = opdef.infer([v.type for v in operands], attrs)
        except TensorforgeError as e:
            shapes = ", ".join(str(v.type) for v in operands)
            raise type(e)(f"'{name}'{'' if loc is None else f' at {loc}'}: {e} (operands: {shapes})") from None
    cls = opdef.op_class or Operation
    op = cls.__new__(cls)
    Operation.__init__(op, name, operands, result_types, attrs, regions, loc, opdef)
    return op


class Builder:
    """Inserts new ops at an insertion point (end of a block, or before an op)."""

    __slots__ = ("block", "anchor", "loc")

    def __init__(self, block: Block, anchor: Operation | None = None, loc: Any = None):
        self.block, self.anchor, self.loc = block, anchor, loc

    @staticmethod
    def at_end(block: Block) -> "Builder":
        return Builder(block)

    @staticmethod
    def before(op: Operation) -> "Builder":
        return Builder(op.parent, op, op.loc)

    @staticmethod
    def after(op: Operation) -> "Builder":
        return Builder(op.parent, op.next, op.loc) if op.next is not None else Builder(op.parent, None, op.loc)

    def insert(self, op: Operation) -> Operation:
        if self.anchor is None:
            self.block.append(op)
        else:
            self.block.insert_before(op, self.anchor)
        return op

    def create(self, name: str, operands: Sequence[Value] = (), attrs: dict[str, Any] | None = None,
               result_types: Sequence[Type] | None = None, regions: Sequence[Region] = ()) -> Operation:
        return self.insert(make_op(name, operands, attrs, result_types, regions, self.loc))

    def __getattr__(self, dialect: str) -> "DialectBuilder":
        if dialect.startswith("_"):
            raise AttributeError(dialect)
        return DialectBuilder(self, dialect)


class DialectBuilder:
    """``b.graph.add(x, y)`` creates ``graph.add``; one result gives a Value, several a tuple."""

    __slots__ = ("_b", "_dialect")

    def __init__(self, builder: Builder, dialect: str):
        self._b, self._dialect = builder, dialect

    def __getattr__(self, short: str):
        name = f"{self._dialect}.{short}"
        opdef = lookup(name)
        if opdef is None:
            raise AttributeError(f"no op '{name}'")
        b = self._b

        def build(*operands, result_types: Sequence[Type] | None = None, **attrs):
            flat: list[Value] = []
            for o in operands:
                if isinstance(o, (list, tuple)):
                    flat.extend(o)
                elif o is None:
                    continue
                else:
                    flat.append(o)
            op = b.create(name, flat, attrs, result_types)
            if len(op.results) == 1:
                return op.results[0]
            return tuple(op.results)

        build.__name__ = short
        build.__doc__ = opdef.doc
        return build

    def constant(self, value, dtype=None) -> Value:
        """A constant from a NumPy array, a Python number or a ``Dense``."""
        dense = value if isinstance(value, Dense) else Dense(np.asarray(value), dtype)
        return self._b.create(f"{self._dialect}.constant", [], {"value": dense}).results[0]
