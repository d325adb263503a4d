"""The ``loop`` dialect: loop nests over buffers (≈ scf + memref + vector, TensorIR-like).

``loop.func`` takes buffers (inputs, then outputs); ``loop.for`` has static bounds and a kind
(serial, parallel, vectorize, unroll) that schedules set and the C emitter honours;
``loop.load``/``loop.store`` address buffers with index expressions built from ``scalar`` ops;
``loop.alloc`` makes a local buffer (a rank-0 one is an accumulator register).  For GPUs a loop
kind binds a loop to the grid (``block.x``) or to the threads of a block (``thread.x``), an alloc
has a memory space and ``loop.barrier`` synchronises a block (docs/gpu.md).
"""
from . import ops  # noqa: F401
from .ops import GPU_BLOCK_KINDS, GPU_KINDS, GPU_THREAD_KINDS, LOOP_KINDS, MEMORY_SPACES, ForView  # noqa: F401
