"""The JAX models (tensorforge/models/jax_models.py), the jax.jit peer and `tensorforge bench` on a
JAX function.

The models must be what they claim, since the StableHLO frontend's tests lean on them: they run
under jax.jit with the right shapes, are deterministic, agree between closed-over parameters and
parameters as arguments, and lower to the StableHLO they are meant to exercise (NHWC and NCHW
convolutions, batched dot_general, reduce_window, erf).  The bench test stands a graph built
through the ONNX importer in for the StableHLO import, so that the bench's plumbing (loader,
reference, peer, report) is tested whether or not that frontend handles the model.
"""
import json
import subprocess
import sys

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from tensorforge.benchmark.peers import PeerUnavailable, default_peers, make_peer  # noqa: E402
from tensorforge.benchmark.timing import time_interleaved  # noqa: E402
from tensorforge.commands.bench import is_jax_spec, load_bench_model, load_jax_model  # noqa: E402
from tensorforge.commands.loading import LoadedModel  # noqa: E402
from tensorforge.errors import TensorforgeError  # noqa: E402
from tensorforge.models import jax_models  # noqa: E402

SMALL = ["jax_mlp", "jax_cnn", "jax_transformer", "jax_resnet18_small"]
OUTPUT_SHAPES = {"jax_mlp": (2, 10), "jax_cnn": (2, 10), "jax_transformer": (2, 128, 256),
                 "jax_resnet18_small": (2, 10)}
INPUT_SHAPES = {"jax_mlp": (2, 784), "jax_cnn": (2, 32, 32, 3), "jax_transformer": (2, 128, 256),
                "jax_resnet18_small": (2, 3, 32, 32)}


def _jit(fn, inputs) -> np.ndarray:
    return np.asarray(jax.jit(fn)(*inputs))


def test_names_and_summaries():
    assert jax_models.names() == ["jax_mlp", "jax_cnn", "jax_transformer", "jax_resnet18", "jax_resnet18_small"]
    assert all(jax_models.summary(n) for n in jax_models.names())


def test_importing_the_models_does_not_import_jax():
    code = ("import sys, tensorforge.models, tensorforge.models.jax_models as m, tensorforge.commands.bench; "
            "m.names(); m.summary('jax_cnn'); assert 'jax' not in sys.modules, 'jax imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", SMALL)
def test_small_models_run_under_jit_with_the_right_shapes(name):
    fn, inputs = jax_models.get(name, batch=2)
    assert [x.shape for x in inputs] == [INPUT_SHAPES[name]] and inputs[0].dtype == np.float32
    out = _jit(fn, inputs)
    assert out.shape == OUTPUT_SHAPES[name] and out.dtype == np.float32
    assert np.isfinite(out).all() and out.std() > 1e-3


@pytest.mark.parametrize("name", ["jax_mlp", "jax_cnn"])
def test_models_are_deterministic(name):
    (fn1, in1), (fn2, in2) = jax_models.get(name), jax_models.get(name)
    np.testing.assert_array_equal(in1[0], in2[0])
    p1, p2 = jax_models.params(name), jax_models.params(name)
    assert list(p1) == list(p2) and all(np.array_equal(p1[k], p2[k]) for k in p1)
    np.testing.assert_array_equal(_jit(fn1, in1), _jit(fn2, in2))
    _, other = jax_models.get(name, input_seed=7)
    assert not np.array_equal(other[0], in1[0])


@pytest.mark.parametrize("name", ["jax_mlp", "jax_cnn", "jax_transformer"])
def test_params_as_arguments_compute_the_closed_over_model(name):
    fn, inputs = jax_models.get(name)
    fn_args, inputs_args = jax_models.get(name, params_as_args=True)
    weights = jax_models.params(name)
    assert len(inputs_args) == 1 + len(weights)
    assert all(np.array_equal(a, w) for a, w in zip(inputs_args[1:], weights.values()))
    np.testing.assert_allclose(_jit(fn_args, inputs_args), _jit(fn, inputs), rtol=1e-5, atol=1e-5)


def _stablehlo(name: str, **options) -> str:
    fn, inputs = jax_models.get(name, **options)
    return jax.jit(fn).lower(*inputs).as_text()


