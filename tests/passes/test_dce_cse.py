"""dce and cse: what goes, what stays, nested scopes, numerics and speed."""
import time

import numpy as np

from tensorforge.ir import Block, Module, Region, interpret, tensor, verify
from tensorforge.ir.builder import Builder
from tensorforge.ir.opdef import OpDef, register
from tensorforge.passes.graph.cse import eliminate_common_subexpressions
from tensorforge.passes.graph.dce import eliminate_dead_code


@register
class _Effect(OpDef):
    """Not pure (say, it prints): never removed or merged, even when its result is unused."""

    name = "tdc.effect"
    operands = ("x",)

    def infer(self, types, attrs):
        return [types[0]]

    @staticmethod
    def compute(x):
        return x.copy()


@register
class _Scope(OpDef):
    """An op with a region whose block sees the enclosing values (like a loop body)."""

    name = "tdc.scope"
    operands = ("x",)
    results = ()


@register
class _Yield(OpDef):
    name = "tdc.yield"
    operands = ("values*",)
    results = ()


def fn(*shapes):
    m = Module()
    f = m.add_function("main", [tensor(s) for s in shapes])
    return m, f, f.builder().graph


def names(block):
    return [op.name for op in block]


# ---- dce ------------------------------------------------------------------------------------
def test_dce_removes_dead_chains_in_one_walk():
    m, f, g = fn((4,), (4,))
    x, unused = f.args
    a = g.mul(x, g.constant(np.float32(2)))
    b = g.tanh(a)
    g.add(b, g.exp(a))                                  # the whole cone is dead
    keep = g.relu(x)
    f.set_return([keep])
    assert eliminate_dead_code(m) == 5                  # constant, mul, tanh, exp, add
    assert names(m.main.body) == ["graph.relu", "func.return"]
    assert len(m.main.args) == 2                        # the signature is the function's contract
    assert eliminate_dead_code(m) == 0
    v = np.array([-1, 0, 1, 2], np.float32)
    np.testing.assert_array_equal(interpret(m, v, v)[0], np.maximum(v, 0))


def test_dce_keeps_impure_ops_and_what_they_use():
    m, f, g = fn((3,))
    b = f.builder()
    t = g.tanh(f.args[0])
    b.create("tdc.effect", [t])                          # unused, but has an effect
    g.exp(f.args[0])                                    # dead
    f.set_return([f.args[0]])
    assert eliminate_dead_code(m) == 1
    assert names(m.main.body) == ["graph.tanh", "tdc.effect", "func.return"]


def _scoped_module():
    """main(x): outer = neg(x); scope { inner = neg(x) [dup of outer]; dead = exp(outer); yield inner }."""
    m, f, g = fn((3,))
    x = f.args[0]
    outer = g.neg(x)
    only_used_inside = g.sqrt(x)
    body = Block()
    scope = f.builder().create("tdc.scope", [x], regions=[Region([body])])
    bg = Builder.at_end(body).graph
    inner = bg.neg(x)
    bg.exp(only_used_inside)                            # dead: and with it the sqrt outside
    Builder.at_end(body).create("tdc.yield", [inner, outer])
    after = g.neg(x)                                    # after the region: merges with outer
    f.set_return([outer, after])
    return m, scope, body


def test_dce_cleans_nested_regions_before_their_enclosing_block():
    m, scope, body = _scoped_module()
    assert eliminate_dead_code(m) == 2                  # exp inside, then sqrt outside
    assert names(body) == ["graph.neg", "tdc.yield"]
    assert names(m.main.body) == ["graph.neg", "tdc.scope", "graph.neg", "func.return"]


# ---- cse ------------------------------------------------------------------------------------
def test_cse_merges_duplicates_commutative_pairs_and_chains():
    m, f, g = fn((4,), (4,))
    x, y = f.args
    a1, a2 = g.add(x, y), g.add(y, x)                   # commutative: same
    s1, s2 = g.sub(x, y), g.sub(y, x)                   # not commutative: different
    e1, e2 = g.exp(a1), g.exp(a2)                       # equal once a2 became a1
    f.set_return([e1, e2, s1, s2])
    v = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    want = interpret(m, v[0], v[1])
    assert eliminate_common_subexpressions(m) == 2
    verify(m)
    assert names(m.main.body).count("graph.add") == 1 and names(m.main.body).count("graph.exp") == 1
    assert names(m.main.body).count("graph.sub") == 2
    ret = m.main.return_op
    assert ret.operands[0] is ret.operands[1]
    for w, r in zip(want, interpret(m, v[0], v[1])):
        np.testing.assert_array_equal(r, w)


