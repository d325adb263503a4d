"""The auto-tuner's GPU space: per-kernel ``GpuConfig`` candidates, rejected before measurement
when they cannot run well, timed as one-kernel programs, kept in the tuning database.

    report = tensorforge.tune(model, x, target="opencl", trials=32, db="tune.sqlite")
    cm = tensorforge.compile(model, x, target="opencl", db="tune.sqlite")

**Space** (``gpu_space``).  A GPU kernel is tuned only through the knobs of ``GpuConfig``, and a
knob matters only to the nests whose strategy reads it (``STRATEGY_KNOBS``), so the space varies
only the groups of knobs the kernel's schedule uses: those of the default config's strategies and
of ``PROBE``'s (the smallest micro-tile, which turns a contraction the default hands to a block
reduction into a tiled one).  Groups are varied one at a time, the others at their defaults: each
nest uses one strategy and runs as its own launch, so the groups barely interact, and their
product (144 tilings x 16 thread counts) would be mostly copies.  Configs that schedule to the
same printed launches are one candidate (the schedules clamp tiles to the problem, so a 16-row
GEMM prints the same for tm 16..128); the tuner prints candidates only as it draws them
(``CandidateSpace``), since printing a whole space costs seconds per kernel.

**Rejection** (``GpuMeasurer.build``).  A candidate is built exactly as compile builds it
(``plan_program``: lowered, scheduled, verified, printed); then, for a CUDA target, or for an
OpenCL one when NVRTC is installed (a proxy for register pressure: the same schedule printed as
CUDA), its cubin's ptxas report goes through ``check_resources``.  A candidate that fails there
(too much shared memory, registers, spills) becomes a failed record whose ``error`` says why and
is never run.

**Measurement.**  The one-kernel function of the kernel (``tasks.single_kernel_function``) runs
on seeded random inputs (``measure.random_array``) on OpenCL, or on CUDA when a device is there;
its outputs must match the first config that ran (the default) within ``rtol``; latencies are
seconds per call (copies in and out included, the same for every candidate).

**Search** (``tune_gpu``).  Every kernel's default is measured first; then each next trial goes to
the kernel with the largest ``weight x latency / (records + 1)`` (its default's latency, then its
best so far), so trials are split across kernels by what they cost; within a kernel, a seeded
random untried candidate or, half of the time, an untried neighbour (one knob changed) of the best
so far.  Configs already in the
database are never measured again, and those records count against ``trials`` (a second run with
the same database does nothing).  Kernels that got records are then *confirmed* as the CPU tuner
does (``api.ConfirmOptions``): the default and the best few re-timed round-robin, and compile
applies a tuned config only if it beat the default by more than the margin there
(``TuningDatabase.best``).
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import random
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..codegen.cuda.language import COMPILE_OPTIONS
from ..codegen.gpu.backend import compile_kernel, gpu_target, plan_program
from ..codegen.gpu.program import GpuProgram
from ..codegen.target import GpuTarget
from ..errors import CompileError, TensorforgeError
from ..ir.builtin import FuncOp
from ..ir.core import Operation
from ..passes.lower.structured_to_loop import lower_kernel
from ..schedule.gpu import DEFAULT_CONFIG, GpuConfig, gpu_schedule
from .api import ConfirmOptions, open_db, shown, speedup, weighted_total
from .apply import tuning_from_db
from .database import Confirmation, canonical_config
from .measure import Result, one_line, random_array
from .tasks import Task, kernel_bytes, kernel_flops, lowered_function, single_kernel_function, workload_key

TILES = (16, 32, 64, 128)
DEPTHS = (8, 16, 32)
MICROS = (2, 4, 8)
THREADS = (64, 128, 256, 512)
VECTORS = (1, 2, 4)
KNOB_VALUES = {"tm": TILES, "tn": TILES, "tk": DEPTHS, "micro": MICROS,
               "flat_threads": THREADS, "reduce_threads": THREADS, "vector": VECTORS}
STRATEGY_KNOBS = {"tiled contraction": ("tm", "tn", "tk", "micro"),
                  "block reduction": ("reduce_threads",),
                  "flat": ("flat_threads", "vector")}
PROBE = GpuConfig(tm=min(TILES), tn=min(TILES), micro=min(MICROS))
DEFAULT_MARK = {"kind": "default"}      # a Confirmation's first config (``check_confirmation``)


def config_dict(cfg: GpuConfig) -> dict:
    """What the database stores for a config."""
    return dataclasses.asdict(cfg)


DEFAULT_KEY = canonical_config(config_dict(DEFAULT_CONFIG))


def resolve_target(target: str | GpuTarget) -> GpuTarget:
    """A ``GpuTarget`` from a language name ("opencl", "cuda": what compile targets) or a target."""
    if isinstance(target, GpuTarget):
        return target
    if target in ("opencl", "cuda"):
        return gpu_target(target)
    raise TensorforgeError(f"GPU tuning targets 'opencl' or 'cuda' (or a GpuTarget), not {target!r}")


# ---- the space -----------------------------------------------------------------------------------
def schedule_strategies(kernel: Operation, target: GpuTarget, config: GpuConfig | None = None) -> list[str]:
    """What ``gpu_schedule`` does to each nest of ``kernel`` under ``config`` (on a lowered copy)."""
    return gpu_schedule(lower_kernel(kernel), target.max_threads_per_block, config).strategies


def knob_groups(kernel: Operation, target: GpuTarget) -> list[tuple[str, ...]]:
    """The groups of knobs the kernel's schedule reads, under the default and under ``PROBE``."""
    used = schedule_strategies(kernel, target) + schedule_strategies(kernel, target, PROBE)
    return [knobs for name, knobs in STRATEGY_KNOBS.items() if any(s.startswith(name) for s in used)]


