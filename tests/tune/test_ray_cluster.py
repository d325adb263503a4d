"""A real Ray cluster on this machine: ``ray start --head`` plus two ``ray start`` worker processes,
each its own node with one CPU and this machine's target resource, running small tunes.

* a tune builds on the workers of the target's CPU kind (never on a third node that does not
  advertise it), measures on both measuring nodes one batch at a time per node and per machine
  (the actors' start/end times do not overlap), commits every batch to the one
  database, and confirms on the cluster;
* SIGKILLing a worker node mid-tune loses only the batch it had in flight: that batch is
  re-queued on the other node, the database holds exactly the trials the report counts and passes
  ``tensorforge db check``, and a rerun with a larger budget measures exactly the rest.

Every Ray process belongs to the fixture's ``LocalCluster`` and is ended by it (also when a test
fails); a watchdog ends the cluster if a tune hangs, so the test fails instead of blocking.
"""
import signal
import threading
import time

import pytest

ray = pytest.importorskip("ray")

import tensorforge                                          # noqa: E402
from tensorforge.cli import main as cli_main                # noqa: E402
from tensorforge.tune.database import TuningDatabase        # noqa: E402
from tensorforge.tune.distributed.driver import overlaps    # noqa: E402
from tensorforge.tune.distributed.local import LocalCluster  # noqa: E402
from tensorforge.tune.distributed.session import Cluster    # noqa: E402

from tests.tune.tune_util import stack_model                # noqa: E402

HARD_LIMIT_S = 120          # per tune: past this the watchdog ends the cluster


@pytest.fixture(scope="module")
def cluster():
    local = LocalCluster(2, startup_timeout_s=60)
    try:
        local.start()
        # a third node that builds but advertises neither the target nor its CPU kind: a machine
        # of another kind, where no -march=native build may run
        local.add_worker(resources={}, wait=True)
        session = Cluster.open(local.address)
        session.local = local             # closing the session ends the cluster too
        yield session
    finally:
        if ray.is_initialized():
            ray.shutdown()
        local.close()


@pytest.fixture(scope="module")
def graph():
    m, x = stack_model(rows=16, width=32)
    return tensorforge.import_model(m, x)


def _tune(graph, cluster, db, trials, **kwargs):
    watchdog = threading.Timer(HARD_LIMIT_S, cluster.local.close)
    watchdog.start()
    try:
        return tensorforge.tune(graph, trials=trials, db=db, progress=False, batch_size=3, cluster=cluster,
                                **kwargs)
    finally:
        watchdog.cancel()


def test_small_tune_on_two_worker_nodes(graph, cluster, tmp_path, capsys):
    db = str(tmp_path / "ray.sqlite")
    report = _tune(graph, cluster, db, 12)
    assert report.trials == 12
    with TuningDatabase(db, readonly=True) as d:
        assert d.count() == 12
        assert all(d.confirmation(t.key, report.target_key) is not None for t in report.tasks if t.trials)
    assert report.cluster["measure_nodes"] == 2 and report.cluster["lost"] == 0
    ms = report.measurements
    assert sum(m["candidates"] for m in ms) == 12
    assert overlaps(ms) == []                              # one measurement at a time per node
    assert overlaps(ms, within="host") == []               # and per machine: both nodes are this one
    foreign = {n["NodeID"] for n in cluster.nodes() if n["Resources"].get("CPU", 0) > 0
               and not any(k.startswith("tensorforge_build_") for k in n["Resources"])}
    built_on = {b["node"] for m in ms for b in m["builds"]}
    assert len(foreign) == 1 and built_on and not built_on & foreign   # native builds only on the target's kind
    assert all(m["end"] >= m["start"] for m in ms)
    assert cli_main(["db", "check", "--db", db]) == 0
    assert "ok" in capsys.readouterr().out
    again = _tune(graph, cluster, db, 12)                   # the budget is spent: nothing to do
    assert again.trials == 0


def test_sigkilled_worker_loses_only_its_in_flight_batch(graph, cluster, tmp_path, capsys):
    db = str(tmp_path / "kill.sqlite")
    killed = {}

    def kill_after_first_batch():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with TuningDatabase(db, readonly=True) as d:
                    if d.count() >= 3:
                        killed["records"] = d.count()
                        cluster.local.kill_worker(0, signal.SIGKILL)
                        return
            except Exception:       # noqa: BLE001 - the file is not created yet
                pass
            time.sleep(0.05)

    killer = threading.Thread(target=kill_after_first_batch, daemon=True)
    killer.start()
    report = _tune(graph, cluster, db, 18)
    killer.join(timeout=5)
    assert "records" in killed, "the tune ended before the worker could be killed"
    # At most the batches in flight when the node died (one per measuring node) were lost and re-queued.
    assert report.cluster["lost"] <= 2 * 3
    assert report.cluster["lost_nodes"] <= 1
    assert report.trials == 18                           # the re-queued candidates were measured elsewhere
    assert overlaps(report.measurements) == []
    with TuningDatabase(db, readonly=True) as d:
        assert d.count() == 18                           # no half batch, nothing measured twice
    assert cli_main(["db", "check", "--db", db]) == 0
    capsys.readouterr()
    more = _tune(graph, cluster, db, 24)                 # a rerun completes a larger budget exactly
    assert more.trials == 6
    with TuningDatabase(db, readonly=True) as d:
        assert d.count() == 24
