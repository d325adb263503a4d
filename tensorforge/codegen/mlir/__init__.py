"""Export of tensorforge's IR to upstream MLIR dialects (docs/mlir.md).

Two levels: ``structured`` (``linalg.generic`` on tensors, ``structured_export.py``) and ``loop``
(``scf``/``memref`` functions over buffers plus a ``@main`` with the C interface,
``loop_export.py``); both print text that ``mlir-opt`` verifies with registered dialects only.
``scalar.py`` maps the scalar ops both levels share onto ``arith``/``math``.
"""
from __future__ import annotations


from .export import LEVELS, export_mlir, verify_mlir

# The exporters and MlirTarget import the lowering passes; ``tensorforge`` imports this package
# for ``tensorforge.export_mlir``, so they are imported from their modules when needed:
# ``loop_export.loop_module_text``, ``structured_export.structured_module_text``, ``target.MlirTarget``.
__all__ = ["LEVELS", "export_mlir", "verify_mlir"]
