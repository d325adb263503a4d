"""ONNX models exported with dynamic axes: dims bound at import, dims left symbolic, unbound-dim errors.

Each model is exported by ``torch.onnx.export(dynamic_axes=...)`` (tiny HF BERT / GPT-2, a small
conv net) or built by hand (a graph that uses every op of a shape chain), compiled natively for
two batch sizes / sequence lengths and compared with onnxruntime on the same file: max error
at most 1e-4 relative to the largest reference magnitude.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import tensorforge  # noqa: E402
from tensorforge.errors import FrontendError  # noqa: E402
from tensorforge.frontends.onnx import UnboundDimError, import_onnx  # noqa: E402

RTOL = 1e-4


def assert_matches_onnxruntime(path, outs, feeds):
    refs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        o, r = np.asarray(o), np.asarray(r)
        assert o.shape == r.shape
        scale = float(np.max(np.abs(r))) if r.size else 1.0
        np.testing.assert_allclose(o, r, rtol=RTOL, atol=RTOL * max(scale, 1e-6))


def export(module, inputs, names, dynamic_axes, path, opset):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, tuple(inputs), str(path), input_names=names, dynamic_axes=dynamic_axes,
                          opset_version=opset, dynamo=False)
    return path


# ---- models ---------------------------------------------------------------------------------------
class SmallConvNet(torch.nn.Module):
    """Conv-BN-ReLU-pool-conv-pool-linear; ``view(x.size(0), -1)`` exports a Shape->Reshape chain."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn(self.conv1(x))), 2)
        x = torch.nn.functional.adaptive_avg_pool2d(torch.relu(self.conv2(x)), 4)
        return self.fc(x.view(x.size(0), -1))


class _HFWrapper(torch.nn.Module):
    """Positional inputs and a plain tuple out, which TorchScript export wants from an HF model."""

    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *inputs):
        out = self.model(**dict(zip(self.names, inputs)), return_dict=False)
        return out[0]


def _token_inputs(names, batch, seq, vocab=100, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for n in names:
        if n == "input_ids":
            feeds[n] = rng.integers(0, vocab, (batch, seq)).astype(np.int64)
        elif n == "attention_mask":
            mask = np.ones((batch, seq), np.int64)
            mask[0, seq // 2:] = 0          # padding in the first row
            feeds[n] = mask
        else:
            feeds[n] = np.zeros((batch, seq), np.int64)
    return feeds


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    bert = transformers.BertModel(transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64)).eval()
    gpt2 = transformers.GPT2Model(transformers.GPT2Config(
        vocab_size=100, n_embd=32, n_layer=1, n_head=2, n_positions=64, bos_token_id=0, eos_token_id=0)).eval()
    gpt2.config.use_cache = False
    models = {}
    for name, model, names, opset in (("bert", bert, ["input_ids", "attention_mask", "token_type_ids"], 17),
                                      ("gpt2", gpt2, ["input_ids", "attention_mask"], 18)):
        feeds = _token_inputs(names, 2, 16)
        dyn = {n: {0: "batch", 1: "seq"} for n in names}
        path = export(_HFWrapper(model, names), [torch.from_numpy(feeds[n]) for n in names], names, dyn,
                      out / f"{name}.onnx", opset)
        models[name] = (path, names)
    return models


@pytest.fixture(scope="module")
def convnet(tmp_path_factory):
    torch.manual_seed(0)
    net = SmallConvNet().eval()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 1.5)
    path = tmp_path_factory.mktemp("conv") / "convnet.onnx"
    return export(net, [torch.randn(2, 3, 16, 16)], ["x"], {"x": {0: "batch"}}, path, 18)


# ---- exported models compile natively for two sizes ---------------------------------------------------
@pytest.mark.parametrize("name", ["bert", "gpt2"])
@pytest.mark.parametrize("batch,seq", [(1, 16), (3, 8)])
def test_hf_transformer_with_dynamic_axes_compiles_for_example_inputs(hf_models, name, batch, seq):
    path, names = hf_models[name]
    feeds = _token_inputs(names, batch, seq, seed=batch)
    cm = tensorforge.compile(str(path), [feeds[n] for n in names])
    assert [a.type.shape for a in cm.func.args] == [(batch, seq)] * len(names)
    assert not any(op.name == "graph.shape_of" for op in cm.func.body)
    assert_matches_onnxruntime(path, cm.run(*(feeds[n] for n in names)), feeds)


