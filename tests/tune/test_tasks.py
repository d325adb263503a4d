"""Tasks: identical layers share one task, keys are stable, and a task's one-kernel function
computes what its kernel computes."""
import numpy as np

from tensorforge.dialects.structured.interpret import run_kernel
from tensorforge.ir.structure import structurally_equal
from tensorforge.tune.tasks import extract_tasks, lowered_function, tasks_of_function, workload_key

from tests.tune.tune_util import stack_model


def test_identical_layers_share_one_task():
    model, inputs = stack_model(rows=64, width=64, depth=3)
    tasks = extract_tasks(model, inputs)
    gemms = [t for t in tasks if t.kind == "gemm"]
    assert len(gemms) == 1, [str(t) for t in tasks]
    g = gemms[0]
    assert g.weight == 3
    assert g.problem["M"] == 64 and g.problem["N"] == 64 and g.problem["K"] == 64
    assert g.flops == 2.0 * 64 * 64 * 64
    assert g.bytes >= 4 * (64 * 64 * 3)            # x, W and y at least
    loops = [t for t in tasks if t.kind == "loop"]
    assert loops and all(t.weight == 1 for t in loops)
    assert len({t.key for t in tasks}) == len(tasks)
    assert g.workload().key == g.key and g.workload().description["kind"] == "gemm"


def test_keys_are_stable_and_shape_dependent():
    model, inputs = stack_model(rows=64, width=64)
    keys_a = sorted(t.key for t in extract_tasks(model, inputs))
    keys_b = sorted(t.key for t in extract_tasks(model, inputs))
    assert keys_a == keys_b
    other = sorted(t.key for t in extract_tasks(*stack_model(rows=32, width=64)))
    assert not set(keys_a) & set(other)          # every kernel's shapes changed with the rows


def test_single_kernel_function_matches_the_kernel():
    model, inputs = stack_model(rows=8, width=16, depth=2)
    func = lowered_function(model, inputs)
    kernels = [op for op in func.body if op.name == "structured.kernel"]
    tasks = tasks_of_function(func, None)
    by_key: dict = {}
    for k in kernels:                               # a task is the first kernel of its key
        by_key.setdefault(workload_key(k), k)
    rng = np.random.default_rng(1)
    for t in tasks:
        kernel = by_key[t.key]
        assert structurally_equal(t.kernel, kernel)
        args = [rng.standard_normal(a.type.shape).astype(np.float32) for a in t.func.args]
        feed = dict(zip((id(a) for a in t.func.args), args))
        values = [feed[id(v)] if id(v) in feed else v.op.attributes["value"].array for v in t.kernel.operands]
        originals = [v.op.attributes["value"].array if v.op is not None and v.op.name == "graph.constant"
                     else None for v in kernel.operands]
        for mine, orig in zip(values, originals):
            if orig is not None:
                np.testing.assert_array_equal(mine, orig)      # the task carries the model's weights
        got = run_kernel(t.kernel, values)
        want = run_kernel(kernel, values)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        assert workload_key(t.kernel) == t.key          # the copy keys like the original
