"""The default schedule: every kernel kind stays exact, and each rule fires where it should.

Kernels are one graph op each (lowered as the compiler lowers them), with shapes large enough that
the threaded and split paths engage (work >= PARALLEL_MIN_WORK) and with odd extents where guards
matter.  Numerics: all cases are scheduled for 2 threads and for 1, emitted into one C file per
thread count (one gcc run each), run, and compared with the graph reference interpreter (rtol 1e-4,
atol 1e-5 relative to the output's scale; exact for data movement and integer results).
"""
from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

from tensorforge.codegen.c.emit_loop import PRELUDE, emit_function
from tensorforge.codegen.c.toolchain import compile_c
from tensorforge.codegen.target import Target
from tensorforge.ir import interpret
from tensorforge.passes.lower.structured_to_loop import lower_kernel
from tensorforge.passes.lower.to_structured import lower_op_to_kernel
from tensorforge.schedule import Trace, default_schedule, replay
from tensorforge.schedule.analysis import ALLOC, FOR, body, walk_ops
from tensorforge.schedule.rules import PARALLEL_MIN_WORK, Context, analyze, is_contraction
from tests.lowering.harness import one_op_module

R = np.random.default_rng(7)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def pos(*shape):
    return (np.abs(R.standard_normal(shape)) + 0.5).astype(np.float32)


CASES = {
    "add_batch1": ("graph.add", [f32(1, 3, 64, 200), f32(3, 1, 1)], {}),
    "relu_image": ("graph.relu", [f32(2, 8, 56, 56)], {}),
    "mul_1d_guarded": ("graph.mul", [f32(70001), f32(70001)], {}),
    "gelu": ("graph.gelu", [f32(64, 700)], {}),
    "sum_rows": ("graph.reduce_sum", [f32(300, 257)], {"axes": (1,)}),
    "sum_cols": ("graph.reduce_sum", [f32(65, 3008)], {"axes": (0,)}),
    "sum_cols_prime": ("graph.reduce_sum", [f32(40, 3001)], {"axes": (0,)}),
    "max_mid": ("graph.reduce_max", [f32(16, 300, 40)], {"axes": (1,)}),
    "mean_all": ("graph.reduce_mean", [f32(200, 300)], {}),
    "argmax": ("graph.argmax", [f32(100, 500)], {"axis": 1}),
    "softmax_rows": ("graph.softmax", [f32(64, 700) * 3], {"axis": -1}),
    "softmax_axis1": ("graph.softmax", [f32(4, 50, 300) * 3], {"axis": 1}),
    "log_softmax": ("graph.log_softmax", [f32(70, 600)], {"axis": -1}),
    "layer_norm": ("graph.layer_norm", [f32(40, 12, 100) + 3, f32(12, 100), f32(100)], {"axis": -2}),
    "group_norm_batch1": ("graph.group_norm", [f32(1, 32, 40, 40), pos(32), f32(32)], {"num_groups": 8}),
    "instance_norm": ("graph.instance_norm", [f32(2, 16, 30, 30), pos(16), f32(16)], {}),
    "batch_norm": ("graph.batch_norm", [f32(2, 16, 30, 30), pos(16), f32(16), f32(16), pos(16)], {}),
    "max_pool_s2": ("graph.max_pool", [f32(1, 16, 60, 60)], {"kernel": (3, 3), "strides": (2, 2),
                                                            "pads": (1, 1, 1, 1)}),
    "max_pool_s1": ("graph.max_pool", [f32(1, 16, 60, 60)], {"kernel": (3, 3), "strides": (1, 1),
                                                            "pads": (1, 1, 1, 1)}),
    "avg_pool": ("graph.avg_pool", [f32(2, 16, 30, 30)], {"kernel": (3, 3), "strides": (1, 1),
                                                          "pads": (1, 1, 1, 1)}),
    "global_avg_pool": ("graph.global_avg_pool", [f32(2, 64, 20, 20)], {}),
    "global_avg_pool_56": ("graph.global_avg_pool", [f32(2, 16, 56, 56)], {}),
    "depthwise": ("graph.conv", [f32(1, 32, 30, 30), f32(32, 1, 3, 3)], {"groups": 32, "pads": (1, 1, 1, 1)}),
    "transpose_2d": ("graph.transpose", [f32(300, 200)], {"perm": (1, 0)}),
    "transpose_3d": ("graph.transpose", [f32(2, 64, 500)], {"perm": (0, 2, 1)}),
    "concat": ("graph.concat", [f32(2, 30, 700), f32(2, 20, 700)], {"axis": 1}),
    "pad": ("graph.pad", [f32(2, 8, 50, 50)], {"pads": (0, 0, 1, 2, 0, 0, 2, 1)}),
    "cumsum": ("graph.cumsum", [f32(50, 300)], {"axis": 1}),
    "attention": ("graph.attention", [f32(1, 2, 64, 32), f32(1, 2, 64, 32), f32(1, 2, 64, 32)], {"causal": True}),
    "matmul": ("graph.matmul", [f32(96, 80), f32(80, 112)], {}),
    "matmul_odd": ("graph.matmul", [f32(97, 80), f32(80, 113)], {}),
    "batch_matmul_bt": ("graph.gemm", [f32(90, 64), f32(120, 64)], {"trans_a": False, "trans_b": True,
                                                                    "alpha": 1.0, "beta": 1.0}),
}


