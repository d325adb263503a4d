"""Each legality rule rejects: ScheduleError names the primitive, the loop (or compute/buffer) and the
rule, and a rejected primitive leaves the function and the trace as they were."""
import re

import pytest

from tensorforge.errors import ScheduleError, TensorforgeError
from tensorforge.ir.printer import print_module
from tensorforge.schedule import Schedule
from tensorforge.schedule.analysis import LOAD, const_index, find_tagged, walk_ops
from tensorforge.ir.builder import Builder

from tests.schedule.kernels import elementwise_chain, lowered, matmul, softmax

MM = matmul(6, 10, 4)


def rejects(s: Schedule, call, *needles: str) -> str:
    """Applies ``call``; asserts it raises ScheduleError containing every needle and changes nothing."""
    before, steps = print_module(s.fn), len(s.trace)
    with pytest.raises(ScheduleError) as info:
        call(s)
    msg = str(info.value)
    for n in needles:
        assert re.search(n, msg), f"{n!r} not in: {msg}"
    assert print_module(s.fn) == before, "a rejected primitive changed the function"
    assert len(s.trace) == steps
    return msg


def mm(*steps) -> Schedule:
    s = Schedule(lowered(MM))
    for name, *args in steps:
        getattr(s, name)(*args)
    return s


def test_schedule_error_is_a_tensorforge_error():
    assert issubclass(ScheduleError, TensorforgeError)


def test_unknown_loop_and_buffer():
    rejects(mm(), lambda s: s.split("9.9", 2), "^split: loop '9.9': no such loop", "0.0, 0.1, 0.2")
    rejects(mm(), lambda s: s.cache_read("in7", "0.0"), "cache_read: buffer 'in7': no such buffer")


def test_split_and_unroll_factors():
    rejects(mm(), lambda s: s.split("0.0", 0), "split: loop '0.0': factor must be a positive integer")
    rejects(mm(), lambda s: s.unroll("0.2", -1), "unroll: loop '0.2': factor must be")


def test_restructuring_an_annotated_loop():
    rejects(mm(("parallel", "0.0")), lambda s: s.split("0.0", 2), "split: loop '0.0': is already 'parallel'")
    rejects(mm(("vectorize", "0.2")), lambda s: s.reorder("0.0", "0.1", "0.2"), "reorder: loop '0.2'")


def test_reorder_reduction_outside_scalar_accumulator_needs_cache_write():
    rejects(mm(), lambda s: s.reorder("0.2", "0.1"), "reorder", "not a perfect nest",
            "scalar accumulator of compute '0'", r"cache_write\('0'")
    mm(("cache_write", "0", "0.0"), ("reorder", "0.2", "0.1"))      # legal once cached


def test_reorder_needs_one_nest_and_distinct_loops():
    s = Schedule(lowered(elementwise_chain(3, 4)))
    rejects(s, lambda s: s.reorder("0.1", "1.0"), "reorder", "not nested in one another")
    rejects(s, lambda s: s.reorder("0.1", "0.1"), "reorder", "two distinct loops")


def test_reorder_rejects_a_non_reduction_loop_writing_one_element():
    s = mm(("cache_write", "0", "0.0"))
    s.loop("0.2").attributes["reduction"] = False       # pretend k were an ordinary loop
    rejects(s, lambda s: s.reorder("0.2", "0.1"), "reorder: loop '0.2': iterations write the same element of "
            "buffer '0.cw'")


def test_reorder_rejects_reads_at_other_indices_than_writes():
    s = mm(("cache_write", "0", "0.0"))
    ld = next(op for op in walk_ops(s.loop("0.2"), LOAD) if op.operands[0].type.rank == 1)
    ld.set_operand(1, const_index(Builder.before(ld), 0))  # read cw[0], write cw[j]: carried dependence
    rejects(s, lambda s: s.reorder("0.2", "0.1"), "reorder", "reads buffer '0.cw' at other indices")


def test_parallel_rules():
    rejects(mm(), lambda s: s.parallel("0.2"), "parallel: loop '0.2': is a reduction loop")
    rejects(mm(("parallel", "0.0")), lambda s: s.parallel("0.1"), "parallel: loop '0.1'", "already parallel")
    rejects(mm(("parallel", "0.1")), lambda s: s.parallel("0.0"), "parallel: loop '0.0'", "'0.1'.*already parallel")
    s = mm(("cache_write", "0", "0.0"))
    s.loop("0.2").attributes["reduction"] = False
    rejects(s, lambda s: s.parallel("0.2"), "parallel: loop '0.2': iterations write the same element")


