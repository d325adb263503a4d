"""Compile-time evaluation of what in a kernel depends only on constants.

When the graph optimiser has not folded them (``fold-inference`` off, an unusual pattern), a
kernel may compute per-channel parameters from constants every time it runs: the scale
``gamma / sqrt(var + eps)`` and the shift of an unfolded BatchNorm.  Hoisted to constants, the
kernel's last compute is a plain ``x * a[c] + b[c]``, an epilogue a GEMM/conv micro-kernel can
apply, so conv + batch_norm + relu stays one tensorized kernel without BatchNorm folding.

``hoist_constant_computes`` evaluates such computes (structured interpreter) and passes the
values in as new ``graph.constant`` operands; ``fold_constant_kernels`` replaces a kernel whose
operands are all constants by its results.  Both stay within ``MAX_FOLD_BYTES`` per value.
"""
from __future__ import annotations

import numpy as np

from ...dialects.structured.interpret import eval_compute, run_kernel
from ...dialects.structured.ops import ComputeView, KernelView
from ...ir.attributes import Dense
from ...ir.builder import make_op
from ...ir.builtin import FuncOp
from ...ir.core import Operation, Value
from .kinds import KERNEL, READ
from .merge import prune_inputs

MAX_FOLD_BYTES = 16 << 20


def _is_constant(v: Value) -> bool:
    return v.op is not None and v.op.name == "graph.constant"


def _constant(func_anchor: Operation, array: np.ndarray) -> Value:
    # np.array, not np.ascontiguousarray: that makes a 0-d array 1-d, and a hoisted scalar (the
    # mean of a LayerNorm over a constant input) then no longer has its value's type
    op = make_op("graph.constant", [], {"value": Dense(np.array(array, order="C"))})
    func_anchor.parent.insert_before(op, func_anchor)
    return op.results[0]


def _reads_only(cv: ComputeView, known: dict[int, np.ndarray]) -> bool:
    for op in cv.body:
        for v in op.operands:
            if v.op is None and v.owner is not cv.body and id(v) not in known:
                return False                         # a kernel argument that is not constant
        if op.name == READ and id(op.operands[0]) not in known:
            return False
    return True


def hoist_constant_computes(kernel: Operation) -> int:
    """Evaluates the non-returned computes of ``kernel`` that read only constants and makes them
    constant operands; returns how many were hoisted."""
    kv = KernelView(kernel)
    body = kv.body
    known: dict[int, np.ndarray] = {id(a): v.op.attributes["value"].array
                                    for a, v in zip(body.args, kernel.operands) if _is_constant(v)}
    if not known:
        return 0
    returned = {id(v) for v in kv.outputs}
    hoisted = 0
    for cv in kv.computes:
        res = cv.op.results[0]
        if id(res) in returned or not _foldable(res.type) or not _reads_only(cv, known):
            continue
        value = eval_compute(cv, known)
        const = _constant(kernel, value)
        kernel.set_operands(list(kernel.operands) + [const])
        arg = body.add_arg(const.type)
        known[id(arg)] = value
        res.replace_all_uses_with(arg)
        cv.op.erase()
        hoisted += 1
    if hoisted:
        prune_inputs(kernel)
    return hoisted


def _foldable(t) -> bool:
    """A result that may become a constant: static (a symbolic size has no array) and small."""
    return t.is_static and t.nbytes <= MAX_FOLD_BYTES


def fold_constant_kernels(func: FuncOp) -> int:
    """Replaces each kernel whose operands are all constants by constants; returns how many."""
    folded = 0
    for k in [op for op in func.body if op.name == KERNEL]:
        if not k.operands or not all(_is_constant(v) for v in k.operands):
            continue
        if not all(_foldable(r.type) for r in k.results) or sum(r.type.nbytes for r in k.results) > MAX_FOLD_BYTES:
            continue
        outs = run_kernel(k, [v.op.attributes["value"].array for v in k.operands])
        for r, arr in zip(k.results, outs):
            r.replace_all_uses_with(_constant(k, np.asarray(arr, dtype=r.type.dtype.np).reshape(r.type.shape)))
        k.erase()
        folded += 1
    return folded


def fold_constants(func: FuncOp) -> tuple[int, int]:
    """(kernels folded, computes hoisted) over ``func``."""
    kernels = fold_constant_kernels(func)
    computes = sum(hoist_constant_computes(k) for k in func.body if k.name == KERNEL)
    return kernels, computes


__all__ = ["MAX_FOLD_BYTES", "fold_constant_kernels", "fold_constants", "hoist_constant_computes"]
