"""The GPU interpreter: right results with the barriers a kernel needs, detected races without them."""
from __future__ import annotations

import numpy as np
import pytest

from tensorforge.codegen.gpu.interpret import run_gpu_kernel
from tensorforge.errors import CompileError
from tensorforge.ir.types import BufferType, DType
from tensorforge.passes.lower.structured_to_loop import lower_kernel
from tensorforge.dialects.structured.interpret import run_kernel

from tests.codegen.gpu.gemm_ir import F32, finish, loop_func, tiled_gemm, tree_row_sum
from tests.schedule import kernels

SEEDS = range(4)


def _gemm(fn, m: int, n: int, k: int, seed: int, data_seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(the kernel's C, numpy's A @ B) for random A and B."""
    rng = np.random.default_rng(data_seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    run_gpu_kernel(fn, [a, b, c], seed=seed)
    return c, a @ b


def _wrong(got: np.ndarray, want: np.ndarray) -> bool:
    return not np.allclose(got, want, rtol=1e-4, atol=1e-4)


# ---- tiled GEMM -----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [dict(), dict(m=16, n=8, k=24, bm=8, bn=4, bk=4, tm=2, tn=1),
                                   dict(m=8, n=8, k=8, bm=4, bn=4, bk=4, tm=1, tn=1)])
@pytest.mark.parametrize("seed", [0, 1])
def test_gemm_with_both_barriers_matches_numpy(shape, seed):
    fn = tiled_gemm(**shape)
    got, want = _gemm(fn, shape.get("m", 16), shape.get("n", 16), shape.get("k", 16), seed)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_gemm_without_the_barrier_after_the_loads_reads_unwritten_tiles():
    fn = tiled_gemm(sync_loads=False)
    results = [_gemm(fn, 16, 16, 16, seed) for seed in SEEDS]
    assert any(_wrong(got, want) for got, want in results)
    assert any(np.isnan(got).any() for got, _ in results), "unwritten shared memory should read as NaN"


def test_gemm_without_the_barrier_after_the_compute_lets_the_next_tile_overwrite():
    fn = tiled_gemm(sync_compute=False)
    assert any(_wrong(*_gemm(fn, 16, 16, 16, seed)) for seed in SEEDS)


def test_gemm_race_results_depend_on_the_seed_and_clean_runs_do_not():
    racy = tiled_gemm(sync_compute=False)
    assert len({_gemm(racy, 16, 16, 16, seed)[0].tobytes() for seed in SEEDS}) > 1
    clean = tiled_gemm()
    assert len({_gemm(clean, 16, 16, 16, seed)[0].tobytes() for seed in SEEDS}) == 1


# ---- tree reduction -------------------------------------------------------------------------------
def _row_sum(fn, rows: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(1).standard_normal((rows, n)).astype(np.float32)
    out = np.zeros(rows, np.float32)
    run_gpu_kernel(fn, [x, out], seed=seed)
    return out, x.sum(axis=1)


@pytest.mark.parametrize("seed", [0, 3])
def test_tree_reduction_with_barriers_sums_each_row(seed):
    got, want = _row_sum(tree_row_sum(3, 16), 3, 16, seed)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_tree_reduction_without_barriers_is_wrong():
    fn = tree_row_sum(3, 16, barriers=False)
    assert any(_wrong(*_row_sum(fn, 3, 16, seed)) for seed in SEEDS)


# ---- barriers that not every thread reaches -------------------------------------------------------
def _barrier_kernel(where: str):
    """A block of 4 threads that copies x to y; ``where`` puts a barrier in a thread loop of
    extent 2 ("thread-loop") or under ``if tx < 2`` ("if")."""
    fn, ir, (x, y) = loop_func(f"diverge_{where.replace('-', '_')}", [BufferType((4,), F32)], [BufferType((4,), F32)])
    g, _ = ir.for_(1, "block.x")
    t, tx = g.for_(4, "thread.x")
    t.store(t.load(x, tx), y, tx)
    if where == "thread-loop":
        inner, _ = g.for_(2, "thread.x")
        inner.barrier()
    else:
        t.if_(t.scalar("lt", tx, 2)).barrier()
    return finish(fn, ir)


@pytest.mark.parametrize("where", ["thread-loop", "if"])
def test_divergent_barrier_raises(where):
    fn = _barrier_kernel(where)
    with pytest.raises(CompileError, match=rf"kernel '{fn.attributes['sym_name']}'.*divergent barrier"):
        run_gpu_kernel(fn, [np.ones(4, np.float32), np.zeros(4, np.float32)])


def test_barrier_outside_a_launch_raises():
    fn, ir, (x, y) = loop_func("host_barrier", [BufferType((4,), F32)], [BufferType((4,), F32)])
    ir.barrier()
    fn = finish(fn, ir)
    with pytest.raises(CompileError, match="host_barrier.*outside a launch"):
        run_gpu_kernel(fn, [np.ones(4, np.float32), np.zeros(4, np.float32)])


# ---- memory spaces and bounds ---------------------------------------------------------------------
def test_shared_memory_is_per_group_and_local_memory_per_thread():
    """Each thread keeps its own index in a local alloc and publishes it in shared memory; after a
    barrier it reads its mirror's entry: y[b, t] = (n-1-t) + own value."""
    n = 8
    fn, ir, (x, y) = loop_func("spaces", [BufferType((2, n), F32)], [BufferType((2, n), F32)])
    g, bx = ir.for_(2, "block.x")
    s = g.alloc((n,), space="shared")
    mine = g.alloc((), space="local")
    t, tx = g.for_(n, "thread.x")
    t.store(t.load(x, bx, tx), mine)
    t.store(t.load(x, bx, tx), s, tx)
    g.barrier()
    t, tx = g.for_(n, "thread.x")
    mirror = t.scalar("sub", n - 1, tx)
    t.store(t.add(t.load(s, mirror), t.load(mine)), y, bx, tx)
    fn = finish(fn, ir)
    x_ = np.arange(2 * n, dtype=np.float32).reshape(2, n)
    y_ = np.zeros_like(x_)
    run_gpu_kernel(fn, [x_, y_], seed=5)
    np.testing.assert_array_equal(y_, x_[:, ::-1] + x_)


def _shifted_copy(pad):
    fn, ir, (x, y) = loop_func("shifted", [BufferType((4,), F32)], [BufferType((4,), F32)])
    g, _ = ir.for_(1, "block.x")
    t, tx = g.for_(4, "thread.x")
    t.store(t.load(x, t.add(tx, 1), pad=pad), y, tx)
    return finish(fn, ir)


def test_out_of_bounds_load_raises_with_buffer_and_index():
    with pytest.raises(CompileError, match=r"kernel 'shifted'.*load from in0 at index \(4,\)"):
        run_gpu_kernel(_shifted_copy(None), [np.ones(4, np.float32), np.zeros(4, np.float32)])


def test_padded_load_gives_pad_out_of_bounds():
    y = np.zeros(4, np.float32)
    run_gpu_kernel(_shifted_copy(-2.0), [np.arange(4, dtype=np.float32), y])
    np.testing.assert_array_equal(y, [1, 2, 3, -2])


def test_out_of_bounds_store_raises():
    fn, ir, (x, y) = loop_func("bad_store", [BufferType((4,), F32)], [BufferType((4,), F32)])
    loop, i = ir.for_(4)
    loop.store(loop.load(x, i), y, loop.scalar("sub", i, 1))
    fn = finish(fn, ir)
    with pytest.raises(CompileError, match=r"bad_store.*store to out0 at index \(-1,\)"):
        run_gpu_kernel(fn, [np.ones(4, np.float32), np.zeros(4, np.float32)])


def test_two_launches_communicate_through_global_scratch():
    fn, ir, (x, y) = loop_func("two_launches", [BufferType((3, 4), F32)], [BufferType((3, 4), F32)])
    scratch = ir.alloc((3, 4), tag="scratch")
    for src, dst, scale in ((x, scratch, 2.0), (scratch, y, 3.0)):
        g, bx = ir.for_(3, "block.x")
        t, tx = g.for_(4, "thread.x")
        t.store(t.mul(t.load(src, bx, tx), t.const(scale)), dst, bx, tx)
    fn = finish(fn, ir)
    x_ = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    y_ = np.zeros_like(x_)
    run_gpu_kernel(fn, [x_, y_])
    np.testing.assert_array_equal(y_, x_ * np.float32(2) * np.float32(3))


# ---- scalar semantics -----------------------------------------------------------------------------
@pytest.mark.parametrize("make", [lambda: kernels.softmax(3, 5), lambda: kernels.matmul(3, 4, 5),
                                  lambda: kernels.elementwise_chain(2, 3), lambda: kernels.row_max(3, 4)])
def test_serial_kernels_match_the_structured_interpreter(make):
    """Top-level serial nests run as plain code, with the reference semantics of every scalar op."""
    kernel = make()
    inputs = kernels.inputs_for(kernel)
    want = run_kernel(kernel, inputs)
    fn = lower_kernel(kernel)
    outs = [np.zeros(w.shape, w.dtype) for w in want]
    run_gpu_kernel(fn, inputs + outs)
    for got, w in zip(outs, want):
        np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-6)


