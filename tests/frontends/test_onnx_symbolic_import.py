"""ONNX models whose ``dim_param`` dims stay symbolic: ``tensorforge.compile(path)`` with no example
inputs compiles ONE native model that runs every size.

Each exported model (``torch.onnx.export(dynamic_axes=...)``: a small conv net with a dynamic
batch, the zoo's ``bert_tiny`` and ``gpt2_tiny`` with dynamic batch and sequence) is compiled once,
run at several sizes with no C compiler run (``toolchain.stats.compiler_runs``) and compared with
onnxruntime on the same file: max error at most 1e-4 relative to the largest reference magnitude.
Hand-built graphs check the symbolic shape chain (products, floor division, slices, ranges),
ranges, hints, names and the errors.
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
from tensorforge.codegen.c.toolchain import stats  # noqa: E402
from tensorforge.errors import FrontendError, TensorforgeError  # noqa: E402
from tensorforge.frontends.onnx import import_onnx  # noqa: E402
from tensorforge.ir.symbolic import symbol_table_of  # noqa: E402
from tensorforge.specialize import SpecializingModel  # noqa: E402

RTOL = 1e-4


def assert_matches_onnxruntime(model, outs, feeds):
    source = model if isinstance(model, (bytes, str)) else (model.SerializeToString() if hasattr(model, "SerializeToString")
                                                            else str(model))
    refs = ort.InferenceSession(source, providers=["CPUExecutionProvider"]).run(None, feeds)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        o, r = np.asarray(o), np.asarray(r)
        assert o.shape == r.shape
        scale = float(np.max(np.abs(r))) if r.size else 1.0
        np.testing.assert_allclose(o, r, rtol=RTOL, atol=RTOL * max(scale, 1e-6))


def _model(nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, T.FLOAT, None) for n in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


# ---- exported models -----------------------------------------------------------------------------
torch = pytest.importorskip("torch")


def _export(module, inputs, names, dynamic_axes, path, opset=17):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, tuple(inputs), str(path), input_names=names, dynamic_axes=dynamic_axes,
                          opset_version=opset, dynamo=False)
    return str(path)


class _ConvNet(torch.nn.Module):
    """Conv-BN-ReLU-pool-linear; ``x.view(x.size(0), -1)`` exports a Shape -> Gather -> Concat -> Reshape chain."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.view(x.size(0), -1))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from tensorforge.models import get
    out = tmp_path_factory.mktemp("symbolic_onnx")
    torch.manual_seed(0)
    net = _ConvNet().eval()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 1.5)
    paths = {"convnet": _export(net, [torch.randn(2, 3, 8, 8)], ["x"], {"x": {0: "batch"}}, out / "convnet.onnx")}
    for name in ("bert_tiny", "gpt2_tiny"):
        module, inputs = get(name, 2)
        names = [f"input{i}" for i in range(len(inputs))]
        paths[name] = _export(module, inputs, names, {n: {0: "batch", 1: "seq"} for n in names}, out / f"{name}.onnx")
    return paths


def _token_feeds(path, batch, seq, rng):
    feeds = {}
    for i in ort.InferenceSession(path, providers=["CPUExecutionProvider"]).get_inputs():
        if i.name == "input1":                         # bert_tiny's attention mask, padding in row 0
            mask = np.ones((batch, seq), np.int64)
            mask[0, (seq + 1) // 2:] = 0
            feeds[i.name] = mask
        else:
            feeds[i.name] = rng.integers(0, 1000, (batch, seq)).astype(np.int64)
    return feeds


def test_conv_net_compiles_once_for_every_batch(exported):
    path = exported["convnet"]
    runs = stats.compiler_runs
    cm = tensorforge.compile(path)
    assert stats.compiler_runs - runs <= 1                    # one library (0 when cached)
    assert not isinstance(cm, SpecializingModel)
    assert cm.input_specs[0].shape == ("batch", 3, 8, 8) and cm.output_specs[0].shape == ("batch", 5)
    assert "x: f32[batch, 3, 8, 8]  batch in 1..inf" in cm.describe()
    runs = stats.compiler_runs
    for batch in (1, 3, 8, 17):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)
        assert_matches_onnxruntime(path, cm.run(x), {"x": x})
    assert stats.compiler_runs == runs


