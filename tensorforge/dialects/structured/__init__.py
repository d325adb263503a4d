"""The ``structured`` dialect: a kernel as tensor expressions (≈ TVM TE compute / linalg.generic).

A ``structured.kernel`` is isolated from above: its block arguments are the kernel's input
tensors.  Inside, each ``structured.compute`` defines one tensor by an expression over an
iteration domain; later computes may read earlier ones (a softmax is three computes in one
kernel).  ``structured.return`` names the kernel's results.

Expression bodies are ordinary ``scalar`` ops plus ``structured.read`` (an element of a tensor
at index expressions, optionally bounds-checked with a pad value) and ``structured.yield``.
Fusing an injective producer into its consumer is substituting the producer's body for the
consumer's read.
"""
from . import ops  # noqa: F401
from .ops import ComputeView, KernelView, REDUCTION_IDENTITY  # noqa: F401