def kernel_of(name: str):
    op_name, xs, attrs = CASES[name]
    _, op, _ = one_op_module(op_name, xs, **attrs)
    return lower_op_to_kernel(op)


# The expected traces below are for 16-lane vectors (AVX-512); the rules read the lane count from
# the target, so the tests fix it instead of taking the host's.
AVX512 = Target.host().replace(vector_width=16, vector_registers=32)


def scheduled(name: str, threads=2, **kw):
    fn = lower_kernel(kernel_of(name))
    s = default_schedule(fn, AVX512.replace(cores=threads), check=True, **kw)
    return s, emit_function(fn, "k", static=False)


def sums_vectorized(src: str) -> bool:
    """A float sum in a vectorized loop: the ``simd reduction`` clause, or the partial sums the C
    emitter splits a long one into (``FunctionEmitter.split_sum``)."""
    return "reduction(tf_fadd:" in src or re.search(r"float t\d+_p\d+\[\d+\]", src) is not None


def steps(s) -> list[str]:
    return [str(st) for st in s.trace]


@pytest.mark.parametrize("threads", [2, 1])
def test_every_kind_matches_the_reference(threads):
    names = list(CASES)
    fns = []
    for name in names:
        fn = lower_kernel(kernel_of(name))
        default_schedule(fn, threads, check=True)
        fns.append(fn)
    src = PRELUDE + "".join(emit_function(fn, f"k_{n}", static=False) for n, fn in zip(names, fns))
    lib = compile_c(src, name=f"test_default_{threads}")
    for name, fn in zip(names, fns):
        op_name, xs, attrs = CASES[name]
        m, _, _ = one_op_module(op_name, xs, **attrs)
        want = interpret(m, *xs)
        args = body(fn).args[fn.attributes["num_inputs"]:]
        outs = [np.empty(a.type.shape, a.type.dtype.np) for a in args]
        lib.function(f"k_{name}")(*[ctypes.c_void_p(a.ctypes.data) for a in list(xs) + outs])
        for w, g in zip(want, outs):
            scale = max(1.0, float(np.abs(w).max()))
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{name}, {threads} threads")


def test_trace_replays_to_the_same_code():
    for name in ("softmax_rows", "sum_cols", "transpose_2d", "layer_norm", "avg_pool", "mul_1d_guarded"):
        s, src = scheduled(name)
        again = replay(lower_kernel(kernel_of(name)), Trace.from_json(s.trace.to_json()))
        assert emit_function(again.fn, "k", static=False) == src, name


def test_softmax_rows_in_cache_on_threads():
    s, src = scheduled("softmax_rows")
    assert steps(s)[:2] == ["compute_at('1', '2.0')", "compute_at('0', '2.0')"]
    assert "parallel('2.0')" in steps(s)
    assert [op.name for op in body(s.fn)] == ["loop.for", "loop.return"]        # one pass over the rows
    assert "reduction(max:" in src and sums_vectorized(src) and src.count("#pragma omp parallel") == 1


