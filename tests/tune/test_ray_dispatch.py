"""The scheduler's bookkeeping for batches in flight (what the Ray driver relies on; no Ray needed):
reserved trials are not handed out twice, a task with a batch out is not "fresh" again, a short or
lost batch returns its trials, and ``per_task`` counts what is in flight."""
from tensorforge.tune.scheduler import TaskScheduler


def test_dispatched_batches_reserve_their_trials():
    s = TaskScheduler([1.0, 1.0], budget=10)
    i = s.next_task()
    s.dispatched(i, 4)
    j = s.next_task()
    assert j != i                                   # the first task has a batch out: the other is fresh
    s.dispatched(j, 4)
    assert s.remaining == 2 and s.allowance(i, 8) == 2
    s.observe(i, 4, 1e-3, dispatched=4)             # came back whole
    s.observe(j, 0, float("inf"), dispatched=4)     # lost for good: its trials return
    assert s.remaining == 6


def test_per_task_cap_counts_batches_in_flight():
    s = TaskScheduler([1.0], budget=100, per_task=6)
    s.dispatched(0, 4)
    assert s.allowance(0, 8) == 2
    s.dispatched(0, 2)
    assert s.next_task() is None                    # capped while in flight: no empty batch proposed
    s.observe(0, 6, 1e-3, dispatched=6)
    assert s.next_task() is None and s.states[0].done
