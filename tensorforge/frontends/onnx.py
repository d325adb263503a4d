"""ONNX frontend: ``import_onnx(model_or_path) -> ModuleOp`` in the graph dialect.

This module loads models and checks what it is given; the graph walk is in
``onnx_ops/importer.py`` and the per-op handlers in ``onnx_ops/<family>.py``.  Each node goes
to the handler registered for its op type, which emits graph ops; operands that ONNX moved
from attributes to inputs over the opsets are read through the import context, which folds
them to constants when they only depend on constants and static shapes.  Initializers become
``graph.constant``; symbolic dimensions (``dim_param``) become named symbolic dims unless
example inputs or ``shapes`` bind them (``onnx_ops/bindings.py``).  Anything
that cannot be represented raises ``UnsupportedOpError`` naming the node, its op type, the
opset and what is missing.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import FrontendError
from ..ir.builtin import ModuleOp
from ..ir.types import Dim
from .onnx_ops.errors import NonConstantInputError, UnboundDimError

try:
    import onnx
except ImportError:  # pragma: no cover - onnx is an optional dependency
    onnx = None

__all__ = ["import_onnx", "load_model", "supported_ops", "NonConstantInputError", "UnboundDimError", "MAX_OPSET"]


def _require_onnx():
    if onnx is None:
        raise FrontendError("the ONNX frontend needs the 'onnx' package: pip install 'tensorforge[onnx]'")


MAX_OPSET = onnx.defs.onnx_opset_version() if onnx is not None else 0


def load_model(model_or_path: Any) -> "onnx.ModelProto":
    """A ``ModelProto`` from a proto, serialized bytes or a file path; bad input is a FrontendError."""
    _require_onnx()
    if isinstance(model_or_path, onnx.ModelProto):
        model = model_or_path
        where = "the given ModelProto"
    elif isinstance(model_or_path, (bytes, bytearray)):
        where = "the given bytes"
        try:
            model = onnx.load_from_string(bytes(model_or_path))
        except Exception as e:
            raise FrontendError(f"{where} are not a serialized ONNX model ({type(e).__name__}: {e})") from None
    elif isinstance(model_or_path, (str, os.PathLike)):
        path = os.fspath(model_or_path)
        where = f"'{path}'"
        if not os.path.isfile(path):
            raise FrontendError(f"cannot import {where}: no such file")
        try:
            model = onnx.load(path)
        except Exception as e:
            raise FrontendError(f"cannot import {where}: not a readable ONNX model "
                                f"({type(e).__name__}: {e})") from None
    else:
        raise FrontendError(f"cannot import a {type(model_or_path).__name__}: pass an onnx.ModelProto, "
                            f"serialized bytes or a path to an .onnx file")
    if not model.HasField("graph") or (model.ir_version <= 0 and not model.graph.node):
        raise FrontendError(f"cannot import {where}: it holds no ONNX graph (is it an ONNX model?)")
    from .onnx_ops.importer import check_model
    check_model(model)
    return model


def import_onnx(model_or_path: Any, *, bind_inputs: Mapping[str, np.ndarray] | None = None,
                input_shapes: Mapping[str, Sequence[Dim]] | None = None, example_inputs: Any = None,
                shapes: Mapping[str, Any] | None = None, dim_ranges: Mapping[str, Any] | None = None,
                shape_hints: Mapping[str, int] | None = None) -> ModuleOp:
    """Imports an ONNX model into a graph-dialect module with one function, ``main``.

    ``bind_inputs`` turns the named model inputs into constants with the given values (used to
    specialize a model whose shape operands are model inputs); ``input_shapes`` overrides
    declared input shapes (e.g. to fix a dynamic batch size).  ``example_inputs`` (arrays or
    tensors in input order, or a name -> array mapping) and ``shapes`` (``{"batch": 1}``) bind
    the inputs' symbolic dimensions (``dim_param``) to sizes, so that the shape arithmetic of a
    dynamic-axes export folds away at import.  Unbound ones stay symbolic: ``main``'s symbol
    table gives each the range of ``dim_ranges`` (``{"batch": (1, 64)}``; a ``(min, max)`` pair
    in ``shapes`` is the same; default ``1..`` with no maximum, narrowed where the model needs
    it, e.g. a slice of a 64-long position table by ``seq``) and the hint of ``shape_hints``
    (else the example input's size, else 1 for a batch-like dim and 128 otherwise).  Names
    are ``dim_param`` made identifiers (``seq-len`` -> ``seq_len``); these mappings accept both.
    A shape operand that needs a concrete size of an unbound dim raises ``UnboundDimError``.
    """
    model = load_model(model_or_path)
    from .onnx_ops.importer import Importer
    return Importer(model, bind_inputs or {}, input_shapes or {}, example_inputs, shapes, dim_ranges,
                    shape_hints).run()


def supported_ops() -> list[str]:
    """ONNX op types (default domain) the importer has a handler for."""
    _require_onnx()
    from .onnx_ops import handler_tables
    return sorted(handler_tables()[0])
