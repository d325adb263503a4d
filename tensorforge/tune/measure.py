"""Measuring candidates: generate C, build in parallel, time in an isolated process, check outputs.

For each candidate config of a task the one-kernel function (``tasks.single_kernel_function``) goes
through the model code generator with the config as its override (``apply.Tuning``), so what is
timed is exactly the code a tuned compile emits.  The C compiler runs for several candidates at
once (a thread pool; each compile is its own gcc process, content-hash cached), then the runner
process (``runner.py``) times the libraries one after another: a warm-up call whose output is
checked against the reference, then timed repeats of enough calls to last ``min_repeat_s``;
the batch's good candidates are then timed again round-robin for ``repeats`` rounds (a shared
machine's load spikes hit all of them alike); the median is the candidate's latency.  A
candidate whose build fails, whose runner crashes or exceeds ``timeout_s``, or whose output is
wrong costs one trial: its result has an ``error`` and no latencies, and the next candidate gets
a fresh runner.

Kernels of the kinds in ``COLD_WEIGHT_KINDS`` are timed as a model runs them, with weights as cold
as there: between two calls of a layer a model run reads all its other weights.  The runner keeps
copies of the weight blob that together hold as many bytes as the model's weights (at least
twice the L2 of all cores; ``rotate_bytes``) and each call reads the next copy, while the inputs
stay warm, as a layer's input does.  Back-to-back calls on one copy keep a layer's weights in
the caches: timed that way (or rotating through only 16 MB), Winograd F(4x4) with 9.4 MB of
transformed weights won ResNet-18's 14x14 layers by 1.15x and lost to F(2x2) in the model
(0.65 against 0.46 ms, kernel timers); rotating through 64 MB or more ranks them as the model
does (0.55-0.61 against 0.50 ms).  Rotating costs no time, unlike flushing the caches before
every call (TVM's CPU cache flush; this host reports a 480 MB L3).

The reference is the structured interpreter's output (NumPy) for kernels small enough to evaluate
that way, else the untuned default build's output (the default path is what the test suite checks
against the interpreter).

A symbolic task (a kernel over symbolic shapes, ``Task.is_symbolic``) is built as a dynamic model
builds it: its one-kernel function carries the symbol table, so the library exports
``tf_run_dyn`` and the kernel reads its extents from ``tf_dims``.  It is measured at its hints:
the runner passes the hint values as the dims array (in the table's order), the inputs, outputs
and reference are sized at the hints, and the interpreter's reference is evaluated there too.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..errors import TensorforgeError
from ..ir.symbolic import evaluate_shape
from .apply import Tuning
from .database import Measured
from .space import DEFAULT
from .tasks import Task

# Task kinds timed with weights out of L2 (see the module docstring): the blocked convolutions, whose
# algorithms trade weight bytes (Winograd's transformed weights) for arithmetic.
COLD_WEIGHT_KINDS = ("blocked",)


# Most bytes of weight copies the runner allocates for one candidate.
MAX_ROTATE_BYTES = 64 << 20


def rotate_bytes(target, task: Task) -> int:
    """Bytes of weight copies a cold-weight task's calls rotate through: the weights of the model it
    was found in (``problem["model_weight_bytes"]``), at least twice all cores' L2."""
    l2 = 2 * int(target.l2 or (1 << 20)) * max(1, int(target.cores or 1))
    return min(MAX_ROTATE_BYTES, max(l2, int((task.problem or {}).get("model_weight_bytes") or 0)))


# Kernels whose computes span at most this many points are checked against the NumPy interpreter.
INTERPRETER_MAX_POINTS = 1 << 23


@dataclass
class Result(Measured):
    """One measured candidate (``latencies`` empty when ``error`` says why it failed)."""

    config: dict
    latencies: tuple[float, ...] = ()
    error: str | None = None
    workspace_bytes: int = 0
    code_size: int = 0
    build_s: float = 0.0

    def record(self, task: Task, target_key: str):
        from .database import Record
        return Record(task.key, target_key, self.config, tuple(self.latencies), int(self.workspace_bytes),
                      int(self.code_size), self.error)


