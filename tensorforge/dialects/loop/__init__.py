"""The ``loop`` dialect: loop nests over buffers (≈ scf + memref + vector, TensorIR-like).

``loop.func`` takes buffers (inputs, then outputs); ``loop.for`` has static bounds and a kind
(serial, parallel, vectorize, unroll) that schedules set and the C emitter honours;
``loop.load``/``loop.store`` address buffers with index expressions built from ``scalar`` ops;
``loop.alloc`` makes a local buffer (a rank-0 one is an accumulator register).
"""
from . import ops  # noqa: F401
from .ops import LOOP_KINDS, ForView  # noqa: F401
