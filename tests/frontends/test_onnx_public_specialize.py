"""``tensorforge.compile(model)`` on ONNX models that specialise per call (``tensorforge/specialize.py``).

Shape-like operands given as model inputs (Reshape's shape, Slice's starts/ends, TopK's K) and
symbolic input dims with no sizes given: the public ``CompiledModel`` compiles one specialisation
per distinct value / shape, keeps an LRU cache and warns when it evicts.  Results are compared
with onnxruntime on the same model.  Native (the default target) unless the test says otherwise.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import tensorforge  # noqa: E402
from tensorforge.errors import TensorforgeError, TensorforgeWarning, UnsupportedOpError  # noqa: E402
from tensorforge.frontends.onnx import UnboundDimError  # noqa: E402
from tensorforge.specialize import SpecializingModel  # noqa: E402


def _model(nodes, inputs, outputs, opset=18, inits=()):
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                              initializer=[numpy_helper.from_array(a, n) for n, a in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _reference(m, *arrays):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), arrays)})


def _check(cm, m, *arrays):
    outs = cm(*arrays)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    refs = _reference(m, *arrays)
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        assert o.dtype == r.dtype and o.shape == r.shape
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-6)


RESHAPE = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                 [("x", T.FLOAT, [2, 3, 4]), ("shape", T.INT64, [2])], [("y", T.FLOAT, None)])
X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def test_reshape_with_shape_input_specialises_per_value():
    cm = tensorforge.compile(RESHAPE)
    assert isinstance(cm, SpecializingModel) and isinstance(cm, tensorforge.CompiledModel)
    assert [t.shape for t in cm.input_types] == [(2, 3, 4), (2,)]
    _check(cm, RESHAPE, X, np.array([6, 4], np.int64))
    _check(cm, RESHAPE, X, np.array([4, -1], np.int64))
    _check(cm, RESHAPE, X, np.array([6, 4], np.int64))          # seen: reused, not compiled again
    assert len(cm.specializations) == 2
    assert cm.output_types[0].shape == (6, 4)                     # the latest call's specialisation
    assert cm.run(X, np.array([24, 1], np.int64))[0].shape == (24, 1)
    assert "shape = [24, 1]" in cm.specializations[-1][0]


def test_shape_input_specialises_on_its_value_only_and_dims_stay_symbolic():
    """A shape operand that is a model input is a true run-time value: the model specialises on
    that input's value; the data input keeps its dim_param, so one specialisation runs any N."""
    m = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
               [("x", T.FLOAT, ["N", 12]), ("shape", T.INT64, [2])], [("y", T.FLOAT, None)])
    cm = tensorforge.compile(m, target="interpreter")
    assert cm.guard.by_value == ("shape",) and not cm.guard.by_shape
    target = np.array([-1, 4], np.int64)
    for n in (1, 5, 2):
        _check(cm, m, np.random.default_rng(n).standard_normal((n, 12)).astype(np.float32), target)
    ((key, one),) = cm.specializations
    assert key == "shape = [-1, 4]" and one.input_specs[0].shape == ("N", 12)
    assert one.output_specs[0].shape == ("3*N", 4)
    assert "x: f32[N, 12]  N in 1..inf" in cm.describe() and "specialises on the values of 'shape'" in cm.describe()


def test_slice_with_starts_and_ends_inputs():
    m = _model([helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"])],
               [("x", T.FLOAT, [5, 6]), ("starts", T.INT64, [2]), ("ends", T.INT64, [2]), ("axes", T.INT64, [2])],
               [("y", T.FLOAT, None)])
    cm = tensorforge.compile(m)
    x = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    _check(cm, m, x, np.array([1, 0], np.int64), np.array([4, 6], np.int64), np.array([0, 1], np.int64))
    _check(cm, m, x, np.array([-2, 1], np.int64), np.array([100, -1], np.int64), np.array([0, 1], np.int64))
    assert cm.guard.by_value == ("starts", "ends", "axes")


def test_topk_with_k_input_on_both_targets():
    m = _model([helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1)],
               [("x", T.FLOAT, [3, 7]), ("k", T.INT64, [1])],
               [("values", T.FLOAT, None), ("indices", T.INT64, None)])
    x = np.random.default_rng(1).permutation(21).reshape(3, 7).astype(np.float32)
    for target in ("cpu", "interpreter"):
        cm = tensorforge.compile(m, target=target)
        _check(cm, m, x, np.array([3], np.int64))
        _check(cm, m, x, np.array([1], np.int64))


