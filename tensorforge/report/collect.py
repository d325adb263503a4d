"""Everything ``tensorforge explain --html`` shows, gathered in one pass over the compile path.

The model goes the way ``tensorforge.compile`` takes it (pipeline, fusion, C, one library), with
three differences that only add information: each pass runs alone so its time and op counts are
recorded, fusion keeps its log, and the library is built with per-kernel timers
(``generate_model_c(profile=True)``) and run a few times so every kernel gets its share of the run.
The result is plain data (``Report``); ``html.py`` renders it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..codegen.c.build import build_lowered
from ..codegen.target import Target
from ..ir.builtin import FuncOp, ModuleOp
from ..ir.core import Operation
from ..ir.interpreter import run_function
from ..ir.pass_manager import PassManager
from ..passes.fusion.log import FusionLog
from ..passes.fusion.passes import fuse_function
from ..passes.lower.graph_to_kernels import default_fusion, lower_ops
from ..passes.memory.plan import live_intervals
from ..passes.pipeline import ModuleStats, PassTrace, default_pipeline, trace_pipeline
from ..runtime.native import NativeModel
from .pictures import Picture, collapse, graph_picture, kernel_labels, kernel_picture


@dataclass
class KernelRow:
    """One kernel call of ``tf_run`` (program order)."""

    index: int
    name: str                  # C function (calls of identical kernels share it)
    ops: list[str]             # fusion-log labels of the lowered kernels merged into it
    kind: str                  # fusion kind
    seconds: float             # mean wall time per run
    share: float               # percent of the summed kernel time
    precision: str = ""        # what its arithmetic runs in (``kernel_precision``)


@dataclass
class KernelCode:
    """One distinct C function: how it was scheduled and its text."""

    name: str
    schedule: str
    source: str
    calls: int
    seconds: float


@dataclass
class Buffer:
    """An intermediate in the arena: bytes [offset, offset+size) live from kernel ``first`` to ``last``."""

    name: str
    offset: int
    size: int
    first: int
    last: int


@dataclass
class MemoryReport:
    arena_bytes: int           # the plan's peak: one arena holds every intermediate
    naive_bytes: int           # every intermediate in its own buffer
    weight_bytes: int
    steps: int                 # kernel calls (the time axis of the lifetimes)
    buffers: list[Buffer] = field(default_factory=list)


@dataclass
class Report:
    model: str
    target: str
    pipeline: str
    fusion: str
    before: ModuleStats
    passes: list[PassTrace]
    log: FusionLog
    pictures: list[Picture]
    kernels: list[KernelRow]
    code: list[KernelCode]
    memory: MemoryReport
    profile_runs: int
    run_seconds: float         # mean end-to-end time of one run (profiling build)
    compile_seconds: float
    max_abs_error: float | None = None   # against the reference interpreter, when checked
    notes: list[str] = field(default_factory=list)

    @property
    def after(self) -> ModuleStats:
        return self.passes[-1].after if self.passes else self.before


def example_inputs(model: NativeModel, seed: int = 0) -> list[np.ndarray]:
    """Inputs for the profiling run when the caller has none: normal floats, zero integers (safe
    as indices into any embedding table), False booleans."""
    rng = np.random.default_rng(seed)
    out = []
    for spec in model.inputs:
        dt = spec.np_dtype
        out.append(rng.standard_normal(spec.shape).astype(dt) if np.issubdtype(dt, np.floating)
                   else np.zeros(spec.shape, dt))
    return out


def lower_with_log(module: ModuleOp, target: Target, fusion: str | None = None) -> tuple[ModuleOp, FusionLog]:
    """A lowered, fused copy of ``module`` as ``build_native`` makes it, and the fusion log."""
    lowered = module.clone()
    log = FusionLog()
    pipeline = default_fusion() if fusion is None else fusion
    for f in lowered.functions:
        if pipeline:
            fuse_function(f, target, pipeline, log)
        else:
            lower_ops(f)
    return lowered, log


def default_tuning(target: Target):
    """The tuning records ``tensorforge.compile`` applies by default (None without a database), so
    that the report and bisect look at the code a normal compile makes."""
    try:
        from ..tune.apply import tuning_from_db
    except ImportError:
        return None
    return tuning_from_db("auto", target)


def build_profiled(module: ModuleOp, target: Target, name: str, fusion: str | None = None):
    """``module`` (already through the graph pipeline) lowered with the fusion log and built with
    per-kernel timers and the default tuning, as ``tensorforge.compile`` would build it:
    (lowered module, fusion log, model, tuning or None)."""
    lowered, log = lower_with_log(module, target, fusion)
    tuning = default_tuning(target)
    model, _ = build_lowered(lowered, module, target, name=name, profile=True, tuning=tuning)
    return lowered, log, model, tuning


def collect(module: ModuleOp, name: str, inputs: Sequence[Any] | None = None, target: Target | None = None,
            profile_runs: int = 10, pipeline: str | None = None, check: bool = True,
            step: Callable[[str], None] | None = None, warmup_runs: int = 5) -> Report:
    """Optimises ``module`` in place, compiles it with kernel timers and runs it ``profile_runs``
    times (after ``warmup_runs`` untimed runs) on ``inputs`` (default: ``example_inputs``).
    ``check`` compares the outputs with the reference interpreter; ``step(what)`` is told as each
    of 5 stages ends.  The first runs after a compile (or any idle spell) are slower for a few
    calls: after one warm-up run, MobileNetV2's kernels summed 6.8 ms per run over 20 profiled
    runs and 3.3 ms over 300."""
    step = step or (lambda what: None)
    target = target or Target.host()
    pictures = [graph_picture(module.main, "graph as imported")]
    pm = PassManager.parse(pipeline) if pipeline else default_pipeline(target)
    before, rows = trace_pipeline(module, pm)
    pictures.append(graph_picture(module.main, "graph after the optimiser"))
    step("optimised")
    t0 = time.perf_counter()
    fusion = default_fusion()
    lowered, log, model, tuning = build_profiled(module, target, name, fusion)
    compile_s = time.perf_counter() - t0
    step("compiled")
    layout = model.layout
    pictures.append(kernel_picture(lowered.main, log, layout.kernel_names, "kernels after fusion"))

    xs = list(inputs) if inputs is not None else example_inputs(model)
    outs = model.run(xs)
    for _ in range(max(0, warmup_runs - 1)):
        model.run(xs)
    model.reset_kernel_times()
    runs = max(1, profile_runs)
    t1 = time.perf_counter()
    for _ in range(runs):
        model.run(xs)
    run_s = (time.perf_counter() - t1) / runs
    per_call = model.kernel_times() / runs
    step("profiled")
    notes = [f"{model.build.get('tuned_kernels', 0)} kernel(s) use records of the tuning database"
             if tuning is not None else "untuned: default schedules (no tuning database)"]
    err = None
    if check:
        ref = run_function(module.main, xs)
        err = max((float(np.max(np.abs(np.asarray(o, np.float64) - np.asarray(r, np.float64)))) if np.size(r) else 0.0)
                  for o, r in zip(outs, ref))
    step("checked")
    kernels = _kernel_rows(lowered.main, log, layout.kernel_names, per_call)
    code = _kernel_code(layout, kernels)
    memory = _memory(lowered.main, layout, model)
    pictures = [collapse(p) for p in pictures]
    step("collected")
    return Report(name, target.key(), pm.pipeline, fusion or "none",
                  before, rows, log, pictures, kernels, code, memory, runs, run_s, compile_s, err, notes)


LOW_PRECISION = (("graph.q", "int8"), ("graph.bf16_", "bf16"))   # op-name prefix -> the precision it computes in


def kernel_precision(kernel: Operation) -> str:
    """The precision a kernel computes in, read off its ops and types so that any model (and any
    new quantized op) is covered: "int8" for a quantized contraction (``graph.qmatmul``,
    ``graph.qconv``, any ``graph.q*``), "bf16" for ``graph.bf16_matmul``; otherwise the element
    types it writes ("f32", "i64"), prefixed by what it reads when that differs ("f32->ui8" for
    the quantize step before an int8 contraction)."""
    for op in kernel.walk():
        for prefix, precision in LOW_PRECISION:
            if op.name.startswith(prefix):
                return precision

    def dtypes(values) -> list[str]:
        return list(dict.fromkeys(str(v.type.dtype.value) for v in values if hasattr(v.type, "dtype")))

    outs, ins = dtypes(kernel.results), dtypes(kernel.operands)
    written = ",".join(outs) or "?"
    return written if not ins or set(outs) <= set(ins) else f"{','.join(ins)}->{written}"


def _kernel_rows(func: FuncOp, log: FusionLog, names: list[str], seconds: np.ndarray) -> list[KernelRow]:
    kernels = [op for op in func.body if op.name == "structured.kernel"]
    total = float(seconds.sum()) or 1.0
    return [KernelRow(i, names[i], kernel_labels(op, log), str(op.attributes.get("tf.fusion", "")),
                      float(seconds[i]), 100.0 * float(seconds[i]) / total, kernel_precision(op))
            for i, op in enumerate(kernels)]


def _kernel_code(layout, rows: list[KernelRow]) -> list[KernelCode]:
    calls: dict[str, int] = {}
    spent: dict[str, float] = {}
    for r in rows:
        calls[r.name] = calls.get(r.name, 0) + 1
        spent[r.name] = spent.get(r.name, 0.0) + r.seconds
    return [KernelCode(n, layout.schedules.get(n, ""), layout.sources[n], calls.get(n, 0), spent.get(n, 0.0))
            for n in layout.sources]


def _memory(func: FuncOp, layout, model: NativeModel) -> MemoryReport:
    plan = layout.plan
    upto: list[int] = []              # body index -> ordinal of the last kernel call at or before it
    name_of: dict[int, str] = {}      # id(value) -> "#call C-name" of its kernel (".j": result j of several)
    k = -1
    for op in func.body:
        if op.name == "structured.kernel":
            k += 1
            for j, r in enumerate(op.results):
                name_of[id(r)] = f"#{k} {layout.kernel_names[k]}" + (f".{j}" if len(op.results) > 1 else "")
        upto.append(max(k, 0))
    buffers = [Buffer(name_of.get(key, "?"), plan.offsets[key], plan.sizes[key], upto[start], upto[end])
               for key, (start, end, v) in live_intervals(func, lambda v: id(v) in plan.offsets,
                                                            plan.keep_alive).items()]
    buffers.sort(key=lambda b: (b.first, b.offset))
    return MemoryReport(plan.arena_bytes, plan.naive_bytes, int(model.weights.nbytes), k + 1, buffers)


__all__ = ["Buffer", "KernelCode", "KernelRow", "MemoryReport", "Report", "collect", "default_tuning",
           "example_inputs", "kernel_precision", "lower_with_log"]
