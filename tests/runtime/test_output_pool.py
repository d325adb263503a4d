"""The output pool of a native model: a call without ``out=`` writes into the memory of an
earlier result once the caller has dropped it (already faulted in), never into a result, or a
view of one, that the caller still holds; with NumPy and torch, several outputs, several threads
and dynamic shapes.  And the zero-copy call path: inputs are passed by address, outputs are the
memory the kernels wrote."""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import tensorforge
from tensorforge.ir.builtin import ModuleOp
from tensorforge.ir.symbolic import SymbolRange, SymbolTable, set_symbol_table
from tensorforge.ir.types import tensor
from tensorforge.runtime import buffers

from . import models

RTOL, ATOL = 1e-5, 1e-5
BIG = (256, 1024)             # 1 MiB of f32: above buffers.POOL_MIN_BYTES


def big_two_out() -> ModuleOp:
    """main(x: f32[256, 1024]) -> (relu(x), x * x): two 1 MiB outputs, pooled by default."""
    m = ModuleOp.create()
    f = m.add_function("main", [tensor(BIG)], arg_names=["x"])
    g = f.builder().graph
    f.set_return([g.relu(f.args[0]), g.mul(f.args[0], f.args[0])])
    return m


def big_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.maximum(x, 0), x * x


def dynamic_relu() -> ModuleOp:
    """main(x: f32[b, 512]) -> relu(x) + x: outputs whose size follows the batch."""
    m = ModuleOp.create()
    f = m.add_function("main", [tensor(("b", 512))], arg_names=["x"])
    g = f.builder().graph
    f.set_return([g.add(g.relu(f.args[0]), f.args[0])])
    set_symbol_table(f, SymbolTable([SymbolRange("b", 1, 256, hint=64)]))
    return m