def group_configs(knobs: Sequence[str], max_threads: int) -> list[GpuConfig]:
    """Every combination of ``knobs``' values (the others at their defaults) that ``problems`` allows."""
    out = []
    for values in itertools.product(*(KNOB_VALUES[k] for k in knobs)):
        cfg = dataclasses.replace(DEFAULT_CONFIG, **dict(zip(knobs, values)))
        if not cfg.problems(max_threads):
            out.append(cfg)
    return out


def printed_form(kernel: Operation, cfg: GpuConfig, target: GpuTarget) -> tuple:
    """What compile emits for ``kernel`` under ``cfg`` (each launch's text and shape), or the
    reason it cannot: two configs with equal forms are one candidate."""
    try:
        compiled, _ = compile_kernel(kernel, "k", target, cfg)
    except CompileError as exc:
        return ("error", str(exc))
    return tuple((p.text, p.grid, p.block) for p in compiled.launches)


class CandidateSpace:
    """The candidates of one kernel, printed only when drawn: printing all of them costs seconds
    per kernel (scheduling dominates), the search draws a few.

    ``configs``: the default, then every config of the kernel's knob groups that ``problems``
    allows (a config that schedules but breaks a limit of the target stays in: the tuner records
    why it was rejected).  ``admit`` prints a config and says whether it is new; one that prints
    like an admitted one is a copy, never drawn again."""

    def __init__(self, kernel: Operation, target: GpuTarget):
        self.kernel, self.target = kernel, target
        configs = itertools.chain([DEFAULT_CONFIG], *(group_configs(g, target.max_threads_per_block)
                                                      for g in knob_groups(kernel, target)))
        self.configs = list(dict.fromkeys(configs))
        self.keys = [canonical_config(config_dict(c)) for c in self.configs]
        self.copies: set[str] = set()
        self._forms: dict[tuple, GpuConfig] = {}

    def admit(self, cfg: GpuConfig) -> bool:
        """Whether ``cfg`` prints launches no other admitted config prints (idempotent)."""
        key = canonical_config(config_dict(cfg))
        if key in self.copies:
            return False
        first = self._forms.setdefault(printed_form(self.kernel, cfg, self.target), cfg)
        if first != cfg:
            self.copies.add(key)
        return first == cfg

    def open_configs(self, tried: set[str]) -> list[GpuConfig]:
        """The configs neither tried nor known to be copies."""
        return [c for c, k in zip(self.configs, self.keys) if k not in tried and k not in self.copies]


