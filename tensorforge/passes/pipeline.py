"""The default graph-optimisation pipeline, in the order the design names.

    const-fold -> shape-prop -> dce -> cse -> qdq-contractions -> simplify-extra -> fold-inference
               -> trim-window -> int8-contractions -> cse -> dce -> [layout -> cse -> dce] -> reorder

- ``const-fold`` / ``shape-prop``: constants, shape arithmetic and splats (ConstantOfShape)
  become constants; ``const-fold`` is ``fold`` with a guard that never lets folding grow the
  model by more than its limit (``fold`` would duplicate a weight that stays in use, such as
  GPT-2's tied embedding); ``dce`` drops what they leave behind, ``cse`` merges duplicates.
- ``qdq-contractions``: convolutions and matmuls of ``DequantizeLinear``'d 8-bit activations and
  int8 weights (onnxruntime's ``quantize_static`` QDQ models) run on the int8 kernels; first, before
  simplification folds the next layer's quantization scale into the weights.
- ``simplify-extra``: algebraic simplification (simplify's rules plus ``EXTRA_RULES``).
- ``fold-inference``: BatchNorm, bias adds and scales into conv/GEMM weights.
- ``trim-window``: conv/pooling kernel taps that read only padding for every output (a 3x3 pad-1
  conv over a 1x1 map) are cut out of the kernel and the pads, when that is exact (constant conv
  weights, finite in the dropped taps); after ``fold-inference`` so that folded weights are constants.
- ``int8-contractions``: int32 matmuls and convolutions of 8-bit activations by constant int8
  weights (ONNX ``MatMulInteger``, ``QLinearMatMul``, ``ConvInteger``, ``QLinearConv``) become
  ``graph.qmatmul`` / ``graph.qconv``, the int8 (VNNI) kernels; exact.
- ``layout``: blocked NCHW[x]c convolutions for the target's vector width, lowered to the C
  backend's native kernels (``codegen/c/nchwc.py``).  On by default for the CPU target in its
  ``auto`` form: a function stays blocked only where the conversions left at its edges cost little
  beside its blocked convolutions (``passes/graph/layout.py``, ``MAX_CONVERSION_BYTES_PER_MAC``:
  ResNets go blocked, MobileNetV2 and EfficientNet, whose depthwise convolutions have no blocked
  kernel, stay plain).  ``layout=True`` forces it, ``False`` leaves it out; off for the
  interpreter, MLIR and GPU targets, which have no blocked kernels.
- ``reorder``: a topological order with a lower peak of live memory (``reorder="siblings"``
  instead puts horizontal-fusion candidates next to each other; None leaves the order alone).

``tensorforge.compile`` runs ``default_pipeline(target)`` on the imported module (``passes=``
overrides it); ``tensorforge explain MODEL --passes`` prints what each pass did.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..errors import PassError
from ..ir.builtin import ModuleOp
from ..ir.pass_manager import PassManager, PassReport

CLEANUP = ("const-fold", "fold-control-flow", "shape-prop", "dce", "cse")
OPTIMIZE = ("qdq-contractions", "simplify-extra", "fold-inference", "trim-window", "int8-contractions", "cse", "dce")
INT8_REWRITES = ("qdq-contractions", "int8-contractions")


def vector_block(target: Any = None) -> int:
    """fp32 lanes per vector of ``target`` (a ``Target``, or "cpu"/"interpreter"/None: the host)."""
    width = getattr(target, "vector_width", None)
    if width:
        return int(width)
    from ..codegen.target import Target
    return Target.host().vector_width


FOLDING = ("const-fold", "shape-prop", "simplify-extra", "fold-inference", "layout")
"""Passes that fold constants, and so take the ``limit`` option (elements one fold may add)."""


def default_pipeline_text(target: Any = None, *, layout: bool | None = None, reorder: str | None = "memory",
                          fold_limit: int | None = None) -> str:
    """The textual pipeline ``default_pipeline`` parses.  For a GPU target the int8 rewrites are left
    out: the ops they make (``graph.qconv``, ``graph.qmatmul``) have CPU kernels only, so a QDQ model
    runs its dequantized float32 arithmetic there.  ``layout``: None is the blocked layout where it
    pays, on the CPU target (``target`` None or "cpu" or a CPU ``Target``); True always; False never."""
    passes = [p for p in CLEANUP + OPTIMIZE if not (_is_gpu(target) and p in INT8_REWRITES)]
    if layout is None and _is_native_cpu(target):
        passes += [f"layout{{block={vector_block(target)} auto=true}}", "cse", "dce"]
    elif layout:
        passes += [f"layout{{block={vector_block(target)}}}", "cse", "dce"]
    if reorder:
        passes.append(f"reorder{{goal={reorder}}}")
    if fold_limit is not None:
        passes = [_with_limit(p, fold_limit) if p.split("{")[0] in FOLDING else p for p in passes]
    return ",".join(passes)


def _is_native_cpu(target: Any) -> bool:
    """The C backend's target: the blocked layout's kernels exist there only."""
    if target is None or target == "cpu":
        return True
    return not isinstance(target, str) and getattr(target, "language", "c") == "c"


def _is_gpu(target: Any) -> bool:
    return target in ("opencl", "cuda") or getattr(target, "language", None) in ("opencl", "cuda")


def _with_limit(text: str, limit: int) -> str:
    name, brace, rest = text.partition("{")
    return f"{name}{{limit={limit}" + (f" {rest}" if brace else "}")


def default_pipeline(target: Any = None, *, layout: bool | None = None, reorder: str | None = "memory",
                     fold_limit: int | None = None, verify_each: bool = False) -> PassManager:
    """The graph-level optimisation pipeline for ``target`` as a ``PassManager``; ``fold_limit``
    (elements) bounds how much one constant fold may grow the model (default 65536)."""
    return PassManager.parse(default_pipeline_text(target, layout=layout, reorder=reorder, fold_limit=fold_limit),
                             verify_each=verify_each)


def resolve_pipeline(passes: Any, target: Any = None) -> PassManager | None:
    """``passes`` as ``compile`` takes it: None for the default pipeline, a pipeline string, a
    ``PassManager``, or False / "" for none."""
    if passes is None:
        return default_pipeline(target)
    if passes is False or passes == "":
        return None
    if isinstance(passes, PassManager):
        return passes
    if isinstance(passes, str):
        return PassManager.parse(passes)
    raise PassError(f"passes= takes a pipeline string, a PassManager, None (the default pipeline) or "
                    f"False (no optimisation), not {type(passes).__name__}")


def optimize(module: ModuleOp, target: Any = None, passes: Any = None) -> PassReport | None:
    """Runs the pipeline ``passes`` selects on ``module`` in place; its report, or None if none ran."""
    pm = resolve_pipeline(passes, target)
    return None if pm is None else pm.run(module)


# ---- per-pass statistics (``tensorforge explain --passes``) -----------------------------------
@dataclass
class ModuleStats:
    """What a module looks like between passes."""

    ops: int                     # graph ops other than constants
    constants: int
    weight_bytes: int            # bytes held by constants
    peak_bytes: int              # peak_live_bytes summed over functions
    histogram: Counter

    @staticmethod
    def of(module: ModuleOp) -> "ModuleStats":
        from .memory.plan import peak_live_bytes
        hist: Counter = Counter()
        consts = weight = 0
        for op in module.walk():
            if op.name == "graph.constant":
                consts += 1
                weight += op.attributes["value"].array.nbytes
            elif op.dialect not in ("builtin", "func"):
                hist[op.name] += 1
        peak = sum(peak_live_bytes(f) for f in module.functions)
        return ModuleStats(sum(hist.values()), consts, weight, peak, hist)


@dataclass
class PassTrace:
    """One pass of a traced pipeline and the module after it."""

    name: str
    seconds: float
    changed: bool
    after: ModuleStats


def trace_pipeline(module: ModuleOp, pm: PassManager) -> tuple[ModuleStats, list[PassTrace]]:
    """Runs ``pm``'s passes one at a time on ``module``: its stats before, and after each pass."""
    before = ModuleStats.of(module)
    rows = []
    for p in pm.passes:
        single = PassManager([p], verify_each=pm.verify_each)
        (record,) = single.run(module).records
        rows.append(PassTrace(record.name, record.seconds, record.changed, ModuleStats.of(module)))
    return before, rows


__all__ = ["CLEANUP", "FOLDING", "OPTIMIZE", "ModuleStats", "PassTrace", "default_pipeline", "default_pipeline_text",
           "optimize", "resolve_pipeline", "trace_pipeline", "vector_block"]