def test_layer_norm_inlines_cheap_statistics_and_attaches_the_reductions():
    s, src = scheduled("layer_norm")
    st = steps(s)
    # The statistics (sum, mean, the centring correction, variance, rstd: norm.py's corrected
    # two-pass moments) are all inlined or attached to the output's row loop, the last compute.
    out = len(st) and max(int(x.split("'")[1]) for x in st if x.startswith(("compute_at", "compute_inline"))) + 1
    stats = [x for x in st if x.startswith(("compute_at", "compute_inline"))]
    assert len(stats) == out and all(x.startswith("compute_inline") or x.endswith(f"'{out}.0')") for x in stats), st
    assert [op.name for op in body(s.fn)] == ["loop.for", "loop.return"]
    assert src.count("#pragma omp parallel") == 1


def test_outer_axis_reduction_accumulates_a_row_with_the_reduction_outside():
    s, src = scheduled("max_mid")               # (16, 300, 40) over axis 1
    assert steps(s)[:2] == ["cache_write('0', '0.0')", "reorder('0.2', '0.1')"]
    assert "vectorize('0.1')" in steps(s) and "parallel('0.0')" in steps(s)


def test_column_sum_splits_the_only_loop_for_threads():
    s, _ = scheduled("sum_cols")                # (65, 3008) over axis 0: one parallel loop of 3008
    st = steps(s)
    assert st[0].startswith("split('0.0', ") and "parallel('0.0.o')" in st and "vectorize('0.0.i')" in st
    factor = int(re.search(r"split\('0.0', (\d+)\)", st[0]).group(1))
    assert 3008 % factor == 0 and factor % Context.of(2).lanes == 0
    s, _ = scheduled("sum_cols_prime")          # 3001 is prime: no guard in a cached row, no split
    assert not any(x.startswith("split") for x in steps(s)) and "cache_write('0', None)" in steps(s)


def test_batch_one_fuses_leading_loops_until_every_thread_has_work():
    s, _ = scheduled("add_batch1")              # (1, 3, 64, 200): n * c = 3 < 4 per thread
    # the contiguous 64 x 200 image is one vector loop, split for threads, its outer part fused
    # with n and c
    assert steps(s) == ["fuse('0.2', '0.3')", "split('0.2+0.3', 3200)", "fuse('0.0', '0.1')",
                        "fuse('0.0+0.1', '0.2+0.3.o')", "parallel('0.0+0.1+0.2+0.3.o')", "vectorize('0.2+0.3.i')"]
    s, src = scheduled("mul_1d_guarded")        # 70001 = 7 * 73 * 137: a guarded split
    assert steps(s)[0].startswith("split('0.0', ") and "if (" in src


def test_short_contiguous_rows_flatten_into_one_vector_loop():
    """A 56 x 56 image is one loop of 3136 (its indices the flat offset again), not 56 rows of 56."""
    s, src = scheduled("relu_image")
    assert steps(s)[0] == "fuse('0.2', '0.3')" and "vectorize('0.2+0.3')" in steps(s)
    assert "< 3136;" in src and "< 56;" not in src


def test_transposes_are_tiled():
    s, _ = scheduled("transpose_2d")
    assert steps(s)[0] == "tile('0.0', '0.1', 64, 16)"
    s, _ = scheduled("transpose_3d")            # (0, 2, 1): tile the last two loops
    assert steps(s)[0].startswith("tile('0.1', '0.2', ")


def test_windows_with_unit_stride_vectorize_along_the_output_row():
    for name in ("depthwise", "max_pool_s1", "avg_pool"):
        s, _ = scheduled(name)
        assert any(x.startswith("cache_write('0', ") for x in steps(s)), name
    s, src = scheduled("max_pool_s2")           # stride 2: gathers would be slower than the plain nest
    assert not any(x.startswith("cache_write") for x in steps(s))


