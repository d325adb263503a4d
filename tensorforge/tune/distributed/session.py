"""A connection to a Ray cluster for one tune, and the pool of measuring actors on it.

``Cluster.open("local:2")`` starts a ``LocalCluster`` and connects; ``Cluster.open(address)``
connects to a running one.  ``close`` disconnects and, for ``local:N``, ends the cluster.
``MeasurePool`` places one ``MeasureNode`` actor on every alive node that advertises the tuned
target's resource (``resources.py``), finds new nodes as they join, and forgets lost ones; it is
also the "measurer" the confirmation step calls (``confirm``), so the confirmation re-times on a
machine of the target like the search did.
"""
from __future__ import annotations

import copy
import time
from typing import Any

from ...errors import TensorforgeError
from ..measure import one_line
from .resources import build_options, build_resource, target_resource

# What a lost node or actor looks like to the driver; anything else from Ray is a bug to surface.
_LOST = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "NodeDiedError", "WorkerCrashedError",
         "ObjectLostError", "OwnerDiedError", "ObjectReconstructionFailedError", "TaskUnschedulableError",
         "ActorUnschedulableError", "RaySystemError")


def is_lost(exc: BaseException) -> bool:
    """True for Ray's "that node, actor or object is gone" errors (its in-flight work is re-queued)."""
    names = {c.__name__ for c in type(exc).__mro__}
    if names & set(_LOST):
        return True
    cause = getattr(exc, "cause", None)         # a RayTaskError wrapping a lost dependency
    return cause is not None and cause is not exc and isinstance(cause, BaseException) and is_lost(cause)


