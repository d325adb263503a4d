"""Prefetch of the next row in row kernels (``Schedule.prefetch``, ``schedule/prefetch.py``).

The hint must leave results exactly as they were (it is no memory access), appear only where a
row kernel's input outgrows a core's L2, address the same chunk one row ahead, and be dropped by
the targets that have no use for it (MLIR export, the GPU interpreter)."""
from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

from tensorforge.codegen.c.emit_loop import PRELUDE, emit_function
from tensorforge.codegen.c.toolchain import compile_c
from tensorforge.codegen.mlir.loop_export import kernel_function_text
from tensorforge.codegen.target import Target
from tensorforge.errors import ScheduleError
from tensorforge.ir import interpret
from tensorforge.passes.lower.structured_to_loop import lower_kernel
from tensorforge.passes.lower.to_structured import lower_op_to_kernel
from tensorforge.schedule import Trace, default_schedule, replay
from tensorforge.schedule.analysis import walk_ops
from tensorforge.schedule.prefetch import _chunk
from tensorforge.schedule.primitives import Schedule
from tests.lowering.harness import one_op_module

R = np.random.default_rng(11)
ROW = 768
X = (R.standard_normal((96, ROW)) * 3).astype(np.float32)       # 288 KB
CASES = {
    "layer_norm": ("graph.layer_norm", [X, R.standard_normal(ROW).astype(np.float32),
                                        R.standard_normal(ROW).astype(np.float32)], {"axis": -1}),
    "softmax": ("graph.softmax", [X], {"axis": -1}),
}
SMALL_L2 = Target.host().replace(cores=2, l2=64 * 1024)        # X does not fit: the rule fires
LARGE_L2 = Target.host().replace(cores=2, l2=64 << 20)         # X fits: no hint


def lowered(name: str):
    op_name, xs, attrs = CASES[name]
    _, op, _ = one_op_module(op_name, xs, **attrs)
    return lower_kernel(lower_op_to_kernel(op))


def prefetch_steps(s: Schedule) -> list[str]:
    return [str(st) for st in s.trace if st.primitive == "prefetch"]


@pytest.mark.parametrize("name", list(CASES))
def test_rows_larger_than_l2_prefetch_the_next_row_in_chunks(name):
    fn = lowered(name)
    s = default_schedule(fn, SMALL_L2, check=True)
    steps = prefetch_steps(s)
    assert len(steps) == 1 and steps[0].startswith("prefetch('in0', ") and steps[0].endswith(", 96)"), steps
    hints = list(walk_ops(fn, "loop.prefetch"))
    assert len(hints) == 1
    assert hints[0].attributes["ahead"] == ROW and hints[0].attributes["span"] == 96
    src = emit_function(fn, "k", static=False)
    # 96 floats a chunk: 384 bytes, 6 lines, one row (3072 bytes) ahead
    assert re.search(r"< 384; p\d+ \+= 64\) __builtin_prefetch\(\(const char \*\)\(in0 \+ v\d+\) \+ 3072 \+ p\d+, 0, 3\)",
                     src), src
    assert "#pragma omp simd" in src.split("__builtin_prefetch")[1]        # the chunk still vectorizes
    again = replay(lowered(name), Trace.from_json(s.trace.to_json()))
    assert emit_function(again.fn, "k", static=False) == src


def test_rows_that_fit_in_l2_get_no_hint():
    for name in CASES:
        fn = lowered(name)
        assert prefetch_steps(default_schedule(fn, LARGE_L2, check=True)) == []
        assert "__builtin_prefetch" not in emit_function(fn, "k", static=False)


def test_prefetched_kernels_match_the_reference_exactly_as_without():
    fns = {}
    for name in CASES:
        for tgt, label in ((SMALL_L2, "pf"), (LARGE_L2, "plain")):
            fn = lowered(name)
            default_schedule(fn, tgt, check=True)
            fns[f"{name}_{label}"] = fn
    lib = compile_c(PRELUDE + "".join(emit_function(fn, f"k_{n}", static=False) for n, fn in fns.items()),
                    name="test_prefetch")
    for name in CASES:
        op_name, xs, attrs = CASES[name]
        m, _, _ = one_op_module(op_name, xs, **attrs)
        want = interpret(m, *xs)[0]
        got = {}
        for label in ("pf", "plain"):
            out = np.empty_like(want)
            lib.function(f"k_{name}_{label}")(*[ctypes.c_void_p(a.ctypes.data) for a in list(xs) + [out]])
            got[label] = out
        np.testing.assert_allclose(got["pf"], want, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(want).max())))
        np.testing.assert_array_equal(got["pf"], got["plain"])          # same arithmetic, bit for bit


def test_prefetch_refuses_what_it_cannot_hint():
    fn = lowered("layer_norm")
    s = Schedule(fn)
    with pytest.raises(ScheduleError, match="is not directly inside another loop"):
        s.prefetch("in0", "6.0", 16)
    s.split("6.1", 96)
    with pytest.raises(ScheduleError, match="is not innermost"):
        s.prefetch("in0", "6.1.o", 16)
    with pytest.raises(ScheduleError, match="factor must be a positive integer"):
        s.prefetch("in0", "6.1.i", 0)
    assert prefetch_steps(s) == []
    s = Schedule(lowered("softmax"))
    s.compute_at("1", "2.0")
    s.compute_at("0", "2.0")
    with pytest.raises(ScheduleError, match="is not read in loop"):
        s.prefetch("out0", "2.1", 16)               # written there, not read
    assert s.prefetch("in0", "0.2", 96) == ("0.2.o", "0.2.i")       # a reduction pass may take the hint too


def test_a_buffer_read_alike_in_every_row_is_not_prefetched():
    fn = lowered("layer_norm")
    s = Schedule(fn)
    for c in ("5", "4", "3", "2", "1", "0"):
        try:
            s.compute_at(c, "6.0")
        except ScheduleError:
            s.compute_inline(c)
    with pytest.raises(ScheduleError, match="at the same place in every iteration"):
        s.prefetch("in1", "6.1", 96)                 # the scale: one row for all rows
    assert s.prefetch("in0", "6.1", 96) == ("6.1.o", "6.1.i")


def test_targets_without_prefetch_drop_the_hint():
    fn = lowered("softmax")
    default_schedule(fn, SMALL_L2)
    assert list(walk_ops(fn, "loop.prefetch"))
    text = kernel_function_text(fn, "k")
    assert "prefetch" not in text and "scf.for" in text


def test_chunks_are_whole_lines_near_an_eighth_of_the_row():
    assert _chunk(768, 4) == 96 and _chunk(1024, 4) == 128 and _chunk(3072, 4) == 384
    assert _chunk(200, 4) is None                   # 800 bytes: too short to be worth it
    assert _chunk(771, 4) is None                   # no whole-line divisor
    assert _chunk(768, 2) == 96