def gpu_space(kernel: Operation, target: GpuTarget) -> list[GpuConfig]:
    """The distinct candidate configs of one ``structured.kernel``, the default first: every
    config of ``CandidateSpace`` that prints launches no earlier one prints."""
    space = CandidateSpace(kernel, target)
    return [c for c in space.configs if space.admit(c)]


def neighbours(cfg: GpuConfig, space: Sequence[GpuConfig]) -> list[GpuConfig]:
    """The configs of ``space`` that differ from ``cfg`` in exactly one knob."""
    mine = config_dict(cfg)
    return [c for c in space if sum(v != mine[k] for k, v in config_dict(c).items()) == 1]


# ---- tasks ---------------------------------------------------------------------------------------
def gpu_lowered_function(model: Any, example_inputs: Sequence | None, target: GpuTarget,
                         passes: Any = None) -> FuncOp:
    """``model`` lowered to kernels as ``compile(target="opencl"|"cuda")`` lowers it, so that the
    workload keys are the ones compile looks up: the graph pipeline for the GPU target (which may
    differ from the CPU's: int8 rewrites are CPU-only), then ``tasks.lowered_function``'s lowering."""
    from ..api import import_model
    from ..ir.verifier import verify
    from ..passes.pipeline import optimize
    module = import_model(model, example_inputs).clone()
    verify(module)
    if passes is not False and passes != "":
        optimize(module, target, passes)
    return lowered_function(module, None, target, passes=False)


def gpu_tasks(func: FuncOp) -> list[Task]:
    """The distinct kernels of a lowered function (by ``workload_key``), each with its one-kernel
    function and how many kernels of the model it is; kind "gpu" (no tensorizer classes here)."""
    from ..passes.lower.graph_to_kernels import is_library_kernel
    tasks: dict[str, Task] = {}
    for op in func.body:
        if op.name != "structured.kernel" or is_library_kernel(op):
            continue
        key = workload_key(op)
        if key in tasks:
            tasks[key].weight += 1
            continue
        name = str(op.attributes.get("sym_name", "kernel"))
        tasks[key] = Task(key, name, "gpu", single_kernel_function(op, name), 1, kernel_flops(op), kernel_bytes(op))
    return list(tasks.values())


# ---- measurement ---------------------------------------------------------------------------------
@dataclass
class _Bench:
    """A task's seeded inputs, and the outputs of the first config that ran (the reference)."""

    inputs: list[np.ndarray]
    reference: list[np.ndarray] | None = None


