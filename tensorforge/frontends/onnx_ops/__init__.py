"""ONNX op handlers, one module per op family.

``handler_tables()`` imports the handler modules (which need the ``onnx`` package) and returns
the registry; importing this package alone does not, so the frontend can report a missing
``onnx`` installation as a clean error.
"""
from __future__ import annotations


def handler_tables():
    """(HANDLERS, REJECTED): op type -> handler, and op type -> why it is rejected."""
    from . import (attention, bitwise, control_flow, data_dependent, elementwise, flex_attention,  # noqa: F401
                   generate, grid, index, linalg, loss, nn, qlinear, quant, reduce, rnn, sampling, scatter,
                   sequence, shape, signal, state, training)
    from .registry import HANDLERS, REJECTED
    return HANDLERS, REJECTED
