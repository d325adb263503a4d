"""The default graph pipeline: its order, ``tensorforge.compile(passes=...)``, ``tensorforge explain``,
and BERT / GPT-2 from the zoo (tiny variants) with every piece of shape arithmetic folded."""
import numpy as np
import pytest

import tensorforge
from tensorforge.cli import main as cli_main
from tensorforge.errors import PassError
from tensorforge.ir import Module, interpret, tensor, verify
from tensorforge.ir.rewrite import constant_value
from tensorforge.passes.pipeline import (ModuleStats, default_pipeline, default_pipeline_text, resolve_pipeline,
                                         trace_pipeline)

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def test_the_default_pipeline_follows_the_design_order():
    names = [p.name for p in default_pipeline().passes]
    assert names == ["const-fold", "fold-control-flow", "shape-prop", "dce", "cse", "qdq-contractions",
                     "simplify-extra", "fold-inference", "trim-window", "int8-contractions", "cse", "dce",
                     "layout", "cse", "dce", "reorder"]
    # the blocked layout has native kernels on the C backend only
    for target in ("interpreter", "mlir", "opencl", "cuda"):
        assert "layout" not in default_pipeline_text(target)
    with_layout = [p.name for p in default_pipeline(layout=True).passes]
    assert with_layout.index("fold-inference") < with_layout.index("layout") < with_layout.index("reorder")
    assert "reorder{goal=siblings}" in default_pipeline_text(reorder="siblings")
    assert "reorder" not in default_pipeline_text(reorder=None)
    assert resolve_pipeline(False) is None and resolve_pipeline("dce").pipeline == "dce"
    with pytest.raises(PassError, match="passes="):
        resolve_pipeline(3)


def _conv_bn_module() -> Module:
    rng = np.random.default_rng(0)
    m = Module()
    f = m.add_function("main", [tensor((1, 3, 6, 6))])
    g = f.builder().graph
    y = g.conv(f.args[0], g.constant(rng.normal(size=(4, 3, 3, 3)).astype(np.float32)), pads=(1, 1, 1, 1))
    params = [rng.uniform(0.5, 1.5, 4), rng.normal(size=4), rng.normal(size=4), rng.uniform(0.5, 1.5, 4)]
    y = g.batch_norm(y, *[g.constant(p.astype(np.float32)) for p in params])
    f.set_return([g.relu(y)])
    return m


def test_compile_runs_the_pipeline_on_a_copy_and_passes_overrides_it():
    m = _conv_bn_module()
    x = np.random.default_rng(1).normal(size=(1, 3, 6, 6)).astype(np.float32)
    want = interpret(m, x)[0]
    optimised = tensorforge.compile(m, target="interpreter")
    assert "graph.batch_norm" in [op.name for op in m.main.body]                # the input is untouched
    assert "graph.batch_norm" not in [op.name for op in optimised.module.main.body]
    np.testing.assert_allclose(optimised(x), want, rtol=1e-5, atol=1e-5)
    as_is = tensorforge.compile(m, target="interpreter", passes=False)
    assert [op.name for op in as_is.module.main.body] == [op.name for op in m.main.body]
    custom = tensorforge.compile(m, target="interpreter", passes="fold-inference")
    assert "graph.batch_norm" not in [op.name for op in custom.module.main.body]


def _onnx_conv_bn(path) -> str:
    rng = np.random.default_rng(2)
    init = [numpy_helper.from_array(rng.normal(size=(4, 3, 3, 3)).astype(np.float32), "w")]
    for name, value in (("s", rng.uniform(0.5, 1.5, 4)), ("b", rng.normal(size=4)), ("mu", rng.normal(size=4)),
                        ("var", rng.uniform(0.5, 1.5, 4))):
        init.append(numpy_helper.from_array(value.astype(np.float32), name))
    init.append(helper.make_tensor("shape", TensorProto.INT64, [2], [1, 64]))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "mu", "var"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("Dropout", ["r"], ["d"]),
             helper.make_node("Reshape", ["d", "shape"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], init)
    file = path / "conv_bn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), file)
    return str(file)


