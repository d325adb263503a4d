"""One timing per machine: a host-wide lock that keeps builds and other measurements off a machine
while one of its nodes times a batch.

The target resource (``resources.py``) gives each Ray *node* one measurement at a time.  Several
nodes can live on one machine, though: ``local:N`` starts N of them on this one, and a big box may
run a node per socket.  Without more, their measuring actors time batches at the same moment on
the same cores, and the builds that Ray schedules there (gcc at full load) run under them too:
each disturbs the other's timings.  Measured on ``local:2`` with bert_base: 5 overlapping windows
across the two nodes, and a tuned model 5% slower than the same budget tuned locally, where the
loop builds a batch and only then times it.

So the actors and the builders of one machine share two advisory ``flock`` files in a folder of
the machine's temporary directory (``TENSORFORGE_HOST_LOCK_DIR`` overrides it):

* ``timing()`` (a measuring actor, for a batch or a confirmation) takes the *gate* exclusively,
  then the *machine* lock exclusively: it waits for builds already running to finish, and while it
  holds both, nothing else on the machine starts;
* ``building()`` (a build task) passes the gate (so a waiting measurement is not starved by a
  stream of builds) and holds the machine lock *shared*: builds run side by side, never during a
  measurement.

Locks are per machine, not per process or node: a lock held by a process that dies is released by
the kernel, so a node killed mid-batch cannot wedge the others.  Machines do not share the folder
(it is local disk), so builds on other machines are never held up.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from typing import Iterator


def lock_dir() -> str:
    """The folder of this machine's lock files (made on first use)."""
    folder = os.environ.get("TENSORFORGE_HOST_LOCK_DIR") or os.path.join(tempfile.gettempdir(), "tensorforge-host")
    os.makedirs(folder, exist_ok=True)
    return folder


@contextlib.contextmanager
def _flock(name: str, mode: int) -> Iterator[None]:
    fd = os.open(os.path.join(lock_dir(), name), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)          # closing the descriptor releases its lock


@contextlib.contextmanager
def timing() -> Iterator[None]:
    """Held while a batch is timed: no other timing and no build runs on this machine."""
    with _flock("gate.lock", fcntl.LOCK_EX), _flock("machine.lock", fcntl.LOCK_EX):
        yield


@contextlib.contextmanager
def building() -> Iterator[None]:
    """Held while a candidate compiles: builds share the machine, timings wait for them."""
    with contextlib.ExitStack() as stack:
        with _flock("gate.lock", fcntl.LOCK_EX):
            stack.enter_context(_flock("machine.lock", fcntl.LOCK_SH))
        yield


__all__ = ["building", "lock_dir", "timing"]
