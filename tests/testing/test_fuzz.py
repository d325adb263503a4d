"""The differential fuzzer: a fixed-seed slice (native == interpreter == onnxruntime), and unit
tests of its value generator, graph builder, comparison and minimiser.

The slice is split by batch range so that ``pytest -n 2`` runs the parts in parallel.  A
mismatch fails the slice unless it matches an entry of ``tensorforge.testing.fuzz_known.KNOWN``
(each names the strict-xfail regression test that pins it, so fixing the bug makes that test
XPASS and forces the entry out of the list).
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto as T, helper  # noqa: E402

from tensorforge.testing import fuzz_values as fv  # noqa: E402
from tensorforge.testing.fuzz import Config, case_code, generate_batch, write_regression  # noqa: E402
from tensorforge.testing.fuzz_check import (Mismatch, case_from_model, check_cases, check_model,  # noqa: E402
                                            compare, reference, tolerances)
from tensorforge.testing.fuzz_graphs import ALL_OP_KINDS, OPS, build_case, select_generators, to_model  # noqa: E402
from tensorforge.testing.fuzz_known import DEVIATION_KINDS, KNOWN, known  # noqa: E402
from tensorforge.testing.fuzz_minimize import minimize  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")   # numpy on empty tensors

SEED = 7
BATCH = 16
BATCHES_PER_PART = 4          # 4 parts x 4 batches x 16 graphs = 256 graphs



def _known(m: Mismatch) -> bool:
    return known(m) is not None


@pytest.mark.parametrize("part", range(4))
def test_fixed_seed_slice(part):
    cfg = Config(seed=SEED, batch=BATCH)
    found, total = [], 0
    for index in range(part * BATCHES_PER_PART, (part + 1) * BATCHES_PER_PART):
        cases, refs, _ = generate_batch(cfg, index)
        total += len(cases)
        found += check_cases(cases, refs)
    assert total >= BATCH * BATCHES_PER_PART * 0.9
    open_ = [m for m in found if m.kind not in DEVIATION_KINDS and not _known(m)]
    assert not open_, "\n".join(m.line() for m in open_)


# ---- values ----------------------------------------------------------------------------------
def test_special_values_fraction_and_kinds():
    rng = np.random.default_rng(0)
    x = fv.random_float(rng, (100, 100), fraction=0.2)
    mask = fv.special_mask(x)
    assert 0.15 < mask.mean() < 0.25
    assert fv.specials_in(x) == set(fv.SPECIALS)
    assert np.float32(1e-40) != 0 and (x == np.float32(1e-40)).any()        # denormals survive
    assert (np.signbit(x) & (x == 0)).any()                                   # -0.0 is there
    none = fv.random_float(np.random.default_rng(0), (50, 50), fraction=0.0)
    assert not fv.special_mask(none).any() and np.isfinite(none).all()
    only = fv.random_float(rng, (1000,), fraction=1.0, specials=fv.parse_specials("nan,-0"))
    assert fv.specials_in(only) == {"nan", "-0"}


def test_values_are_reproducible_and_typed():
    a = fv.random_value(np.random.default_rng(3), (4, 5), np.float32, 0.3)
    b = fv.random_value(np.random.default_rng(3), (4, 5), np.float32, 0.3)
    np.testing.assert_array_equal(a, b)
    assert fv.random_value(np.random.default_rng(0), (3,), np.int64).dtype == np.int64
    assert fv.random_value(np.random.default_rng(0), (3,), np.bool_).dtype == np.bool_
    assert fv.parse_specials("none") == () and fv.parse_specials(None) == fv.DEFAULT_SPECIALS
    with pytest.raises(ValueError, match="unknown special"):
        fv.parse_specials("nan,bogus")
    cleaned = fv.without_specials(np.random.default_rng(0), a)
    assert not fv.special_mask(cleaned).any()


# ---- graphs ----------------------------------------------------------------------------------
def test_builder_covers_many_op_kinds_with_valid_models():
    assert len(ALL_OP_KINDS) >= 40
    rng = np.random.default_rng(1)
    seen, valid = set(), 0
    for i in range(60):
        case = build_case(rng, f"t{i}", opset=18 if i % 2 else 23)
        onnx.checker.check_model(to_model(case))
        try:
            reference(case)
            valid += 1
        except Exception:  # noqa: BLE001 - onnxruntime may refuse a few; the driver regenerates those
            pass
        seen |= set(case.ops)
    assert valid >= 50
    assert len(seen) >= 40
    assert select_generators(["Conv"]) == ["Conv"] and "Reduce" in select_generators(["ReduceL2"])
    with pytest.raises(ValueError):
        select_generators(["NoSuchOp"])


def test_batch_names_are_disjoint_and_deterministic():
    cfg = Config(seed=1, batch=4)
    a, _, _ = generate_batch(cfg, 0)
    b, _, _ = generate_batch(cfg, 0)
    assert [case_code(c) for c in a] == [case_code(c) for c in b]
    names = [n for c in a for n in c.types]
    assert len(names) == len(set(names))
    onnx.checker.check_model(to_model(a))


# ---- comparison ------------------------------------------------------------------------------
def test_compare_rules():
    r = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], np.float32)
    assert compare(r.copy(), r, 1e-4, 1e-5) is None
    assert compare(np.array([1.0, 0.0, np.inf, -np.inf, 0.0], np.float32), r, 1e-4, 1e-5)[0] == "nan"
    assert compare(np.array([1.0, np.nan, np.inf, np.inf, 0.0], np.float32), r, 1e-4, 1e-5)[0] == "inf"
    assert compare(np.array([1.001, np.nan, np.inf, -np.inf, 0.0], np.float32), r, 1e-4, 1e-5)[0] == "value"
    assert compare(np.array([1.00001, np.nan, np.inf, -np.inf, -0.0], np.float32), r, 1e-4, 1e-5) is None
    assert compare(np.array([1, 2]), np.array([1, 3]), 1, 1)[0] == "value"        # ints are exact
    assert compare(np.zeros(2, np.float32), np.zeros(3, np.float32), 1, 1)[0] == "shape"
    assert compare(np.zeros(2, np.float64), np.zeros(2, np.float32), 1, 1)[0] == "dtype"


def test_tolerance_grows_with_reduction_length_and_magnitude():
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Neg", ["x"], ["n"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [1000])],
                          [helper.make_tensor_value_info("s", T.FLOAT, []),
                           helper.make_tensor_value_info("n", T.FLOAT, [1000])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    case = case_from_model(m, [np.full(1000, 100.0, np.float32)])
    tol = tolerances(case, reference(case))
    assert tol["n"][1] == pytest.approx(1e-5)           # an exact op adds nothing
    assert tol["s"][1] > 1000 * 100 * 1e-7              # a sum of 1000 terms of size 100


# ---- minimiser -------------------------------------------------------------------------------
def _chain_case():
    x = np.array([[0.5, np.nan, 2.0, -1.0], [np.inf, 1e-40, 3.0, -0.0], [1.0, 1.0, 1.0, 1.0]], np.float32)
    nodes = [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Add", ["a", "y"], ["b"]),
             helper.make_node("Exp", ["b"], ["c"]), helper.make_node("Tanh", ["c"], ["d"]),
             helper.make_node("ReduceSum", ["d"], ["e"], keepdims=1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [3, 4]),
                                       helper.make_tensor_value_info("y", T.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("e", T.FLOAT, [1, 1]),
                           helper.make_tensor_value_info("d", T.FLOAT, [3, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    return case_from_model(m, [x, np.array([[1.0, -2.0, 0.25, 4.0]], np.float32)])


def test_minimizer_shrinks_to_the_node_and_values_that_matter():
    case = _chain_case()

    def fails(c):        # synthetic "mismatch": an Exp node reading a NaN
        ref = reference(c).outputs
        vals = {**c.inputs, **ref}
        return any(n.op == "Exp" and np.isnan(vals[n.inputs[0]]).any() for n in c.nodes)

    assert fails(case)
    small = minimize(case, fails)
    assert [n.op for n in small.nodes] == ["Exp"]
    assert len(small.inputs) == 1
    (x,) = small.inputs.values()
    assert x.size == 1 and np.isnan(x).all()               # shapes shrunk, only the NaN kept
    assert fails(small)


def test_minimizer_keeps_what_the_predicate_needs():
    case = _chain_case()

    def fails(c):        # needs a ReduceSum over at least 2 elements fed by Tanh
        ops = {n.op: n for n in c.nodes}
        return "ReduceSum" in ops and "Tanh" in ops and int(np.prod(c.types[ops["ReduceSum"].inputs[0]][1])) >= 2

    small = minimize(case, fails)
    assert sorted(n.op for n in small.nodes) == ["ReduceSum", "Tanh"]
    assert int(np.prod(small.types[small.nodes[-1].inputs[0]][1])) == 2


def test_regression_file_round_trip(tmp_path):
    case = _chain_case()
    path = write_regression(case, [], tmp_path, command="unit test")
    spec = importlib.util.spec_from_file_location("reg", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rebuilt = mod.build()
    onnx.checker.check_model(rebuilt)
    assert check_model(rebuilt, mod.FEEDS, targets=("interpreter",)) == []
    for a, b in zip(mod.FEEDS, case.inputs.values()):
        np.testing.assert_array_equal(a, b)


def test_generators_registered():
    assert len(OPS) >= 30


def test_known_issues_have_their_regression_tests():
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    for k in KNOWN:
        assert os.path.exists(os.path.join(root, k.test)), k
        assert "xfail(strict=True" in open(os.path.join(root, k.test)).read(), k


def test_unsupported_is_told_apart_from_bugs():
    from tensorforge.errors import ShapeError, UnsupportedOpError
    from tensorforge.testing.fuzz_check import _classify_error
    assert _classify_error(UnsupportedOpError("ONNX node 'b' (Bernoulli, opset 18): rejected")) == "unsupported"
    assert _classify_error(UnsupportedOpError("ONNX node 'c' (Conv, opset 18): odd pads")) == "unsupported-attr"
    assert _classify_error(ShapeError("bad")) == "error"
    assert _classify_error(ZeroDivisionError()) == "error"


def test_reference_hang_rejects_that_case_and_reruns_the_batch(tmp_path):
    """A worker stopped by its watchdog while onnxruntime computed a reference: the parent reads
    the worker's note, rejects that generator attempt (it cannot be checked) and queues the batch
    again; the batch then generates a replacement case in its place, the others unchanged."""
    import json
    import time
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    from tensorforge.testing.fuzz import _after_broken_pool
    cfg = Config(seed=3, batch=4, inflight=str(tmp_path), batch_timeout=1)
    cases, _, _ = generate_batch(cfg, 2)
    for note in tmp_path.iterdir():       # this process's own note of that batch (named by its pid)
        note.unlink()
    (tmp_path / "101").write_text(json.dumps([[2, None], "reference", 1, time.time() - 100]))
    (tmp_path / "102").write_text(json.dumps([[5, None], "tensorforge", -1, time.time()]))
    futs = {}
    for key in [(2, None), (5, None), (9, None)]:
        f = Future()
        f.set_exception(BrokenProcessPool("a worker died"))
        futs[f] = key
    results, pending, retried = [], [], set()
    _after_broken_pool(cfg, futs, set(), results, pending, retried)
    assert cfg.reference_hangs == {(2, 1)}
    # the hung batch again whole, the one in tensorforge code case by case, the unstarted one whole
    assert sorted(pending, key=str) == sorted([(2, None), (9, None)] + [(5, j) for j in range(4)], key=str)
    assert results == []
    again, _, rejects = generate_batch(cfg, 2)
    assert rejects["onnxruntime did not finish the reference (the worker was stopped)"] == 1
    assert len(again) == 4
    # attempts count from 1: the first graph is the one rejected, a replacement takes its place
    assert again[0].nodes != cases[0].nodes


def test_overflowing_products_next_to_infinities_are_order_dependent():
    """inf + (1e30 * -1e30): NaN when the product is rounded first, inf under an FMA; a
    mismatch there is reported as order-dependent (never open), and only there."""
    from onnx import numpy_helper

    from tensorforge.testing.fuzz_known import ORDER_KIND

    def model(b):
        node = helper.make_node("MatMul", ["a", "b"], ["y"])
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", T.FLOAT, [1, 2])],
                                  [helper.make_tensor_value_info("y", T.FLOAT, [1, 1])],
                                  [numpy_helper.from_array(b, "b")])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)

    a = np.array([[np.inf, 1e30]], np.float32)
    case = case_from_model(model(np.array([[1.0], [-1e30]], np.float32)), [a])
    found = check_cases([case], None, ("cpu", "interpreter"))
    # onnxruntime's FMA gives inf, the reference evaluator NaN: the tie-break or the order rule
    assert found and all(m.kind in DEVIATION_KINDS for m in found) and ORDER_KIND in DEVIATION_KINDS
    tame = case_from_model(model(np.array([[1.0], [-2.0]], np.float32)), [a])
    from tensorforge.testing.fuzz_check import order_dependent, reference
    assert order_dependent(case, reference(case), case.outputs[0])
    assert not order_dependent(tame, reference(tame), tame.outputs[0])


def test_pruned_reference_sees_a_deviation_upstream_of_the_output():
    """ArgMax over a column holding NaN, then Cast: onnxruntime skips the NaN (index 2),
    onnx.reference and tensorforge take the first NaN (1).  The whole graph cannot run in
    onnx.reference (a Pad with negative pads elsewhere) and the Cast alone, fed onnxruntime's
    index, agrees with onnxruntime; the output's ancestors alone settle it."""
    from tensorforge.testing.fuzz_check import pruned_reference

    nodes = [helper.make_node("ArgMax", ["x"], ["a"], axis=0, keepdims=0),
             helper.make_node("Cast", ["a"], ["y"], to=T.FLOAT),
             helper.make_node("Pad", ["z", "p"], ["q"], mode="constant")]
    from onnx import numpy_helper
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [3, 2]),
                                           helper.make_tensor_value_info("z", T.FLOAT, [4, 5])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [2]),
                               helper.make_tensor_value_info("q", T.FLOAT, [5, 5])],
                              [numpy_helper.from_array(np.array([2, 1, -1, -1], np.int64), "p")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    x = np.array([[1.3, -0.38], [-1.2, np.nan], [0.7, 0.23]], np.float32)
    case = case_from_model(model, [x, np.ones((4, 5), np.float32)])
    np.testing.assert_array_equal(pruned_reference(case, "y"), [0.0, 1.0])
    found = check_cases([case], None, ("interpreter",))
    assert all(m.kind in DEVIATION_KINDS for m in found)


def test_node_reference_settles_when_the_whole_graph_reference_differs_from_both():
    """Fuzzer seed 5151 (s5151b332c14), minimised: Conv gives [-inf, NaN] in the two channels of
    one position, ReduceMax over both is NaN (PyTorch, onnx.reference's ReduceMax, tensorforge)
    but -inf in onnxruntime.  onnx.reference's whole graph is no arbiter: its Conv turns every
    window touching the -inf into NaN, so it differs from onnxruntime and tensorforge alike.
    ReduceMax alone, fed onnxruntime's Conv output, settles it as an onnxruntime deviation."""
    from onnx import numpy_helper

    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], dilations=[2], pads=[0, 1]),
             helper.make_node("ReduceMax", ["c", "axes"], ["y"], keepdims=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [1, 4, 7]),
                                           helper.make_tensor_value_info("w", T.FLOAT, [2, 4, 2])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [6])],
                              [numpy_helper.from_array(np.array([0, 1], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    inf = np.inf
    x = np.array([[[-1e-30, -0.09647, -0.34527, -inf, 0.42057, -0.0, -0.027734],
                   [0.35069, 0.32637, 0.55194, -1e-40, -inf, 0.12702, 0.19688],
                   [0.31866, -inf, -0.025819, -0.21765, -0.45923, -0.19331, 0.091527],
                   [0.14998, 0.18182, -0.080945, 0.17968, 0.20756, -0.16640, 0.28127]]], np.float32)
    w = np.array([[[-0.26069, 1.3511], [1e-30, 2.5724], [0.04999, -1e-40], [-0.0, 1e-30]],
                  [[-2.2273, 1.4283], [-0.095263, 0.91216], [-0.0, 1e-30], [-1e-40, -0.0]]], np.float32)
    case = case_from_model(model, [x, w])
    found = check_cases([case], None, ("interpreter", "cpu"))
    assert found and all(m.kind == "ort-deviation" for m in found)
    import tensorforge
    y = tensorforge.compile(model)(x, w)
    assert np.isnan(y[1]) and y[2] == -np.inf


def _single_op_case(op, inputs, out_shape, **attrs):
    names = [f"x{i}" for i in range(len(inputs))]
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, T.FLOAT, list(np.shape(v)))
                                             for n, v in zip(names, inputs)],
                              [helper.make_tensor_value_info("y", T.FLOAT, out_shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    return case_from_model(model, [np.asarray(v, np.float32) for v in inputs])


def test_ill_conditioned_results_are_told_apart_from_wrong_ones():
    """Seed 7171: fmod(1e30, y) moves by its whole range when y moves by an ulp, and Floor of
    erf(3.79) = 1 - 1.1e-7 lies within erf's tolerance of 1: such mismatches are "ill-conditioned"
    (never open).  The same wrong numbers on a well-conditioned output stay open."""
    from tensorforge.testing.fuzz_check import Outcome, check_outcome, reference
    from tensorforge.testing.fuzz_known import ILL_KIND

    def kinds(case, got):
        ref = reference(case)
        return {m.kind for m in check_outcome(case, ref, "cpu", Outcome([np.asarray(got, np.float32)]), tiebreak=False)}

    fmod = _single_op_case("Mod", [np.float32(1e30), [-0.64, -0.75]], [2], fmod=1)
    want = reference(fmod).outputs["y"]
    assert kinds(fmod, want + np.float32(0.2)) == {ILL_KIND}
    tame = _single_op_case("Mod", [np.float32(7.5), [-0.64, -0.75]], [2], fmod=1)
    assert kinds(tame, reference(tame).outputs["y"] + np.float32(0.2)) == {"value"}

    erf_floor = [helper.make_node("Erf", ["x"], ["e"]), helper.make_node("Floor", ["e"], ["y"])]

    def floor_case(x):
        graph = helper.make_graph(erf_floor, "g", [helper.make_tensor_value_info("x", T.FLOAT, [1])],
                                  [helper.make_tensor_value_info("y", T.FLOAT, [1])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
        return case_from_model(model, [np.array([x], np.float32)])

    assert kinds(floor_case(3.7919507), [1.0]) == {ILL_KIND}      # erf rounds to just below 1
    assert kinds(floor_case(0.5), [1.0]) == {"value"}               # erf(0.5) = 0.52: floor is 0


def test_a_wrong_argmax_stays_open():
    """arg_unsettled excuses near ties and order-dependent non-finite values only."""
    from tensorforge.testing.fuzz_check import arg_unsettled, case_from_model, reference
    from tensorforge.testing.fuzz_known import ILL_KIND

    node = helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", T.INT64, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    case = case_from_model(model, [np.array([[1.0, 5.0, 3.0], [2.0, np.nextafter(np.float32(2.0), np.float32(3.0)), 0.0]], np.float32)])
    ref = reference(case)
    assert list(ref.outputs["y"]) == [1, 1]
    assert arg_unsettled(case, ref, "y", np.array([0, 1])) is None           # 1 vs 5: a real bug
    assert arg_unsettled(case, ref, "y", np.array([1, 0])) == ILL_KIND       # 2 and the next float: a tie
