"""simplify: every rule fires where it should and only there, and keeps the interpreter's results."""
from pathlib import Path

import numpy as np
import pytest

from tensorforge.ir import Module, interpret, tensor, verify
from tensorforge.ir.parser import parse_module
from tensorforge.passes.graph.simplify import SIMPLIFY_RULES, simplify
from tests.filecheck_util import assert_filecheck, assert_same_numerics, random_input

FILECHECK_DIR = Path(__file__).parent / "filecheck"


def _rule_cases():
    """(rule name, 'fires' | 'stays', function name, module holding just that function)."""
    cases = []
    names = {r.name.replace("-", "_"): r.name for r in SIMPLIFY_RULES}
    for path in sorted(FILECHECK_DIR.glob("*.mlir")):
        text = path.read_text()
        if "-p simplify" not in text:
            continue
        for f in parse_module(text, source=str(path)).functions:
            for prefix, rule_name in names.items():
                for kind in ("fires", "stays"):
                    if f.sym_name.startswith(f"{prefix}_{kind}"):
                        m = Module()
                        m.body.append(f.clone())
                        cases.append((rule_name, kind, f.sym_name, m))
    return cases


CASES = _rule_cases()


@pytest.mark.parametrize("rule_name", [r.name for r in SIMPLIFY_RULES])
def test_every_rule_has_a_firing_and_a_non_firing_ir_test(rule_name):
    kinds = {kind for name, kind, _, _ in CASES if name == rule_name}
    assert kinds == {"fires", "stays"}, f"rule '{rule_name}' lacks IR tests: has {sorted(kinds)}"


@pytest.mark.parametrize("rule_name,kind,fname,module", CASES, ids=[c[2] for c in CASES])
def test_rule_fires_exactly_where_its_test_says(rule_name, kind, fname, module):
    before = module.clone()
    stats = simplify(module)
    verify(module)
    if kind == "fires":
        assert stats.fired[rule_name] >= 1, f"'{rule_name}' did not fire in {fname}: {stats}"
    else:
        assert stats.fired[rule_name] == 0, f"'{rule_name}' fired in {fname}: {stats}"
    assert assert_same_numerics(before, module) == 1


def test_there_are_at_least_twelve_rules_with_unique_names():
    names = [r.name for r in SIMPLIFY_RULES]
    assert len(names) >= 12 and len(set(names)) == len(names)


# ---- random expression graphs ---------------------------------------------------------------
SHAPES = [(2, 3), (3,), (1, 3), (2, 1)]


def _random_graph(seed):
    """A random DAG of ops that the rules target, over two 2x3 inputs, with constants 0 and 1."""
    rng = np.random.default_rng(seed)
    m = Module()
    f = m.add_function("main", [tensor((2, 3)), tensor((2, 3))])
    g = f.builder().graph
    values = list(f.args)

    def pick():
        v = values[rng.integers(len(values))]
        return v if v.type.shape == (2, 3) else g.reshape(v, shape=(2, 3))

    def const(values=(0.0, 1.0, 2.0)):
        shape = SHAPES[rng.integers(len(SHAPES))]
        return g.constant(np.full(shape, rng.choice(values), np.float32))

    for _ in range(25):
        kind = rng.integers(9)
        x = pick()
        if kind == 0:
            v = g.add(x, const()) if rng.integers(2) else g.add(const(), x)
        elif kind == 1:
            v = g.mul(x, const()) if rng.integers(2) else g.mul(const(), x)
        elif kind == 2:
            v = g.sub(x, g.neg(pick())) if rng.integers(2) else g.neg(g.neg(x))
        elif kind == 3:
            v = g.mul(x, g.reciprocal(pick()))
        elif kind == 4:
            v = g.transpose(g.transpose(x, perm=(1, 0)), perm=(1, 0))
        elif kind == 5:
            v = g.reshape(g.reshape(x, shape=(6,)), shape=(3, 2) if rng.integers(2) else (2, 3))
        elif kind == 6:
            v = g.squeeze(g.unsqueeze(x, axes=(0,)), axes=(0,))
        elif kind == 7:
            v = g.cast(g.cast(x, dtype="f64"), dtype="f32")
        else:
            v = g.identity(g.div(x, const((1.0, 2.0))))
        values.append(v)
    f.set_return([values[-1], values[-2], values[len(values) // 2]])
    return m


@pytest.mark.parametrize("seed", range(25))
def test_simplify_keeps_numerics_on_random_graphs(seed):
    m = _random_graph(seed)
    before = m.clone()
    count = sum(1 for _ in m.walk())
    stats = simplify(m)
    verify(m)
    assert stats.converged and stats.changed
    assert sum(1 for _ in m.walk()) < count
    rng = np.random.default_rng(seed)
    inputs = [random_input(a.type, rng) for a in m.main.args]
    want = interpret(before, *inputs)
    got = interpret(m, *inputs)
    for w, r in zip(want, got):
        assert w.shape == r.shape
        np.testing.assert_allclose(r, w, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_simplify_is_idempotent():
    m = _random_graph(3)
    simplify(m)
    assert not simplify(m).changed


def test_simplify_without_folding_keeps_constant_arithmetic():
    m = Module()
    f = m.add_function("main", [])
    g = f.builder().graph
    f.set_return([g.add(g.constant(np.float32(1)), g.constant(np.float32(2)))])
    assert not simplify(m, fold=False).changed
    assert simplify(m).folded["graph.add"] == 1
    assert float(interpret(m)[0]) == 3.0


def test_simplify_output_text():
    m = Module()
    f = m.add_function("main", [tensor((4, 5))])
    g = f.builder().graph
    t = g.transpose(g.transpose(f.args[0], perm=(1, 0)), perm=(1, 0))
    f.set_return([g.mul(g.neg(g.neg(t)), g.reciprocal(f.args[0]))])
    simplify(m)
    assert_filecheck(str(m), """
    // CHECK:      ^bb0(%[[X:arg0]]: tensor<4x5xf32>):
    // CHECK-NEXT:   %[[R:[0-9]+]] = "graph.reciprocal"(%[[X]])
    // CHECK-NEXT:   %[[D:[0-9]+]] = "graph.mul"(%[[X]], %[[R]])
    // CHECK-NEXT:   "func.return"(%[[D]])
    """)
