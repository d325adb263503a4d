"""The order ``time_interleaved`` visits its contenders in: warm-up in the given order, then timed
rounds that each start one contender further along, so no contender always follows the same one."""
from tensorforge.benchmark.timing import time_interleaved


def _recorder(calls: list, name: str):
    return lambda: calls.append(name)


def test_rounds_rotate_so_no_contender_always_follows_the_same_one():
    calls: list[str] = []
    t = time_interleaved({k: _recorder(calls, k) for k in "abc"}, repeats=4, warmup=1)
    assert calls == list("abc" "abc" "bca" "cab" "abc")
    assert all(len(t[k].samples) == 4 for k in "abc")


def test_blocked_rounds_rotate_whole_blocks_after_their_untimed_call():
    calls: list[str] = []
    t = time_interleaved({k: _recorder(calls, k) for k in "ab"}, repeats=2, warmup=0, block=2)
    assert calls == list("aaa" "bbb" "bbb" "aaa")              # each turn: one untimed call, then 2 timed
    assert [len(t[k].samples) for k in "ab"] == [4, 4]


def test_fixed_order_on_request():
    calls: list[str] = []
    time_interleaved({k: _recorder(calls, k) for k in "ab"}, repeats=3, warmup=0, rotate=False)
    assert calls == list("ababab")
