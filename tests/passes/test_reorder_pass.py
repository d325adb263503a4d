"""reorder: a valid topological order, never a higher peak of live memory, siblings together."""
import numpy as np
import pytest

from tensorforge.ir import Module, interpret, tensor, verify
from tensorforge.ir.pass_manager import PassManager
from tensorforge.passes.graph.reorder import (_Graph, adjacent_siblings, reorder_function, simulated_peak,
                                             working_set_bound)
from tensorforge.passes.memory.plan import peak_live_bytes
from tests.filecheck_util import random_input

def _random_dag(seed: int) -> Module:
    """Random ops over tensors of mixed sizes, emitted in a random (valid) order."""
    rng = np.random.default_rng(seed)
    m = Module()
    f = m.add_function("main", [tensor((64, 64))])
    g = f.builder().graph
    values = [f.args[0]]
    for _ in range(30):
        x = values[rng.integers(len(values))]
        kind = rng.integers(5)
        if kind == 0:
            v = g.exp(g.tanh(x))
        elif kind == 1 and x.type.rank == 2 and x.type.shape[0] == 64:
            v = g.reduce_sum(x, axes=(0,), keepdims=True)          # 64x64 -> 1x64
        elif kind == 2:
            y = values[rng.integers(len(values))]
            v = g.add(x, y)                                        # (64, 64) and (1, 64) broadcast
        elif kind == 3:
            v = g.mul(x, g.constant(np.float32(0.5)))
        else:
            v = g.sigmoid(x)
        values.append(v)
    f.set_return([values[-1], values[len(values) // 2], values[-5]])
    verify(m)
    return m


@pytest.mark.parametrize("seed", range(12))
def test_memory_reorder_is_valid_keeps_numerics_and_never_raises_the_peak(seed):
    m = _random_dag(seed)
    before = m.clone()
    graph = _Graph(m.main.body)
    simulated = simulated_peak(graph, list(range(len(graph.ops))))
    assert simulated == peak_live_bytes(m.main)              # the scheduler's model is the planner's
    result = reorder_function(m.main, "memory")
    verify(m)
    assert result.peak_after <= result.peak_before == simulated
    assert result.peak_after == peak_live_bytes(m.main) >= working_set_bound(m.main)
    x = random_input(m.main.args[0].type, np.random.default_rng(seed))
    for want, got in zip(interpret(before, x), interpret(m, x)):
        np.testing.assert_array_equal(got, want)


def test_branches_started_together_are_finished_one_by_one():
    """Four 64 KiB branches opened before any is reduced: the peak drops from 4 to 1 big tensor."""
    m = Module()
    f = m.add_function("main", [tensor((128, 128))])
    g = f.builder().graph
    heads = [op(f.args[0]) for op in (g.exp, g.tanh, g.sigmoid, g.neg)]
    sums = [g.reduce_sum(h, axes=(), keepdims=False) for h in heads]
    total = sums[0]
    for s in sums[1:]:
        total = g.add(total, s)
    f.set_return([total])
    pm = PassManager.parse("reorder", verify_each=True)
    big = 128 * 128 * 4
    assert peak_live_bytes(m.main) >= 4 * big
    pm.run(m)
    (result,) = pm.passes[0].results
    assert result.changed and result.peak_after < 2 * big and result.peak_after == working_set_bound(m.main) + 4


def test_siblings_goal_groups_projections_of_one_input():
    m = Module()
    f = m.add_function("main", [tensor((4, 8))])
    g = f.builder().graph
    outs = []
    for i in range(3):
        y = g.matmul(f.args[0], g.constant(np.full((8, 8), i + 1, np.float32)))
        outs.append(g.relu(y))
    f.set_return(outs)
    assert adjacent_siblings(m.main.body) == 0
    result = reorder_function(m.main, "siblings")
    verify(m)
    assert result.siblings_after == 2 and result.siblings_before == 0
    kinds = [op.name for op in m.main.body if op.name != "graph.constant"]
    assert kinds == ["graph.matmul"] * 3 + ["graph.relu"] * 3 + ["func.return"]


def test_memory_reorder_lowers_the_peak_of_random_orders_substantially():
    results = [reorder_function(_random_dag(seed).main, "memory") for seed in range(12)]
    assert sum(r.changed for r in results) >= 9
    assert sum(r.peak_after for r in results) <= 0.75 * sum(r.peak_before for r in results)
