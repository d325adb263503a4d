"""Checks one graph op through every level: graph interpreter, structured interpreter, native C.

    check_op("graph.softmax", [x], axis=1)

builds a one-op module, and asserts that the structured kernel (NumPy evaluation of the tensor
expressions) and the compiled C agree with the reference interpreter.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

import tensorforge
from tensorforge.dialects.structured.interpret import run_kernel
from tensorforge.ir import Module, interpret, tensor, verify
from tensorforge.ir.types import DType
from tensorforge.passes.lower.to_structured import lower_op_to_kernel


def one_op_module(name: str, inputs: Sequence[np.ndarray], const_inputs: Sequence[int] = (), **attrs):
    """A module whose main applies ``name`` to ``inputs``; indices in ``const_inputs`` become constants."""
    m = Module()
    arg_pos = [i for i in range(len(inputs)) if i not in const_inputs]
    f = m.add_function("main", [tensor(inputs[i].shape, DType.from_np(inputs[i].dtype)) for i in arg_pos])
    b = f.builder()
    operands = []
    args = iter(f.args)
    for i, x in enumerate(inputs):
        operands.append(b.graph.constant(x) if i in const_inputs else next(args))
    op = b.create(name, operands, attrs)
    f.set_return(list(op.results))
    verify(m)
    return m, op, [inputs[i] for i in arg_pos]


def check_op(name: str, inputs: Sequence[np.ndarray], rtol: float = 1e-4, atol: float = 1e-5,
             native: bool = True, const_inputs: Sequence[int] = (), **attrs) -> list[np.ndarray]:
    m, op, run_inputs = one_op_module(name, inputs, const_inputs, **attrs)
    ref = interpret(m, *run_inputs)
    kernel = lower_op_to_kernel(op)
    verify(kernel)
    got = run_kernel(kernel, list(inputs))
    for r, g in zip(ref, got):
        np.testing.assert_allclose(g, r, rtol=rtol, atol=atol, err_msg=f"{name}: structured level")
    if native:
        cm = tensorforge.compile(m)
        outs = cm(*run_inputs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        for r, g in zip(ref, outs):
            np.testing.assert_allclose(g, r, rtol=rtol, atol=atol, err_msg=f"{name}: native C")
    return ref
