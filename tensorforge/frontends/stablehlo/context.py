"""The state of one StableHLO import: which graph value stands for which StableHLO value, and
the few graph-building helpers every op family uses.

StableHLO spells every broadcast out (``broadcast_in_dim`` to the full shape), where the graph
dialect's elementwise ops broadcast implicitly.  A ``broadcast_in_dim`` therefore records its
operand reshaped to the result's rank (size-1 dims where it broadcasts) and only materialises
the full tensor (``graph.expand``) when a consumer needs it: ``x * scale[c]`` stays a broadcasting
multiply instead of a multiply by a copied full-size tensor.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

import numpy as np

from ...errors import FrontendError, TensorforgeError, UnsupportedOpError
from ...ir.builder import Builder
from ...ir.core import Operation, Value
from ...ir.types import DType, TensorType


class ImportContext:
    def __init__(self, builder: Builder, source: str):
        self.b = builder
        self.g = builder.graph
        self.source = source
        self.values: dict[int, Value] = {}       # id(StableHLO value) -> graph value
        self.lazy: dict[int, Value] = {}         # id(broadcast result) -> operand at the result's rank
        self.op: Operation | None = None         # the op being converted (for errors)
        self.functions: dict[str, Operation] = {}   # the module's functions, for inlining calls
        self.nesting = 0                         # > 0 while building inside a loop or branch body

    @contextmanager
    def building_in(self, block):
        """Builds into ``block`` (a control-flow body) for the duration of the ``with``."""
        saved = self.b, self.g
        self.b = Builder.at_end(block)
        self.g = self.b.graph
        self.nesting += 1
        try:
            yield
        finally:
            self.b, self.g = saved
            self.nesting -= 1

    # -- values ------------------------------------------------------------------------------
    def bind(self, shlo: Value, value: Value) -> None:
        self.values[id(shlo)] = value

    def bind_lazy(self, shlo: Value, small: Value) -> None:
        self.lazy[id(shlo)] = small

    def get(self, shlo: Value) -> Value:
        """The graph value of ``shlo``, materialising a pending broadcast."""
        v = self.values.get(id(shlo))
        if v is None:
            small = self.lazy.get(id(shlo))
            if small is None:
                raise self.fail(f"value {shlo} is used before it is defined")
            v = self.expand(small, shlo.type.shape)
            if not self.nesting:      # a copy made inside a body must not be used after it
                self.values[id(shlo)] = v
        return v

    def get_broadcastable(self, shlo: Value) -> Value:
        """``shlo`` as a value that broadcasts to its type (a pending broadcast stays small)."""
        return self.values.get(id(shlo)) or self.lazy.get(id(shlo)) or self.get(shlo)

    def constant_of(self, shlo: Value) -> np.ndarray | None:
        """The array of ``shlo`` when it is a compile-time constant (through pending broadcasts and
        small computations on constants, e.g. a converted padding value)."""
        v = self.values.get(id(shlo)) or self.lazy.get(id(shlo))
        arr = _fold(v, 4) if v is not None else None
        return None if arr is None else np.broadcast_to(arr, shlo.type.shape)

    # -- errors ------------------------------------------------------------------------------
    def where(self) -> str:
        return f"{self.op.loc}: " if self.op is not None and self.op.loc else f"{self.source}: "

    def fail(self, message: str) -> TensorforgeError:
        name = f"'{self.op.name}' " if self.op is not None else ""
        return FrontendError(f"{self.where()}{name}{message}")

    def unsupported(self, message: str) -> TensorforgeError:
        name = f"'{self.op.name}' " if self.op is not None else ""
        return UnsupportedOpError(f"{self.where()}{name}{message}")

    # -- building ----------------------------------------------------------------------------
    def const(self, array, dtype: DType | None = None) -> Value:
        return self.g.constant(np.asarray(array), dtype)

    def reshape(self, v: Value, shape: Sequence[int]) -> Value:
        shape = tuple(int(d) for d in shape)
        return v if tuple(v.type.shape) == shape else self.g.reshape(v, shape=shape)

    def transpose(self, v: Value, perm: Sequence[int]) -> Value:
        perm = tuple(int(p) for p in perm)
        return v if perm == tuple(range(len(perm))) else self.g.transpose(v, perm=perm)

    def expand(self, v: Value, shape: Sequence[int]) -> Value:
        shape = tuple(int(d) for d in shape)
        return v if tuple(v.type.shape) == shape else self.g.expand(v, shape=shape)

    def cast(self, v: Value, dtype: DType) -> Value:
        return v if v.type.dtype is dtype else self.g.cast(v, dtype=dtype)

    def scalar_like(self, value, t: TensorType, rank: int | None = None) -> Value:
        """A constant of ``t``'s dtype with ``rank`` size-1 dims (default: ``t``'s rank)."""
        return self.const(np.full((1,) * (t.rank if rank is None else rank), value, dtype=t.dtype.np), t.dtype)


_FOLD_LIMIT = 1 << 16      # elements: folding is for scalars and small index tensors, not weights


def _fold(v: Value, depth: int) -> np.ndarray | None:
    """``v``'s value when it is a constant or a small region-free op on constants (else None)."""
    op = v.op
    if op is None:
        return None
    if op.name == "graph.constant":
        return op.attributes["value"].array
    if depth == 0 or op.regions or op.opdef is None or not v.type.is_static or v.type.num_elements > _FOLD_LIMIT:
        return None
    args = []
    for operand in op.operands:
        a = _fold(operand, depth - 1)
        if a is None:
            return None
        args.append(a)
    try:
        outs = op.opdef.evaluate(args, op.attributes, [r.type for r in op.results])
    except Exception:          # not foldable here (data-dependent, unsupported): leave it to run time
        return None
    return np.asarray(outs[list(op.results).index(v)])
