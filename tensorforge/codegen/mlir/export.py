"""``tensorforge.export_mlir(model, level)``: any model ``tensorforge.compile`` takes, as upstream MLIR text.

The model is imported and optimised as a compile does it (``api.import_model``, then
``passes.pipeline.optimize`` for ``MlirTarget``), then printed at one of two levels:

- ``"structured"``: ``linalg.generic`` on tensors (``structured_export.py``);
- ``"loop"``: ``scf``/``memref`` kernel functions and a ``@main`` over memrefs with the C
  interface (``loop_export.py``), what an upstream-MLIR backend lowers to a shared library.

Options that only shape a native build (threads, the tuning database) are accepted and ignored,
so a call written for ``tensorforge.compile`` works unchanged; options that would change the
arithmetic into something upstream dialects cannot express (``fast_math``, int8/bf16
precision) are errors.  ``verify_mlir`` runs ``mlir-opt`` on a text (the CLI's ``--verify``).
"""
from __future__ import annotations

import shutil
import subprocess
from typing import Any, Sequence

from ...errors import CompileError, TensorforgeError
from ...ir.builtin import ModuleOp

LEVELS = ("structured", "loop")
MLIR_OPT_NAMES = ("mlir-opt-19", "mlir-opt")
_IMPORT_OPTIONS = ("shapes", "dynamic_shapes", "dim_ranges", "shape_hints")
# What tensorforge.compile takes that changes only a native build, not the IR printed here.
_IGNORED_OPTIONS = ("threads", "db", "max_specializations", "onnx_structured_io")


def export_mlir(model: Any, level: str = "structured", example_inputs: Sequence | None = None,
                **compile_options: Any) -> str:
    """``model`` (a ``torch.nn.Module`` with ``example_inputs``, an ``onnx.ModelProto``, an .onnx
    path or a graph ``ModuleOp``) as the text of an upstream-MLIR module at ``level``
    ("structured" or "loop") that ``mlir-opt`` verifies with registered dialects only.

    ``compile_options`` are ``tensorforge.compile``'s: ``passes`` picks the graph optimisation,
    ``shapes``/``dynamic_shapes``/``dim_ranges``/``shape_hints`` the import; the export needs
    static shapes, so a dimension left symbolic is a CompileError.  A ``ModuleOp`` is copied,
    not changed.
    """
    if level not in LEVELS:
        raise TensorforgeError(f"unknown MLIR export level '{level}' (choose from {', '.join(LEVELS)})")
    module = optimized_module(model, example_inputs, dict(compile_options))
    if level == "structured":
        from .structured_export import structured_module_text
        return structured_module_text(module)
    from .loop_export import loop_module_text
    return loop_module_text(module)


def optimized_module(model: Any, example_inputs: Sequence | None, options: dict) -> ModuleOp:
    """Imports, verifies and optimises ``model`` as ``tensorforge.compile`` does (for ``MlirTarget``)."""
    from ...api import import_model
    from ...ir.verifier import verify
    from ...runtime.control_flow import has_control_flow
    from .target import MlirTarget
    import_options = {k: options.pop(k) for k in _IMPORT_OPTIONS if k in options}
    passes = options.pop("passes", None)
    _check_options(options)
    module = import_model(model, example_inputs, **import_options)
    verify(module)
    if passes is not False and passes != "":
        from ...passes.pipeline import optimize
        module = module.clone() if module is model else module
        optimize(module, MlirTarget.host(), passes)
        verify(module)
    if has_control_flow(module.main):
        raise CompileError("models with control flow (If/Loop/Scan) have no MLIR export yet; export the "
                           "branch or loop body as its own model")
    return module


def _check_options(options: dict) -> None:
    target = options.pop("target", "cpu")
    if target not in ("cpu", "mlir"):
        raise TensorforgeError(f"export_mlir(target='{target}'): the export is for CPUs ('cpu' or 'mlir')")
    if options.pop("fast_math", False):
        raise CompileError("fast_math=True is a C-compiler option; the MLIR export keeps IEEE arithmetic only")
    precision = options.pop("precision", "f32")
    if precision != "f32":
        raise CompileError(f"precision='{precision}' maps layers onto hand-written int8/bf16 kernels, which have "
                           f"no upstream-MLIR form; export with precision='f32'")
    for key in _IGNORED_OPTIONS:
        options.pop(key, None)
    if options:
        raise TensorforgeError(f"export_mlir got unknown options: {', '.join(sorted(options))}")


def find_mlir_opt() -> str | None:
    """The path of ``mlir-opt-19`` (Debian's name) or ``mlir-opt``; None when neither is installed."""
    for name in MLIR_OPT_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def verify_mlir(text: str, timeout: float = 300) -> None:
    """Parses and verifies ``text`` with ``mlir-opt`` (registered dialects only); a CompileError
    with mlir-opt's first message when it fails or is not installed."""
    tool = find_mlir_opt()
    if tool is None:
        raise CompileError("mlir-opt is not installed (Debian: apt-get install mlir-19-tools); "
                           "leave out --verify to export without checking")
    try:
        out = subprocess.run([tool, "-o", "/dev/null", "-"], input=text, capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CompileError(f"mlir-opt did not finish verifying the export within {timeout:.0f} s") from None
    if out.returncode != 0:
        first = next((line for line in out.stderr.splitlines() if "error" in line), out.stderr.strip()[:300])
        raise CompileError(f"mlir-opt rejects the exported module: {first.strip()}")


__all__ = ["LEVELS", "export_mlir", "find_mlir_opt", "optimized_module", "verify_mlir"]
