"""graph module -> loaded native model: lower, schedule, emit C, compile (cached), load."""
from __future__ import annotations

from ...ir.builtin import ModuleOp
from ...passes.lower.graph_to_kernels import lower_function
from ...runtime.native import NativeModel
from ...schedule.default import default_schedule
from ..target import Target
from .model import ENTRY, generate_model_c
from .toolchain import compile_c


def build_native(module: ModuleOp, target: Target | None = None, name: str = "model"
                 ) -> tuple[NativeModel, str]:
    """Compiles the module's main function; the module itself is left unchanged."""
    target = target or Target.host()
    work = module.clone()
    func = work.main
    lower_function(func)
    src, layout = generate_model_c(func, lambda fn: default_schedule(fn, target.cores))
    lib = compile_c(src, target, name=name)
    model = NativeModel(lib.lib, ENTRY, layout.input_types, layout.output_types, layout.weights,
                        layout.arena_bytes)
    model.library = lib
    model.layout = layout
    return model, src