class GpuMeasurer:
    """Checks and times GPU candidates of tasks on ``target``'s runtime: OpenCL (the default device)
    or CUDA (needs an NVIDIA device).  ``rtol``: allowed max error relative to the reference's
    largest value; each latency is the median of calls lasting ``min_round_s``, ``rounds`` of them."""

    def __init__(self, target: GpuTarget, *, rtol: float = 1e-3, rounds: int = 3, min_round_s: float = 0.02,
                 seed: int = 0):
        self.target, self.rtol, self.rounds, self.min_round_s, self.seed = target, rtol, rounds, min_round_s, seed
        self._benches: dict[str, _Bench] = {}
        _check_runtime(target)
        self._time_ms = _runtime_timer(target.language)

    # -- before measurement ------------------------------------------------------------------------
    def build(self, task: Task, cfg: GpuConfig) -> tuple[GpuProgram, Any]:
        """(program, CUDA binary or None) of ``task`` under ``cfg``; ``CompileError`` when it
        cannot be built (the verifier's limits, NVRTC) or its resources rule it out."""
        program = plan_program(task.func, self.target, config_for=lambda op: cfg)
        binary, problems = self._resources(task, cfg, program)
        if problems:
            raise CompileError("; ".join(problems))
        return program, binary

    def _resources(self, task: Task, cfg: GpuConfig, program: GpuProgram) -> tuple[Any, list[str]]:
        """(CUDA binary, what ptxas's report says against the target).  An OpenCL target is
        checked through the same schedule printed as CUDA when NVRTC is installed (its binary is
        then not kept); without NVRTC it is not checked."""
        from ..codegen.cuda.nvrtc import check_resources, compile_cuda, nvrtc_available
        t = self.target
        if t.language == "cuda":
            binary = compile_cuda(program.source, t.arch or "sm_90", COMPILE_OPTIONS)
            cuda_program = program
        elif nvrtc_available():
            proxy = dataclasses.replace(t, language="cuda", arch=t.arch or "sm_90")
            cuda_program = plan_program(task.func, proxy, config_for=lambda op: cfg)
            try:
                binary = compile_cuda(cuda_program.source, proxy.arch, COMPILE_OPTIONS)
            except CompileError as exc:          # the proxy's own failure says nothing about OpenCL
                warnings.warn(f"register check of {task.name} skipped: {one_line(exc)}")
                return None, []
        else:
            return None, []
        threads = {name: info.threads for name, info in cuda_program.kernels.items()}
        return (binary if t.language == "cuda" else None), check_resources(binary.resources, t, threads)

    # -- running -----------------------------------------------------------------------------------
    def measure(self, task: Task, cfg: GpuConfig) -> Result:
        """One candidate: a failed ``Result`` saying why when it is rejected, fails or disagrees
        with the reference, else its latencies in seconds."""
        config = config_dict(cfg)
        try:
            program, binary = self.build(task, cfg)
        except CompileError as exc:
            return Result(config, error=f"rejected before measurement: {exc}")
        model = None
        try:
            model = self._model(program, binary)
            error = self._check_outputs(task, model)
            if error:
                return Result(config, error=error)
            return Result(config, tuple(self._time(model, self._bench(task).inputs)))
        except Exception as exc:         # noqa: BLE001 - a driver failure costs this candidate only
            return Result(config, error=one_line(exc))
        finally:
            _release(model)

    def time_round_robin(self, task: Task, configs: Sequence[GpuConfig], rounds: int,
                         min_repeat_s: float) -> list[list[float]]:
        """Seconds per call of each config in each of ``rounds`` rounds, the configs taking turns
        in every round (a load that comes and goes hits all of them alike)."""
        inputs = self._bench(task).inputs
        models: list = []
        try:
            for cfg in configs:
                models.append(self._model(*self.build(task, cfg)))
            repeats = [self._repeats(m, inputs, min_repeat_s) for m in models]
            rows: list[list[float]] = [[] for _ in models]
            for _ in range(rounds):
                for row, m, n in zip(rows, models, repeats):
                    row.append(self._seconds(m, inputs, 1, n))
            return rows
        finally:
            for m in models:
                _release(m)

    def _model(self, program: GpuProgram, binary: Any):
        if program.language == "opencl":
            from ..runtime.opencl import OpenCLModel
            return OpenCLModel(program)
        from ..runtime.cuda import CudaModel
        return CudaModel(program, binary)

    def _bench(self, task: Task) -> _Bench:
        b = self._benches.get(task.key)
        if b is None:
            rng = np.random.default_rng([self.seed, int(task.key[:8], 16)])
            inputs = [random_array(a.type.shape, a.type.dtype.np, rng) for a in task.func.args]
            b = self._benches[task.key] = _Bench(inputs)
        return b

    def _check_outputs(self, task: Task, model) -> str | None:
        """Why the model's outputs are wrong (None: they match the reference, or set it)."""
        b = self._bench(task)
        outs = [np.asarray(o) for o in model(*b.inputs)]
        if b.reference is None:
            b.reference = outs
            return None
        for j, (got, want) in enumerate(zip(outs, b.reference)):
            err = _relative_error(got, want)
            if not err <= self.rtol:
                return f"wrong output #{j}: max error {err:.3g} relative to the reference's largest value " \
                       f"(allowed {self.rtol:g})"
        return None

    def _time(self, model, inputs: list[np.ndarray]) -> list[float]:
        n = self._repeats(model, inputs, self.min_round_s)
        return [self._seconds(model, inputs, 2 if r == 0 else 0, n) for r in range(self.rounds)]

    def _seconds(self, model, inputs: list[np.ndarray], warmup: int, repeats: int) -> float:
        """Median seconds per call (the runtimes answer in milliseconds)."""
        return self._time_ms(model, inputs, warmup=warmup, repeats=repeats) / 1e3

    def _repeats(self, model, inputs: list[np.ndarray], min_s: float) -> int:
        """Calls per timing that last about ``min_s`` (3 to 1000): one call's noise would swamp a
        short kernel."""
        one = self._seconds(model, inputs, 1, 3)
        return int(min(1000, max(3, math.ceil(min_s / max(one, 1e-7)))))


