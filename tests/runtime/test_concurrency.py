"""Several threads calling one compiled model: results bitwise equal to serial calls (static and
dynamic models, ``out=`` too), the arena pool's bound, the OpenMP thread count per calling thread,
and arenas or outputs too large for memory failing with a ``TensorforgeError``.

No timing is asserted: a thread that should block is checked to still be waiting, and every join
has a generous limit so a broken pool fails the test instead of hanging it.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import tensorforge
from tensorforge.errors import TensorforgeError
from tensorforge.ir.builtin import ModuleOp
from tensorforge.ir.symbolic import SymbolRange, SymbolTable, set_symbol_table
from tensorforge.ir.types import tensor
from tensorforge.runtime import buffers
from tensorforge.runtime.arena_plan import DynamicPlan, PlannedBuffer
from tensorforge.runtime.buffers import Pool
from tensorforge.runtime.native import NativeModel

from . import models
from .test_threads_and_cache import _omp_max_threads

THREADS, CALLS = 4, 40
JOIN_S = 60.0                 # only reached when something hangs


def dynamic_mlp() -> ModuleOp:
    """main(x: f32[b, 64]) -> tanh(relu(x @ W1) @ W2), b in 1..256: the hidden layer lives in the arena."""
    rng = np.random.default_rng(3)
    m = ModuleOp.create()
    f = m.add_function("main", [tensor(("b", 64))], arg_names=["x"])
    g = f.builder().graph
    w1 = g.constant((rng.standard_normal((64, 128)) / 8).astype(np.float32))
    w2 = g.constant((rng.standard_normal((128, 32)) / 8).astype(np.float32))
    f.set_return([g.tanh(g.matmul(g.relu(g.matmul(f.args[0], w1)), w2))])
    set_symbol_table(f, SymbolTable([SymbolRange("b", 1, 256, hint=8)]))
    return m


@pytest.fixture(scope="module")
def mlp():
    cm = tensorforge.compile(models.wide_mlp(), threads=1)
    cm.native.set_max_concurrency(THREADS)
    return cm


@pytest.fixture(scope="module")
def dyn():
    cm = tensorforge.compile(dynamic_mlp(), threads=1)
    assert cm.native.is_dynamic and cm.native.plan.buffers
    cm.native.set_max_concurrency(THREADS)
    return cm


def run_threads(work, n: int) -> list:
    """``work(k)`` in ``n`` threads started together; their results in thread order (errors re-raised)."""
    results, errors = [None] * n, []
    start = threading.Barrier(n)

    def body(k):
        try:
            start.wait()
            results[k] = work(k)
        except BaseException as e:      # noqa: BLE001 - handed to the test thread
            errors.append(e)

    threads = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_S)
    assert not any(t.is_alive() for t in threads), "a caller hung"
    if errors:
        raise errors[0]
    return results


def assert_same(concurrent: list, serial: list) -> None:
    for got_thread, want_thread in zip(concurrent, serial, strict=True):
        for got, want in zip(got_thread, want_thread, strict=True):
            np.testing.assert_array_equal(got, want)


def static_inputs(k: int) -> list[np.ndarray]:
    rng = np.random.default_rng(100 + k)
    return [rng.standard_normal((64, 256)).astype(np.float32) for _ in range(CALLS)]


def dynamic_inputs(k: int) -> list[np.ndarray]:
    rng = np.random.default_rng(200 + k)
    return [rng.standard_normal((int(rng.integers(1, 97)), 64)).astype(np.float32) for _ in range(CALLS)]


def test_threads_on_one_static_model_give_the_serial_results(mlp):
    inputs = [static_inputs(k) for k in range(THREADS)]
    serial = [[mlp(x) for x in xs] for xs in inputs]

    def work(k):      # odd threads write into their own out= array: pointer slots are per arena
        if k % 2 == 0:
            return [mlp(x) for x in inputs[k]]
        buf = np.empty((64, 10), np.float32)
        return [mlp.run(x, out=[buf])[0].copy() for x in inputs[k]]

    assert_same(run_threads(work, THREADS), serial)
    assert 1 <= len(mlp.native.arenas) <= THREADS


def test_threads_at_different_batches_on_one_dynamic_model_give_the_serial_results(dyn):
    inputs = [dynamic_inputs(k) for k in range(THREADS)]
    serial = [[dyn(x) for x in xs] for xs in inputs]
    assert_same(run_threads(lambda k: [dyn(x) for x in inputs[k]], THREADS), serial)
    assert_same(run_threads(lambda k: [dyn(x) for x in inputs[THREADS - 1 - k]], THREADS), serial[::-1])
    arenas = dyn.native.arenas
    assert 1 <= len(arenas) <= THREADS
    need = max([dyn.native.plan.offsets_for((x.shape[0],))[1] for xs in inputs for x in xs] + [dyn.native.arena_bytes])
    assert all(a.nbytes <= need for a in arenas)         # grown only as far as the largest call needed


def test_each_calling_thread_gets_the_model_thread_count(mlp):
    x = static_inputs(0)[0]

    def work(_):
        mlp(x)
        return _omp_max_threads(mlp)      # this thread's OpenMP setting, applied by tf_run on entry

    assert run_threads(work, THREADS) == [mlp.threads] * THREADS == [1] * THREADS


def test_a_call_takes_a_free_arena_and_callers_past_the_bound_wait(dyn):
    native = dyn.native
    native.set_max_concurrency(2)
    x = dynamic_inputs(0)[0]
    want = dyn(x)
    held = native._pool.acquire()      # stands for a call in progress in another thread
    try:
        np.testing.assert_array_equal(dyn(x), want)         # runs in the second arena
        assert len(native.arenas) == 2
        second = native._pool.acquire()                     # now both are in use
        result = []
        waiter = threading.Thread(target=lambda: result.append(dyn(x)), daemon=True)
        waiter.start()
        waiter.join(0.3)
        assert waiter.is_alive() and not result and len(native.arenas) == 2    # no third arena
        native._pool.release(second)
        waiter.join(JOIN_S)
        assert not waiter.is_alive()
        np.testing.assert_array_equal(result[0], want)
    finally:
        native._pool.release(held)
        native.set_max_concurrency(THREADS)


def test_the_bound_is_respected_with_many_threads(dyn):
    dyn.native.set_max_concurrency(2)
    try:
        inputs = [dynamic_inputs(k)[:10] for k in range(6)]
        serial = [[dyn(x) for x in xs] for xs in inputs]
        assert_same(run_threads(lambda k: [dyn(x) for x in inputs[k]], 6), serial)
        assert 1 <= len(dyn.native.arenas) <= 2
    finally:
        dyn.native.set_max_concurrency(THREADS)


def test_default_concurrency_is_cores_over_threads(small):
    from tensorforge.runtime.native import default_threads
    model = NativeModel(small.native.lib, small.native.inputs, small.native.outputs, small.native.weights,
                        small.native.arena_bytes, threads=1)
    assert model.max_concurrency == default_threads()
    model.set_threads(default_threads())
    assert model.max_concurrency == 1
    model.set_max_concurrency(3)
    model.set_threads(1)
    assert model.max_concurrency == 3          # an explicit bound stays
    model.set_max_concurrency(None)
    assert model.max_concurrency == default_threads()
    with pytest.raises(TensorforgeError, match="max_concurrency must be a positive integer"):
        model.set_max_concurrency(0)


# ---- the pool on its own ------------------------------------------------------------------------
def test_pool_makes_on_demand_up_to_the_bound_and_reuses():
    made = []
    pool = Pool(lambda: made.append(object()) or made[-1], 2)
    a = pool.acquire()
    pool.release(a)
    assert pool.acquire() is a and len(made) == 1      # a lone caller gets the same one back
    b = pool.acquire()
    assert b is not a and pool.items == [a, b]
    got = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire()), daemon=True)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and len(made) == 2
    pool.release(b)
    waiter.join(JOIN_S)
    assert got == [b]
    pool.release(a)
    pool.release(b)
    assert pool.latest is b and pool.acquire() is b     # the last returned goes out first (warm)


def test_pool_bound_changes_wake_waiters_and_drop_the_surplus():
    pool = Pool(object, 1)
    a = pool.acquire()
    got = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire()), daemon=True)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()
    pool.set_bound(2)                         # room for one more: the waiter makes it
    waiter.join(JOIN_S)
    assert len(got) == 1 and got[0] is not a
    pool.set_bound(1)
    pool.release(got[0])                      # over the bound: dropped
    assert pool.items == [a]
    pool.release(a)
    assert pool.acquire() is a


def test_a_failed_make_frees_its_slot():
    calls = []

    def make():
        calls.append(1)
        if len(calls) == 1:
            raise TensorforgeError("no memory")
        return object()

    pool = Pool(make, 1)
    with pytest.raises(TensorforgeError, match="no memory"):
        pool.acquire()
    assert pool.acquire() is not None and len(calls) == 2


# ---- memory that is not there -------------------------------------------------------------------
def test_a_static_arena_too_large_fails_at_load_with_the_bytes(small):
    n = small.native
    with pytest.raises(TensorforgeError, match=r"^cannot allocate 1152921504606846976 bytes \(1048576\.0 TiB\) for "
                                               r"the arena of a call .*compile the model for a smaller batch"):
        NativeModel(n.lib, n.inputs, n.outputs, n.weights, 1 << 60, threads=1)


def test_a_dynamic_arena_too_large_fails_at_the_call_and_the_model_still_works(dyn):
    n = dyn.native
    huge = DynamicPlan(["b"], [PlannedBuffer("1099511627776*b", 0, 3)])     # 1 TiB per row
    model = NativeModel(n.lib, n.inputs, n.outputs, n.weights, 0, threads=1, symbols=n.symbols,
                        plan=huge, max_concurrency=1)
    x = np.ones((4, 64), np.float32)
    for _ in range(2):                        # the arena went back to the pool: no hang the second time
        with pytest.raises(TensorforgeError, match=r"^cannot allocate 4398046511104 bytes \(4\.0 TiB\) for the "
                                                   r"arena of a call at b=4.*smaller batch"):
            model(x)
    assert len(model.arenas) == 1


def test_outputs_beyond_the_free_memory_fail_before_running(dyn, monkeypatch):
    monkeypatch.setattr(buffers, "CHECK_ABOVE", 0)
    monkeypatch.setattr(buffers, "available_memory", lambda: 1000)
    x = np.ones((200, 64), np.float32)        # a batch no other test uses: its checks are not cached
    with pytest.raises(TensorforgeError, match=r"^cannot allocate 25600 bytes \(25\.0 KiB\) for the outputs of a "
                                               r"call at b=200, 1000 bytes \(1000 B\) are available; call the model "
                                               r"with a smaller batch"):
        dyn(x)


def test_memory_error_becomes_a_tensorforge_error(monkeypatch):
    monkeypatch.setattr(buffers, "available_memory", lambda: None)     # only the allocation itself can tell
    with pytest.raises(TensorforgeError, match=r"^cannot allocate 4611686018427387904 bytes .* for a test; do less$"):
        buffers.allocate(1 << 62, "a test", "do less")
