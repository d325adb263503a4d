"""What runs on the cluster's nodes: the build task and the measuring actor.

**Build** (``build_candidate``, a Ray task needing one CPU, on any node): the candidate's C is
generated for the *tuned* target and compiled with gcc, exactly as ``Measurer`` does locally; the
library's bytes, its weight blob (unless large: then only its digest, and the measuring node makes
it again from the config), and the arena sizes (``FrozenLayout``) go back.  With a target whose
``march`` is ``native`` the builder must be a machine of the same kind (gcc generates for the CPU
it runs on): such builds ask for the build resource of the target's CPU kind (``resources.py``),
so Ray places them only on nodes of that kind; a builder of another kind that gets one anyway
(a node advertising a resource it should not) fails its candidates with an error saying so, rather
than handing over code that would crash or be wrong.

**Measure** (``MeasureNode``, one actor per node of the tuned target, holding that node's target
resource): a ``Measurer`` whose runner times the built libraries one batch at a time (an actor
runs one call at a time), with the batch's start and end times so that a report can show that
no two measurements on a node overlapped.  The batch is timed under ``host_lock.timing()``, and
builds compile under ``host_lock.building()``: nodes that share a machine (``local:N``) never time
at once, nor while that machine compiles.  It refuses to start on a machine whose own target key
is not the tuned one.
"""
from __future__ import annotations

import hashlib
import os
import socket
import time
from pathlib import Path

from ...errors import TensorforgeError
from ..measure import FrozenLayout, Measurer, generate, one_line, weights_digest
from ..tasks import Task
from . import host_lock
from .resources import build_resource
from .wire import TaskWire, unpack

WEIGHTS_INLINE_MAX = 8 << 20        # bytes of weights sent with a build; above: the measuring node remakes them
_tasks: dict[str, Task] = {}        # a worker process's unpacked tasks (workers are reused)


def _task(wire: TaskWire) -> Task:
    task = _tasks.get(wire.key)
    if task is None:
        if len(_tasks) > 64:
            _tasks.clear()
        task = _tasks[wire.key] = unpack(wire)
    return task


def _node_id() -> str:
    try:
        import ray
        return ray.get_runtime_context().get_node_id()
    except Exception:       # noqa: BLE001 - outside Ray (tests call the functions directly)
        return "local"


def _check_builder(target) -> None:
    """A native build on a node of another CPU kind is refused (the kind is ``build_resource``'s,
    the one Ray schedules these builds by)."""
    need = build_resource(target)
    if need is None:
        return
    from ...codegen.target import Target
    host = Target.host()
    if build_resource(host) != need:
        raise TensorforgeError(f"this node ({host.key()}) cannot build -march=native code for target {target.key()}: "
                               f"run builders on machines of that kind")


def build_candidate(wire: TaskWire, config: dict, target) -> dict:
    """Builds one candidate; never raises (a failure is the candidate's result)."""
    from ...codegen.c.toolchain import compile_c
    start = time.time()
    out = {"config": config, "node": _node_id(), "start": start}
    try:
        _check_builder(target)
        task = _task(wire)
        with host_lock.building():
            src, layout = generate(task, config, target)
            lib = compile_c(src, target, name=f"tune_{task.name}")
        blob = layout.weights
        out.update(lib_bytes=Path(lib.path).read_bytes(), weights_digest=weights_digest(blob),
                   weights=blob if blob.nbytes <= WEIGHTS_INLINE_MAX else None,
                   layout=FrozenLayout.of(layout, task))
    except Exception as exc:       # noqa: BLE001 - a build error costs this candidate only
        out["error"] = one_line(exc)
    out["end"] = time.time()
    out["build_s"] = out["end"] - start
    return out


class MeasureNode:
    """The measuring actor of one node (see the module docstring)."""

    def __init__(self, target, options: dict | None = None):
        from ...codegen.target import Target
        here = Target.host().key()
        if here != target.key():
            raise TensorforgeError(f"node advertises target {target.key()} but is {here}: fix its --resources")
        self.target = target
        self.measurer = Measurer(target, **(options or {}))
        self.libdir = os.path.join(self.measurer.workdir, "libs")
        os.makedirs(self.libdir, exist_ok=True)
        self.node = _node_id()

    def info(self) -> dict:
        return {"node": self.node, "pid": os.getpid()}

    def _local(self, task: Task, build: dict) -> dict:
        """A build as ``Measurer.measure_prebuilt`` takes it: the library written to this node's disk."""
        if build.get("error"):
            return build
        data = build["lib_bytes"]
        lib = os.path.join(self.libdir, hashlib.blake2b(data, digest_size=16).hexdigest() + ".so")
        if not os.path.exists(lib):
            tmp = f"{lib}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, lib)
        local = {"config": build["config"], "lib": lib, "layout": build["layout"], "build_s": build["build_s"]}
        path = self.measurer.weights_path(task, build["weights_digest"])
        if build.get("weights") is not None:
            local["weights"] = build["weights"]
        elif os.path.exists(path):
            local["weights_path"] = path
        else:           # large weights: made again here from the config (same code generator, same blob)
            local["weights"] = generate(task, build["config"], self.target)[1].weights
        return local

    def measure(self, wire: TaskWire, *builds: dict) -> dict:
        """Times one batch (the builds are Ray object refs resolved before this call starts)."""
        task = _task(wire)
        local = [self._local(task, b) for b in builds]
        with host_lock.timing():
            start = time.time()
            results = self.measurer.measure_prebuilt(task, local)
            end = time.time()
        return {"results": results, "node": self.node, "host": socket.gethostname(), "pid": os.getpid(),
                "start": start, "end": end,
                "builds": [{"node": b.get("node"), "start": b.get("start"), "end": b.get("end")} for b in builds]}

    def confirm(self, wire: TaskWire, configs: list, rounds: int, min_repeat_s: float) -> dict:
        task = _task(wire)
        with host_lock.timing():
            start = time.time()
            timed = self.measurer.confirm(task, configs, rounds=rounds, min_repeat_s=min_repeat_s)
            end = time.time()
        return {"timed": timed, "node": self.node, "start": start, "end": end}

    def close(self) -> None:
        self.measurer.close()