@pytest.mark.parametrize("batch", [1, 3])
def test_conv_net_with_dynamic_batch_compiles_for_example_inputs(convnet, batch):
    x = np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32)
    cm = tensorforge.compile(str(convnet), [torch.from_numpy(x) if batch > 1 else x])   # tensors bind too
    assert_matches_onnxruntime(convnet, cm.run(x), {"x": x})


def test_shapes_binding_by_name_equals_example_inputs(hf_models):
    path, names = hf_models["gpt2"]
    feeds = _token_inputs(names, 2, 8)
    cm = tensorforge.compile(onnx.load(str(path)), shapes={"batch": 2, "seq": 8})
    assert [a.type.shape for a in cm.func.args] == [(2, 8), (2, 8)]
    assert_matches_onnxruntime(path, cm.run(*(feeds[n] for n in names)), feeds)


def test_partly_bound_transformer_stays_symbolic_in_the_interpreter(tmp_path):
    """Only ``seq`` bound: the batch stays symbolic and the graph runs for any batch (the Reshape
    targets [batch, seq, heads, head_dim] come from shape chains with one unknown entry)."""
    from tensorforge.models import get
    module, (ids,) = get("gpt2_tiny", 1)
    path = export(module, [ids[:, :8]], ["input_ids"], {"input_ids": {0: "batch", 1: "seq"}},
                  tmp_path / "gpt2.onnx", 17)
    cm = tensorforge.compile(str(path), shapes={"seq": 8}, target="interpreter")
    assert cm.func.args[0].type.shape == ("batch", 8)
    for batch in (1, 3):
        x = np.random.default_rng(batch).integers(0, 1000, (batch, 8)).astype(np.int64)
        assert_matches_onnxruntime(path, cm.run(x), {"input_ids": x})