def rand(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def address(a) -> int:
    return a.data_ptr() if hasattr(a, "data_ptr") else a.ctypes.data


@pytest.fixture(scope="module")
def big():
    cm = tensorforge.compile(big_two_out(), threads=1)
    assert cm.native.pool_min_bytes == buffers.POOL_MIN_BYTES <= BIG[0] * BIG[1] * 4
    return cm


@pytest.fixture()
def pooled():
    """The small two-output model with every output pooled (a fresh NativeModel per test)."""
    cm = tensorforge.compile(models.two_in_two_out(), threads=1)
    cm.native.pool_min_bytes = 0
    return cm


@pytest.fixture(scope="module")
def dyn():
    cm = tensorforge.compile(dynamic_relu(), threads=1)
    assert cm.native.is_dynamic
    return cm


# ---- reuse once dropped ---------------------------------------------------------------------
def test_a_dropped_result_is_reused_by_the_next_call(big):
    x1, x2 = rand(BIG, 1), rand(BIG, 2)
    a, b = big(x1)
    where = (address(a), address(b))
    np.testing.assert_array_equal(a, big_reference(x1)[0])
    del a, b
    made = big.native.output_pool.made
    a, b = big(x2)
    assert (address(a), address(b)) == where
    assert big.native.output_pool.made == made              # nothing new allocated
    np.testing.assert_array_equal(a, big_reference(x2)[0])
    np.testing.assert_array_equal(b, big_reference(x2)[1])


def test_a_loop_that_rebinds_its_result_alternates_two_buffers(big):
    x = rand(BIG, 3)
    seen = set()
    for _ in range(8):
        y = big(x)                     # the previous y is still alive while the call runs
        seen.add(address(y[0]))
    assert len(seen) == 2
    np.testing.assert_array_equal(y[0], big_reference(x)[0])


def test_small_outputs_bypass_the_pool(small):
    x, b = models.inputs()
    small(x, b)
    assert small.native.output_pool.made == 0 and small.native.output_pool.slots == []


# ---- never while held -----------------------------------------------------------------------
VIEWS = {
    "itself": lambda y: y,
    "slice": lambda y: y[1:3, ::2],
    "row": lambda y: y[2],
    "reshape": lambda y: y.reshape(-1),
    "transpose": lambda y: y.T,
    "dtype view": lambda y: y.view(np.uint32),
    "memoryview": lambda y: memoryview(y),
    "asarray of a slice": lambda y: np.asarray(y[1:]),
}


@pytest.mark.parametrize("kind", list(VIEWS))
def test_a_held_result_or_view_is_never_overwritten(pooled, kind):
    x, b = models.inputs(4)
    h, h2 = pooled(x, b)
    held = VIEWS[kind](h)
    expected = np.array(held, copy=True)
    del h, h2
    gc.collect()
    results = []
    for seed in range(5, 5 + 3 * pooled.native.output_pool_size):     # more calls than the pool holds
        y = pooled(*models.inputs(seed))
        assert not np.shares_memory(y[0], np.asarray(held)) and not np.shares_memory(y[1], np.asarray(held))
        if seed % 2:
            results.append((seed, y))
        del y
    np.testing.assert_array_equal(np.asarray(held), expected)
    for seed, (h, _) in results:                          # the ones kept meanwhile are intact too
        np.testing.assert_allclose(h, models.reference(*models.inputs(seed))[0], rtol=RTOL, atol=ATOL)
    assert pooled.native.output_pool.reused > 0           # the dropped ones were reused


def test_held_results_keep_their_values_and_the_pool_stays_bounded(pooled):
    cases = [models.inputs(seed) for seed in range(20)]
    kept = [pooled(x, b) for x, b in cases]              # all held: each call needs new memory
    pool = pooled.native.output_pool
    assert len(pool.slots) <= pool.capacity == pooled.native.output_pool_size
    for (x, b), (h, h2) in zip(cases, kept):
        ref_h, ref_h2 = models.reference(x, b)
        np.testing.assert_allclose(h, ref_h, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(h2, ref_h2, rtol=1e-4, atol=ATOL)
    addresses = {address(o) for pair in kept for o in pair}
    assert len(addresses) == 2 * len(cases)


def test_one_output_held_the_other_dropped(big):
    x1, x2 = rand(BIG, 6), rand(BIG, 7)
    a, b = big(x1)
    a_at, b_at, a_ref = address(a), address(b), a.copy()
    del b                                                  # keep relu(x1), drop x1 * x1
    a2, b2 = big(x2)
    got = {address(a2), address(b2)}
    assert b_at in got and a_at not in got                # same-sized outputs share the pool
    np.testing.assert_array_equal(a2, big_reference(x2)[0])
    np.testing.assert_array_equal(a, a_ref)
    np.testing.assert_array_equal(b2, big_reference(x2)[1])


def test_pool_size_zero_pools_nothing(pooled):
    pooled.native.set_output_pool(0)
    assert pooled.native.output_pool_size == 0
    for seed in range(3):
        h, _ = pooled(*models.inputs(seed))
        np.testing.assert_allclose(h, models.reference(*models.inputs(seed))[0], rtol=RTOL, atol=ATOL)
    assert pooled.native.output_pool.made == 0
    pooled.native.set_output_pool(None)
    assert pooled.native.output_pool_size == 2 * pooled.native.max_concurrency * 2


def test_bad_pool_sizes_are_refused(pooled):
    with pytest.raises(tensorforge.errors.TensorforgeError, match="non-negative"):
        pooled.native.set_output_pool(-1)


# ---- torch ----------------------------------------------------------------------------------
def test_torch_results_are_reused_once_dropped_and_kept_while_held(big):
    torch = pytest.importorskip("torch")
    x1, x2 = torch.from_numpy(rand(BIG, 8)), torch.from_numpy(rand(BIG, 9))
    a, b = big(x1)
    assert isinstance(a, torch.Tensor)
    at = address(a)
    del a, b
    a, b = big(x2)
    assert address(a) == at                                # dropped: reused
    torch.testing.assert_close(a, torch.relu(x2))
    row = a[3]                                             # a torch view of the result
    as_numpy = b.numpy()                                   # a NumPy view of the other
    row_ref, b_ref = row.clone(), as_numpy.copy()
    del a, b
    for seed in range(10, 16):
        c, d = big(torch.from_numpy(rand(BIG, seed)))
        assert address(c) != at
        assert not np.shares_memory(d.numpy(), as_numpy)
        del c, d
    assert torch.equal(row, row_ref)
    np.testing.assert_array_equal(as_numpy, b_ref)


def test_torch_inputs_are_passed_by_address_and_outputs_are_the_kernels_memory(big):
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(rand(BIG, 20))
    a, b = big(x)
    arena = big.native._latest_arena()                     # a lone caller: the arena of that call
    assert arena.in_ptrs[0] == x.data_ptr()                # no copy of a contiguous f32 CPU tensor
    assert (arena.out_ptrs[0], arena.out_ptrs[1]) == (a.data_ptr(), b.data_ptr())
    slot_addresses = {s.address for s in big.native.output_pool.slots}
    assert {a.data_ptr(), b.data_ptr()} <= slot_addresses  # the pooled memory itself, no copy out
    # out= tensors: the kernels write them in place
    out = [torch.empty(BIG), torch.empty(BIG)]
    result = big.run(x, out=out)
    assert result[0] is out[0] and result[1] is out[1]
    assert (arena.out_ptrs[0], arena.out_ptrs[1]) == (out[0].data_ptr(), out[1].data_ptr())
    torch.testing.assert_close(out[1], x * x)


def test_numpy_inputs_are_passed_by_address(big):
    x = rand(BIG, 21)
    y = big(x)
    assert big.native._latest_arena().in_ptrs[0] == x.ctypes.data
    assert big.native._latest_arena().out_ptrs[0] == y[0].ctypes.data


# ---- threads --------------------------------------------------------------------------------
def test_concurrent_callers_get_the_serial_results(pooled):
    native = pooled.native
    native.set_max_concurrency(4)
    cases = [models.inputs(100 + k) for k in range(12)]
    serial = [tuple(o.copy() for o in pooled(x, b)) for x, b in cases]
    errors: list = []
    kept: list = []
    start = threading.Barrier(4)

    def work(t: int) -> None:
        try:
            start.wait()
            mine = []
            for i in range(60):
                k = (t * 7 + i) % len(cases)
                h, h2 = pooled(*cases[k])
                np.testing.assert_array_equal(h, serial[k][0])
                np.testing.assert_array_equal(h2, serial[k][1])
                if i % 5 == 0:
                    mine.append((k, h, h2))          # held: must not change while other threads run
            kept.extend(mine)
        except BaseException as exc:               # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]
    for k, h, h2 in kept:
        np.testing.assert_array_equal(h, serial[k][0])
        np.testing.assert_array_equal(h2, serial[k][1])
    ptrs = [address(o) for _, h, h2 in kept for o in (h, h2)]
    assert len(set(ptrs)) == len(ptrs)             # no two held results share memory
    assert native.output_pool.reused > 0           # and the dropped ones were reused
    assert len(native.output_pool.slots) <= native.output_pool_size


# ---- dynamic shapes -------------------------------------------------------------------------
def test_dynamic_batch_reuses_fitting_buffers_only(dyn):
    native = dyn.native
    ref = lambda x: np.maximum(x, 0) + x                   # noqa: E731
    x64 = rand((64, 512), 30)                              # 128 KiB out: pooled
    y = dyn(x64)
    at = address(y)
    np.testing.assert_array_equal(y, ref(x64))
    del y
    x40 = rand((40, 512), 31)                              # smaller, within 2x: the same buffer
    y = dyn(x40)
    assert y.shape == (40, 512) and address(y) == at
    np.testing.assert_array_equal(y, ref(x40))
    held, held_ref = y, y.copy()
    x96 = rand((96, 512), 32)                              # bigger: never the 64-row buffer
    y96 = dyn(x96)
    assert address(y96) != at and y96.shape == (96, 512)
    np.testing.assert_array_equal(y96, ref(x96))
    for seed, rows in enumerate((64, 40, 33, 64, 128, 40)):
        x = rand((rows, 512), 40 + seed)
        y = dyn(x)
        assert y.shape == (rows, 512)
        assert not np.shares_memory(y, held)
        np.testing.assert_array_equal(y, ref(x))
    np.testing.assert_array_equal(held, held_ref)
    assert native.output_pool.reused > 0
    assert len(native.output_pool.slots) <= native.output_pool_size


# ---- the overhead probe -----------------------------------------------------------------------
def test_call_overhead_probe_runs(big):
    from tensorforge.runtime.overhead import measure_call_overhead
    x = rand(BIG, 50)
    o = measure_call_overhead(big.native, [x], lambda: big(x), blocks=3, calls_per_block=3)
    assert o.c_loop_us > 0 and o.python_us > 0
    np.testing.assert_array_equal(big(x)[0], big_reference(x)[0])