def test_models_lower_to_the_stablehlo_they_are_meant_to_exercise():
    cnn = _stablehlo("jax_cnn")
    assert "[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]" in cnn          # NHWC / HWIO
    assert "stablehlo.reduce_window" in cnn and "stablehlo.rsqrt" in cnn
    resnet = _stablehlo("jax_resnet18_small")
    assert "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]" in resnet       # NCHW / OIHW
    assert resnet.count("stablehlo.convolution") == 20                # stem, 16 in blocks, 3 projections
    transformer = _stablehlo("jax_transformer")
    assert "batching_dims = [0, 2] x [0, 2]" in transformer            # batch and head axes
    assert "chlo.erf" in transformer and "stablehlo.tanh" not in transformer
    assert "stablehlo.tanh" in _stablehlo("jax_transformer", gelu="tanh")
    assert "call @relu" in _stablehlo("jax_mlp")                       # a private helper to inline


def test_gelu_variants_are_close_but_different():
    exact = _jit(*jax_models.get("jax_transformer"))
    approx = _jit(*jax_models.get("jax_transformer", gelu="tanh"))
    assert 0 < np.abs(exact - approx).max() < 1e-2


def test_full_resnet18_has_torchvision_parameter_count_and_shapes():
    weights = jax_models.params("jax_resnet18")
    learned = sum(w.size for k, w in weights.items() if not k.endswith((".mean", ".var")))
    assert learned == 11_689_512                                      # torchvision's resnet18
    fn, inputs = jax_models.get("jax_resnet18")
    assert inputs[0].shape == (1, 3, 224, 224)
    assert jax.eval_shape(fn, *inputs).shape == (1, 1000)


def test_bad_requests_are_tensorforge_errors():
    with pytest.raises(TensorforgeError, match="unknown JAX model 'jax_nope'"):
        jax_models.get("jax_nope")
    with pytest.raises(TensorforgeError, match="has no option 'gelu'"):
        jax_models.get("jax_mlp", gelu="tanh")
    with pytest.raises(TensorforgeError, match="gelu='fast' is not one of exact, tanh"):
        jax_models.get("jax_transformer", gelu="fast")
    with pytest.raises(TensorforgeError, match="batch must be at least 1"):
        jax_models.get("jax_mlp", batch=0)


# -- the jax.jit peer ---------------------------------------------------------------------------

def test_jax_peer_times_the_jitted_function():
    lm = load_jax_model("jax_cnn")
    peer = make_peer("jax", lm, threads=1)
    assert peer.label == "jax.jit" and peer.setup_s > 0
    np.testing.assert_allclose(peer.outputs[0], lm.reference(lm.inputs)[0], rtol=1e-6, atol=1e-6)
    timings = time_interleaved({"jax": peer.run}, repeats=3, warmup=1)
    assert len(timings["jax"].samples) == 3 and timings["jax"].median_ms > 0
    result = peer.run()                                   # the timed call waited for the result
    assert all(leaf.is_ready() for leaf in jax.tree_util.tree_leaves(result))


def test_peers_that_cannot_run_the_model_say_why():
    jax_lm = load_jax_model("jax_mlp")
    for key in ("eager", "onnxruntime"):
        with pytest.raises(PeerUnavailable, match="'jax_mlp' is a JAX function"):
            make_peer(key, jax_lm, threads=1)
    onnx_lm = LoadedModel("tiny", "onnx", None, [np.zeros(2, np.float32)])
    with pytest.raises(PeerUnavailable, match="needs a JAX function; 'tiny' is an .onnx file"):
        make_peer("jax", onnx_lm, threads=1)
    assert default_peers("jax") == ["jax"] and default_peers("jax", "int8") == ["jax"]
    assert default_peers("zoo") == ["eager", "inductor", "inductor-freezing", "onnxruntime"]
    assert default_peers("onnx", "bf16") == ["onnxruntime"]


# -- JAX functions as a bench MODEL ---------------------------------------------------------------

FACTORY = '''
import numpy as np
import jax.numpy as jnp
from helper import SCALE            # a module next to this file, as for a script

W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10

def f(x):
    return jnp.tanh(x @ W) * SCALE

def make(batch=2):
    return f, (np.ones((batch, 4), np.float32),)

def apply(params, x):
    return jnp.tanh(x @ params["w"]) + params["b"]

def make_pytree():                  # apply(params, x) with a dict of parameters, float64 NumPy in
    return apply, ({"w": W, "b": np.ones(3)}, np.ones((2, 4)))

def needs_args(n):
    return f, ()

def not_a_pair():
    return f
'''


@pytest.fixture
def factory_file(tmp_path):
    (tmp_path / "helper.py").write_text("SCALE = 2.0\n")
    path = tmp_path / "my_model.py"
    path.write_text(FACTORY)
    return str(path)