# ---- every op of a shape chain, bound and partly bound -------------------------------------------------
def _shape_chain_model():
    """x: [N, S, 8] -> outputs built from Shape(start/end), Size, Gather, (Un)Squeeze, Concat, Slice,
    Cast, Mul/Div/Sub/Add on int64 shape tensors, Equal/Where, ConstantOfShape, Range, Expand."""
    c = {"i0": np.array(0, np.int64), "i1": np.array(1, np.int64), "two": np.array(2, np.int64),
         "one": np.array(1, np.int64), "ax0": np.array([0], np.int64), "minus1": np.array([-1], np.int64),
         "zero": np.array(0, np.int64), "start": np.array([0], np.int64), "axis1": np.array([1], np.int64)}
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["s"]),
        n("Shape", ["x"], ["s_tail"], start=1),                       # [S, 8]
        n("Gather", ["s", "i0"], ["nb"], axis=0),
        n("Gather", ["s", "i1"], ["sq"], axis=0),
        n("Gather", ["s_tail", "i1"], ["feat"], axis=0),               # 8
        # reshape target [N, 2S, feat/2] built with Mul and Div
        n("Mul", ["sq", "two"], ["sq2"]), n("Div", ["feat", "two"], ["half"]),
        n("Unsqueeze", ["nb", "ax0"], ["nb1"]), n("Unsqueeze", ["sq2", "ax0"], ["sq21"]),
        n("Unsqueeze", ["half", "ax0"], ["half1"]),
        n("Concat", ["nb1", "sq21", "half1"], ["target"], axis=0),
        n("Reshape", ["x", "target"], ["y_reshape"]),
        # x[:, :S-1] with the end from Sub, squeezed back to a scalar and unsqueezed again
        n("Sub", ["sq", "one"], ["sq_m1"]), n("Unsqueeze", ["sq_m1", "ax0"], ["end1"]),
        n("Squeeze", ["end1", "ax0"], ["end0"]), n("Unsqueeze", ["end0", "ax0"], ["end"]),
        n("Slice", ["x", "start", "end", "axis1"], ["y_slice"]),
        # positions 0..S-1 from Range (limit (S - 1) + 1), expanded to [N, S, 1] through the
        # Where(Equal(shape, -1), 1, shape) that torch exports for expand(N, -1, -1)
        n("Add", ["sq_m1", "one"], ["sq_again"]),
        n("Range", ["zero", "sq_again", "one"], ["pos"]), n("Cast", ["pos"], ["posf"], to=T.FLOAT),
        n("Unsqueeze", ["posf", "axis1"], ["pos_col"]),                 # [S, 1]
        n("Concat", ["nb1", "minus1", "minus1"], ["want"], axis=0),   # [N, -1, -1]
        n("Equal", ["want", "minus1"], ["is_any"]),
        n("Shape", ["want"], ["want_shape"]),
        n("ConstantOfShape", ["want_shape"], ["ones_vec"], value=numpy_helper.from_array(np.array([1], np.int64))),
        n("Where", ["is_any", "ones_vec", "want"], ["expand_to"]),      # [N, 1, 1]
        n("Expand", ["pos_col", "expand_to"], ["pos_b"]),               # [N, S, 1]
        n("Add", ["x", "pos_b"], ["y_pos"]),
        # a [N, S, 1] block of ones from ConstantOfShape, scaled by Size(x) cast to float
        n("Unsqueeze", ["sq", "ax0"], ["sq1"]),
        n("Concat", ["nb1", "sq1", "axis1"], ["ones_dims"], axis=0),
        n("ConstantOfShape", ["ones_dims"], ["ones"], value=numpy_helper.from_array(np.array([1.0], np.float32))),
        n("Size", ["x"], ["numel"]), n("Cast", ["numel"], ["numelf"], to=T.FLOAT),
        n("Mul", ["ones", "numelf"], ["y_size"]),
    ]
    graph = helper.make_graph(
        nodes, "shape_chain", [helper.make_tensor_value_info("x", T.FLOAT, ["N", "S", 8])],
        [helper.make_tensor_value_info(o, T.FLOAT, None) for o in ("y_reshape", "y_slice", "y_pos", "y_size")],
        [numpy_helper.from_array(v, k) for k, v in c.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


@pytest.mark.parametrize("n,s", [(2, 6), (3, 4)])
def test_every_shape_chain_op_folds_when_bound(tmp_path, n, s):
    path = tmp_path / "chain.onnx"
    onnx.save(_shape_chain_model(), str(path))
    x = np.random.default_rng(n).standard_normal((n, s, 8)).astype(np.float32)
    cm = tensorforge.compile(str(path), [x])
    ops = {op.name for op in cm.func.body}
    assert not ops & {"graph.shape_of", "graph.iota", "graph.equal", "graph.select"}, ops
    assert_matches_onnxruntime(path, cm.run(x), {"x": x})


def test_shape_chain_with_only_the_static_part_bound_runs_in_the_interpreter():
    """``S`` bound, ``N`` symbolic: Gather(Shape(x), 1), Range(0, S) and Size-free chains fold; the
    Reshape/Expand targets keep ``N`` as a symbol."""
    model = _shape_chain_model()
    module = import_onnx(model, shapes={"S": 5})
    assert module.main.args[0].type.shape == ("N", 5, 8)
    assert module.main.outputs[0].type.shape == ("N", 10, 4)
    cm = tensorforge.compile(module, target="interpreter", passes=False)
    for n in (1, 4):
        x = np.random.default_rng(n).standard_normal((n, 5, 8)).astype(np.float32)
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        for o, r in zip(cm.run(x), sess.run(None, {"x": x})):
            np.testing.assert_allclose(o, r, rtol=RTOL, atol=RTOL)


@pytest.mark.parametrize("op,const", [("Mul", 1), ("Add", 0), ("Sub", 0), ("Div", 1), ("Max", 0)])
def test_identities_keep_an_unbound_dim_symbolic(op, const):
    """``N op const`` is N for every size, so a Reshape to [N op const, -1] stays [N, 12]."""
    n = helper.make_node
    nodes = [n("Shape", ["x"], ["s"]), n("Gather", ["s", "i0"], ["nb"], axis=0), n(op, ["nb", "c"], ["nb2"]),
             n("Unsqueeze", ["nb2", "ax0"], ["nb1"]), n("Concat", ["nb1", "m1"], ["t"], axis=0),
             n("Reshape", ["x", "t"], ["y"])]
    inits = {"i0": np.array(0, np.int64), "c": np.array(const, np.int64), "ax0": np.array([0], np.int64),
             "m1": np.array([-1], np.int64)}
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, ["N", 3, 4])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    module = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10))
    assert module.main.outputs[0].type.shape == ("N", 12)
    x = np.random.default_rng(0).standard_normal((5, 3, 4)).astype(np.float32)
    (y,) = tensorforge.compile(module, target="interpreter").run(x)
    np.testing.assert_array_equal(y, x.reshape(5, 12))


