"""Runs a function that mixes graph ops and structured kernels on NumPy arrays.

The oracle of the fusion tests: graph ops through their reference semantics, kernels through
the structured interpreter, so a module can be compared with itself before lowering, after
lowering and after fusion.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...dialects.structured.interpret import run_kernel
from ...errors import IRError
from ...ir.builtin import FuncOp
from ...ir.interpreter import bound_symbols
from .kinds import KERNEL


def run_lowered(func: FuncOp, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluates ``func`` on ``inputs`` (graph ops and ``structured.kernel`` ops in any mix);
    symbolic dims are bound from the inputs (``interpreter.symbol_sizes()`` gives them)."""
    if len(inputs) != len(func.args):
        raise IRError(f"'{func.sym_name}' takes {len(func.args)} inputs, got {len(inputs)}")
    with bound_symbols(func, inputs):
        return _run_lowered(func, inputs)


def _run_lowered(func: FuncOp, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    env: dict[int, np.ndarray] = {id(a): np.asarray(x, dtype=a.type.dtype.np) for a, x in zip(func.args, inputs)}
    for op in func.body:
        if op.name == "func.return":
            return [env[id(v)] for v in op.operands]
        args = [env[id(v)] for v in op.operands]
        if op.name == KERNEL:
            outs = run_kernel(op, args)
        else:
            outs = op.opdef.evaluate(args, op.attributes, [r.type for r in op.results])
        for r, arr in zip(op.results, outs):
            env[id(r)] = np.asarray(arr)
    raise IRError(f"'{func.sym_name}' has no func.return")


__all__ = ["run_lowered"]