def _check_runtime(target: GpuTarget) -> None:
    """Raise when ``target``'s language cannot run here (nothing could be measured)."""
    if target.language == "opencl":
        from ..runtime.opencl import opencl_available
        if not opencl_available():
            raise TensorforgeError("GPU tuning for OpenCL needs an OpenCL device (pyopencl and a driver, e.g. PoCL)")
    else:
        from ..runtime.cuda import cuda_device_available
        if not cuda_device_available():
            raise TensorforgeError("GPU tuning for CUDA measures on an NVIDIA GPU, and this machine has none: "
                                   "tune with target='opencl', or on a machine with the GPU")


def _release(model) -> None:
    """Frees a CUDA model's device memory now (an OpenCL model's buffers go with the object)."""
    close = getattr(model, "close", None)
    if close is not None:
        close()


def _runtime_timer(language: str) -> Callable[..., float]:
    """The runtime's ``time_call`` (median milliseconds of ``model(*inputs)``) for ``language``."""
    if language == "cuda":
        from ..runtime.cuda import time_call
    else:
        from ..runtime.opencl import time_call
    return time_call


def _relative_error(got: np.ndarray, want: np.ndarray) -> float:
    if got.shape != want.shape:
        return math.inf
    if got.size == 0:
        return 0.0
    g, w = got.astype(np.float64), want.astype(np.float64)
    return float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-30))


# ---- search --------------------------------------------------------------------------------------
class GpuSearch:
    """One kernel's candidates: which were tried (here or in the database), the best so far."""

    def __init__(self, task: Task, target: GpuTarget, rng: random.Random):
        self.task, self.target, self.rng = task, target, rng
        self._space: CandidateSpace | None = None
        self.tried: set[str] = set()
        self.default_s = math.inf
        self.best: tuple[float, GpuConfig] | None = None
        self.ok: list[tuple[float, GpuConfig]] = []
        self.records = 0
        self.measured = self.rejected = 0          # in this run

    def load(self, records) -> None:
        """What the database already holds for this kernel and target."""
        for r in records:
            cfg = _config_from_dict(r.config)
            if cfg is not None:
                self._add(cfg, r.median_s)
            self.tried.add(canonical_config(r.config))
            self.records += 1

    @property
    def space(self) -> CandidateSpace:
        """Made on first use (a kernel whose budget ends at its default never needs it), with the
        configs tried before admitted first, so that their copies are never measured."""
        if self._space is None:
            self._space = CandidateSpace(self.task.kernel, self.target)
            for c, k in zip(self._space.configs, self._space.keys):
                if k in self.tried:
                    self._space.admit(c)
        return self._space

    @property
    def space_size(self) -> int | None:
        """How many candidates before deduplication, if the space was made."""
        return len(self._space.configs) if self._space is not None else None

    def _add(self, cfg: GpuConfig, seconds: float) -> None:
        if canonical_config(config_dict(cfg)) == DEFAULT_KEY:
            self.default_s = min(self.default_s, seconds)
        if math.isfinite(seconds):
            self.ok.append((seconds, cfg))
            if self.best is None or seconds < self.best[0]:
                self.best = (seconds, cfg)

    @property
    def default_done(self) -> bool:
        return DEFAULT_KEY in self.tried

    def next_config(self) -> GpuConfig | None:
        """The default first; then half of the time an untried neighbour of the best so far, else
        a random untried config (copies of tried ones are skipped); None when none is left."""
        if not self.default_done:
            return DEFAULT_CONFIG
        while True:
            left = self.space.open_configs(self.tried)
            if not left:
                return None
            near = neighbours(self.best[1], left) if self.best is not None and self.rng.random() < 0.5 else []
            cfg = self.rng.choice(near or left)
            if self.space.admit(cfg):
                return cfg

    def observe(self, cfg: GpuConfig, result: Result) -> None:
        self.tried.add(canonical_config(result.config))
        self.records += 1
        if result.error is not None and result.error.startswith("rejected"):
            self.rejected += 1
        else:
            self.measured += 1
        self._add(cfg, result.median_s)

    def top(self, n: int) -> list[GpuConfig]:
        """The ``n`` fastest distinct non-default configs that beat the default."""
        out, seen = [], {DEFAULT_KEY}
        for s, cfg in sorted(self.ok, key=lambda sc: sc[0]):
            key = canonical_config(config_dict(cfg))
            if key not in seen and s < self.default_s and len(out) < n:
                seen.add(key)
                out.append(cfg)
        return out


