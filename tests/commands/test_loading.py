"""The MODEL loader shared by the commands: zoo names, .onnx files and .tfm files."""
import numpy as np
import pytest

from tensorforge.commands.loading import load_model, parse_shapes, random_inputs
from tensorforge.errors import TensorforgeError


def test_zoo_model_has_torch_inputs_and_a_torch_reference():
    torch = pytest.importorskip("torch")
    lm = load_model("mlp_small", batch=3)
    assert (lm.kind, lm.name, lm.reference_name) == ("zoo", "mlp_small", "torch")
    assert [a.shape for a in lm.inputs] == [(3, 784)]
    with torch.no_grad():
        expected = lm.model(*lm.torch_inputs).numpy()
    np.testing.assert_array_equal(lm.reference(lm.inputs)[0], expected)
    out = lm.compile(threads=1).run(*lm.inputs)[0]
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_onnx_symbolic_dim_needs_a_value(tiny_onnx):
    path, _ = tiny_onnx
    with pytest.raises(TensorforgeError, match=r"symbolic dimension 'N'.*--shape N=VALUE"):
        load_model(path)
    with pytest.raises(TensorforgeError, match="no input"):
        load_model(path, shapes={"N": 2, "M": 2})
    assert load_model(path, batch=2).inputs[0].shape == (2, 4)     # --batch fixes a leading symbol


def test_onnx_inputs_are_seeded_and_reference_is_onnxruntime(tiny_onnx):
    pytest.importorskip("onnxruntime")
    path, numpy_model = tiny_onnx
    lm = load_model(path, shapes={"N": 3}, seed=5)
    assert (lm.kind, lm.name, lm.input_names, lm.reference_name) == ("onnx", "tiny", ["x"], "onnxruntime")
    assert lm.input_shapes == {"x": (3, 4)}
    np.testing.assert_array_equal(lm.inputs[0], load_model(path, shapes={"N": 3}, seed=5).inputs[0])
    assert not np.array_equal(lm.inputs[0], load_model(path, shapes={"N": 3}, seed=6).inputs[0])
    expected = numpy_model(lm.inputs[0])
    np.testing.assert_allclose(lm.reference(lm.inputs)[0], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lm.compile(threads=1).run(*lm.inputs)[0], expected, rtol=1e-5, atol=1e-6)


def test_tfm_loads_the_saved_model_without_a_reference(tiny_onnx, tmp_path):
    path, numpy_model = tiny_onnx
    cm = load_model(path, shapes={"N": 2}).compile(threads=1)
    cm.save(tmp_path / "tiny.tfm")
    lm = load_model(str(tmp_path / "tiny.tfm"), threads=1)
    assert (lm.kind, lm.reference, lm.input_names) == ("tfm", None, ["x"])
    assert lm.inputs[0].shape == (2, 4) and lm.inputs[0].dtype == np.float32
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    np.testing.assert_allclose(lm.compile().run(x)[0], numpy_model(x), rtol=1e-5, atol=1e-6)
    assert lm.import_module().main.args[0].type.shape == (2, 4)      # the graph travels with the file
    cm.save(tmp_path / "bare.tfm", include_graph=False)
    with pytest.raises(TensorforgeError, match="without its graph"):
        load_model(str(tmp_path / "bare.tfm"), threads=1).import_module()


@pytest.mark.parametrize("spec, message", [
    ("no_such_model", "unknown model 'no_such_model'"),
    ("missing.onnx", "no such file"),
    ("missing.tfm", "no such file"),
    ("dir/model.pt", r"must end in \.onnx or \.tfm"),
])
def test_bad_model_names_say_what_is_accepted(spec, message):
    with pytest.raises(TensorforgeError, match=message):
        load_model(spec)


def test_not_an_artifact_is_a_tensorforge_error(tmp_path):
    bad = tmp_path / "junk.tfm"
    bad.write_text("not a zip")
    with pytest.raises(TensorforgeError, match="not a tensorforge model artifact"):
        load_model(str(bad))


def test_parse_shapes():
    assert parse_shapes(["N=2", "seq = 8"]) == {"N": 2, "seq": 8}
    for bad in (["N"], ["N=x"], ["=3"], ["N=0"]):
        with pytest.raises(TensorforgeError, match="--shape"):
            parse_shapes(bad)


def test_random_inputs_by_dtype():
    f, i, b = random_inputs([((2, 3), np.float32), ((50,), np.int64), ((4,), np.bool_)], seed=0)
    assert f.dtype == np.float32 and f.shape == (2, 3) and f.std() > 0
    assert i.dtype == np.int64 and set(np.unique(i)) == {0, 1}
    assert b.dtype == np.bool_
    np.testing.assert_array_equal(f, random_inputs([((2, 3), np.float32)], seed=0)[0])