@pytest.mark.parametrize("name", ["bert_tiny", "gpt2_tiny"])
def test_transformer_compiles_once_for_every_batch_and_sequence(exported, name):
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains become symbolic reshapes, the
    position table ``[:seq]`` a symbolic slice (which narrows ``seq`` to the table's 64 rows),
    ``arange(seq)`` a symbolic iota; one library runs every size."""
    path = exported[name]
    cm = tensorforge.compile(path)
    assert not isinstance(cm, SpecializingModel)
    text = cm.describe()
    assert "input0: i64[batch, seq]  batch in 1..inf  seq in 1..64" in text
    table = cm.symbols
    assert (table.get("batch").hint, table.get("seq").hint) == (1, 64)
    runs = stats.compiler_runs
    rng = np.random.default_rng(0)
    for batch, seq in ((1, 1), (3, 7), (2, 33), (5, 64)):
        feeds = _token_feeds(path, batch, seq, rng)
        assert_matches_onnxruntime(path, cm.run(*feeds.values()), feeds)
    assert stats.compiler_runs == runs
    with pytest.raises(TensorforgeError, match=r"input 'input0' axis 1 is 65, outside seq's range 1..64"):
        cm(*_token_feeds(path, 1, 65, rng).values())


def test_a_range_wider_than_the_model_allows_names_the_node(exported):
    with pytest.raises(FrontendError, match=r"Slice.*'seq' to be at most 64, but its range is 1..512"):
        import_onnx(exported["bert_tiny"], dim_ranges={"seq": (1, 512)})
    module = import_onnx(exported["bert_tiny"], shapes={"batch": (1, 8), "seq": (4, 32)})
    table = symbol_table_of(module.main)
    assert [(r.name, r.lo, r.hi, r.hint) for r in table.ranges.values()] == [("batch", 1, 8, 1), ("seq", 4, 32, 32)]


# ---- the symbolic shape chain, by hand ----------------------------------------------------------------
def _chain_model():
    """x: [N, S, 8]: a reshape to [N*S, 2, 4] from Mul and Div of shape entries, a flattened
    [-1, 8] back (the -1 is N*S), positions Range(0, S) expanded against x, x[:, :S-1] and
    ConstantOfShape([N, S, 1]) scaled by Size(x)."""
    c = {"i0": np.array(0, np.int64), "i1": np.array(1, np.int64), "two": np.array(2, np.int64),
         "four": np.array([4], np.int64), "ax0": np.array([0], np.int64), "m1": np.array([-1, 8], np.int64),
         "zero": np.array(0, np.int64), "one": np.array(1, np.int64), "start": np.array([0], np.int64),
         "axis1": np.array([1], np.int64), "eight": np.array(8, np.int64)}
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["s"]), n("Gather", ["s", "i0"], ["nb"], axis=0), n("Gather", ["s", "i1"], ["sq"], axis=0),
        n("Mul", ["nb", "sq"], ["ns"]), n("Div", ["eight", "four"], ["half"]),          # 8 / [4] = [2]
        n("Unsqueeze", ["ns", "ax0"], ["ns1"]),
        n("Concat", ["ns1", "half", "four"], ["t1"], axis=0),
        n("Reshape", ["x", "t1"], ["r1"]),                                               # [N*S, 2, 4]
        n("Reshape", ["r1", "m1"], ["r2"]),                                              # [N*S, 8]
        n("Size", ["r2"], ["numel"]), n("Div", ["numel", "eight"], ["rows"]),            # N*S*8 // 8
        n("Unsqueeze", ["rows", "ax0"], ["rows1"]), n("Concat", ["rows1", "four", "half"], ["t3"], axis=0),
        n("Reshape", ["r2", "t3"], ["y_reshape"]),                                       # [N*S, 4, 2]
        n("Sub", ["sq", "one"], ["sq_m1"]), n("Unsqueeze", ["sq_m1", "ax0"], ["end"]),
        n("Slice", ["x", "start", "end", "axis1"], ["y_slice"]),                         # [N, S-1, 8]
        n("Range", ["zero", "sq", "one"], ["pos"]), n("Cast", ["pos"], ["posf"], to=T.FLOAT),
        n("Unsqueeze", ["posf", "axis1"], ["pos_col"]), n("Add", ["x", "pos_col"], ["y_pos"]),
        n("Unsqueeze", ["nb", "ax0"], ["nb1"]), n("Unsqueeze", ["sq", "ax0"], ["sq1"]),
        n("Concat", ["nb1", "sq1", "axis1"], ["dims"], axis=0),
        n("ConstantOfShape", ["dims"], ["ones"], value=numpy_helper.from_array(np.array([1.0], np.float32))),
        n("Size", ["x"], ["size"]), n("Cast", ["size"], ["sizef"], to=T.FLOAT), n("Mul", ["ones", "sizef"], ["y_size"]),
    ]
    return _model(nodes, [("x", T.FLOAT, ["N", "S", 8])], ["y_reshape", "y_slice", "y_pos", "y_size"], c.items())


def test_shape_chain_becomes_symbolic_attributes():
    m = _chain_model()
    module = import_onnx(m)
    assert [v.type.shape for v in module.main.outputs] == [("N*S", 4, 2), ("N", "S-1", 8), ("N", "S", 8), ("N", "S", 1)]
    ops = {op.name for op in module.main.body}
    assert "graph.concat" not in ops and "graph.gather" not in ops     # the shape arithmetic is gone
    cm = tensorforge.compile(m)
    runs = stats.compiler_runs
    for n, s in ((1, 1), (2, 6), (3, 4), (5, 9)):
        x = np.random.default_rng(n).standard_normal((n, s, 8)).astype(np.float32)
        assert_matches_onnxruntime(m, cm.run(x), {"x": x})
    assert stats.compiler_runs == runs


def test_dim_param_names_become_identifiers_and_both_spellings_bind():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, ["batch size", "seq-len", "min"])], ["y"])
    assert import_onnx(m).main.args[0].type.shape == ("batch_size", "seq_len", "min_")
    assert import_onnx(m, shapes={"seq-len": 3, "batch_size": 2}).main.args[0].type.shape == (2, 3, "min_")
    table = symbol_table_of(import_onnx(m, dim_ranges={"seq-len": (1, 16)}, shape_hints={"min": 5}).main)
    assert (table.get("seq_len").hi, table.get("min_").hint, table.get("batch_size").hint) == (16, 5, 1)
    with pytest.raises(FrontendError, match=r"which no model input declares .*'batch size', 'seq-len', 'min'"):
        import_onnx(m, shapes={"seq": 3})


def test_example_inputs_bind_all_dims_but_the_ranged_ones():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, ["B", "S"])], ["y"])
    x = np.ones((2, 5), np.float32)
    assert import_onnx(m, example_inputs=[x]).main.args[0].type.shape == (2, 5)
    module = import_onnx(m, example_inputs=[x], dim_ranges={"S": (1, 8)})
    assert module.main.args[0].type.shape == (2, "S")
    assert symbol_table_of(module.main).get("S").hint == 5          # the example's size is the hint
    with pytest.raises(FrontendError, match=r"the example inputs give 'S' the size 5, outside its range 1..4"):
        import_onnx(m, example_inputs=[x], dim_ranges={"S": (1, 4)})


@pytest.mark.parametrize("bad,match", [
    ({"dim_ranges": {"B": 4}}, r"a range is a \(min, max\) pair"),
    ({"dim_ranges": {"B": (0, 4)}}, r"1 <= min <= max"),
    ({"shapes": {"B": (5, 4)}}, r"1 <= min <= max"),
    ({"shapes": {"B": 2}, "dim_ranges": {"B": (1, 2)}}, r"both a size and a range"),
    ({"shape_hints": {"B": 9}, "dim_ranges": {"B": (1, 4)}}, r"shape_hints give 'B' the size 9, outside its range"),
])
def test_range_mistakes_are_frontend_errors(bad, match):
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, ["B", 3])], ["y"])
    with pytest.raises(FrontendError, match=match):
        import_onnx(m, **bad)


def test_slice_past_a_static_axis_narrows_the_range_and_runs():
    """``table[:seq]`` on a 10-row table: seq can be at most 10; the interpreter and native code
    agree with onnxruntime inside the range and refuse sizes outside it."""
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    n = helper.make_node
    nodes = [n("Shape", ["x"], ["s"]), n("Gather", ["s", "i0"], ["sq"], axis=0), n("Unsqueeze", ["sq", "ax0"], ["end"]),
             n("Slice", ["table", "zero", "end"], ["rows"]), n("Add", ["x", "rows"], ["y"])]
    m = _model(nodes, [("x", T.FLOAT, ["seq", 4])], ["y"],
               [("table", table), ("i0", np.array(0, np.int64)), ("ax0", np.array([0], np.int64)),
                ("zero", np.array([0], np.int64))])
    for target in ("interpreter", "cpu"):
        cm = tensorforge.compile(m, target=target)
        assert "seq in 1..10" in cm.describe()
        for s in (1, 10):
            x = np.random.default_rng(s).standard_normal((s, 4)).astype(np.float32)
            assert_matches_onnxruntime(m, cm(x), {"x": x})
        with pytest.raises(TensorforgeError, match="11"):
            cm(np.zeros((11, 4), np.float32))


def test_tile_by_a_symbolic_count_of_a_unit_axis_is_an_expand():
    """``v.repeat(N, 2)`` of a [1, 3] tensor: [N, 6] for every N."""
    n = helper.make_node
    nodes = [n("Shape", ["x"], ["s"]), n("Gather", ["s", "i0"], ["nb"], axis=0), n("Unsqueeze", ["nb", "ax0"], ["nb1"]),
             n("Concat", ["nb1", "two"], ["reps"], axis=0), n("Tile", ["v", "reps"], ["t"]), n("Mul", ["x", "t"], ["y"])]
    m = _model(nodes, [("x", T.FLOAT, ["N", 6])], ["y"],
               [("v", np.arange(3, dtype=np.float32).reshape(1, 3)), ("i0", np.array(0, np.int64)),
                ("ax0", np.array([0], np.int64)), ("two", np.array([2], np.int64))])
    module = import_onnx(m)
    assert {op.name for op in module.main.body} >= {"graph.tile", "graph.expand"}
    cm = tensorforge.compile(module, target="interpreter")
    for rows in (1, 4):
        x = np.random.default_rng(rows).standard_normal((rows, 6)).astype(np.float32)
        assert_matches_onnxruntime(m, cm(x), {"x": x})
