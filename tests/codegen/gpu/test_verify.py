"""The GPU kernel verifier: each rule of docs/gpu.md, kept and broken."""
from __future__ import annotations

import pytest

from tensorforge.codegen.gpu.verify import launch_shape, shared_bytes, verify_gpu_kernel
from tensorforge.codegen.target import GpuTarget
from tensorforge.errors import CompileError
from tensorforge.ir.types import BufferType

from tests.codegen.gpu.gemm_ir import F32, finish, loop_func, tiled_gemm, tree_row_sum

H200 = GpuTarget.h200()
N = 8


def _kernel(build, name: str = "k", threads: int = N):
    """A kernel over x, y: f32[4, threads] with one block.x loop over the rows; ``build(g, bx, x, y)``
    fills the block loop's body."""
    fn, ir, (x, y) = loop_func(name, [BufferType((4, threads), F32)], [BufferType((4, threads), F32)])
    g, bx = ir.for_(4, "block.x")
    build(g, bx, x, y)
    return finish(fn, ir)


def _copy(t, bx, tx, x, y) -> None:
    t.store(t.load(x, bx, tx), y, bx, tx)


def _thread_copy(extent: int = N, kind: str = "thread.x", **attrs):
    def build(g, bx, x, y):
        t, tx = g.for_(extent, kind, **attrs)
        _copy(t, bx, tx, x, y)
    return build


def _raises(fn, match: str, target: GpuTarget = H200):
    with pytest.raises(CompileError, match=rf"kernel '{fn.attributes['sym_name']}'.*{match}"):
        verify_gpu_kernel(fn, target)


# ---- the reference kernels pass ------------------------------------------------------------------
@pytest.mark.parametrize("target", [H200, GpuTarget.opencl_default()])
def test_gemm_and_tree_reduction_are_legal(target):
    verify_gpu_kernel(tiled_gemm(), target)
    verify_gpu_kernel(tree_row_sum(4, 32), target)


def test_launch_shape_and_shared_bytes_of_the_gemm():
    gemm = tiled_gemm(m=32, n=16, k=16, bm=8, bn=8, bk=4, tm=2, tn=1)
    (nest,) = [op for op in gemm.regions[0].blocks[0] if op.name == "loop.for"]
    assert launch_shape(nest) == ((2, 4, 1), (8, 4, 1))
    assert shared_bytes(nest) == (8 * 4 + 4 * 8) * 4


# ---- threads per block ----------------------------------------------------------------------------
def test_threads_per_block_limit():
    fn = tiled_gemm(m=32, n=32, k=8, bm=32, bn=32, bk=8, tm=2, tn=2)   # 16 x 16 = 256 threads
    verify_gpu_kernel(fn, GpuTarget.opencl_default())
    _raises(fn, "256 threads.*more than the 128", GpuTarget("small", "opencl", max_threads_per_block=128))


def test_thread_loop_extent_must_be_static():
    verify_gpu_kernel(_kernel(_thread_copy(N)), H200)
    _raises(_kernel(_thread_copy("n")), "symbolic extent 'n'")


# ---- shared memory --------------------------------------------------------------------------------
def test_shared_memory_limit():
    fn = tiled_gemm()                                          # two 8x8 f32 tiles: 512 bytes
    verify_gpu_kernel(fn, GpuTarget("small", "cuda", shared_per_block=512))
    _raises(fn, "512 bytes of shared memory, more than the 256", GpuTarget("tiny", "cuda", shared_per_block=256))


def _shared_in_thread_loop(g, bx, x, y):
    t, tx = g.for_(N, "thread.x")
    s = t.alloc((N,), space="shared", tag="tile")
    t.store(t.load(x, bx, tx), s, tx)


def test_shared_alloc_inside_a_thread_loop_is_rejected():
    _raises(_kernel(_shared_in_thread_loop), "shared alloc 'tile' inside a thread loop")


def test_shared_alloc_outside_block_loops_is_rejected():
    fn, ir, _ = loop_func("top_shared", [BufferType((4,), F32)], [BufferType((4,), F32)])
    ir.alloc((4,), space="shared", tag="tile")
    _raises(finish(fn, ir), "shared alloc 'tile' outside block loops")


# ---- barriers -------------------------------------------------------------------------------------
def _barrier_under_if(depends_on: str):
    def build(g, bx, x, y):
        t, tx = g.for_(N, "thread.x")
        _copy(t, bx, tx, x, y)
        iv = tx if depends_on == "thread" else bx
        g_or_t = t if depends_on == "thread" else g
        g_or_t.if_(g_or_t.scalar("lt", iv, 2)).barrier()
    return _kernel(build, name=f"if_{depends_on}")


def test_barrier_under_a_thread_dependent_if_is_rejected():
    verify_gpu_kernel(_barrier_under_if("block"), H200)
    _raises(_barrier_under_if("thread"), "barrier under a loop.if whose condition depends on a thread index")


