"""The host-wide lock of the distributed tuner (``tune/distributed/host_lock.py``): on one machine a
timing excludes every build and every other timing, builds run side by side, and a timing that
waits is not starved by a stream of builds.  Threads stand in for the Ray processes: ``flock``
locks belong to open file descriptions, so two opens in one process exclude each other too."""
import threading
import time

import pytest

from tensorforge.tune.distributed import host_lock


@pytest.fixture(autouse=True)
def own_lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORFORGE_HOST_LOCK_DIR", str(tmp_path))


def _enter_in_thread(lock, events: list, name: str, hold_s: float = 0.0) -> threading.Thread:
    def body():
        with lock():
            events.append((name, "in", time.monotonic()))
            time.sleep(hold_s)
            events.append((name, "out", time.monotonic()))
    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t


def test_a_build_waits_for_a_timing_and_starts_when_it_ends():
    events: list = []
    with host_lock.timing():
        t = _enter_in_thread(host_lock.building, events, "build")
        time.sleep(0.3)
        assert events == []                    # the build has not started during the timing
        released = time.monotonic()
    t.join(timeout=5)
    assert [e[:2] for e in events] == [("build", "in"), ("build", "out")]
    assert events[0][2] >= released


def test_two_timings_never_overlap():
    events: list = []
    threads = [_enter_in_thread(host_lock.timing, events, f"t{k}", hold_s=0.15) for k in range(3)]
    for t in threads:
        t.join(timeout=5)
    assert len(events) == 6
    # in and out alternate: each timing ends before the next begins
    assert [e[1] for e in sorted(events, key=lambda e: e[2])] == ["in", "out"] * 3


def test_builds_share_the_machine():
    events: list = []
    with host_lock.building():
        t = _enter_in_thread(host_lock.building, events, "second", hold_s=0.0)
        t.join(timeout=5)
        assert [e[:2] for e in events] == [("second", "in"), ("second", "out")]


def test_a_waiting_timing_is_not_starved_by_new_builds():
    events: list = []
    first = host_lock.building()
    first.__enter__()
    timer = _enter_in_thread(host_lock.timing, events, "timing")
    time.sleep(0.2)                            # the timing now holds the gate, waiting for the build
    late = _enter_in_thread(host_lock.building, events, "late build")
    time.sleep(0.2)
    assert events == []                        # neither the timing nor the late build has started
    first.__exit__(None, None, None)
    timer.join(timeout=5)
    late.join(timeout=5)
    order = [e[:2] for e in sorted(events, key=lambda e: e[2])]
    assert order == [("timing", "in"), ("timing", "out"), ("late build", "in"), ("late build", "out")]


def test_the_lock_folder_is_per_machine_by_default(monkeypatch, tmp_path):
    monkeypatch.delenv("TENSORFORGE_HOST_LOCK_DIR")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    assert host_lock.lock_dir() == str(tmp_path / "tensorforge-host")
