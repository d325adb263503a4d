"""Evaluates structured kernels with NumPy: the oracle that checks graph -> structured lowering.

A compute body is evaluated once over the whole iteration domain: each axis argument is a
sparse index grid (shape 1 except along its own axis), so scalar ops broadcast to the domain
without materialising more than the reads need.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...errors import IRError
from ...ir.core import Operation
from ...ir.symbolic import symbols_of
from ..scalar import element_dtype
from .ops import REDUCTION_IDENTITY, ComputeView, KernelView

_REDUCE = {"add": np.sum, "mul": np.prod, "max": np.max, "min": np.min}
_COMBINE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _start_from(combiner: str, reduced: np.ndarray, value: np.ndarray, axes: tuple, init: float) -> np.ndarray:
    """``reduced`` (NumPy's reduction, from the identity) as the reduction from ``init``.  NumPy's
    sums start from +0.0, so a sum of only -0.0 terms (or of none) comes out +0.0; from -0.0, the
    IEEE identity of addition, it is -0.0, and every other sum is the same."""
    if combiner == "add" and init == 0.0 and np.signbit(init):
        only_neg_zero = np.all((value == 0) & np.signbit(value), axis=axes)
        return np.where(only_neg_zero, np.asarray(-0.0, dtype=np.asarray(reduced).dtype), reduced)
    if init == REDUCTION_IDENTITY[combiner] and np.signbit(init) == np.signbit(REDUCTION_IDENTITY[combiner]):
        return reduced
    return _COMBINE[combiner](np.asarray(init, dtype=np.asarray(reduced).dtype), reduced)


def _read(arr: np.ndarray, idx: list[np.ndarray], pad: float | None) -> np.ndarray:
    idx = np.broadcast_arrays(*idx) if idx else []
    if pad is None:
        return arr[tuple(idx)] if idx else arr[()]
    inside = np.ones(idx[0].shape if idx else (), dtype=bool)
    clipped = []
    for i, n in zip(idx, arr.shape):
        inside &= (i >= 0) & (i < n)
        clipped.append(np.clip(i, 0, max(n - 1, 0)))
    vals = arr[tuple(clipped)] if arr.size else np.zeros(inside.shape, arr.dtype)
    return np.where(inside, vals, np.asarray(pad).astype(arr.dtype))


def eval_compute(cv: ComputeView, env: dict[int, np.ndarray], symbols: dict[str, int] | None = None) -> np.ndarray:
    """The result of one compute; ``symbols`` gives the values of the symbolic dims of its domain
    and of its ``scalar.dim`` ops (a kernel over dynamic shapes)."""
    dom = cv.domain
    if not all(isinstance(d, int) for d in dom):
        dom = tuple(_evaluate(d, symbols) for d in dom)
    grids = np.ogrid[tuple(slice(0, d) for d in dom)] if dom else []
    grids = [grids] if isinstance(grids, np.ndarray) else list(grids)   # NumPy 2 gives a tuple, even of one
    local: dict[int, np.ndarray] = {id(a): g for a, g in zip(cv.axes, grids)}
    for op in cv.body:
        if op.name == "structured.yield":
            break
        if op.name == "structured.read":
            arr = env[id(op.operands[0])]
            val = _read(arr, [local[id(v)] for v in op.operands[1:]], op.attributes.get("pad"))
        else:
            args = [local[id(v)] for v in op.operands]
            if op.name == "scalar.dim":
                local[id(op.results[0])] = np.asarray(_evaluate(op.attributes["dim"], symbols), dtype=np.int64)
                continue
            val = op.opdef.evaluate(args, op.attributes, [r.type for r in op.results])[0] \
                if op.opdef.name != "scalar.const" else np.asarray(
                    op.attributes["value"], dtype=element_dtype(op.results[0].type).np)
            val = np.asarray(val)
            rt = op.results[0].type
            want = element_dtype(rt).np
            if val.dtype != want:
                val = val.astype(want)
        local[id(op.results[0])] = val
    value = np.broadcast_to(local[id(cv.value)], dom) if dom else local[id(cv.value)]
    if cv.combiner != "none":
        axes = tuple(cv.reduction_axes)
        reduced = _REDUCE[cv.combiner](value, axis=axes)
        if "init" in cv.op.attributes:
            reduced = _start_from(cv.combiner, reduced, value, axes, cv.op.attributes["init"])
        value = reduced
    dt = cv.op.attributes["dtype"].np
    return np.array(value, dtype=dt, order="C")   # ascontiguousarray would make rank 0 rank 1


def run_kernel(kernel: Operation, inputs: Sequence[np.ndarray],
               symbols: dict[str, int] | None = None) -> list[np.ndarray]:
    """Runs one ``structured.kernel`` on NumPy inputs.  The values of its symbols come from
    ``symbols``, else from the input axes whose dim is exactly a symbol."""
    kv = KernelView(kernel)
    if len(inputs) != len(kv.body.args):
        raise IRError(f"kernel '{kernel.attributes.get('sym_name')}' takes {len(kv.body.args)} inputs")
    env = {id(a): np.asarray(x) for a, x in zip(kv.body.args, inputs)}
    symbols = dict(symbols or {})
    for a, x in zip(kv.body.args, inputs):
        for d, n in zip(a.type.shape, np.shape(x)):
            if isinstance(d, str) and symbols_of(d) == {d}:
                symbols.setdefault(d, int(n))
    for op in kv.body:
        if op.name == "structured.compute":
            env[id(op.results[0])] = eval_compute(ComputeView(op), env, symbols)
        elif op.opdef is not None and op.name != "structured.return":
            # a library kernel's body is the graph op itself (codegen/c/library_kernels.py)
            from ...ir.interpreter import symbol_sizes_bound
            with symbol_sizes_bound(symbols):
                outs = op.opdef.evaluate([env[id(v)] for v in op.operands], op.attributes,
                                         [r.type for r in op.results])
            env.update((id(r), o) for r, o in zip(op.results, outs))
    return [env[id(v)] for v in kv.outputs]


def _evaluate(d, symbols: dict[str, int] | None) -> int:
    from ...ir.symbolic import evaluate
    if symbols is None:
        raise IRError(f"the symbolic dim '{d}' needs values for its symbols")
    return evaluate(d, symbols)
