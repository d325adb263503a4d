"""Traces: JSON round trip, replay on a freshly lowered function gives identical C, bad traces fail clearly."""
import json

import pytest

from tensorforge.errors import ScheduleError
from tensorforge.schedule import PRIMITIVES, Schedule, Step, Trace, replay

from tests.schedule.kernels import c_source, check_numerics, elementwise_chain, lowered, matmul, softmax


def _mm_schedule(s: Schedule) -> None:
    io, jo, ii, ji = s.tile("0.0", "0.1", 4, 8)
    s.cache_write("0", jo)
    s.reorder("0.2", ii, ji)
    s.cache_read("in1", jo, (1, 0))
    s.vectorize(ji)
    s.unroll(ii, 4)
    s.parallel(io)


def _softmax_schedule(s: Schedule) -> None:
    s.compute_at("1", "2.0")
    s.compute_at("0", "2.0")
    s.split("2.1", 8)
    s.vectorize("2.1.i")
    s.parallel("2.0")


def _chain_schedule(s: Schedule) -> None:
    s.compute_inline("0")
    s.fuse("2.0", "2.1")
    s.split("2.0+2.1", 16)
    s.parallel("2.0+2.1.o")


@pytest.mark.parametrize("kernel,steps", [(matmul(13, 17, 11), _mm_schedule), (softmax(5, 21), _softmax_schedule),
                                          (elementwise_chain(7, 9), _chain_schedule)])
def test_trace_round_trips_through_json_and_replays_to_identical_c(kernel, steps):
    s = Schedule(lowered(kernel))
    steps(s)
    text = s.trace.to_json()
    assert json.loads(text)["version"] == 1
    again = Trace.from_json(text)
    assert again.steps == s.trace.steps
    fresh = replay(lowered(kernel), again)
    assert c_source(fresh.fn) == c_source(s.fn)
    assert fresh.trace.steps == s.trace.steps          # replaying records the same trace
    check_numerics(kernel, fresh.fn)


def test_trace_records_refs_and_decisions_once_per_top_level_primitive():
    s = Schedule(lowered(matmul(8, 8, 8)))
    _mm_schedule(s)
    assert [st.primitive for st in s.trace] == ["tile", "cache_write", "reorder", "cache_read", "vectorize",
                                                "unroll", "parallel"]
    assert s.trace.steps[0] == Step("tile", ("0.0", "0.1"), (4, 8))
    assert s.trace.steps[3] == Step("cache_read", ("in1", "0.1.o"), ((1, 0),))
    assert str(s.trace.steps[0]) == "tile('0.0', '0.1', 4, 8)"
    assert set(PRIMITIVES) >= {"split", "tile", "reorder", "fuse", "parallel", "vectorize", "unroll", "cache_write",
                               "cache_read", "compute_at", "compute_inline"}


def test_fork_is_independent():
    s = Schedule(lowered(matmul(8, 8, 8)))
    s.split("0.0", 2)
    f = s.fork()
    f.parallel("0.0.o")
    assert len(s.trace) == 1 and len(f.trace) == 2 and "omp parallel" not in c_source(s.fn)


def test_replay_names_the_step_that_does_not_apply():
    s = Schedule(lowered(matmul(8, 8, 8)))
    _mm_schedule(s)
    with pytest.raises(ScheduleError, match=r"trace step 1 \(cache_write\('0', '0.1.o'\)\) does not apply: "
                                            r"cache_write: compute '0': has no reduction accumulator"):
        replay(lowered(elementwise_chain(8, 8)), Trace([Step("split", ("0.1",), (2,)), s.trace.steps[1]]))
    with pytest.raises(ScheduleError, match="unknown primitive 'swizzle'"):
        replay(lowered(matmul(4, 4, 4)), Trace([Step("swizzle", ("0.0",))]))


@pytest.mark.parametrize("text", ["not json", "[]", '{"version": 2, "steps": []}',
                                  '{"version": 1, "steps": [["split"]]}'])
def test_malformed_trace_json(text):
    with pytest.raises(ScheduleError):
        Trace.from_json(text)
