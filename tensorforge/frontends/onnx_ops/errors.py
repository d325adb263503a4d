"""The frontend's own error: a shape-like operand that only model inputs determine."""
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
