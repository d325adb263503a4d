"""The default GPU schedules (schedule/gpu.py) checked in the race-checking interpreter: every
strategy gives the kernel's results whatever order the threads run in, and removing a barrier
from the tiled contraction the schedule builds is caught."""
from __future__ import annotations

import numpy as np
import pytest

from tensorforge.codegen.gpu.interpret import run_gpu_kernel
from tensorforge.codegen.gpu.verify import verify_gpu_kernel
from tensorforge.codegen.target import GpuTarget
from tensorforge.dialects.structured.interpret import run_kernel
from tensorforge.passes.lower.structured_to_loop import lower_kernel
from tensorforge.schedule.analysis import walk_ops
from tensorforge.schedule.gpu import gpu_schedule

from tests.schedule import kernels


def _scheduled(kernel):
    fn = lower_kernel(kernel)
    plan = gpu_schedule(fn, 256)
    verify_gpu_kernel(fn, GpuTarget.opencl_default())
    return fn, plan


def _run(kernel, fn, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    inputs = kernels.inputs_for(kernel, seed=3)
    want = run_kernel(kernel, inputs)
    outs = [np.full(w.shape, np.nan, w.dtype) for w in want]
    run_gpu_kernel(fn, inputs + outs, seed=seed)
    return outs, want


@pytest.mark.parametrize("make, strategy", [
    (lambda: kernels.matmul(40, 36, 24), "tiled contraction"),
    (lambda: kernels.row_max(8, 300), "block reduction"),
    (lambda: kernels.softmax(6, 100), "row fusion"),
    (lambda: kernels.two_stage(5, 70), "row fusion"),
    (lambda: kernels.softmax(6, 40), "flat"),
    (lambda: kernels.col_sum(5, 7), "flat"),
    (lambda: kernels.elementwise_chain(9, 13), "flat"),
])
@pytest.mark.parametrize("seed", [0, 1])
def test_each_strategy_matches_the_kernel_in_any_thread_order(make, strategy, seed):
    kernel = make()
    fn, plan = _scheduled(kernel)
    assert any(s.startswith(strategy) for s in plan.strategies), plan.describe()
    got, want = _run(kernel, fn, seed)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("which", [0, 1])
def test_a_barrier_removed_from_the_scheduled_gemm_is_caught(which):
    """The tiled contraction has two barriers per k-slice: after staging (read-after-write) and
    after the products (write-after-read); without either, some thread order gives wrong sums."""
    kernel = kernels.matmul(32, 32, 48)
    fn, _ = _scheduled(kernel)
    barriers = list(walk_ops(fn, "loop.barrier"))
    assert len(barriers) == 2
    barriers[which].erase()
    wrong = 0
    for seed in range(4):
        got, want = _run(kernel, fn, seed)
        wrong += not np.allclose(got[0], want[0], rtol=1e-4, atol=1e-4)
    assert wrong > 0


def test_row_fused_softmax_needs_the_barriers_between_its_phases():
    """Softmax as one launch: maximum, sum of exponentials, normalisation, a block per row.  Each
    phase reads what the previous one wrote; without the barrier between two phases (the one after
    a phase's last store) some thread order reads a stale row statistic."""
    kernel = kernels.softmax(4, 96)
    fn, plan = _scheduled(kernel)
    assert plan.describe().startswith("row fusion (3 nests")
    assert len([op for op in fn.regions[0].blocks[0] if op.name == "loop.for"]) == 1
    got, want = _run(kernel, fn)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-7)
    block = next(op for op in fn.walk() if op.name == "loop.for" and op.attributes["kind"] == "block.x")
    between = [op for op in block.regions[0].blocks[0] if op.name == "loop.barrier"]
    between[-1].erase()                    # the barrier before the normalisation phase
    assert any(not np.allclose(_run(kernel, fn, seed)[0][0], want[0], rtol=1e-4, atol=1e-6) for seed in range(4))


def _matmul_bias_relu(m: int, n: int, k: int):
    """relu(A @ B + bias[j]): a contraction and an elementwise consumer reading it point for point."""
    from tensorforge.dialects.structured.builder import KernelBuilder
    from tensorforge.ir.core import Block
    from tensorforge.ir.types import DType, TensorType
    f32 = DType.f32
    kb = KernelBuilder("mm_bias_relu", [TensorType((m, k), f32), TensorType((k, n), f32), TensorType((n,), f32)])
    a, b, bias = kb.inputs
    c = kb.compute((m, n, k), "ppr", f32, lambda i, j, r: a[i, r] * b[r, j], combiner="add")
    y = kb.compute((m, n), "pp", f32, lambda i, j: (c[i, j] + bias[j]).apply("relu"))
    return kb.ret([y], Block([x.type for x in kb.block.args]).args)


def test_elementwise_consumer_runs_in_the_contraction_epilogue():
    kernel = _matmul_bias_relu(20, 36, 16)
    fn, plan = _scheduled(kernel)
    launches = [op for op in fn.regions[0].blocks[0] if op.name == "loop.for"]
    assert len(launches) == 1, plan.describe()
    assert "fused into their producer's epilogue" in plan.describe()
    assert not [op for op in fn.regions[0].blocks[0] if op.name == "loop.alloc"]   # no scratch left
    got, want = _run(kernel, fn)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


# ---- the GPU schedule primitives, composed by hand -------------------------------------------------
def _hand_scheduled_matmul(m: int, n: int, k: int, tile: int = 8, depth: int = 4):
    """bind + split + reorder + cache_shared: an 8x8-thread block per 8x8 tile of C, k-slices of A
    and B staged in shared memory."""
    from tensorforge.schedule.primitives import Schedule
    kernel = kernels.matmul(m, n, k)
    fn = lower_kernel(kernel)
    s = Schedule(fn)
    io, ii = s.split("0.0", tile)
    jo, ji = s.split("0.1", tile)
    s.reorder(io, jo, ii, ji)
    s.bind(io, "block.y")
    s.bind(jo, "block.x")
    s.bind(ii, "thread.y")
    s.bind(ji, "thread.x")
    ko, _ = s.split("0.2", depth)
    a = s.cache_shared("in0", ko)
    b = s.cache_shared("in1", ko)
    return kernel, fn, s, (a, b)


def test_bind_and_cache_shared_build_a_correct_tiled_gemm():
    kernel, fn, s, names = _hand_scheduled_matmul(16, 24, 12)
    verify_gpu_kernel(fn, GpuTarget.opencl_default())
    shared = [op for op in walk_ops(fn, "loop.alloc") if op.attributes.get("space") == "shared"]
    assert sorted(op.attributes["tag"] for op in shared) == sorted(names)
    assert [op.attributes["type"].shape for op in shared] == [(8, 4), (4, 8)]
    assert len(list(walk_ops(fn, "loop.barrier"))) == 4
    assert [step.primitive for step in s.trace][-2:] == ["cache_shared", "cache_shared"]
    for seed in range(3):
        got, want = _run(kernel, fn, seed)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


def test_bind_refuses_a_block_loop_inside_a_thread_loop():
    from tensorforge.errors import ScheduleError
    from tensorforge.schedule.primitives import Schedule
    s = Schedule(lower_kernel(kernels.matmul(8, 8, 8)))
    with pytest.raises(ScheduleError, match="needs an enclosing block loop"):
        s.bind("0.1", "thread.x")
    s.bind("0.0", "block.x")
    s.bind("0.1", "thread.x")
    with pytest.raises(ScheduleError, match="reduction loop"):
        s.bind("0.2", "thread.y")
