"""The arena placer (runtime/arena_plan.py) shared by the static planner and dynamic models."""
from __future__ import annotations

import numpy as np
import pytest

from tensorforge.ir.builtin import ModuleOp
from tensorforge.ir.symbolic import SymbolRange, SymbolTable, set_symbol_table
from tensorforge.ir.types import tensor
from tensorforge.passes.memory.plan import plan_dynamic, plan_memory
from tensorforge.runtime.arena_plan import ALIGN, DynamicPlan, PlannedBuffer, aligned, place


def _random_problem(rng: np.random.Generator, n: int) -> tuple[list[int], list[tuple[int, int]]]:
    sizes = [int(s) for s in rng.integers(1, 5000, n)]
    starts = rng.integers(0, 40, n)
    intervals = [(int(a), int(a + rng.integers(0, 10))) for a in starts]
    return sizes, intervals


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return not (a[1] < b[0] or b[1] < a[0])


@pytest.mark.parametrize("seed", range(20))
def test_live_buffers_never_share_bytes(seed):
    rng = np.random.default_rng(seed)
    sizes, intervals = _random_problem(rng, int(rng.integers(1, 60)))
    offsets, arena = place(sizes, intervals)
    assert all(o % ALIGN == 0 for o in offsets)
    assert arena == max(o + aligned(s) for o, s in zip(offsets, sizes))
    for i in range(len(sizes)):
        for j in range(i + 1, len(sizes)):
            if _overlaps(intervals[i], intervals[j]):
                a, b = (offsets[i], offsets[i] + sizes[i]), (offsets[j], offsets[j] + sizes[j])
                assert a[1] <= b[0] or b[1] <= a[0], (i, j)
    # reuse never costs more than giving every buffer its own bytes
    assert arena <= sum(aligned(s) for s in sizes)


def test_reuses_the_bytes_of_dead_buffers():
    offsets, arena = place([1000, 1000, 1000], [(0, 1), (1, 2), (2, 3)])
    assert offsets == [0, 1024, 0] and arena == 2048      # the third reuses the first's bytes


def test_largest_first_then_earliest_start():
    offsets, arena = place([64, 256, 64], [(0, 5), (0, 5), (0, 5)])
    assert offsets == [256, 0, 320] and arena == 384


def _chain_module(shape) -> ModuleOp:
    """x -> a = exp(x) -> b = tanh(a) -> c = relu(b) -> (c * c): a's bytes are free again for c."""
    m = ModuleOp.create()
    f = m.add_function("main", [tensor(shape)], arg_names=["x"])
    g = f.builder().graph
    c = g.relu(g.tanh(g.exp(f.args[0])))
    f.set_return([g.mul(c, c)])
    return m


def _intermediate(v) -> bool:
    return v.op is not None and v.op.name != "graph.constant" and v.op.name != "func.return"


@pytest.mark.parametrize("batch", [1, 3, 17])
def test_dynamic_plan_places_as_the_static_planner_does_at_the_same_size(batch):
    static = _chain_module((batch, 40)).main
    dynamic = _chain_module(("b", 40)).main
    set_symbol_table(dynamic, SymbolTable([SymbolRange("b", 1, 64)]))
    keep = {id(v) for v in static.outputs}
    sp = plan_memory(static, lambda v: _intermediate(v) and id(v) not in keep)
    keep_d = {id(v) for v in dynamic.outputs}
    dp = plan_dynamic(dynamic, lambda v: _intermediate(v) and id(v) not in keep_d, ["b"])
    assert [b.nbytes for b in dp.plan.buffers] == ["160*b"] * 3
    offsets, arena = dp.plan.offsets_for((batch,))
    static_values = [r for op in static.body for r in op.results if id(r) in sp.offsets]
    assert offsets == [sp.offsets[id(v)] for v in static_values]
    assert arena == sp.arena_bytes == 2 * aligned(160 * batch) < sp.naive_bytes


def test_offsets_are_cached_per_dims_and_bounded():
    plan = DynamicPlan(["b", "s"], [PlannedBuffer("4*b*s", 0, 1), PlannedBuffer("8*s", 1, 2),
                                    PlannedBuffer(100, 0, 2)], cache_size=2)
    first = plan.offsets_for((2, 10))
    assert plan.offsets_for((2, 10)) is first                       # a hit returns the cached result
    assert plan.sizes_for((2, 10)) == [80, 80, 100]
    plan.offsets_for((3, 10))
    plan.offsets_for((4, 10))                                      # evicts (2, 10): the oldest
    assert plan.offsets_for((2, 10)) is not first and plan.offsets_for((2, 10)) == first


def test_plan_json_round_trip():
    plan = DynamicPlan(["b"], [PlannedBuffer("(b-1)//2+1", 0, 3), PlannedBuffer(64, 1, 1)])
    again = DynamicPlan.from_json(plan.to_json())
    assert again.symbols == ["b"] and again.buffers == plan.buffers
    assert again.offsets_for((9,)) == plan.offsets_for((9,))


def test_keep_alive_extends_a_life_to_a_later_reader():
    """``keep_alive`` (a kernel fused at emission with the one after it reads its inputs there):
    a's bytes, free for c in the plain plan, stay a's until op 2, so c gets bytes of its own."""
    func = _chain_module((4, 40)).main
    ops = [op for op in func.body if op.results]
    a, c = ops[0].results[0], ops[2].results[0]
    keep = {id(v) for v in func.outputs}
    plain = plan_memory(func, lambda v: _intermediate(v) and id(v) not in keep)
    assert plain.offsets[id(a)] == plain.offsets[id(c)]
    kept = plan_memory(func, lambda v: _intermediate(v) and id(v) not in keep, {id(a): 2})
    assert kept.offsets[id(a)] != kept.offsets[id(c)] and kept.keep_alive == {id(a): 2}
    assert kept.arena_bytes == 3 * aligned(160 * 4)