@dataclass
class _Bench:
    """A task's files in the work folder: inputs, reference outputs, output specs."""

    inputs: list[str]
    reference: list[str] | None
    outputs: list[dict]
    weights: dict[str, str] = field(default_factory=dict)     # blob digest -> path
    dims: list[int] | None = None           # a symbolic task's symbol values (table order), else None
    checks: list[dict] = field(default_factory=list)    # other sizes' inputs/outputs/reference/dims
    rotate_bytes: int = 0                   # > 0: rotate weight copies of this many bytes (``COLD_WEIGHT_KINDS``)


class RunnerDied(Exception):
    pass


class BuildFailed(Exception):
    """A candidate's build failed on another node (the message is that node's one-line error)."""


class _Runner:
    """The measuring subprocess, restarted after a crash or a timeout."""

    def __init__(self, env: dict[str, str] | None = None):
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.buf = b""

    def _start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tensorforge.tune.runner"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=self.env,
                                     cwd=os.getcwd())
        self.buf = b""

    def request(self, req: dict, timeout_s: float) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            self.kill()
            raise RunnerDied("the measuring process exited")
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise TimeoutError(f"no result within {timeout_s:.0f} s (killed)")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                code = self.proc.wait()
                self.proc = None
                raise RunnerDied(f"the measuring process died (exit {code}"
                                 + (f", signal {-code}" if code < 0 else "") + ")")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)

    def kill(self) -> None:
        if self.proc is not None:
            try:
                self.proc.kill()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self.proc = None

    close = kill