def _scalar_kernel(op: str, dtype: DType, *extra: str):
    """out[i] = (a[i] op b[i]) then each of ``extra`` applied with a[i]: ``(a op b) extra a``."""
    t = BufferType((3,), dtype)
    fn, ir, (a, b, out) = loop_func(f"scalar_{op}", [t, t], [t])
    loop, i = ir.for_(3)
    va, vb = loop.load(a, i), loop.load(b, i)
    v = loop.scalar(op, va, vb)
    for name in extra:
        v = loop.scalar(name, v, va)
    loop.store(v, out, i)
    return finish(fn, ir)


def _run_scalar(fn, a, b) -> np.ndarray:
    out = np.zeros_like(a)
    run_gpu_kernel(fn, [a, b, out])
    return out


def test_float32_arithmetic_stays_float32():
    a = np.array([1.0, 3.0, 1e8], np.float32)
    b = np.array([1e-8, 1e-7, 1.0], np.float32)
    got = _run_scalar(_scalar_kernel("add", DType.f32, "sub"), a, b)   # (a + b) - a
    np.testing.assert_array_equal(got, (a + b) - a)
    assert got[0] == 0.0 and got[2] == 0.0, "float64 arithmetic would keep b"


def test_integer_division_truncates_and_mod_follows_the_divisor():
    a = np.array([-7, 7, 5], np.int32)
    b = np.array([2, -2, 0], np.int32)
    np.testing.assert_array_equal(_run_scalar(_scalar_kernel("div", DType.i32), a, b), [-3, -3, 0])
    np.testing.assert_array_equal(_run_scalar(_scalar_kernel("mod", DType.i32), a, b), [1, -1, 0])


def test_max_and_min_propagate_nan():
    a = np.array([np.nan, 1.0, 2.0], np.float32)
    b = np.array([1.0, np.nan, 3.0], np.float32)
    got = _run_scalar(_scalar_kernel("max", DType.f32), a, b)
    assert np.isnan(got[:2]).all() and got[2] == 3.0
    got = _run_scalar(_scalar_kernel("min", DType.f32), a, b)
    assert np.isnan(got[:2]).all() and got[2] == 2.0


def test_gemm_of_16_cubed_is_fast():
    import time
    start = time.perf_counter()
    got, want = _gemm(tiled_gemm(), 16, 16, 16, seed=0)
    assert time.perf_counter() - start < 3.0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
