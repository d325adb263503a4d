"""Reference interpreter: runs a graph-level function on NumPy arrays.

It is the oracle of every numerical test, so it is deliberately simple: each op's NumPy
reference semantics, one op at a time, in program order.
"""
from __future__ import annotations

from contextvars import ContextVar
from typing import Callable, Sequence

import numpy as np

from ..errors import IRError, TensorforgeError
from .builtin import FuncOp, ModuleOp
from .core import Operation, Value
from .types import TensorType


def _coerce_input(x, t, i: int, fname: str) -> np.ndarray:
    arr = np.asarray(x)
    if isinstance(t, TensorType):
        if arr.ndim != t.rank or any(isinstance(d, int) and d != s for d, s in zip(t.shape, arr.shape)):
            raise IRError(f"input #{i} of '{fname}' has shape {arr.shape}, expected {t}")
        if arr.dtype != t.dtype.np:
            arr = arr.astype(t.dtype.np)
    return arr


_SYMBOL_SIZES: ContextVar[dict[str, int] | None] = ContextVar("tensorforge_symbol_sizes", default=None)


def symbol_sizes() -> dict[str, int]:
    """Run-time sizes of the named dims of the function being interpreted, bound from its inputs.

    Ops whose attributes name symbols (``graph.reshape`` to ``("N", 768)``) read them here, since
    ``compute`` sees only arrays; empty outside ``run_function``.
    """
    return _SYMBOL_SIZES.get() or {}


def run_function(func: FuncOp, inputs: Sequence, observer: Callable[[Operation, list], None] | None = None
                 ) -> list[np.ndarray]:
    """Evaluates ``func`` on ``inputs``; ``observer(op, results)`` sees every op's results."""
    sizes: dict[str, int] = {}
    for a, x in zip(func.args, inputs):
        if isinstance(a.type, TensorType):
            for d, n in zip(a.type.shape, np.shape(x)):
                if isinstance(d, str):
                    sizes.setdefault(d, int(n))
    token = _SYMBOL_SIZES.set(sizes)
    try:
        return _run_function(func, inputs, observer)
    finally:
        _SYMBOL_SIZES.reset(token)


def _run_function(func: FuncOp, inputs: Sequence, observer: Callable[[Operation, list], None] | None
                  ) -> list[np.ndarray]:
    if len(inputs) != len(func.args):
        raise IRError(f"'{func.sym_name}' takes {len(func.args)} inputs, got {len(inputs)}")
    env: dict[int, np.ndarray] = {}
    for i, (a, x) in enumerate(zip(func.args, inputs)):
        env[id(a)] = _coerce_input(x, a.type, i, func.sym_name)
    remaining: dict[int, int] = {}
    for op in func.body:
        for v in op.operands:
            remaining[id(v)] = remaining.get(id(v), 0) + 1
    for op in func.body:
        if op.name == "func.return":
            return [env[id(v)] for v in op.operands]
        if op.opdef is None:
            raise IRError(f"cannot interpret unregistered op '{op.name}'{op.location_str()}")
        args = [env[id(v)] for v in op.operands]
        try:
            outs = op.opdef.evaluate(args, op.attributes, [r.type for r in op.results])
        except TensorforgeError:
            raise
        except Exception as e:  # a reference implementation rejected its inputs
            raise IRError(f"interpreting '{op.name}'{op.location_str()} failed: {type(e).__name__}: {e}") from e
        if observer is not None:
            observer(op, outs)
        for r, arr in zip(op.results, outs):
            env[id(r)] = arr
        for v in op.operands:  # free intermediates early: whole models run here
            remaining[id(v)] -= 1
            if remaining[id(v)] == 0 and not v.is_block_arg:
                env.pop(id(v), None)
    raise IRError(f"'{func.sym_name}' has no func.return")


def interpret(module_or_func: ModuleOp | FuncOp, *inputs) -> list[np.ndarray]:
    """Runs the module's main function (or the given function) on NumPy inputs."""
    func = module_or_func.main if isinstance(module_or_func, ModuleOp) else module_or_func
    return run_function(func, inputs)
