"""``local:N``: a throwaway Ray cluster on this machine, for trying the distributed tuner and for tests.

It is a real cluster, started the way one is started on many machines: ``ray start --head`` (no
CPUs, so it only hosts the driver and the cluster's bookkeeping), then N ``ray start --address``
worker processes, each its own Ray node with ``cpus_per_worker`` CPUs (build slots) and this
machine's target resource (``resources.py``), so each measures one candidate at a time.  Every
``ray start`` runs with ``--block`` in its own process group: ``kill_worker`` can SIGKILL one node
(raylet, object store and workers at once) as a machine failure would, and ``close`` ends every
process it started, and only those (never ``ray stop``, which would end other users' clusters).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from ...errors import TensorforgeError

# How fast the head notices a dead node (Ray's defaults take ~30 s; a killed worker must be
# noticed while the tune is still running).
HEALTH_ENV = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "1000",
              "RAY_health_check_failure_threshold": "3", "RAY_health_check_initial_delay_ms": "1000"}


# How long close() lets the nodes end on SIGTERM before it KILLs their process groups.  ``ray start
# --block`` (Ray 2.60) took 30-34 s to exit on TERM, worker and head alike, so a longer grace only
# delayed the KILL that ends them anyway; the cluster is a throwaway and its folder is removed after.
TERM_GRACE_S = 2.0


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen
    log: str

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


@dataclass
class LocalCluster:
    """``workers`` worker nodes plus a head, all on this machine; use as a context manager."""

    workers: int
    cpus_per_worker: int = 1
    object_store_bytes: int = 100_000_000
    resources: dict | None = None          # per worker node; default: this machine's target resource
    startup_timeout_s: float = 120.0
    address: str = ""
    tmp: str = ""
    procs: list[_Proc] = field(default_factory=list)

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- starting ---------------------------------------------------------------------------
    def _ray_start(self, name: str, args: list[str]) -> _Proc:
        log = os.path.join(self.tmp, f"{name}.log")
        env = dict(os.environ, **HEALTH_ENV, RAY_USAGE_STATS_ENABLED="0")
        env.pop("RAY_ADDRESS", None)
        with open(log, "wb") as out:
            popen = subprocess.Popen([sys.executable, "-m", "ray.scripts.scripts", "start", "--block", *args,
                                      f"--object-store-memory={self.object_store_bytes}",
                                      "--disable-usage-stats"],
                                     stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                     start_new_session=True)
        proc = _Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def start(self) -> "LocalCluster":
        if self.workers < 1:
            raise TensorforgeError(f"local:N needs N >= 1 worker nodes (got {self.workers})")
        # Ray's socket paths must stay short (108 bytes): a folder right under the temp root.
        self.tmp = tempfile.mkdtemp(prefix="tfray-", dir="/tmp" if os.path.isdir("/tmp") else None)
        try:
            port = _free_port()
            self.address = f"127.0.0.1:{port}"
            head = self._ray_start("head", ["--head", f"--port={port}", "--num-cpus=0", "--include-dashboard=false",
                                            f"--temp-dir={self.tmp}"])
            self._wait_started(head)
            for _ in range(self.workers):       # one at a time: raylets starting together race in one session
                self.add_worker(wait=True)
        except BaseException:
            self.close()
            raise
        return self

    def add_worker(self, resources: dict | None = None, wait: bool = False) -> int:
        """Starts one more worker node (``wait``: until it runs); returns its index for ``kill_worker``."""
        if resources is None:
            resources = self.resources
        if resources is None:
            from .resources import node_resources
            resources = node_resources()
        k = sum(1 for p in self.procs if p.name.startswith("worker"))
        proc = self._ray_start(f"worker{k}", [f"--address={self.address}", f"--num-cpus={self.cpus_per_worker}",
                                              f"--resources={json.dumps(resources)}"])
        if wait:
            self._wait_started(proc)
        return k

    def _wait_started(self, proc: _Proc) -> None:
        """Until ``ray start`` says the node runs (its log's "Ray runtime started.")."""
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if not proc.alive():
                raise TensorforgeError(f"local Ray node {proc.name} exited at start ({_tail(proc.log)}); see {proc.log}")
            try:
                with open(proc.log, "rb") as f:
                    if b"Ray runtime started." in f.read():
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise TensorforgeError(f"local Ray node {proc.name} did not start within {self.startup_timeout_s:.0f} s; "
                               f"see {proc.log}")

    def wait_for_nodes(self, ray, count: int | None = None, timeout_s: float | None = None) -> None:
        """Blocks until ``count`` nodes (default: head + workers still running) are alive."""
        count = count if count is not None else 1 + sum(1 for p in self.procs if p.name != "head" and p.alive())
        deadline = time.monotonic() + (timeout_s or self.startup_timeout_s)
        while time.monotonic() < deadline:
            if sum(1 for n in ray.nodes() if n.get("Alive")) >= count:
                return
            dead = [p for p in self.procs if not p.alive()]
            if dead:
                raise TensorforgeError(f"local Ray node {dead[0].name} exited at start ({_tail(dead[0].log)})")
            time.sleep(0.3)
        raise TensorforgeError(f"only {sum(1 for n in ray.nodes() if n.get('Alive'))} of {count} local Ray nodes "
                               f"came up within {timeout_s or self.startup_timeout_s:.0f} s; logs in {self.tmp}")

    # ---- failures and the end -----------------------------------------------------------------
    def kill_worker(self, k: int, sig: int = signal.SIGKILL) -> None:
        """Sends ``sig`` to worker node ``k``'s whole process group (a machine failure)."""
        proc = next(p for p in self.procs if p.name == f"worker{k}")
        proc.signal(sig)

    def close(self) -> None:
        """Ends every process this cluster started (TERM, then KILL after ``TERM_GRACE_S``) and
        removes its folder."""
        order = [p for p in self.procs if p.name != "head"] + [p for p in self.procs if p.name == "head"]
        for p in order:
            p.signal(signal.SIGTERM)
        deadline = time.monotonic() + TERM_GRACE_S
        for p in order:
            try:
                p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in order:         # the group may outlive its leader: KILL whatever is left in it
            p.signal(signal.SIGKILL)
            try:
                p.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: str, n: int = 300) -> str:
    try:
        with open(path, "rb") as f:
            text = f.read().decode(errors="replace").strip()
    except OSError:
        return "no log"
    return " | ".join(text[-n:].splitlines()[-3:])