def test_factory_file_is_a_jax_model(factory_file):
    assert is_jax_spec(f"{factory_file}:make") and is_jax_spec("jax_cnn")
    assert not is_jax_spec("resnet18") and not is_jax_spec("model.onnx")
    lm = load_bench_model(f"{factory_file}:make", batch=3)
    assert (lm.name, lm.kind, lm.reference_name) == ("my_model:make", "jax", "jax.jit")
    assert [x.shape for x in lm.inputs] == [(3, 4)]
    W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    np.testing.assert_allclose(lm.reference(lm.inputs)[0], 2 * np.tanh(np.ones((3, 4)) @ W), rtol=1e-5)


def test_factory_with_pytree_inputs_is_flattened(factory_file):
    lm = load_jax_model(f"{factory_file}:make_pytree")
    assert [(x.shape, x.dtype) for x in lm.inputs] == [((3,), np.float32), ((4, 3), np.float32), ((2, 4), np.float32)]
    W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    expected = np.tanh(np.ones((2, 4)) @ W) + 1
    np.testing.assert_allclose(lm.reference(lm.inputs)[0], expected, rtol=1e-5)
    np.testing.assert_allclose(make_peer("jax", lm, threads=1).outputs[0], expected, rtol=1e-5)
    assert lm.model.__name__ == "apply"


def test_bad_factories_are_one_line_errors(factory_file, tmp_path):
    with pytest.raises(TensorforgeError, match="no such file"):
        load_jax_model(str(tmp_path / "missing.py") + ":make")
    with pytest.raises(TensorforgeError, match="defines no function 'nope'"):
        load_jax_model(f"{factory_file}:nope")
    with pytest.raises(TensorforgeError, match="needs_args must be a factory that takes no arguments"):
        load_jax_model(f"{factory_file}:needs_args")
    with pytest.raises(TensorforgeError, match="returns \\(fn, example_inputs\\); it returned a function"):
        load_jax_model(f"{factory_file}:not_a_pair")
    (tmp_path / "strings.py").write_text("def make():\n    return len, ('a',)\n")
    with pytest.raises(TensorforgeError, match="example inputs must be arrays or pytrees of arrays"):
        load_jax_model(f"{tmp_path / 'strings.py'}:make")
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(TensorforgeError, match="cannot import .*broken.py': RuntimeError: boom"):
        load_jax_model(f"{broken}:make")
    with pytest.raises(TensorforgeError, match="--shape: 'jax_mlp' is a JAX function"):
        load_bench_model("jax_mlp", shapes={"N": 1})


def _mlp_as_onnx_graph():
    """jax_mlp's function imported through the ONNX frontend instead of StableHLO."""
    from onnx import TensorProto, helper, numpy_helper

    from tensorforge.frontends.onnx import import_onnx

    weights = jax_models.params("jax_mlp")
    nodes, last = [], "x"
    for i in (1, 2, 3):
        nodes += [helper.make_node("MatMul", [last, f"fc{i}.w"], [f"mm{i}"]),
                  helper.make_node("Add", [f"mm{i}", f"fc{i}.b"], [f"h{i}"])]
        last = f"h{i}"
        if i < 3:
            nodes.append(helper.make_node("Relu", [last], [f"r{i}"]))
            last = f"r{i}"
    graph = helper.make_graph(nodes, "jax_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 784])],
                              [helper.make_tensor_value_info(last, TensorProto.FLOAT, [1, 10])],
                              initializer=[numpy_helper.from_array(w, k) for k, w in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return import_onnx(model)


def test_bench_a_jax_model_against_jax_jit(tmp_path, monkeypatch, capsys):
    pytest.importorskip("onnx")
    from tensorforge.cli import main
    from tensorforge.commands.bench import JaxLoadedModel

    monkeypatch.setattr(JaxLoadedModel, "import_module", lambda self: _mlp_as_onnx_graph())
    js = tmp_path / "b.json"
    code = main(["bench", "jax_mlp", "--json", str(js), "--chart", str(tmp_path / "b.png"), "--repeats", "2",
                 "--warmup", "1", "--threads", "1", "--no-progress", "--db", "none"])
    out = capsys.readouterr().out
    assert code == 0, out
    (model,) = json.loads(js.read_text())["models"]
    assert model["kind"] == "jax" and model["check"]["reference"] == "jax.jit" and model["check"]["ok"]
    assert [c["key"] for c in model["contenders"]] == ["tensorforge", "jax"] and model["skipped"] == []
    jax_row = model["contenders"][1]
    assert jax_row["name"] == "jax.jit" and jax_row["median_ms"] > 0 and jax_row["rounds"] == 2
    assert "outputs match jax.jit" in out and "jax.jit" in out
