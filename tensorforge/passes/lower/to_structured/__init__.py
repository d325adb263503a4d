"""graph -> structured: every graph op becomes a ``structured.kernel`` of tensor expressions.

Lowerings are registered per op name with ``@lowering("graph.x", ...)``; each receives a
``KernelBuilder`` whose inputs are the op's operands and returns the kernel's results.  One
module per op family; importing this package registers all of them.
"""
from .registry import LoweringContext, lower_op_to_kernel, lowering, lowerings  # noqa: F401
from . import constant, elementwise, linalg, conv, pool, reduce, norm, attention, shape, index  # noqa: F401,E402
