"""The frontend's own errors: shape-like operands that only model inputs (or their unbound
symbolic dimensions) determine."""
from __future__ import annotations

from typing import Sequence

from ...errors import UnsupportedOpError


class NonConstantInputError(UnsupportedOpError):
    """A shape-like operand (shape, axes, pads, sizes...) is computed at run time from model inputs.

    ``inputs`` names those model inputs: a caller that knows their values can import again
    with them bound (``import_onnx(..., bind_inputs=...)``), which is what the ONNX backend does.
    """

    def __init__(self, message: str, inputs: Sequence[str]):
        super().__init__(message)
        self.inputs = tuple(inputs)


class UnboundDimError(NonConstantInputError):
    """A size that must be concrete (an import-time shape operand, or any size native code needs)
    depends on a symbolic dimension (ONNX ``dim_param``) that nothing bound.

    ``dims`` holds ``(input, axis, dim name)`` of each such dimension.  It subclasses
    ``NonConstantInputError`` because binding the named inputs' values also fixes their shapes
    (what the ONNX backend does); a user binds the dims instead, with example inputs or
    ``shapes={name: size}``.
    """

    def __init__(self, message: str, dims: Sequence[tuple[str, int, str]]):
        super().__init__(message, sorted({inp for inp, _, _ in dims}))
        self.dims = tuple(dims)
