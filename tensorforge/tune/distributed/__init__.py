"""Tuning on a Ray cluster: builds anywhere, measurements on the nodes of the tuned target.

The search, the cost model, the measurement (``measure.Measurer``), the database transactions and
the confirmation stay those of ``tune/``; this package only moves work onto other machines:

* ``resources.py``: the custom Ray resource a node advertises for its target key (one unit: one
  measurement at a time on that machine);
* ``wire.py``: a task as plain data (its kernel's IR text and constants), shipped once per task;
* ``remote.py``: the build task (generate C, run gcc, return the library's bytes) and the
  per-node measuring actor (a ``Measurer`` whose runner times what the builds produced);
* ``driver.py``: the driver loop: batches in flight on every measuring node, results committed
  to the one SQLite database as they arrive, the batches of a lost node re-queued elsewhere;
* ``local.py``: ``local:N``, a throwaway cluster of ``ray start`` processes on this machine;
* ``session.py``: connecting to a cluster (or starting the local one) and closing it again.

Ray is an optional extra; ``require_ray`` says how to install it.
"""
from __future__ import annotations

from typing import Any

from ...errors import TensorforgeError

INSTALL_HINT = "tuning on a Ray cluster needs Ray: pip install 'tensorforge[ray]'"


def require_ray():
    """The ``ray`` module, or a one-line error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise TensorforgeError(INSTALL_HINT) from None
    return ray


def open_cluster(spec: Any):
    """A connected ``session.Cluster`` for ``spec``: an address (``host:port``, ``ray://...``,
    ``auto``), ``local:N`` (a new local cluster of N worker nodes, removed on ``close``), or an
    already open ``Cluster`` (left open on ``close``: its owner closes it)."""
    from .session import Cluster
    if isinstance(spec, Cluster):
        return spec.borrowed()
    require_ray()
    return Cluster.open(str(spec))


__all__ = ["INSTALL_HINT", "open_cluster", "require_ray"]