def test_short_reductions_are_left_to_the_compiler_unless_they_flatten():
    s, src = scheduled("sum_rows")              # rows of 257 (lanes start at -0.0: tf_fadd)
    assert sums_vectorized(src)
    # a 20 x 20 window is rows of 20, too short to vectorize one at a time, but contiguous: the
    # two reduction loops fuse into one loop of 400 that reads memory as one run
    s, src = scheduled("global_avg_pool")
    fuses = [x for x in steps(s) if x.startswith("fuse(")]
    assert "fuse('0.4', '0.5')" in fuses and sums_vectorized(src) and "< 400;" in src
    # rows of 56 vectorize on their own, but one horizontal sum per 56 elements cost 3x the time
    # of one loop over the 3136 pixels (a squeeze-excitation mean at batch 8)
    s, src = scheduled("global_avg_pool_56")
    assert "fuse('0.4', '0.5')" in steps(s) and sums_vectorized(src) and "< 3136;" in src


def test_small_kernels_and_one_thread_stay_serial():
    _, src = scheduled("sum_rows", threads=1)
    assert "omp parallel" not in src
    fn = lower_kernel(kernel_of("sum_rows"))
    assert analyze(next(op for op in body(fn) if op.name == FOR)).work() >= PARALLEL_MIN_WORK
    op_name, _, attrs = CASES["softmax_rows"]
    _, op, _ = one_op_module(op_name, [f32(4, 30)], **attrs)
    small = lower_kernel(lower_op_to_kernel(op))
    default_schedule(small, 2)
    assert "omp parallel" not in emit_function(small, "k")


def test_group_norm_batch_one_keeps_statistics_on_threads():
    """compute_at into the batch loop (one iteration) would run the statistics on one thread."""
    s, src = scheduled("group_norm_batch1")
    assert not any(x.startswith("compute_at") for x in steps(s))
    assert src.count("#pragma omp parallel") == 4             # sum, centring correction, variance, output


def test_expensive_producer_read_many_times_is_not_inlined():
    s, _ = scheduled("attention")               # probabilities (exp) are read once per output column
    assert any(t.endswith(".buf") for t in (op.attributes.get("tag") or "" for op in walk_ops(s.fn, ALLOC)))
    assert "compute_inline('3')" not in steps(s)


def test_contractions_go_to_the_hook():
    fn = lower_kernel(kernel_of("matmul"))
    assert is_contraction(analyze(next(op for op in body(fn) if op.name == FOR)))
    seen = []
    default_schedule(fn, 2, contraction=lambda s, c, ctx: seen.append((c, ctx.threads)))
    assert seen == [("0", 2)]
    s, _ = scheduled("matmul")                  # the default hook: an 8 x 16 register tile of C
    assert steps(s)[:3] == ["tile('0.0', '0.1', 8, 16)", "cache_write('0', '0.1.o')",
                            "reorder('0.2', '0.0.i', '0.1.i')"]
    assert {"vectorize('0.1.i')", "unroll('0.0.i', 8)", "parallel('0.0.o')"} <= set(steps(s))
    s, _ = scheduled("matmul_odd")              # extents without a tile: i-k-j with a row accumulator
    assert steps(s)[:2] == ["cache_write('0', '0.0')", "reorder('0.2', '0.1')"]
    assert {"vectorize('0.1')", "parallel('0.0')"} <= set(steps(s))
    s, src = scheduled("batch_matmul_bt")       # B^T is contiguous along k: dot products (64: 4 vectors)
    assert not any(x.startswith(("tile", "cache_write")) for x in steps(s)) and sums_vectorized(src)
    for name in ("depthwise", "max_pool_s1", "sum_cols"):
        fn = lower_kernel(kernel_of(name))
        assert not any(is_contraction(analyze(op)) for op in body(fn) if op.name == FOR), name


def test_target_or_thread_count():
    host = Target.host()
    ctx = Context.of(host.replace(cores=3))
    assert ctx.threads == 3 and ctx.lanes == host.vector_width
    assert Context.of(1).threads == 1
    fn = lower_kernel(kernel_of("softmax_rows"))
    assert "parallel('2.0')" in steps(default_schedule(fn, host.replace(cores=2)))