def test_symbolic_dims_without_example_inputs_compile_one_dynamic_model(tmp_path):
    """dim_param dims, no shapes= and no example inputs: one native model for every shape, no
    specialisation, no C compile per call; it saves like any model."""
    from tensorforge.codegen.c.toolchain import stats
    w = np.random.default_rng(2).standard_normal((8, 4)).astype(np.float32)
    m = _model([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
               [("x", T.FLOAT, ["batch", "seq", 8])], [("y", T.FLOAT, ["batch", "seq", 4])], inits=[("w", w)])
    cm = tensorforge.compile(m)
    assert not isinstance(cm, SpecializingModel)
    assert cm.input_specs[0].shape == ("batch", "seq", 8)
    rng = np.random.default_rng(3)
    runs = stats.compiler_runs
    for shape in ((2, 3, 8), (5, 1, 8), (2, 3, 8)):
        _check(cm, m, rng.standard_normal(shape).astype(np.float32))
    assert stats.compiler_runs == runs
    with pytest.raises(TensorforgeError, match="rank 2"):
        cm(np.zeros((2, 8), np.float32))
    cm.save(tmp_path / "m.tfm")
    assert tensorforge.load(tmp_path / "m.tfm").input_specs[0].shape == ("batch", "seq", 8)


def test_partly_bound_dims_leave_the_rest_symbolic():
    """A size bound with shapes= is static; the dims nobody bound stay symbolic."""
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, ["B", "S"])], [("y", T.FLOAT, None)])
    cm = tensorforge.compile(m, shapes={"B": 2})
    assert cm.input_specs[0].shape == (2, "S")
    for s in (1, 6):
        _check(cm, m, np.random.default_rng(s).standard_normal((2, s)).astype(np.float32))
    with pytest.raises(TensorforgeError, match="input 'x'"):
        cm(np.zeros((3, 4), np.float32))


EYE = _model([helper.make_node("EyeLike", ["x"], ["e"]), helper.make_node("Add", ["x", "e"], ["y"])],
             [("x", T.FLOAT, ["rows", 3])], [("y", T.FLOAT, None)])


def test_an_import_that_needs_sizes_falls_back_to_one_specialisation_per_shape():
    """EyeLike needs static dims: the symbolic import fails, and the model compiles per input
    shape instead, saying so in one line."""
    with pytest.warns(TensorforgeWarning, match=r"one specialisation per input shape .* EyeLike needs static"):
        cm = tensorforge.compile(EYE, target="interpreter")
    assert isinstance(cm, SpecializingModel) and cm.guard.by_shape
    for rows in (2, 4):
        _check(cm, EYE, np.random.default_rng(rows).standard_normal((rows, 3)).astype(np.float32))
    assert [d for d, _ in cm.specializations] == ["x: shape [2, 3]", "x: shape [4, 3]"]
    with pytest.raises(TensorforgeError, match="cannot save .* shapes of 'x'"):
        cm.save("never.tfm")


def test_eviction_warns_with_the_evicted_key():
    cm = tensorforge.compile(RESHAPE, target="interpreter", max_specializations=2)
    cm(X, np.array([6, 4], np.int64))
    cm(X, np.array([4, 6], np.int64))
    with warnings.catch_warnings():
        warnings.simplefilter("error")                            # a hit warns about nothing
        cm(X, np.array([6, 4], np.int64))
    evicted = r"evicted the specialisation for shape = \[4, 6\].*max_specializations=2"
    with pytest.warns(TensorforgeWarning, match=evicted):
        cm(X, np.array([12, 2], np.int64))
    assert [d for d, _ in cm.specializations] == ["shape = [6, 4]", "shape = [12, 2]"]
    with pytest.raises(TensorforgeError, match="max_specializations"):
        tensorforge.compile(RESHAPE, target="interpreter", max_specializations=-1)


