"""graph.if / graph.loop / graph.scan: verifier, text round trip, interpreter, the constant-condition
fold and native execution (segments and bodies compiled, docs/control_flow.md)."""
from __future__ import annotations

import numpy as np
import pytest

import tensorforge
from tensorforge.errors import VerificationError
from tensorforge.ir.builder import Builder, make_op
from tensorforge.ir.builtin import ModuleOp
from tensorforge.ir.core import Block, Region
from tensorforge.ir.interpreter import interpret
from tensorforge.ir.parser import parse_module
from tensorforge.ir.printer import print_module
from tensorforge.ir.types import DType, TensorType
from tensorforge.ir.verifier import verify

F4 = TensorType((4,), DType.f32)


def _if_loop_module(if_types=(F4,), then_shape=None) -> ModuleOp:
    """main(c, x): y = if c { x + x } else { -x };  loop 3 times: s += x (scan: every s)."""
    m = ModuleOp.create()
    f = m.add_function("main", [TensorType((), DType.bool), F4], ["c", "x"])
    b = f.builder()
    then_b, else_b = Block(), Block()
    tb, eb = Builder(then_b), Builder(else_b)
    tb.create("graph.yield", [tb.graph.add(f.args[1], f.args[1])])
    eb.create("graph.yield", [eb.graph.neg(f.args[1])])
    y = b.insert(make_op("graph.if", [f.args[0]], {}, list(if_types), [Region([then_b]), Region([else_b])])).results[0]
    body = Block([TensorType((), DType.i64), TensorType((), DType.bool), F4])
    lb = Builder(body)
    s = lb.graph.add(body.args[2], f.args[1])
    lb.create("graph.yield", [body.args[1], s, s])
    trips = b.graph.constant(np.array(3, np.int64))
    true = b.graph.constant(np.array(True))
    loop = b.insert(make_op("graph.loop", [trips, true, y], {"num_scan": 1},
                            [F4, TensorType(("n_it", 4), DType.f32)], [Region([body])]))
    f.set_return(list(loop.results))
    return m


def _expected(c: bool, x: np.ndarray):
    y = x + x if c else -x
    scans = np.stack([y + x * (i + 1) for i in range(3)])
    return scans[-1], scans


def test_print_parse_round_trip_and_interpret():
    m = _if_loop_module()
    verify(m)
    text = print_module(m)
    assert '"graph.if"' in text and '"graph.loop"' in text and '"graph.yield"' in text
    m2 = parse_module(text)
    verify(m2)
    assert print_module(m2) == text
    x = np.arange(4, dtype=np.float32)
    for c in (True, False):
        got = interpret(m2, np.array(c), x)
        for g, w in zip(got, _expected(c, x)):
            np.testing.assert_allclose(g, w)


def test_verifier_rejects_a_branch_of_the_wrong_type():
    m = _if_loop_module(if_types=(TensorType((5,), DType.f32),))
    with pytest.raises(VerificationError, match="does not fit"):
        verify(m)


def test_if_result_with_a_symbolic_dim_accepts_both_branches():
    m = _if_loop_module(if_types=(TensorType(("k",), DType.f32),))
    # the loop's carried type must now be the symbolic one too: the verifier says so
    with pytest.raises(VerificationError):
        verify(m)


def test_scan_interpreter_reverse_and_axes():
    m = ModuleOp.create()
    f = m.add_function("main", [TensorType((2,), DType.f32), TensorType((2, 3), DType.f32)], ["s0", "xs"])
    body = Block([TensorType((2,), DType.f32), TensorType((2,), DType.f32)])
    bb = Builder(body)
    s = bb.graph.add(body.args[0], body.args[1])
    bb.create("graph.yield", [s, s])
    op = f.builder().insert(make_op(
        "graph.scan", list(f.args), {"num_scan_inputs": 1, "scan_input_axes": (1,), "scan_input_directions": (1,),
                                     "scan_output_axes": (1,), "scan_output_directions": (0,)},
        [TensorType((2,), DType.f32), TensorType((2, 3), DType.f32)], [Region([body])]))
    f.set_return(list(op.results))
    verify(m)
    s0 = np.array([1, 2], np.float32)
    xs = np.arange(6, dtype=np.float32).reshape(2, 3)
    final, ys = interpret(parse_module(print_module(m)), s0, xs)
    acc, want = s0.copy(), []
    for t in (2, 1, 0):
        acc = acc + xs[:, t]
        want.append(acc.copy())
    np.testing.assert_allclose(final, acc)
    np.testing.assert_allclose(ys, np.stack(want, axis=1))


def test_fold_control_flow_inlines_a_constant_condition():
    from tensorforge.passes.graph.fold_control_flow import fold_control_flow
    m = ModuleOp.create()
    f = m.add_function("main", [F4], ["x"])
    b = f.builder()
    c = b.graph.constant(np.array(False))
    then_b, else_b = Block(), Block()
    Builder(then_b).create("graph.yield", [f.args[0]])
    eb = Builder(else_b)
    eb.create("graph.yield", [eb.graph.neg(f.args[0])])
    op = b.insert(make_op("graph.if", [c], {}, [F4], [Region([then_b]), Region([else_b])]))
    f.set_return([op.results[0]])
    x = np.arange(4, dtype=np.float32)
    before = interpret(m, x)
    assert fold_control_flow(m) == 1
    verify(m)
    assert not any(o.name == "graph.if" for o in m.walk())
    np.testing.assert_allclose(interpret(m, x)[0], before[0])


def test_native_runs_segments_and_bodies_compiled():
    m = _if_loop_module()
    cm = tensorforge.compile(m, target="cpu")
    from tensorforge.runtime.control_flow import ControlFlowModel, _Control, _Segment
    assert isinstance(cm.native, ControlFlowModel)
    controls = [s for s in cm.native.program.steps if isinstance(s, _Control)]
    assert [c.op.name for c in controls] == ["graph.if", "graph.loop"]
    body_segments = [s for c in controls for p in c.bodies for s in p.steps if isinstance(s, _Segment)]
    assert body_segments and all(s._cache for s in body_segments)      # compiled at compile time
    x = np.arange(4, dtype=np.float32) - 1.5
    for c in (True, False):
        got = cm(np.array(c), x)
        for g, w in zip(got, _expected(c, x)):
            np.testing.assert_allclose(g, w, rtol=1e-6)