class Cluster:
    """A Ray connection (and, for ``local:N``, the cluster itself) held for one tune."""

    def __init__(self, ray, local=None, address: str = ""):
        self.ray, self.local, self.address = ray, local, address
        self.pool: MeasurePool | None = None
        self._borrowed = False

    @classmethod
    def open(cls, spec: str) -> "Cluster":
        import ray
        local = None
        address = spec
        if spec.startswith("local:"):
            from .local import LocalCluster
            try:
                n = int(spec.split(":", 1)[1])
            except ValueError:
                raise TensorforgeError(f"--ray {spec}: write local:N with N the number of worker nodes, "
                                       f"e.g. local:2") from None
            local = LocalCluster(n).start()
            address = local.address
        try:
            kwargs: dict[str, Any] = {"address": address, "log_to_driver": False, "logging_level": "ERROR"}
            ray.init(**kwargs)
            if local is not None:
                local.wait_for_nodes(ray)
        except BaseException as exc:
            if ray.is_initialized():
                ray.shutdown()
            if local is not None:
                local.close()
            if isinstance(exc, TensorforgeError):
                raise
            raise TensorforgeError(f"cannot connect to the Ray cluster at {address} ({one_line(exc)}); start one "
                                   f"with `ray start --head`, or use --ray local:N") from None
        return cls(ray, local, address)

    def borrowed(self) -> "Cluster":
        """This cluster for a tune that must not close it (its owner does)."""
        other = copy.copy(self)
        other._borrowed = True
        return other

    def nodes(self) -> list[dict]:
        return [n for n in self.ray.nodes() if n.get("Alive")]

    def measurer(self, target, options: dict | None = None) -> "MeasurePool":
        """The pool of measuring actors for ``target`` (kept as ``self.pool`` for the driver loop)."""
        self.pool = MeasurePool(self, target, options)
        return self.pool

    def close(self) -> None:
        if self._borrowed:
            return
        if self.ray.is_initialized():
            self.ray.shutdown()
        if self.local is not None:
            self.local.close()
            self.local = None

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class MeasurePool:
    """One measuring actor per node of the target; see the module docstring."""

    def __init__(self, cluster: Cluster, target, options: dict | None = None):
        from .remote import MeasureNode, build_candidate
        ray = cluster.ray
        self.cluster, self.ray, self.target = cluster, ray, target
        self.resource = target_resource(target.key())
        self.options = options or {}
        self.actors: dict[str, Any] = {}          # node id -> actor
        self.lost_nodes: set[str] = set()
        self._actor_cls = ray.remote(MeasureNode)
        self._build_fn = ray.remote(build_candidate)
        self.build = self.build_task()
        self._target_ref = ray.put(target)
        self._wires: dict[str, Any] = {}

    def build_task(self, **options):
        """The build task with Ray ``options`` (one CPU, 3 retries, and for a ``native`` target the
        build resource of its CPU kind, unless overridden)."""
        return self._build_fn.options(**{"num_cpus": 1, "max_retries": 3, **build_options(self.target), **options})

    def target_ref(self):
        return self._target_ref

    def wire(self, task):
        """The task's ``TaskWire`` in the object store (put once per task)."""
        ref = self._wires.get(task.key)
        if ref is None:
            from .wire import pack
            ref = self._wires[task.key] = self.ray.put(pack(task))
        return ref

    def refresh(self) -> int:
        """Places actors on newly alive nodes of the target; returns how many actors there are."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        for n in self.cluster.nodes():
            node = n["NodeID"]
            if node in self.actors or node in self.lost_nodes or n.get("Resources", {}).get(self.resource, 0) < 1:
                continue
            self.actors[node] = self._actor_cls.options(
                num_cpus=0, resources={self.resource: 1}, max_restarts=0, max_task_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(self.target, self.options)
        return len(self.actors)

    def drop(self, node: str) -> None:
        """Forgets a node whose actor was lost (it is not used again in this tune)."""
        actor = self.actors.pop(node, None)
        self.lost_nodes.add(node)
        if actor is not None:
            try:
                self.ray.kill(actor)
            except Exception:       # noqa: BLE001 - already gone
                pass

    def require(self, timeout_s: float = 60.0) -> None:
        """At least one measuring actor and a node that can build for the target, or an error that
        says how to start a node of the target."""
        deadline = time.monotonic() + timeout_s
        build = build_resource(self.target)
        while not self.refresh() or (build and not any(n.get("Resources", {}).get(build, 0) > 0
                                                       for n in self.cluster.nodes())):
            if time.monotonic() > deadline:
                what = "advertises target" if not self.actors else "can build -march=native code for target"
                raise TensorforgeError(f"no node of the Ray cluster {what} {self.target.key()}: start one "
                                       f"on such a machine with ray start --address ADDRESS --resources "
                                       f"\"$(python -m tensorforge.tune.distributed.resources)\"")
            time.sleep(0.5)

    def submit(self, node: str, task, configs: list[dict]):
        """Builds for ``configs`` (anywhere) and their measurement on ``node``'s actor: an object ref."""
        wire, target = self.wire(task), self._target_ref
        builds = [self.build.remote(wire, c, target) for c in configs]
        return self.actors[node].measure.remote(wire, *builds)

    # ---- the synchronous interface of a measurer (the confirmation step) ---------------------
    def _call(self, fn) -> Any:
        """``fn(node, actor)`` on some measuring node, moving on to another one if it is lost."""
        while True:
            self.require()
            node, actor = next(iter(self.actors.items()))
            try:
                return self.ray.get(fn(node, actor))
            except Exception as exc:       # noqa: BLE001 - a lost node: try another
                if not is_lost(exc):
                    raise
                self.drop(node)

    def measure(self, task, configs: list[dict]):
        return self._call(lambda node, actor: self.submit(node, task, configs))["results"]

    def confirm(self, task, configs: list[dict], rounds: int = 9, min_repeat_s: float = 0.05):
        wire = self.wire(task)
        try:
            out = self._call(lambda node, actor: actor.confirm.remote(wire, configs, rounds, min_repeat_s))
        except Exception as exc:    # noqa: BLE001 - a TensorforgeError raised on the node comes wrapped
            cause = getattr(exc, "cause", None)
            if isinstance(cause, TensorforgeError):
                raise cause from None
            raise
        return out["timed"]

    def close(self) -> None:
        for actor in list(self.actors.values()):
            try:
                self.ray.get(actor.close.remote(), timeout=30)
            except Exception:       # noqa: BLE001 - lost or stuck: killed below
                pass
            try:
                self.ray.kill(actor)
            except Exception:       # noqa: BLE001
                pass
        self.actors = {}