def test_explain_prints_op_counts_and_peak_memory_after_every_pass(tmp_path, capsys):
    assert cli_main(["explain", _onnx_conv_bn(tmp_path), "--passes"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line and line.split()[0] in
            ("(imported)", "fold-inference", "(optimised)")}
    assert set(rows) == {"(imported)", "fold-inference", "(optimised)"}
    assert int(rows["(imported)"][1]) == 5 and int(rows["(optimised)"][2]) == 3     # conv, relu, reshape
    assert "peak MiB" in out and "graph.batch_norm" in out and "const-fold" in out


def test_trace_pipeline_reports_each_pass():
    m = _conv_bn_module()
    before, rows = trace_pipeline(m, default_pipeline())
    assert [r.name for r in rows] == [p.pipeline_text() for p in default_pipeline().passes]
    assert before.histogram["graph.batch_norm"] == 1 and rows[-1].after.histogram["graph.batch_norm"] == 0
    assert rows[-1].after == ModuleStats.of(m)


# ---- BERT and GPT-2 (tiny) from the zoo --------------------------------------------------------
SHAPE_OPS = {"graph.shape_of", "graph.iota"}


@pytest.fixture(scope="module")
def transformers():
    torch = pytest.importorskip("torch")
    from tensorforge import models
    from tensorforge.frontends.torch import import_torch
    out = {}
    for name in ("bert_tiny", "gpt2_tiny"):
        module, inputs = models.get(name)
        with torch.no_grad():
            ref = module(*inputs)
        ref = ref if isinstance(ref, (tuple, list)) else (ref,)
        imported = import_torch(module, inputs)
        optimised = imported.clone()
        pm = default_pipeline(verify_each=True)
        report = pm.run(optimised)
        out[name] = (imported, optimised, pm, report, [x.numpy() for x in inputs], [r.numpy() for r in ref])
    return out


@pytest.mark.parametrize("name", ["bert_tiny", "gpt2_tiny"])
def test_transformer_shape_arithmetic_is_folded_to_static_reshapes(transformers, name):
    imported, m, pm, report, inputs, ref = transformers[name]
    verify(m)
    names = [op.name for op in m.main.body]
    assert not SHAPE_OPS & set(names)
    for op in m.main.body:
        if op.name not in ("graph.constant", "func.return") and op.operands:
            assert any(constant_value(v) is None for v in op.operands), f"{op} computes only constants"
        if op.name in ("graph.reshape", "graph.expand"):
            assert all(isinstance(d, int) for d in op.attributes["shape"]), op
        assert all(r.type.is_static for r in op.results)
    assert "graph.div" not in names                      # 1/sqrt(d) went into the query projection
    assert report.records[0].ops_before > report.records[-1].ops_after
    for got, want in zip(interpret(m, *inputs), ref):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_gpt2_lm_head_reads_the_tied_embedding_without_a_copy(transformers):
    """GPT-2 small's table (38.6M elements) is far above the fold limit; the tiny one (64000)
    is not, so the limit is lowered here to put the tiny model in the same regime."""
    imported, _, _, _, inputs, ref = transformers["gpt2_tiny"]
    m = imported.clone()
    default_pipeline(fold_limit=1024, verify_each=True).run(m)
    before, after = ModuleStats.of(imported), ModuleStats.of(m)
    assert after.weight_bytes <= before.weight_bytes
    head = [op for op in m.main.body if op.name == "graph.gemm" and op.attributes["trans_b"]]
    assert len(head) == 1 and head[0].operands[1].type.shape == (1000, 64)
    np.testing.assert_allclose(interpret(m, *inputs)[0], ref[0], rtol=1e-4, atol=1e-4 * np.abs(ref[0]).max())


def test_scale_of_every_attention_layer_went_into_its_weights(transformers):
    for name in ("bert_tiny", "gpt2_tiny"):
        pm = transformers[name][2]
        fold = next(p for p in pm.passes if p.name == "fold-inference")
        assert fold.stats.fired["scale-through-matmul"] == 2, name           # two layers each
        reorder = pm.passes[-1]
        assert reorder.peak_after <= reorder.peak_before