def test_cse_merges_constants_by_content_only():
    m, f, g = fn()
    w = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)
    c = [g.constant(w), g.constant(w.copy()), g.constant(w.astype(np.float64)),
         g.constant(np.float32(0.0)), g.constant(np.float32(-0.0)), g.constant(np.float32(0.0))]
    f.set_return(c)
    assert eliminate_common_subexpressions(m) == 2
    outs = m.main.return_op.operands
    assert outs[0] is outs[1] and outs[2] is not outs[0]         # same data, other dtype: kept
    assert outs[3] is outs[5] and outs[4] is not outs[3]         # -0.0 is not 0.0
    np.testing.assert_array_equal(interpret(m)[0], w)


def test_cse_constants_that_agree_on_the_sample_are_compared_in_full():
    m, f, g = fn()
    a = np.zeros(1000, np.float32)
    b = a.copy()
    b[1] = 5.0                                   # not one of the 16 sampled elements
    n = np.full(3, np.nan, np.float32)
    f.set_return([g.constant(a), g.constant(b), g.constant(a.copy()), g.constant(n), g.constant(n.copy())])
    assert eliminate_common_subexpressions(m) == 2
    outs = m.main.return_op.operands
    assert outs[0] is outs[2] and outs[1] is not outs[0] and outs[3] is outs[4]
    np.testing.assert_array_equal(interpret(m)[1], b)


def test_cse_respects_attributes_result_types_and_effects():
    m, f, g = fn((2, 3))
    x = f.args[0]
    b = f.builder()
    t1, t2 = g.transpose(x, perm=(1, 0)), g.transpose(x, perm=(1, 0))
    r1, r2 = g.reshape(x, shape=(6,)), g.reshape(x, shape=(3, 2))
    c1, c2 = g.cast(x, dtype="f16"), g.cast(x, dtype="f64")
    fx1, fx2 = b.create("tdc.effect", [x]).result, b.create("tdc.effect", [x]).result
    f.set_return([t1, t2, r1, r2, c1, c2, fx1, fx2])
    assert eliminate_common_subexpressions(m) == 1
    assert names(m.main.body).count("graph.transpose") == 1
    assert names(m.main.body).count("tdc.effect") == 2


def test_cse_scopes_outer_values_reach_inner_regions_only():
    m, scope, body = _scoped_module()
    assert eliminate_common_subexpressions(m) == 2
    verify(m)
    outer = m.main.body.first
    assert names(body) == ["graph.exp", "tdc.yield"]            # inner neg -> the outer one
    assert body.last.operands[0] is outer.result
    ret = m.main.return_op
    assert ret.operands[0] is ret.operands[1] is outer.result


def test_cse_does_not_merge_across_functions():
    m = Module()
    for name in ("a", "b"):
        f = m.add_function(name, [])
        f.set_return([f.builder().graph.constant(np.ones(3, np.float32))])
    assert eliminate_common_subexpressions(m) == 0


def test_cse_and_dce_scale_linearly():
    m, f, g = fn((8,))
    x = f.args[0]
    vals = []
    for i in range(5000):                       # 5 ops per step; 150 distinct in all
        a = g.mul(x, g.constant(np.float32(i % 50)))
        b = g.mul(g.constant(np.float32(i % 50)), x)
        vals.append(g.add(a, b))
    f.set_return([vals[-1]])
    start = time.perf_counter()
    merged = eliminate_common_subexpressions(m)
    erased = eliminate_dead_code(m)
    elapsed = time.perf_counter() - start
    assert merged == 5000 * 5 - 3 * 50
    assert erased == 3 * 50 - 3
    assert names(m.main.body) == ["graph.constant", "graph.mul", "graph.add", "func.return"]
    assert elapsed < 10.0, f"cse+dce of 25k ops took {elapsed:.2f}s"   # ~0.5 s alone; slack for loaded CI