def test_max_specializations_zero_keeps_the_static_compile_error():
    with pytest.raises(UnsupportedOpError, match="computed at run time from model input"):
        tensorforge.compile(RESHAPE, target="interpreter", max_specializations=0)
    with pytest.raises(UnboundDimError, match=r"EyeLike needs static dimensions.*'rows' of input 'x' \(axis 0\)"):
        tensorforge.compile(EYE, max_specializations=0)


def test_save_names_the_specialised_inputs_and_one_specialisation_saves(tmp_path):
    cm = tensorforge.compile(RESHAPE)
    with pytest.raises(TensorforgeError, match=r"values of 'shape'.*cm.specialization\(\*inputs\).save"):
        cm.save(tmp_path / "m.tfm")
    one = cm.specialization(X, np.array([6, 4], np.int64))
    one.save(tmp_path / "m.tfm")
    np.testing.assert_array_equal(tensorforge.load(tmp_path / "m.tfm")(X), X.reshape(6, 4))
    cm.set_threads(1)
    assert one.threads == 1 and cm.threads == 1


def test_data_dependent_inputs_are_not_bound():
    """Only shape operands specialise: an op whose output size depends on data stays rejected."""
    m = _model([helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("NonZero", ["r"], ["y"])],
               [("x", T.FLOAT, [2, 3]), ("shape", T.INT64, [2])], [("y", T.INT64, None)])
    try:
        cm = tensorforge.compile(m, target="interpreter")
    except UnsupportedOpError:
        return
    assert cm.guard.by_value == ("shape",)


def test_bf16_inputs_and_outputs_as_onnx_declares_them():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    m = _model([helper.make_node("Cast", ["x"], ["y"], to=T.BFLOAT16), helper.make_node("Relu", ["y"], ["z"])],
               [("x", T.FLOAT, [4])], [("z", T.BFLOAT16, [4])])
    x = np.array([-1.0, 0.5, 1.00390625, 3.0], np.float32)
    want = np.maximum(x, 0).astype(ml_dtypes.bfloat16)
    for target in ("interpreter", "cpu"):
        z = tensorforge.compile(m, target=target)(x)
        assert z.dtype == ml_dtypes.bfloat16
        np.testing.assert_array_equal(z.astype(np.float32), want.astype(np.float32))


def test_example_inputs_compile_the_first_specialisation_at_compile_time():
    cm = tensorforge.compile(RESHAPE, (X, np.array([3, 8], np.int64)), target="interpreter")
    assert [d for d, _ in cm.specializations] == ["shape = [3, 8]"]
    np.testing.assert_array_equal(cm(X, np.array([3, 8], np.int64)), X.reshape(3, 8))


def test_dft_length_and_axis_inputs_against_numpy():
    """DFT (as constant DFT-matrix products) whose dft_length and axis are model inputs."""
    m = _model([helper.make_node("DFT", ["x", "n", "axis"], ["y"], onesided=1)],
               [("x", T.FLOAT, [2, 16, 1]), ("n", T.INT64, []), ("axis", T.INT64, [])], [("y", T.FLOAT, None)],
               opset=20)
    x = np.random.default_rng(4).standard_normal((2, 16, 1)).astype(np.float32)
    cm = tensorforge.compile(m)
    for n in (16, 12):
        y = cm(x, np.array(n, np.int64), np.array(1, np.int64))
        ref = np.fft.rfft(x[..., 0].astype(np.float64), n=n, axis=1)
        np.testing.assert_allclose(y, np.stack([ref.real, ref.imag], -1), rtol=1e-5, atol=1e-5)
