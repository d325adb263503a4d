"""Every schedule primitive keeps numerics: lower, schedule, emit C, compile, run, compare with the
structured interpreter (max error 1e-5 relative to the output's scale)."""
import numpy as np
import pytest

from tensorforge.schedule import Schedule
from tensorforge.schedule.analysis import FOR, walk_ops

from tests.schedule.kernels import (build, c_source, check_numerics, col_sum, conv1d, elementwise_chain, inputs_for,
                                    lowered, matmul, row_max, scheduled, softmax, two_stage)

MM = matmul(13, 17, 11)          # odd sizes so that splits leave remainders


def loops(s: Schedule) -> dict[str, dict]:
    return {op.attributes["tag"]: op.attributes for op in walk_ops(s.fn, FOR)}


def test_lowering_tags_loops_by_compute_and_axis():
    s = Schedule(lowered(MM))
    assert s.loop_tags() == ["0.0", "0.1", "0.2"]
    assert [loops(s)[t]["ub"] for t in ("0.0", "0.1", "0.2")] == [13, 17, 11]
    assert loops(s)["0.2"]["reduction"] and not loops(s)["0.1"]["reduction"]
    sm = Schedule(lowered(softmax(3, 5)))
    assert sm.loop_tags() == ["0.0", "0.1", "1.0", "1.1", "2.0", "2.1"]
    assert sm.buffer("0.buf").type.shape == (3,) and sm.buffer("out0").type.shape == (3, 5)