# ---- errors ---------------------------------------------------------------------------------------------
def test_unbound_batch_compiles_one_native_model_for_every_batch(convnet):
    """No example inputs and no shapes=: the batch stays symbolic and one native model runs every
    batch size (the ``view(x.size(0), -1)`` chain becomes a symbolic reshape)."""
    from tensorforge.codegen.c.toolchain import stats
    cm = tensorforge.compile(str(convnet))
    assert cm.input_specs[0].shape == ("batch", 3, 16, 16)
    assert "batch in 1..inf" in cm.describe()
    runs = stats.compiler_runs
    for batch in (1, 4, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32)
        assert_matches_onnxruntime(convnet, cm.run(x), {"x": x})
    assert stats.compiler_runs == runs


def test_unresolvable_dim_names_input_dim_and_fix():
    """A dim an op needs as a number, with specialising switched off: the error names the dim,
    the input and axis, and how to bind it."""
    graph = helper.make_graph([helper.make_node("EyeLike", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", T.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    with pytest.raises(UnboundDimError) as info:
        tensorforge.compile(m, max_specializations=0)
    msg = str(info.value)
    assert "'batch' of input 'x' (axis 0)" in msg
    assert "shapes={'batch': N}" in msg and "--shape batch=N" in msg and "example_inputs" in msg
    assert info.value.dims == (("x", 0, "batch"),) and info.value.inputs == ("x",)


def test_unbound_sequence_at_import_names_only_the_dim_needed():
    """Tile's repeats from Gather(Shape(x), 1): only 'seq' is needed as a number, not 'batch'."""
    n = helper.make_node
    nodes = [n("Shape", ["x"], ["s"]), n("Gather", ["s", "i1"], ["sq"], axis=0), n("Unsqueeze", ["sq", "ax0"], ["reps"]),
             n("Tile", ["v", "reps"], ["y"])]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "i1"), numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.ones(2, np.float32), "v")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, ["batch", "seq"])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    with pytest.raises(UnboundDimError) as info:
        import_onnx(m, shapes={"batch": 1})
    msg = str(info.value)
    assert "'seq' of input 'x' (axis 1)" in msg and "'batch'" not in msg
    assert "shapes={'seq': N}" in msg
    assert "ONNX node" in msg
    assert import_onnx(m, shapes={"seq": 3}).main.outputs[0].type.shape == (6,)


def test_op_that_needs_static_dims_names_the_unbound_dim():
    graph = helper.make_graph([helper.make_node("EyeLike", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", T.FLOAT, ["rows", 3])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    with pytest.raises(UnboundDimError, match=r"EyeLike needs static dimensions.*'rows' of input 'x' \(axis 0\)"):
        import_onnx(m)
    assert import_onnx(m, shapes={"rows": 2}).main.outputs[0].type.shape == (2, 3)


def _relu_model(dims):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["z"], ["w"])],
                              "g", [helper.make_tensor_value_info("x", T.FLOAT, dims),
                                    helper.make_tensor_value_info("z", T.FLOAT, ["B", 2])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None),
                               helper.make_tensor_value_info("w", T.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def test_unnamed_dynamic_dim_is_bound_by_example_inputs():
    m = _relu_model(["B", None])
    module = import_onnx(m, example_inputs=[np.zeros((3, 7), np.float32), np.zeros((3, 2), np.float32)])
    assert [a.type.shape for a in module.main.args] == [(3, 7), (3, 2)]
    # unbound, it stays symbolic under the name <input>_<axis>
    assert [a.type.shape for a in import_onnx(m, shapes={"B": 3}).main.args] == [(3, "x_1"), (3, 2)]


@pytest.mark.parametrize("example,shapes,match", [
    ([np.zeros((3, 7), np.float32), np.zeros((4, 2), np.float32)], None, r"'B' .* size 4, but .* gave it 3"),
    ([np.zeros((3, 7), np.float32), np.zeros((3, 2), np.float32)], {"B": 5}, r"'B' .* size 3, but shapes gave it 5"),
    ([np.zeros((3,), np.float32), np.zeros((3, 2), np.float32)], None, r"rank 1 .* declares rank 2"),
    ([np.zeros((3, 7), np.float32), np.zeros((3, 5), np.float32)], None,
     r"size 5 at axis 1, where the model declares 2"),
    ([np.zeros((3, 7), np.float32)], None, r"1 example inputs for a model with 2 inputs"),
    (None, {"seq": 4}, r"'seq', which no model input declares .*'B', 'x_1'"),
])
def test_binding_mistakes_are_frontend_errors(example, shapes, match):
    with pytest.raises(FrontendError, match=match):
        import_onnx(_relu_model(["B", None]), example_inputs=example, shapes=shapes)
