"""CI slice of the parser and importer fuzzer (issue #14, item 3).

Fixed seeds, so a failure is reproducible with
``python -m tensorforge.testing.fuzz_parsers --target T --seed S --replay-case INDEX``:
mutated ONNX models into ``tensorforge.compile(..., target="interpreter")``, mutated IR text into
``parse_module``, and every input of the findings corpus (inputs that once raised something other
than a TensorforgeError); each must give a result or a TensorforgeError, within the per-case
timeout, without crashing its worker process.  The long campaigns are run by hand (see the
module docstring of ``tensorforge.testing.fuzz_parsers``).
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from tensorforge.errors import FrontendError, ParseError, TensorforgeError  # noqa: E402
from tensorforge.testing import fuzz_parsers as fp  # noqa: E402

FINDINGS = fp.CORPUS_ROOT / "findings"


def _no_findings(findings):
    assert not findings, fp.report(findings)


def test_onnx_mutations():
    n, findings = fp.run_campaign("onnx", 300, seed=1, jobs=1, timeout=20)
    assert n == 300
    _no_findings(findings)


def test_mlir_mutations():
    n, findings = fp.run_campaign("mlir", 1000, seed=1, jobs=1, timeout=20)
    assert n == 1000
    _no_findings(findings)


@pytest.mark.parametrize("target", fp.TARGETS)
def test_findings_corpus(target):
    directory = FINDINGS / target
    files = sorted(directory.glob("*" + fp.SUFFIX[target]))
    assert files, f"no regression inputs in {directory}"
    n, findings = fp.run_campaign(target, 0, replay=str(directory), jobs=1, timeout=20)
    assert n == len(files)
    _no_findings(findings)


def test_seed_corpus():
    onnx_files = sorted((fp.CORPUS_ROOT / "onnx").glob("*.onnx"))
    mlir_files = sorted((fp.CORPUS_ROOT / "mlir").glob("*.mlir"))
    assert len(onnx_files) >= 5 and len(mlir_files) >= 5
    assert sum(f.stat().st_size for f in onnx_files) < 50_000


def test_cases_are_reproducible():
    cases = fp.Cases("onnx", seed=3)
    assert cases.get(17) == cases.get(17)
    mlir = fp.Cases("mlir", seed=3)
    assert [mlir.get(i) for i in range(5)] == [fp.Cases("mlir", seed=3).get(i) for i in range(5)]


# ---- the fixes, one by one: a clear TensorforgeError, no huge allocation ----------------------
def _model(nodes, inputs, outputs, inits=(), opset=17):
    from onnx import helper
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                             opset_imports=[helper.make_opsetid("", opset)])


def _compile(model):
    import tensorforge
    return tensorforge.compile(model, target="interpreter", db=None)


def test_huge_input_dim_is_a_clear_error():
    from onnx import TensorProto, helper
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                         [2**40, 2**20])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(FrontendError, match=r"model input 'x'.*TiB"):
        _compile(m)


def test_huge_constant_of_shape_is_a_clear_error():
    from onnx import TensorProto, helper, numpy_helper
    m = _model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")], [],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
               [numpy_helper.from_array(np.array([2**20, 2**20, 2**10], np.int64), "s")])
    with pytest.raises(FrontendError, match=r"'fill' \(ConstantOfShape.*TiB"):
        _compile(m)


def test_raw_data_of_the_wrong_length_names_the_initializer():
    from onnx import TensorProto, helper
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.zeros(16, np.float32).tobytes(), raw=True)
    w.raw_data = w.raw_data[:10]
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    with pytest.raises(FrontendError, match=r"initializer 'w' has 10 bytes of raw_data.*need 64"):
        _compile(m)


def test_unloaded_external_data_is_a_clear_error():
    from onnx import TensorProto, helper
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 4], data_location=TensorProto.EXTERNAL)
    e = w.external_data.add()
    e.key, e.value = "location", "/etc/hostname"
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    with pytest.raises(FrontendError, match=r"initializer 'w' keeps its data in the external file"):
        _compile(m)


def test_attribute_of_the_wrong_kind_names_the_node():
    from onnx import TensorProto, helper
    node = helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1)
    node.attribute[0].type = helper.AttributeProto.STRING
    m = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(FrontendError, match=r"'sm' \(Softmax.*attribute 'axis' is STRING, but ONNX declares it INT"):
        _compile(m)


def test_names_that_are_not_utf8():
    from onnx import TensorProto, helper
    import onnx
    m = _model([helper.make_node("Relu", ["x"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["NN", 4])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    corrupt = onnx.load_from_string(m.SerializeToString().replace(b"NN", b"N\xff"))
    with pytest.raises(FrontendError, match="not valid UTF-8"):
        _compile(corrupt)


def test_node_import_failure_names_the_node_and_keeps_the_cause():
    from onnx import TensorProto, helper, numpy_helper
    m = _model([helper.make_node("Gather", ["d", "i"], ["y"], name="pick", axis=0)], [],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
               [numpy_helper.from_array(np.array(1.0, np.float32), "d"),
                numpy_helper.from_array(np.array(0, np.int64), "i")])
    with pytest.raises(TensorforgeError, match=r"'pick' \(Gather") as info:
        _compile(m)
    assert info.value.__cause__ is None or isinstance(info.value.__cause__, Exception)


@pytest.mark.parametrize("text", [
    "[" * 5000,
    '"graph.constant"() {value = ' + "[" * 3000 + "]" * 3000 + "} : () -> tensor<f32>",
    '"func.func"() ({' * 400,
    '%0 = "graph.constant"() {value = dense<1.0> : tensor<100000000x100000000xf32>} : () -> tensor<1xf32>',
    '%0 = "graph.constant"() {value = dense<"0x01"> : tensor<4294967296x8xi8>} : () -> tensor<1xf32>',
    '%0 = "graph.relu"(%1) : (' * 2000,
])
def test_parser_refuses_deep_nesting_and_huge_splats(text):
    from tensorforge.ir.parser import parse_module
    with pytest.raises(ParseError, match=r"^<text>:\d+:\d+: "):
        parse_module(text)
