"""`tensorforge compile` and `tensorforge run`: a saved model gives the model's outputs."""
import numpy as np
import pytest

from .conftest import run_cli


def test_onnx_compile_then_run_matches_numpy(tiny_onnx, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    path, numpy_model = tiny_onnx
    tfm = tmp_path / "tiny.tfm"
    code, out, err = run_cli(["compile", path, "--shape", "N=3", "-o", tfm, "--threads", "1"], capsys)
    assert code == 0, err
    assert "outputs match onnxruntime" in out and "'x' float32[3, 4]" in out and "'y' float32[3, 5]" in out
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code, out, err = run_cli(["run", tfm, "--inputs", tmp_path / "x.npy", "--out", tmp_path / "res",
                              "--repeats", "2"], capsys)
    assert code == 0, err
    y = np.load(tmp_path / "res" / "y.npy")
    np.testing.assert_allclose(y, numpy_model(x), rtol=1e-5, atol=1e-6)
    assert f"y: float32[3, 5]  min {y.min():.4g}  max {y.max():.4g}" in out
    assert "latency: median" in out and "over 2 run(s)" in out


def test_zoo_compile_run_round_trip_gives_torch_outputs(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    from tensorforge import models
    tfm = tmp_path / "mlp.tfm"
    code, out, err = run_cli(["compile", "mlp_small", "--batch", "2", "-o", tfm], capsys)
    assert code == 0, err
    assert "outputs match torch" in out
    module, inputs = models.get("mlp_small", batch=2)
    np.savez(tmp_path / "in.npz", x=inputs[0].numpy())            # the input is named after the argument
    code, out, err = run_cli(["run", tfm, "--inputs", tmp_path / "in.npz", "--out", tmp_path, "--repeats", "0"],
                             capsys)
    assert code == 0, err
    with torch.no_grad():
        expected = module(*inputs).numpy()
    np.testing.assert_allclose(np.load(tmp_path / "output0.npy"), expected, rtol=1e-4, atol=1e-5)


def test_run_random_inputs_compiles_an_onnx_model_first(tiny_onnx, capsys):
    path, _ = tiny_onnx
    code, out, err = run_cli(["run", path, "--shape", "N=2", "--random", "--repeats", "1"], capsys)
    assert code == 0, err
    assert "tiny: 1 input(s), 1 output(s)" in out and "y: float32[2, 5]" in out


@pytest.mark.parametrize("argv, message", [
    (["compile", "no_such_model", "-o", "x.tfm"], "unknown model 'no_such_model'"),
    (["compile", "{onnx}", "--shape", "N=1", "-o", "out.bin"], "must end in .tfm"),
    (["compile", "{tfm}", "-o", "again.tfm"], "already compiled"),
    (["run", "{tfm}", "--inputs", "{missing}"], "no such file"),
    (["run", "{tfm}", "--inputs", "{x}", "{x}"], "takes 1 input(s)"),
    (["run", "{tfm}", "--inputs", "{wrong}"], "got shape [7, 4]"),
])
def test_errors_are_exit_1_with_one_line(argv, message, tiny_onnx, tmp_path, capsys):
    path, _ = tiny_onnx
    tfm = tmp_path / "t.tfm"
    assert run_cli(["compile", path, "--shape", "N=1", "-o", tfm, "--no-check"], capsys)[0] == 0
    np.save(tmp_path / "x.npy", np.zeros((1, 4), np.float32))
    np.save(tmp_path / "wrong.npy", np.zeros((7, 4), np.float32))
    names = {"onnx": path, "tfm": tfm, "missing": tmp_path / "nope.npy", "x": tmp_path / "x.npy",
             "wrong": tmp_path / "wrong.npy"}
    code, out, err = run_cli([a.format(**names) for a in argv], capsys)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("tensorforge: error: ") and message in err


def test_usage_errors_are_exit_2(tiny_onnx, capsys):
    path, _ = tiny_onnx
    assert run_cli(["run", path], capsys)[0] == 2                  # neither --inputs nor --random
    assert run_cli(["compile", path], capsys)[0] == 2              # no -o


def test_help_lists_the_commands(capsys):
    code, out, _ = run_cli(["--help"], capsys)
    assert code == 0
    for name in ("bench", "compile", "run", "demo"):
        assert name in out


def test_a_model_onnxruntime_cannot_load_is_compiled_and_reported_unchecked(tiny_onnx, tmp_path, capsys):
    """IR version 14 (what onnx.helper writes by default) is newer than onnxruntime 1.31 reads:
    tensorforge still compiles it, and says the outputs went unchecked and why."""
    pytest.importorskip("onnxruntime")
    import onnx
    path, numpy_model = tiny_onnx
    model = onnx.load(path)
    model.ir_version = 99
    newer = tmp_path / "newer.onnx"
    onnx.save(model, str(newer))
    tfm = tmp_path / "newer.tfm"
    code, out, err = run_cli(["compile", newer, "--shape", "N=2", "-o", tfm, "--threads", "1"], capsys)
    assert code == 0, err
    assert "outputs not checked: onnxruntime cannot run this model" in out
    import tensorforge
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(tensorforge.load(tfm)(x), numpy_model(x), rtol=1e-5, atol=1e-6)


def test_a_saved_model_carries_its_graph_for_explain(tmp_path, capsys):
    """A .tfm holds the optimised graph, so `explain` works from the file alone; --no-graph leaves it out."""
    from tensorforge.commands.loading import load_model
    from tensorforge.ir.interpreter import run_function
    tfm, bare = tmp_path / "m.tfm", tmp_path / "bare.tfm"
    assert run_cli(["compile", "mlp_small", "-o", tfm, "--threads", "1"], capsys)[0] == 0
    assert run_cli(["compile", "mlp_small", "-o", bare, "--threads", "1", "--no-graph"], capsys)[0] == 0
    lm = load_model(str(tfm))
    graph = lm.import_module()
    np.testing.assert_allclose(run_function(graph.main, lm.inputs)[0], lm.model.run(*lm.inputs)[0],
                               rtol=1e-4, atol=1e-5)
    code, out, err = run_cli(["explain", tfm], capsys)
    assert code == 0, err
    assert "graph.matmul" in out or "graph.gemm" in out
    code, out, err = run_cli(["explain", bare], capsys)
    assert code == 1 and "saved without its graph" in err
