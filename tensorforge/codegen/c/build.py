"""graph module -> loaded native model: lower, schedule, emit C, compile (cached), load."""
from __future__ import annotations

from ...ir.builtin import ModuleOp
from ...passes.lower.graph_to_kernels import lower_function
from ...runtime.native import NativeModel
from ...runtime.signature import specs_from_values
from ...schedule.default import default_schedule
from ..target import KNOWN_FEATURES, Target, compiler_version
from .model import generate_model_c
from .tensorize import Tensorizer
from .toolchain import compile_c


def target_record(target: Target) -> dict:
    """What an artifact records about the target its library was built for (see runtime/artifact.py)."""
    return {"key": target.key(), "arch": target.arch, "march": target.march,
            "features": sorted(target.features & KNOWN_FEATURES), "cores": target.cores,
            "cc": target.cc, "compiler": compiler_version(target.cc), "flags": list(target.compile_flags)}


def build_native(module: ModuleOp, target: Target | None = None, name: str = "model",
                 threads: int | None = None) -> tuple[NativeModel, str]:
    """Compiles the module's main function; the module itself is left unchanged.

    The generated code depends only on the module and ``target`` (so the compile cache hits for
    any ``threads``); ``threads`` (default: all of the target's cores) is set at run time.
    """
    target = target or Target.host()
    func = module.main
    inputs = specs_from_values(func.args, [a.type for a in func.args], "input")
    outputs = specs_from_values(func.outputs, [v.type for v in func.outputs], "output")
    work = module.clone()
    lowered = work.main
    lower_function(lowered, target)
    src, layout = generate_model_c(lowered, lambda fn: default_schedule(fn, target.cores), Tensorizer(target))
    lib = compile_c(src, target, name=name)
    build = {"target": target_record(target), "digest": lib.digest,
             "origin": "cache" if lib.cache_hit else "compiled",
             "kernels": len(layout.kernel_names), "unique_kernels": layout.unique_kernels}
    model = NativeModel(lib.lib, inputs, outputs, layout.weights, layout.arena_bytes,
                        threads=threads or target.cores, library_path=lib.path, source=src, build=build)
    model.library = lib
    model.layout = layout
    return model, src