class Measurer:
    """Builds and times candidates of tasks for ``target``; ``close()`` (or ``with``) stops the runner.

    ``workers``: parallel C compilers (default: the target's cores); ``timeout_s``: per candidate
    run; ``repeats`` x (calls lasting ``min_repeat_s``); ``threads``: what the kernels run on
    (default: all cores, as a compiled model does); ``rtol``: allowed max relative output error;
    ``interleave``: time a batch's good candidates again round-robin (see ``_interleave``);
    ``check_other_sizes``: a symbolic task's candidate is also run once at another size of its
    range (``other_sizes``) and checked there: a record applies to the whole range, so a
    schedule that is right only at the hints must fail here, not in a compiled model.
    """

    def __init__(self, target=None, *, workers: int | None = None, timeout_s: float = 60.0, repeats: int = 5,
                 min_repeat_s: float = 0.02, threads: int | None = None, rtol: float = 1e-3,
                 workdir: str | None = None, interleave: bool = True, check_other_sizes: bool = True):
        from ..codegen.target import Target
        self.target = target or Target.host()
        self.workers = workers or max(1, self.target.cores)
        self.timeout_s, self.repeats, self.min_repeat_s, self.rtol = timeout_s, repeats, min_repeat_s, rtol
        self.threads = threads or self.target.cores
        self.interleave = interleave
        self.check_other_sizes = check_other_sizes
        self._own_dir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="tensorforge-tune-")
        os.makedirs(self.workdir, exist_ok=True)
        self.runner = _Runner()
        self._benches: dict[tuple, _Bench] = {}
        self._pool = ThreadPoolExecutor(self.workers)

    def __enter__(self) -> "Measurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.runner.close()
        self._pool.shutdown(wait=True)
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ---- code generation --------------------------------------------------------------------
    def generate(self, task: Task, config: dict) -> tuple[str, Any]:
        """(C source, ModelLayout) of the task's one-kernel function under ``config``."""
        return generate(task, config, self.target)

    def workspace_bytes(self, task: Task, config: dict, layout) -> int:
        """Arena plus what a GEMM allocates per call (packed A blocks per thread, packed B); a
        symbolic task's at its hints."""
        extra = 0
        if config.get("kind") == "gemm":
            p, pr = config["params"], task.problem
            if p.get("pack_a"):
                extra += 4 * p["mc"] * min(p["kc"], pr.get("K", p["kc"])) * p.get("threads", 1)
            extra += 4 * (-(-pr.get("N", 0) // p["nr"])) * p["nr"] * pr.get("K", 0)
        return int(_arena(layout, _dims(task))[1] + extra)

    # ---- task files -------------------------------------------------------------------------
    def _folder(self, task: Task) -> str:
        dims = _dims(task)
        d = os.path.join(self.workdir, task.key[:16] + ("" if dims is None else "_" + "x".join(map(str, dims))))
        os.makedirs(d, exist_ok=True)
        return d

    def bench(self, task: Task) -> _Bench:
        """Inputs and reference outputs of ``task`` (made once per measurer and size); a symbolic
        task's at its hints, plus a check at other sizes of its range (``other_sizes``) when the
        interpreter can make that reference."""
        cache_key = (task.key, tuple(_dims(task) or ()))
        b = self._benches.get(cache_key)
        if b is not None:
            return b
        folder = self._folder(task)
        rng = np.random.default_rng(int(task.key[:8], 16))
        env = task.hints()
        inputs, paths, outs = _write_inputs(task, env, folder, "", rng)
        b = _Bench(paths, None, outs, dims=_dims(task),
                   rotate_bytes=rotate_bytes(self.target, task) if task.kind in COLD_WEIGHT_KINDS else 0)
        ref = self._interpreter_reference(task, inputs, env)
        if ref is not None:
            b.reference = _write_reference(ref, folder, "")
        else:       # too big for the interpreter: the untuned default's output is the reference
            saved = [os.path.join(folder, f"ref{j}.npy") for j in range(len(outs))]
            res = self._measure_built(task, [self._build(task, DEFAULT)], b, save=saved)[0]
            if res.error:
                raise TensorforgeError(f"cannot make a reference for task {task.name}: the untuned build failed: "
                                       f"{res.error}")
            b.reference = saved
        if self.check_other_sizes:
            for k, other in enumerate(other_sizes(task)):
                tag = f"c{k}_"
                x, xp, xo = _write_inputs(task, other, folder, tag, rng)
                r = self._interpreter_reference(task, x, other)
                if r is not None:
                    b.checks.append({"inputs": xp, "outputs": xo, "reference": _write_reference(r, folder, tag),
                                     "dims": [other[s] for s in task.symbols.ranges]})
        self._benches[cache_key] = b
        return b

    def _interpreter_reference(self, task: Task, inputs: list[np.ndarray],
                               env: dict[str, int] | None = None) -> list[np.ndarray] | None:
        """The task function's outputs by the NumPy interpreter, its kernels in order (symbols at
        ``env``, default the hints), or None when they span more than ``INTERPRETER_MAX_POINTS``."""
        from ..dialects.structured.interpret import run_kernel
        from ..dialects.structured.ops import ComputeView
        kernels = [op for op in task.func.body if op.name == "structured.kernel"]
        env = task.hints() if env is None else env
        points = sum(math.prod(evaluate_shape(ComputeView(op).domain, env))
                     for kernel in kernels for op in kernel.regions[0].blocks[0] if op.name == "structured.compute")
        if points > INTERPRETER_MAX_POINTS:
            return None
        values = {id(a): x for a, x in zip(task.func.args, inputs)}
        for kernel in kernels:
            args = [values[id(v)] if id(v) in values else v.op.attributes["value"].array for v in kernel.operands]
            outs = run_kernel(kernel, args, **({"symbols": env} if env else {}))
            values.update({id(r): np.asarray(o) for r, o in zip(kernel.results, outs)})
        return [values[id(v)] for v in task.func.outputs]

    # ---- build + run --------------------------------------------------------------------------
    def _build(self, task: Task, config: dict) -> tuple[dict, Any]:
        """(config, future of (library path, weights path, layout) or exception)."""
        t0 = time.perf_counter()
        try:
            src, layout = self.generate(task, config)
        except Exception as exc:         # noqa: BLE001 - a candidate the generator cannot build
            return config, Ready(None, time.perf_counter() - t0, exc)
        weights = self._weights_file(task, layout.weights)
        from ..codegen.c.toolchain import compile_c
        target = self.target

        def build():
            lib = compile_c(src, target, name=f"tune_{task.name}")
            return str(lib.path), weights, layout

        return config, _Timed(self._pool.submit(build), t0)

    def _weights_file(self, task: Task, blob: np.ndarray) -> str:
        path = self.weights_path(task, weights_digest(blob))
        if not os.path.exists(path):
            np.save(path, blob)
        return path

    def weights_path(self, task: Task, digest: str) -> str:
        """Where the weight blob with ``digest`` (``weights_digest``) of ``task`` is kept."""
        return os.path.join(self._folder(task), f"w_{digest}.npy")

    def measure(self, task: Task, configs: Sequence[dict]) -> list[Result]:
        """Results in the order of ``configs`` (every config is built and run, failures included)."""
        b = self.bench(task)
        built = [self._build(task, c) for c in configs]
        return self._measure_built(task, built, b)

    def measure_prebuilt(self, task: Task, builds: Sequence[dict]) -> list[Result]:
        """Results of candidates built elsewhere (Ray build tasks, ``distributed/remote.py``), in
        order: each ``{"config", "lib": path, "weights": blob, "layout": FrozenLayout, "build_s"}``,
        or ``{"config", "error", "build_s"}`` for one whose build failed (it costs that trial)."""
        b = self.bench(task)
        built = []
        for x in builds:
            if x.get("error"):
                built.append((x["config"], Ready(None, x.get("build_s", 0.0), BuildFailed(x["error"]))))
            else:
                weights = x.get("weights_path") or self._weights_file(task, x["weights"])
                paths = (x["lib"], weights, x["layout"])
                built.append((x["config"], Ready(paths, x.get("build_s", 0.0))))
        return self._measure_built(task, built, b)

    def _measure_built(self, task: Task, built: list, b: _Bench, save: list[str] | None = None) -> list[Result]:
        for _, job in built:        # every compiler of the batch done before timing starts: gcc would steal cores
            job.wait()
        results, timed = [], []
        interleave = self.interleave and save is None and len(built) > 1
        for config, job in built:
            res = Result(config)
            try:
                lib, weights, layout = job.result()
            except Exception as exc:     # noqa: BLE001 - a build error costs this candidate only
                res.error = f"build failed: {one_line(exc)}"
                res.build_s = job.seconds
                results.append(res)
                continue
            res.build_s = job.seconds
            res.code_size = os.path.getsize(lib)
            res.workspace_bytes = self.workspace_bytes(task, config, layout)
            req = dict(_request(lib, weights, layout, b), reference=b.reference, save=save, threads=self.threads,
                       repeats=2 if interleave else self.repeats, min_repeat_s=self.min_repeat_s, rtol=self.rtol)
            if b.checks and save is None:
                req["checks"] = [dict(c, **_placed(layout, c["dims"])) for c in b.checks]
            try:
                reply = self.runner.request(req, self.timeout_s)
                res.latencies = tuple(float(x) for x in reply.get("latencies") or ())
                res.error = reply.get("error")
            except (TimeoutError, RunnerDied) as exc:
                res.error = f"run failed: {exc}"
            results.append(res)
            if res.ok:
                timed.append((res, req))
        if interleave and len(timed) > 1:
            self._interleave(timed)
        return results

    def _interleave(self, timed: list[tuple[Result, dict]]) -> None:
        """The batch's good candidates timed again round-robin, ``repeats`` rounds: load that comes
        and goes on a shared machine then slows every candidate alike.  On a failure the
        one-at-a-time numbers stay."""
        try:
            reply = self.runner.request({"interleave": [req for _, req in timed], "rounds": self.repeats},
                                        self.timeout_s * len(timed))
        except (TimeoutError, RunnerDied):
            return
        lat = reply.get("latencies") or []
        if len(lat) == len(timed):
            for (res, _), values in zip(timed, lat):
                res.latencies = tuple(float(x) for x in values)


    def confirm(self, task: Task, configs: Sequence[dict], rounds: int = 9,
                min_repeat_s: float = 0.05) -> dict[str, list[list[float]]]:
        """Per-round seconds of every config (``configs[0]`` is the baseline) timed round-robin in one
        runner process: ``{"wall": [[...] per config], "cpu": [...]}`` (see ``runner.py``).  The
        configs were measured (and their outputs checked) before; their libraries come from the
        build cache.  Raises ``TensorforgeError`` when one no longer builds or the runner fails."""
        b = self.bench(task)
        built = [self._build(task, c) for c in configs]
        reqs = []
        for config, job in built:
            try:
                lib, weights, layout = job.result()
            except Exception as exc:     # noqa: BLE001 - reported with the task's name
                raise TensorforgeError(f"confirming task {task.name}: config {config} no longer builds: "
                                       f"{one_line(exc)}") from None
            reqs.append(dict(_request(lib, weights, layout, b), threads=self.threads, min_repeat_s=min_repeat_s))
        try:
            reply = self.runner.request({"interleave": reqs, "rounds": int(rounds)},
                                        self.timeout_s * len(reqs))
        except (TimeoutError, RunnerDied) as exc:
            raise TensorforgeError(f"confirming task {task.name}: {exc}") from None
        wall, cpu = reply.get("latencies") or [], reply.get("cpu") or []
        if reply.get("error") or len(wall) != len(reqs) or len(cpu) != len(reqs):
            raise TensorforgeError(f"confirming task {task.name}: {reply.get('error') or 'incomplete reply'}")
        return {"wall": wall, "cpu": cpu}


def generate(task: Task, config: dict, target) -> tuple[str, Any]:
    """(C source, ModelLayout) of the task's one-kernel function under ``config`` for ``target``
    (what ``Measurer`` builds, and what a Ray build task builds on another node)."""
    from ..codegen.c.model import generate_model_c
    from ..codegen.c.tensorize import Tensorizer
    from ..schedule.default import default_schedule
    cores = target.cores
    tuning = None if config.get("kind") == "default" else Tuning.fixed({task.key: config}, target)
    src, layout = generate_model_c(task.func, lambda fn: default_schedule(fn, cores),
                                   Tensorizer(target, *(tuning.hooks() if tuning else ())),
                                   schedule_for=tuning.schedule_for if tuning else None)
    if tuning is not None and task.key not in tuning.applied:
        raise TensorforgeError(f"config of kind {config.get('kind')!r} was not used by the code generator "
                               f"for kernel {task.name} (a {task.kind} task)")
    return src, layout


@dataclass
class FrozenLayout:
    """What measuring needs of a ``ModelLayout`` (arena size and offsets), at the sizes a task is
    measured and checked at: plain data, so a build made on another machine can be shipped to
    the measuring one (the layout itself holds IR types, which do not pickle)."""

    arenas: dict[tuple[int, ...], tuple[list[int] | None, int]]

    @classmethod
    def of(cls, layout, task: Task) -> "FrozenLayout":
        sizes = [_dims(task)] + [[o[s] for s in task.symbols.ranges] for o in other_sizes(task)]
        return cls({tuple(d or ()): _arena(layout, d) for d in sizes})


def weights_digest(blob: np.ndarray) -> str:
    """Names a weight blob (candidates that pack weights alike share one file)."""
    return hashlib.blake2b(blob.tobytes(), digest_size=12).hexdigest()


def _dims(task: Task) -> list[int] | None:
    """The dims array a symbolic task runs with: its hints in the table's order (the order
    ``generate_model_c`` gives ``tf_dims``); None for a static task."""
    table = task.symbols
    return [r.representative for r in table.ranges.values()] if table.ranges else None


def _arena(layout, dims: list[int] | None) -> tuple[list[int] | None, int]:
    """(offsets of the arena buffers or None for a static library, arena bytes) at ``dims``."""
    if isinstance(layout, FrozenLayout):
        offsets, size = layout.arenas[tuple(dims or ())]
        return (list(offsets) if offsets is not None else None), int(size)
    plan = getattr(layout, "dynamic_plan", None)
    if plan is None:
        return None, int(layout.arena_bytes)
    offsets, size = plan.offsets_for(dims or [])
    return list(offsets), int(size)


def _placed(layout, dims: list[int]) -> dict:
    """The arena size and offsets of a dynamic library at ``dims`` (for a runner request)."""
    offsets, arena = _arena(layout, dims)
    return {"arena": arena, "offsets": offsets or []}


def other_sizes(task: Task) -> list[dict[str, int]]:
    """Symbol values besides the hints at which a symbolic task's candidates are checked: one
    binding where every symbol is moved off its hint to an odd neighbour inside its range (a
    split or vector tail that the hints divide evenly is then exercised); [] when no symbol can
    move (or for a static task)."""
    table = task.symbols
    env, moved = {}, False
    for name, r in table.ranges.items():
        h = r.representative
        pick = h
        for v in (h - 1, h + 1, h - 3, h + 3, h - r.divisor, h + r.divisor, r.lo):
            if v != h and v >= 1 and r.contains(v):
                pick = v
                break
        moved |= pick != h
        env[name] = pick
    return [env] if moved else []


def _write_inputs(task: Task, env: dict[str, int], folder: str, tag: str,
                  rng: np.random.Generator) -> tuple[list[np.ndarray], list[str], list[dict]]:
    """Seeded inputs of the task's function at symbol values ``env`` (saved as .npy) and its
    output specs there."""
    inputs, paths = [], []
    for i, a in enumerate(task.func.args):
        arr = random_array(evaluate_shape(a.type.shape, env), a.type.dtype.np, rng)
        inputs.append(arr)
        paths.append(os.path.join(folder, f"{tag}in{i}.npy"))
        np.save(paths[-1], arr)
    outs = [{"shape": list(evaluate_shape(v.type.shape, env)), "dtype": np.dtype(v.type.dtype.np).str}
            for v in task.func.outputs]
    return inputs, paths, outs


def _write_reference(ref: list[np.ndarray], folder: str, tag: str) -> list[str]:
    paths = []
    for j, r in enumerate(ref):
        paths.append(os.path.join(folder, f"{tag}ref{j}.npy"))
        np.save(paths[-1], r)
    return paths


def _request(lib: str, weights: str, layout, b: _Bench) -> dict:
    """The part of a runner request that says what to run on which buffers: a dynamic library
    (``tf_run_dyn``) also gets the dims and the arena offsets at the bench's sizes."""
    offsets, arena = _arena(layout, b.dims)
    req = {"lib": lib, "weights": weights, "arena": arena, "inputs": b.inputs, "outputs": b.outputs}
    if b.rotate_bytes:
        req["rotate_bytes"] = b.rotate_bytes
    if offsets is not None:
        req["dims"] = list(b.dims or [])
        req["offsets"] = offsets
    return req


class Ready:
    """A build already settled: made elsewhere (a Ray build task: (library path, weights path,
    layout) at hand), or failed with ``error`` before reaching the compiler."""

    def __init__(self, value: tuple | None, seconds: float, error: BaseException | None = None):
        self.value, self.seconds, self.error = value, seconds, error

    def result(self):
        if self.error is not None:
            raise self.error
        return self.value

    def wait(self) -> None:
        pass


class _Timed:
    def __init__(self, future, t0: float):
        self.future, self.t0, self.seconds = future, t0, 0.0

    def wait(self) -> None:
        try:
            self.result()
        except Exception:       # noqa: BLE001 - reported when the result is taken
            pass

    def result(self):
        try:
            return self.future.result()
        finally:
            if not self.seconds:
                self.seconds = time.perf_counter() - self.t0


def random_array(shape: Sequence[int], dtype, rng: np.random.Generator) -> np.ndarray:
    """Seeded test data: standard normal floats, zeros for integers (always valid indices), random bools."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(tuple(shape)).astype(dt)
    if dt.kind == "b":
        return rng.random(tuple(shape)) < 0.5
    return np.zeros(tuple(shape), dtype=dt)


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {' | '.join(text[:4])}"[:600]