def _config_from_dict(config: dict | None) -> GpuConfig | None:
    """The GpuConfig a stored config names; None for another kind of config (or an older one)."""
    if not config:
        return None
    try:
        return GpuConfig(**config)
    except TypeError:
        return None


def _next_task(searches: list[GpuSearch], trials: int, exhausted: set[int]) -> int | None:
    """Which kernel gets the next trial: one whose default was never measured, else the largest
    ``weight x latency / (records + 1)``, the latency being the best so far (the default's until
    something beats it: a kernel already made fast stops drawing trials its old time would earn);
    None when ``trials`` records exist or every space is used up."""
    if sum(s.records for s in searches) >= trials:
        return None
    for i, s in enumerate(searches):
        if not s.default_done:
            return i
    costs = [s.task.weight * s.best[0] if s.best is not None else math.nan for s in searches]
    fallback = max((c for c in costs if math.isfinite(c)), default=1.0)   # nothing runs yet: find one that does
    open_ = [i for i in range(len(searches)) if i not in exhausted]
    if not open_:
        return None
    return max(open_, key=lambda i: (costs[i] if math.isfinite(costs[i]) else fallback) / (searches[i].records + 1))


# ---- report --------------------------------------------------------------------------------------
@dataclass
class GpuKernelReport:
    """One distinct kernel: latencies in seconds; ``best_config`` is what compile applies (None:
    the default); ``confirmed``: its confirmed speedup over the default (1.0: default kept, nan:
    never confirmed)."""

    name: str
    key: str
    weight: int
    default_s: float
    best_s: float
    best_config: dict | None
    measured: int                    # timed in this run
    rejected: int                    # rejected before measurement in this run
    records: int                     # in the database after this run (this target)
    space: int | None                # candidates before deduplication (None: never needed, never made)
    confirmed: float = math.nan

    @property
    def speedup(self) -> float:
        return speedup(self.default_s, self.best_s)

    @property
    def config_text(self) -> str:
        cfg = _config_from_dict(self.best_config)
        return cfg.describe() if cfg is not None else "default"