def _barrier_in_thread_loop(extent: int):
    def build(g, bx, x, y):
        t, tx = g.for_(N, "thread.x")
        _copy(t, bx, tx, x, y)
        inner, _ = g.for_(extent, "thread.x")
        inner.barrier()
    return _kernel(build, name=f"barrier_in_{extent}")


def test_barrier_in_a_thread_loop_smaller_than_the_block_is_rejected():
    verify_gpu_kernel(_barrier_in_thread_loop(N), H200)
    _raises(_barrier_in_thread_loop(N // 2), f"thread.x loop of extent {N // 2}, smaller than the block's {N}")


def test_barrier_outside_block_loops_is_rejected():
    fn, ir, _ = loop_func("host_barrier", [BufferType((4,), F32)], [BufferType((4,), F32)])
    loop, _ = ir.for_(4)
    loop.barrier()
    _raises(finish(fn, ir), "barrier outside block loops")


# ---- loop structure -------------------------------------------------------------------------------
def _block_in_thread(g, bx, x, y):
    t, tx = g.for_(N, "thread.x")
    inner, by = t.for_(2, "block.y")
    _copy(inner, by, tx, x, y)


def test_block_loop_inside_a_thread_loop_is_rejected():
    _raises(_kernel(_block_in_thread), "block.y loop inside a thread loop")


def _nested_thread_x(g, bx, x, y):
    t, tx = g.for_(2, "thread.x")
    inner, tx2 = t.for_(4, "thread.x")
    _copy(inner, bx, inner.add(inner.mul(tx, 4), tx2), x, y)


def _thread_y_in_thread_x(g, bx, x, y):
    t, tx = g.for_(2, "thread.x")
    inner, ty = t.for_(4, "thread.y")
    _copy(inner, bx, inner.add(inner.mul(tx, 4), ty), x, y)


def test_one_loop_per_gpu_axis_on_a_path():
    verify_gpu_kernel(_kernel(_thread_y_in_thread_x), H200)
    _raises(_kernel(_nested_thread_x), "thread.x loop nested in another thread.x loop")


def test_gpu_loops_must_be_normalised():
    verify_gpu_kernel(_kernel(_thread_copy(N, lb=0, step=1)), H200)
    _raises(_kernel(_thread_copy(N, lb=1)), "lb=1, step=1")
    _raises(_kernel(_thread_copy(N, step=2)), "lb=0, step=2")


def test_gpu_loop_outside_a_launch_is_rejected():
    fn, ir, (x, y) = loop_func("no_blocks", [BufferType((N,), F32)], [BufferType((N,), F32)])
    t, tx = ir.for_(N, "thread.x")
    t.store(t.load(x, tx), y, tx)
    _raises(finish(fn, ir), "thread.x loop outside a launch")


def _vectorized(width: int):
    def build(g, bx, x, y):
        t, tx = g.for_(N // width, "thread.x")
        v, lane = t.for_(width, "vectorize")
        _copy(v, bx, v.add(v.mul(tx, width), lane), x, y)
    return _kernel(build, name=f"vector{width}", threads=N if width != 3 else 9)


def test_vector_width():
    for width in (2, 4, 8):
        verify_gpu_kernel(_vectorized(width), H200)
    _raises(_vectorized(3), r"vectorize loop of extent 3")


# ---- static bounds --------------------------------------------------------------------------------
def _shifted(pad=None, guarded: bool = False, store: bool = False):
    """y[b, t] = x[b, t + 1] (or, with ``store``, y[b, t + 1] = x[b, t]) over t < N."""
    def build(g, bx, x, y):
        t, tx = g.for_(N, "thread.x")
        if guarded:
            t = t.if_(t.scalar("lt", t.add(tx, 1), N))
        shifted = t.add(tx, 1)
        if store:
            t.store(t.load(x, bx, tx), y, bx, shifted)
        else:
            t.store(t.load(x, bx, shifted, pad=pad), y, bx, tx)
    return _kernel(build, name="shifted")


def test_statically_out_of_bounds_load_is_rejected():
    _raises(_shifted(), rf"load from in0 is out of bounds: index 1 ranges over \[1, {N}\]")


def test_guarded_or_padded_loads_pass():
    verify_gpu_kernel(_shifted(guarded=True), H200)
    verify_gpu_kernel(_shifted(pad=0.0), H200)


def test_statically_out_of_bounds_store_is_rejected():
    verify_gpu_kernel(_shifted(store=True, guarded=True), H200)
    _raises(_shifted(store=True), rf"store to out0 is out of bounds: index 1 ranges over \[1, {N}\]")


def test_block_index_ranges_are_checked_too():
    def build(g, bx, x, y):
        t, tx = g.for_(N, "thread.x")
        _copy(t, t.add(bx, 1), tx, x, y)
    _raises(_kernel(build), r"index 0 ranges over \[1, 4\]")
