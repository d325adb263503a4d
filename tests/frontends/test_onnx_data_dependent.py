"""Ops whose output size depends on values (NonZero, Compress, Unique, NonMaxSuppression).

Each result carries a fresh symbol that only running the op binds; the reference interpreter
returns arrays of the true size, and ops downstream of them run over that size.  Natively, each op
is a library kernel that writes its count into the dims array; buffers are sized at the count's
upper bound and the returned arrays have the true shape.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.backend.test.loader import load_model_tests  # noqa: E402

import tensorforge  # noqa: E402
from tensorforge.frontends.onnx_backend import check_node_case  # noqa: E402

KINDS = ("test_nonzero", "test_compress", "test_unique", "test_nonmaxsuppression")
CASES = sorted((c for c in load_model_tests(kind="node")
                if c.name.startswith(KINDS) and "expanded" not in c.name), key=lambda c: c.name)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case_on_the_interpreter(case):
    status, detail = check_node_case(case, target="interpreter")
    assert status == "pass", detail


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case_native(case):
    """The same cases through native code: library kernels compute the counts at run time."""
    status, detail = check_node_case(case, target="cpu", threads=1)
    assert status == "pass", detail


def test_every_kind_has_cases():
    assert {k for k in KINDS if any(c.name.startswith(k) for c in CASES)} == set(KINDS)
    assert len(CASES) >= 20


def _model(nodes, inputs, outputs):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_nonzero_feeds_downstream_ops_with_its_true_size():
    """gather(x.flatten(), nonzero(x > 0)[0]) * 2: the selected positive values doubled, length
    depending on the data."""
    cm = tensorforge.compile(_nonzero_gather_add(), target="interpreter")
    for x in NONZERO_INPUTS[:3]:
        np.testing.assert_array_equal(np.asarray(cm(x)), (x[x > 0] * 2).reshape(1, -1))


def test_unique_first_occurrence_order_and_counts():
    nodes = [helper.make_node("Unique", ["x"], ["y", "i", "inv", "c"], sorted=0)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [7])],
                   [helper.make_tensor_value_info(n, t, None) for n, t in
                    (("y", TensorProto.FLOAT), ("i", TensorProto.INT64), ("inv", TensorProto.INT64),
                     ("c", TensorProto.INT64))])
    cm = tensorforge.compile(model, target="interpreter")
    y, i, inv, c = cm(np.array([3, 1, 3, np.nan, 1, 2, np.nan], np.float32))
    # NaNs are one value, as in ONNX's reference (np.unique with equal_nan)
    np.testing.assert_array_equal(y, np.array([3, 1, np.nan, 2], np.float32))
    assert i.tolist() == [0, 1, 3, 5] and c.tolist() == [2, 2, 2, 1]
    assert inv.tolist() == [0, 1, 0, 2, 1, 3, 2]


def _nonzero_gather_add(dim=6):
    """gather(x, nonzero(x > 0)) * 2 as in the test above; ``dim`` an int or a dim_param name."""
    nodes = [helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", TensorProto.FLOAT, [], [0.0])),
             helper.make_node("Greater", ["x", "zero"], ["pos"]),
             helper.make_node("NonZero", ["pos"], ["nz"]),
             helper.make_node("Flatten", ["nz"], ["flat"], axis=0),
             helper.make_node("Gather", ["x", "flat"], ["g"], axis=0),
             helper.make_node("Add", ["g", "g"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])


NONZERO_INPUTS = (np.array([1, -2, 3, 0, 5, -1], np.float32),      # some
                  np.array([-1, -2, -3, 0, 0, -0.0], np.float32),   # none
                  np.array([4, 4, 4, 4, 4, 4], np.float32),         # all
                  np.array([np.nan, 2, -1, 7, 0, 1], np.float32))   # NaN > 0 is false


@pytest.fixture(scope="module")
def native_nonzero():
    return tensorforge.compile(_nonzero_gather_add(), threads=1)


def test_native_nonzero_feeds_gather_add(native_nonzero):
    cm = native_nonzero
    assert cm.native is not None and cm.native.is_dynamic
    assert cm.symbols.get("nonzero0").bound == 6 and cm.symbols.get("nonzero0").lo == 0
    assert "nonzero0 in 0..6" in cm.describe()
    for x in NONZERO_INPUTS + NONZERO_INPUTS[::-1]:          # counts change from call to call
        y = cm(x)
        want = (x[x > 0] * 2).reshape(1, -1)
        assert y.shape == want.shape
        np.testing.assert_array_equal(y, want)
    # the C: the kernel writes the count into tf_dims, the consumer reads it on entry
    assert "tf_dims_out[0] = count" in cm.source


def test_native_nonzero_over_a_symbolic_input():
    """The count's bound is a dim of the inputs (n): buffers follow both the input size and the count."""
    from tensorforge.frontends.onnx import import_onnx
    from tensorforge.ir.symbolic import SymbolRange, SymbolTable, set_symbol_table
    module = import_onnx(_nonzero_gather_add("n"))
    set_symbol_table(module.main, SymbolTable([SymbolRange("n", 1, 32, hint=8)]))
    cm = tensorforge.compile(module, threads=1)
    assert cm.symbols.get("nonzero0").bound == "n"
    rng = np.random.default_rng(0)
    for n in (1, 32, 7, 32, 3):
        for x in (rng.standard_normal(n).astype(np.float32), np.ones(n, np.float32), -np.ones(n, np.float32)):
            np.testing.assert_array_equal(cm(x), (x[x > 0] * 2).reshape(1, -1))


def test_native_data_dependent_outputs_refuse_out(native_nonzero):
    x = NONZERO_INPUTS[0]
    with pytest.raises(tensorforge.TensorforgeError, match="depends on the input values"):
        native_nonzero.run(x, out=[np.empty((1, 6), np.float32)])


def test_native_data_dependent_save_load(native_nonzero, tmp_path):
    path = tmp_path / "nonzero.tfm"
    native_nonzero.save(path)
    loaded = tensorforge.load(path)
    assert loaded.symbols.get("nonzero0").bound == 6
    assert loaded.describe() == native_nonzero.describe()
    for x in NONZERO_INPUTS:
        np.testing.assert_array_equal(loaded(x), (x[x > 0] * 2).reshape(1, -1))


def test_native_unique_first_occurrence_order_and_counts():
    nodes = [helper.make_node("Unique", ["x"], ["y", "i", "inv", "c"], sorted=0)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [7])],
                   [helper.make_tensor_value_info(n, t, None) for n, t in
                    (("y", TensorProto.FLOAT), ("i", TensorProto.INT64), ("inv", TensorProto.INT64),
                     ("c", TensorProto.INT64))])
    cm = tensorforge.compile(model, threads=1)
    y, i, inv, c = cm(np.array([3, 1, 3, np.nan, 1, 2, np.nan], np.float32))
    np.testing.assert_array_equal(y, np.array([3, 1, np.nan, 2], np.float32))
    assert i.tolist() == [0, 1, 3, 5] and c.tolist() == [2, 2, 2, 1]
    assert inv.tolist() == [0, 1, 0, 2, 1, 3, 2]