@dataclass
class GpuTuneReport:
    """What ``tune_gpu`` did; ``str()`` is a table."""

    target_key: str
    db_path: str
    kernels: list[GpuKernelReport] = field(default_factory=list)
    trials: int = 0
    seconds: float = 0.0
    stopped: str = ""

    def model_estimate(self, which: str = "best_s") -> float:
        """Sum of weight x latency over the kernels (``which``: "default_s" or "best_s")."""
        return weighted_total(self.kernels, which)

    def to_dict(self) -> dict:
        """The report as JSON-ready data (what ``tensorforge tune --json`` writes for the CPU)."""
        return {"target": self.target_key, "db": self.db_path, "trials": self.trials, "seconds": self.seconds,
                "stopped": self.stopped,
                "kernels": [dict(dataclasses.asdict(k), speedup=k.speedup) for k in self.kernels]}

    def __str__(self) -> str:
        lines = [f"{'kernel':22s} {'x':>3s} {'space':>5s} {'meas':>4s} {'rej':>3s} {'default ms':>10s} "
                 f"{'best ms':>9s} {'speedup':>7s} {'confirmed':>9s}  applied config"]
        for k in self.kernels:
            space = k.space if k.space is not None else "-"
            lines.append(f"{k.name[:22]:22s} {k.weight:3d} {space:>5} {k.measured:4d} {k.rejected:3d} "
                         f"{shown(k.default_s * 1e3, 10, 3)} {shown(k.best_s * 1e3, 9, 3)} "
                         f"{shown(k.speedup, 7, 2)} {shown(k.confirmed, 9, 3)}  {k.config_text}")
        d, b = self.model_estimate("default_s"), self.model_estimate("best_s")
        estimate = (f"kernels per model run: default {d * 1e3:.3f} ms, best {b * 1e3:.3f} ms ({d / b:.2f}x)"
                    if math.isfinite(d) and math.isfinite(b) and b > 0 else "no model estimate (kernels unmeasured)")
        lines.append(f"{self.trials} trials in {self.seconds:.1f} s{' (' + self.stopped + ')' if self.stopped else ''}"
                     f"; {estimate}; db {self.db_path}")
        return "\n".join(lines)


# ---- the tuner -----------------------------------------------------------------------------------
def tune_gpu(model: Any, example_inputs: Sequence | None = None, target: str | GpuTarget = "opencl",
             trials: int = 32, db: Any = None, timeout_s: float | None = None, seed: int = 0, *,
             passes: Any = None, progress: bool = False, confirm: ConfirmOptions | None = None,
             measurer: GpuMeasurer | None = None) -> GpuTuneReport:
    """Tunes the GPU schedule knobs of every kernel of ``model`` (anything ``compile`` takes, or a
    lowered function) for ``target`` ("opencl", "cuda" or a ``GpuTarget``).

    ``trials``: candidates for the whole model, records already in ``db`` included; ``db``: a
    path or ``TuningDatabase`` (None: the default database); ``timeout_s``: stop starting trials
    after this long (the confirmation still runs); ``confirm``: the confirmation step
    (``ConfirmOptions(top=0)`` turns it off)."""
    from ..progress import Progress
    if trials < 0:
        raise TensorforgeError(f"tune needs trials >= 0 (got {trials})")
    start = time.perf_counter()
    gpu = resolve_target(target)
    target_key = gpu.key()
    measurer = measurer or GpuMeasurer(gpu, seed=seed)
    func = model if isinstance(model, FuncOp) else gpu_lowered_function(model, example_inputs, gpu, passes)
    tasks = gpu_tasks(func)
    database, own_db = open_db(db)
    report = GpuTuneReport(target_key, str(getattr(database, "path", db)))
    try:
        searches = []
        for i, t in enumerate(tasks):
            database.add_workload(t.workload())
            s = GpuSearch(t, gpu, random.Random(seed * 7919 + i))
            s.load(database.records(t.key, target_key))
            searches.append(s)
        left = max(0, trials - sum(s.records for s in searches))
        with Progress(f"tuning {len(tasks)} GPU kernels", total=left, enabled=progress) as bar:
            report.stopped = _search(searches, measurer, database, target_key, trials, timeout_s, start, bar)
        confirm = confirm or ConfirmOptions()
        for s in searches:
            if s.measured and confirm.top > 0:
                _confirm(measurer, database, s, target_key, confirm)
            report.kernels.append(_row(database, s, target_key, confirm))
        report.trials = sum(s.measured + s.rejected for s in searches)
    finally:
        if own_db:
            database.close()
    report.seconds = time.perf_counter() - start
    return report


