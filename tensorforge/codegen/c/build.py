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
                 threads: int | None = None, profile: bool = False, tuning=None,
                 fast_math: bool = False) -> tuple[NativeModel, str]:
    """Compiles the module's main function; the module itself is left unchanged.

    The generated code depends only on the module and ``target`` (so the compile cache hits for
    any ``threads``); ``threads`` (default: all of the target's cores) is set at run time.
    ``profile`` builds a library that times every kernel call (``NativeModel.kernel_times``).
    ``tuning`` (a ``tune.apply.Tuning``) gives kernels their tuned GemmParams / schedule traces.
    ``fast_math`` compiles with ``-ffast-math`` (docs/numerics.md: NaN/Inf are then not honoured).
    """
    target = target or Target.host()
    if fast_math != target.fast_math:
        target = target.with_fast_math(fast_math)
    work = module.clone()
    lower_function(work.main, target)
    return build_lowered(work, module, target, name, threads, profile, tuning)


def build_lowered(lowered: ModuleOp, module: ModuleOp, target: Target, name: str = "model",
                  threads: int | None = None, profile: bool = False, tuning=None) -> tuple[NativeModel, str]:
    """``build_native`` after lowering: ``lowered`` is ``module`` lowered to kernels by the caller
    (``explain`` lowers with a fusion log); ``module`` names the inputs and outputs.  The ids in
    ``model.layout.plan`` refer to ``lowered``'s values, so a caller reading them keeps ``lowered``."""
    func = module.main
    inputs = specs_from_values(func.args, [a.type for a in func.args], "input")
    outputs = specs_from_values(func.outputs, [v.type for v in func.outputs], "output")
    src, layout = generate_model_c(lowered.main, lambda fn: default_schedule(fn, target.cores),
                                   Tensorizer(target, *(tuning.hooks() if tuning else ())), profile=profile,
                                   schedule_for=tuning.schedule_for if tuning else None)
    lib = compile_c(src, target, name=name)
    build = {"target": target_record(target), "digest": lib.digest,
             "origin": "cache" if lib.cache_hit else "compiled",
             "kernels": len(layout.kernel_names), "unique_kernels": layout.unique_kernels,
             "tuned_kernels": len(tuning.applied) if tuning else 0}
    model = NativeModel(lib.lib, inputs, outputs, layout.weights, layout.arena_bytes,
                        threads=threads or target.cores, library_path=lib.path, source=src, build=build,
                        symbols=layout.symbols, plan=layout.dynamic_plan)
    model.library = lib
    model.layout = layout
    return model, src
