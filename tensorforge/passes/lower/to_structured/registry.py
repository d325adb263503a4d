"""The table of graph -> structured lowerings and the function that applies one."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ....errors import UnsupportedOpError
from ....ir.core import Operation
from ....dialects.structured.builder import Expr, KernelBuilder, TensorRef

LoweringFn = Callable[["LoweringContext"], Sequence[TensorRef]]
_TABLE: dict[str, LoweringFn] = {}


@dataclass
class LoweringContext:
    """What a lowering sees: the graph op, the kernel builder and the op's operands as tensors."""

    op: Operation
    kb: KernelBuilder

    @property
    def inputs(self) -> list[TensorRef]:
        return self.kb.inputs

    @property
    def attrs(self) -> dict:
        return self.op.attributes

    @property
    def out_types(self):
        return [r.type for r in self.op.results]

    def out_shape(self, i: int = 0) -> tuple:
        return self.op.results[i].type.shape

    def out_dtype(self, i: int = 0):
        return self.op.results[i].type.dtype


def lowering(*names: str):
    """Registers ``fn(ctx) -> [TensorRef, ...]`` as the lowering of the named graph ops."""
    def deco(fn: LoweringFn) -> LoweringFn:
        for n in names:
            _TABLE[n] = fn
        return fn
    return deco


def lowerings() -> dict[str, LoweringFn]:
    return dict(_TABLE)


def broadcast_read(t: TensorRef, out_axes: Sequence[Expr], out_shape: Sequence) -> Expr:
    """Reads ``t`` at the output position under NumPy broadcasting (size-1 dims read index 0)."""
    rank, out_rank = len(t.shape), len(out_shape)
    idx = []
    for k, d in enumerate(t.shape):
        o = out_rank - rank + k
        idx.append(0 if (d == 1 and out_shape[o] != 1) else out_axes[o])
    return t.read(idx)


def lower_op_to_kernel(op: Operation, name: str | None = None) -> Operation:
    """Builds the ``structured.kernel`` computing ``op`` (detached; operands are op's operands)."""
    fn = _TABLE.get(op.name)
    if fn is None:
        raise UnsupportedOpError(f"'{op.name}'{op.location_str()} has no lowering to the structured level "
                                 f"yet; run it with target='interpreter' or add a lowering in "
                                 f"tensorforge/passes/lower/to_structured/")
    kb = KernelBuilder(name or op.short_name, [v.type for v in op.operands])
    outs = fn(LoweringContext(op, kb))
    return kb.ret(list(outs), list(op.operands))