def _search(searches: list[GpuSearch], measurer: GpuMeasurer, database, target_key: str, trials: int,
            timeout_s: float | None, start: float, bar) -> str:
    """Measures candidates until the budget is spent; returns why it stopped early ("" if not).
    Each record is its own transaction: a killed run loses one candidate at most."""
    exhausted: set[int] = set()
    while True:
        if timeout_s is not None and time.perf_counter() - start > timeout_s:
            return "time budget"
        i = _next_task(searches, trials, exhausted)
        if i is None:
            return ""
        s = searches[i]
        cfg = s.next_config()
        if cfg is None:
            exhausted.add(i)
            continue
        result = measurer.measure(s.task, cfg)
        database.add_records([result.record(s.task, target_key)])
        s.observe(cfg, result)
        best = f"{s.best[0] * 1e3:.3f} ms" if s.best else "-"
        bar.advance(1, note=f"{s.task.name}: {s.records} records, best {best}")


def _confirm(measurer: GpuMeasurer, database, s: GpuSearch, target_key: str, confirm: ConfirmOptions) -> None:
    """Re-times the default and the best few together and stores the outcome (``best`` reads it)."""
    top = s.top(confirm.top)
    if not top or not math.isfinite(s.default_s):
        return
    try:
        rows = measurer.time_round_robin(s.task, [DEFAULT_CONFIG] + top, confirm.rounds, confirm.min_repeat_s)
    except TensorforgeError as exc:          # unconfirmed: ``best`` falls back to the search's medians
        warnings.warn(f"confirming kernel {s.task.name} failed: {one_line(exc)}")
        return
    database.add_confirmation(Confirmation(s.task.key, target_key, (DEFAULT_MARK, *map(config_dict, top)),
                                           tuple(map(tuple, rows)), "wall", database.count(s.task.key, target_key)))


def _row(database, s: GpuSearch, target_key: str, confirm: ConfirmOptions) -> GpuKernelReport:
    t = s.task
    rec = database.best(t.key, target_key, margin=confirm.margin)
    applied = rec.config if rec is not None and canonical_config(rec.config) != DEFAULT_KEY else None
    conf = database.confirmation(t.key, target_key)
    speedup = math.nan
    if conf is not None:
        by_config = dict(zip(map(canonical_config, conf.configs), conf.speedups))
        speedup = by_config.get(canonical_config(applied), math.nan) if applied is not None else 1.0
    return GpuKernelReport(t.name, t.key, t.weight, s.default_s, s.best[0] if s.best else math.inf, applied,
                           s.measured, s.rejected, database.count(t.key, target_key),
                           s.space_size, speedup)


# ---- compile time --------------------------------------------------------------------------------
def gpu_tuning_from_db(db: Any, target: GpuTarget) -> Callable[[Operation], GpuConfig | None] | None:
    """``config_for`` for ``plan_program``: each kernel's best record for ``target`` in ``db`` as
    a GpuConfig (None: the default), memoised per workload; None when there is no database
    (``db`` as ``apply.tuning_from_db`` takes it: "auto" is the default database if it exists).
    A stored config this tensorforge cannot build any more is skipped with a warning."""
    tuning = tuning_from_db(db, target)
    if tuning is None:
        return None
    memo: dict[str, GpuConfig | None] = {}

    def config_for(kernel: Operation) -> GpuConfig | None:
        key = workload_key(kernel)
        if key not in memo:
            # the raw lookup: ``Tuning.config_for`` keeps only the CPU's config kinds
            memo[key] = _usable(tuning.stored_config(key), kernel, target)
        return memo[key]

    return config_for


def _usable(config: dict | None, kernel: Operation, target: GpuTarget) -> GpuConfig | None:
    if config is None:
        return None
    cfg = _config_from_dict(config)
    problems = cfg.problems(target.max_threads_per_block) if cfg is not None else ["not a GpuConfig"]
    if problems:
        warnings.warn(f"tuned GPU config of kernel {kernel.attributes.get('sym_name', 'kernel')} no longer "
                      f"applies ({'; '.join(problems)}); using the default")
        return None
    return cfg