def test_vectorize_rules():
    rejects(mm(), lambda s: s.vectorize("0.1"), "vectorize: loop '0.1': is not innermost")
    rejects(mm(("cache_write", "0", "0.0")), lambda s: s.vectorize("0.2"),
            "vectorize: loop '0.2': is a reduction loop that updates buffer '0.cw'", "only a scalar accumulator")


def test_tile_and_fuse_need_directly_nested_loops():
    rejects(mm(), lambda s: s.tile("0.0", "0.2", 2, 2), "tile", "'0.2' must be nested directly in '0.0'")
    rejects(mm(), lambda s: s.fuse("0.1", "0.2"), "fuse", "'0.2' must be nested directly in '0.1'",
            "scalar accumulator")
    rejects(mm(("cache_write", "0", "0.0")), lambda s: s.fuse("0.1", "0.2"),
            "fuse", "cannot fuse a reduction loop with a parallel one")


def test_cache_write_rules():
    rejects(Schedule(lowered(elementwise_chain(3, 4))), lambda s: s.cache_write("0", "0.0"),
            "cache_write: compute '0': has no reduction accumulator")
    rejects(mm(), lambda s: s.cache_write("0", "0.2"), "cache_write: loop '0.2': does not enclose the accumulator")
    rejects(mm(), lambda s: s.cache_write("0", "0.1"), "cache_write: loop '0.1': has no loop between")
    rejects(mm(("cache_write", "0", "0.0")), lambda s: s.cache_write("0", "0.0"), "compute '0': is already cached")


def test_cache_read_rules():
    rejects(mm(), lambda s: s.cache_read("out0", "0.0"), "cache_read: buffer 'out0': is written inside loop '0.0'")
    rejects(mm(), lambda s: s.cache_read("in1", "0.2.init"), "no such loop")
    rejects(mm(), lambda s: s.cache_read("in0", "0.0", (1, 0)), r"layout \(1, 0\) is not a permutation")
    rejects(mm(("cache_read", "in0", "0.0")), lambda s: s.cache_read("in0", "0.0"), "is already cached at loop")
    rejects(Schedule(lowered(elementwise_chain(3, 4))), lambda s: s.cache_read("in1", "0.0"),
            "cache_read: buffer 'in1': is not read inside loop '0.0'")
    s = Schedule(lowered(softmax(3, 5)))
    rejects(s, lambda s: s.cache_read("0.buf", "0.0"), "cache_read: buffer '0.buf': is written inside")


def test_compute_at_rules():
    s = Schedule(lowered(softmax(3, 5)))
    rejects(s, lambda s: s.compute_at("2", "2.0"), "compute_at: compute '2': has no intermediate buffer")
    rejects(s, lambda s: s.compute_at("0", "2.0"), "compute_at: compute '0': is also read outside loop '2.0' "
            r"\(in nest '1.0'\)")
    rejects(s, lambda s: s.compute_at("1", "0.0"), "compute '1': is also read outside loop '0.0'")
    rejects(s, lambda s: s.compute_at("1", "1.1"), "compute_at: loop '1.1': is inside compute '1' itself")
    c = Schedule(lowered(elementwise_chain(3, 4)))
    c.reorder("2.1", "2.0")                              # the consumer's outer loop now walks columns
    rejects(c, lambda s: s.compute_at("1", "2.1"), "compute '1': no leading axis of its buffer is fixed")
    s.compute_at("1", "2.0")
    s.compute_at("0", "2.0")
    rejects(s, lambda s: s.compute_at("0", "2.0"), "compute '0': was already moved")
    v = Schedule(lowered(elementwise_chain(3, 4)))
    v.vectorize("2.1")
    rejects(v, lambda s: s.compute_at("1", "2.1"), "compute_at: loop '2.1': is vectorized")


def test_compute_inline_rules():
    s = Schedule(lowered(softmax(3, 5)))
    rejects(s, lambda s: s.compute_inline("0"), "compute_inline: compute '0': is not an injective expression")
    rejects(s, lambda s: s.compute_inline("2"), "compute '2': has no intermediate buffer")
    c = Schedule(lowered(elementwise_chain(3, 4)))
    c.split("0.1", 3)
    rejects(c, lambda s: s.compute_inline("0"), "compute '0': is not an injective expression over an unscheduled")


def test_a_schedule_needs_a_loop_func():
    with pytest.raises(ScheduleError, match="loop.func"):
        Schedule(find_tagged(lowered(MM), "loop.for", "0.0"))
