"""``target="mlir"``: a model lowered by tensorforge to its loop level, exported as upstream MLIR
(scf/memref/arith/math/func), and compiled by upstream tools alone.

This backend is a cross-check, not a fast path: its code generation shares nothing with the C
backend below the loop level, so when both agree on a model, neither's printer, vectorizer nor
micro-kernels fooled the other. The loops run as lowered (no schedule, no tuning database), so
``db``/``tuning``/``threads`` change nothing here and ``fast_math`` is refused (``llc`` compiles
IEEE arithmetic only).
"""
from __future__ import annotations

import time
from typing import Any

from ...errors import CompileError
from ...ir.builtin import ModuleOp
from ...runtime.mlir_model import MlirModel, require_static
from ...runtime.signature import specs_from_values
from .toolchain import compile_mlir, require_tools


def build_mlir(module: ModuleOp, name: str = "model", fast_math: bool = False, **_: Any) -> tuple[MlirModel, str]:
    """Compiles ``module`` (graph level, already optimised) through upstream MLIR; returns
    ``(MlirModel, MLIR text)``. ``model.build["compile_s"]`` holds the seconds of the export, of
    each tool (or of the cache look-up on a hit) and their total."""
    if fast_math:
        raise CompileError("fast_math=True is a C-compiler option; target='mlir' compiles IEEE arithmetic only "
                           "(leave fast_math off, or compile with target='cpu')")
    func = module.main
    inputs = specs_from_values(func.args, [a.type for a in func.args], "input")
    outputs = specs_from_values(func.outputs, [v.type for v in func.outputs], "output")
    require_static((*inputs, *outputs))
    require_tools()
    from .loop_export import loop_program
    start = time.perf_counter()
    program = loop_program(module, weights_argument=True, emit_c_interface=True)
    text = program.text
    export_s = time.perf_counter() - start
    stages: dict[str, float] = {}
    library = compile_mlir(text, name, stages)
    times = {"export": export_s, **stages, "total": export_s + stages["total"]}
    build = {"target": "mlir", "library": str(library), "compile_s": times}
    return MlirModel(library, inputs, outputs, text, build, weights=program.weights), text