@pytest.mark.parametrize("loop,factor", [("0.0", 4), ("0.1", 5), ("0.2", 3), ("0.1", 17), ("0.0", 20), ("0.2", 1)])
def test_split_any_loop_divisible_or_not(loop, factor):
    s = scheduled(MM, lambda s: s.split(loop, factor))
    t = loops(s)
    assert t[f"{loop}.o"]["ub"] == -(-int(MM.regions[0].blocks[0].ops[0].attributes["domain"][int(loop[-1])])
                                       // factor)
    assert t[f"{loop}.i"]["ub"] == factor
    assert ("if (" in c_source(s.fn)) == (MM.regions[0].blocks[0].ops[0].attributes["domain"][int(loop[-1])]
                                          % factor != 0)


def test_split_twice_with_two_guards():
    scheduled(MM, lambda s: (s.split("0.1", 4), s.split("0.1.i", 3), s.split("0.0", 5)))


def test_tile_non_divisible():
    s = scheduled(MM, lambda s: s.tile("0.0", "0.1", 4, 8))
    assert s.loop_tags()[:5] == ["0.0.o", "0.1.o", "0.0.i", "0.1.i", "0.2"]


def test_reorder_parallel_loops_and_split_reduction():
    scheduled(MM, lambda s: s.reorder("0.1", "0.0"))
    scheduled(MM, lambda s: (s.split("0.2", 4), s.reorder("0.2.i", "0.2.o")))


def test_fuse_parallel_and_reduction_pairs():
    s = scheduled(MM, lambda s: (s.fuse("0.0", "0.1"), s.split("0.2", 4), s.fuse("0.2.o", "0.2.i")))
    assert loops(s)["0.0+0.1"]["ub"] == 13 * 17 and loops(s)["0.2.o+0.2.i"]["ub"] == 12


def test_parallel_vectorize_unroll_elementwise():
    k = elementwise_chain(9, 23)
    s = scheduled(k, lambda s: (s.parallel("0.0"), s.vectorize("0.1"), s.split("1.1", 8), s.unroll("1.1.i", 8),
                                s.parallel("2.0"), s.vectorize("2.1")))
    src = c_source(s.fn)
    assert src.count("#pragma omp parallel for") == 2 and src.count("#pragma omp simd") == 2
    assert "#pragma GCC unroll 8" in src


@pytest.mark.parametrize("make,comb", [(lambda: matmul(5, 6, 37), "tf_fadd"), (lambda: row_max(7, 29), "max")])
def test_vectorize_reduction_gets_a_reduction_clause(make, comb):
    k = make()
    red = "0.2" if k.attributes["sym_name"] == "matmul" else "0.1"
    s = scheduled(k, lambda s: s.vectorize(red))
    assert f"reduction({comb}:" in c_source(s.fn)


def test_cache_write_makes_ikj_legal_and_fast_schedule_matches():
    def ikj(s):
        assert s.cache_write("0", "0.0") == "0.cw"
        s.reorder("0.2", "0.1")
        jo, ji = s.split("0.1", 4)
        s.vectorize(ji)
        s.parallel("0.0")
    s = scheduled(MM, ikj)
    assert s.loop_tags() == ["0.0", "0.1.init", "0.2", "0.1.o", "0.1.i", "0.1.wb"]


def test_cache_write_register_tile_with_guards():
    def micro(s):
        io, jo, ii, ji = s.tile("0.0", "0.1", 4, 8)
        s.cache_write("0", jo)
        s.reorder("0.2", ii, ji)
        s.vectorize(ji)
        s.unroll(ii, 4)
        s.parallel(io)
    s = scheduled(MM, micro)
    assert s.buffer("0.cw").type.shape == (4, 8)


def test_cache_write_at_function_level_reduction_outermost():
    k = col_sum(19, 7)               # domain (i: r, j: p): the default nest is j { acc; i }
    s = scheduled(k, lambda s: (s.cache_write("0"), s.reorder("0.0", "0.1"), s.vectorize("0.1")))
    assert s.loop_tags()[1:3] == ["0.0", "0.1"]


def test_cache_read_tiles_and_packed_layouts():
    def pack(s):
        s.cache_write("0", "0.0")
        s.reorder("0.2", "0.1")
        jo, ji = s.split("0.1", 8)
        s.reorder(jo, "0.2")                       # i, jo, k, ji: B's panel is k x 8
        name = s.cache_read("in1", jo)
        assert s.buffer(name).type.shape == (11, 8)
        s.cache_read("in0", "0.0", (0,))           # row i of A: one dimension
    scheduled(MM, pack)
    s = scheduled(MM, lambda s: s.cache_read("in1", None, (1, 0)))   # whole B, transposed
    assert s.buffer("in1@root").type.shape == (17, 11)
    s = scheduled(MM, lambda s: (s.split("0.0", 4), s.cache_read("in0", "0.0.o", (1, 0))))
    assert s.buffer("in0@0.0.o").type.shape == (11, 4)


def test_cache_read_of_padded_reads_copies_the_halo():
    k = conv1d(23, 5)
    s = scheduled(k, lambda s: (s.split("0.0", 8), s.cache_read("in0", "0.0.o")))
    assert s.buffer("in0@0.0.o").type.shape == (8 + 4,)
    scheduled(k, lambda s: s.cache_read("in0", "0.0"))


def test_compute_at_softmax_rows_then_parallel():
    def rows(s):
        s.compute_at("1", "2.0")         # sum of exp, one row at a time
        s.compute_at("0", "2.0")         # max: its only readers are now inside 2.0
        s.parallel("2.0")
        s.vectorize("2.1")
    s = scheduled(softmax(6, 33), rows)
    assert s.buffer("0.buf").type.shape == () and s.buffer("1.buf").type.shape == ()
    assert [op.name for op in s.fn.regions[0].blocks[0]] == ["loop.for", "loop.return"]


def test_compute_at_two_stage_and_split_consumer_needs_guard():
    scheduled(two_stage(5, 9), lambda s: (s.compute_at("0", "1.0"), s.parallel("1.0")))
    s = scheduled(two_stage(7, 9), lambda s: (s.split("1.0", 3), s.compute_at("0", "1.0.i")))
    assert "if (" in c_source(s.fn)


def test_compute_at_elementwise_chain_point_and_row():
    k = elementwise_chain(6, 10)
    s = scheduled(k, lambda s: (s.compute_at("1", "2.1"), s.compute_at("0", "2.1")))
    assert s.buffer("0.buf").type.shape == ()
    s = scheduled(k, lambda s: (s.compute_at("1", "2.0"), s.compute_at("0", "2.0"), s.parallel("2.0")))
    assert s.buffer("1.buf").type.shape == (10,)


def test_compute_inline_elementwise_chain():
    k = elementwise_chain(6, 10)
    s = scheduled(k, lambda s: (s.compute_inline("1"), s.compute_inline("0"), s.vectorize("2.1")))
    names = [op.name for op in s.fn.walk()]
    assert "loop.alloc" not in names and s.loop_tags() == ["2.0", "2.1"]


def test_inline_into_a_reduction_then_schedule():
    from tensorforge.dialects.structured.builder import KernelBuilder
    from tests.schedule.kernels import F32, TensorType, _close
    kb = KernelBuilder("scaled_mm", [TensorType((9, 7), F32), TensorType((7, 5), F32)])
    a, b = kb.inputs
    a2 = kb.compute((9, 7), "pp", F32, lambda i, k: a[i, k] * 0.5)
    c = kb.compute((9, 5, 7), "ppr", F32, lambda i, j, k: a2[i, k] * b[k, j], combiner="add")
    kern = _close(kb, [c])
    scheduled(kern, lambda s: (s.compute_inline("0"), s.cache_write("1", "1.0"), s.reorder("1.2", "1.1")))


def test_matmul_256_fast_schedule_numerics():
    """The benchmark's schedule (see bench_matmul.py) on the benchmark's size."""
    k = matmul(256, 256, 256)

    def fast(s):
        io, jo, ii, ji = s.tile("0.0", "0.1", 8, 32)
        s.cache_write("0", jo)
        s.reorder("0.2", ii, ji)
        s.vectorize(ji)
        s.unroll(ii, 8)
        s.parallel(io)
    s = scheduled(k, fast)
    xs = inputs_for(k)
    got = build(s.fn)(*xs)[0]
    np.testing.assert_allclose(got, xs[0].astype(np.float64) @ xs[1], rtol=1e-4, atol=1e-4)


def test_heap_buffer_placed_in_a_loop_is_freed_every_iteration():
    k = elementwise_chain(3, 20000)                     # a row of t1 is 80 KB: heap, not stack
    s = scheduled(k, lambda s: (s.compute_at("1", "2.0"), s.parallel("2.0")))
    lines = c_source(s.fn).splitlines()
    alloc = next(i for i, l in enumerate(lines) if "aligned_alloc(64, (80000" in l)
    free = next(i for i, l in enumerate(lines) if "free(" in l)
    indent = lambda l: len(l) - len(l.lstrip())
    assert free > alloc and indent(lines[free]) == indent(lines[alloc]) > 2   # freed in the loop body
