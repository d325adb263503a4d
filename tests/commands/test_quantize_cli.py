"""`tensorforge quantize`: calibration data in, an int8 .tfm (or .mlir) out that runs close to float32.

Tolerance: the int8 MLP's outputs stay within 5% (max |diff| / max |ref|) of PyTorch's float32
outputs on an input it was not calibrated on; measured about 0.5%, the slack covers other seeds.
"""
import re

import numpy as np
import pytest

import tensorforge
from tensorforge.commands.loading import LoadedModel
from tensorforge.commands.quantize import draw_samples, read_calibration
from tensorforge.errors import TensorforgeError

from .conftest import run_cli

INT8_TOL = 5e-2


def _samples(path, shape, n=6, seed=3, key="x"):
    rng = np.random.default_rng(seed)
    np.savez(path, **{key: rng.standard_normal((n, *shape)).astype(np.float32)})
    return path


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("tensorforge: error:")]


def test_quantize_to_tfm_runs_close_to_float32_and_saved_statistics_reproduce_it(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    from tensorforge import models
    data = _samples(tmp_path / "cal.npz", (784,))            # [S, 784]: S samples of batch 1
    out, stats = tmp_path / "mlp.tfm", tmp_path / "stats.json"
    code, stdout, err = run_cli(["quantize", "mlp_small", "--calibration", data, "-o", out,
                                 "--quantize-first-last", "--save-calibration", stats, "--db", "none"], capsys)
    assert code == 0, err
    assert "quantized 3 of 3 layer(s) to int8 (minmax calibration on 6 sample(s)" in stdout
    for key in ("0:gemm at addmm", "1:gemm at addmm_1", "2:gemm at addmm_2"):
        assert f"int8     {key}" in stdout
    before, after = map(float, re.search(r"weights: ([\d.]+) KB float32 -> ([\d.]+) KB with int8", stdout).groups())
    assert before == 215.0 and after < before / 3 and stats.exists()          # 4 bytes a weight -> 1 (+ scales)

    cm = tensorforge.load(out)
    assert "qgemm" in cm.source                                  # the int8 kernel, not a float fallback
    module, (x,) = models.get("mlp_small", input_seed=77)        # not a calibration sample
    with torch.no_grad():
        ref = module(x).numpy()
    got = cm(x.numpy())
    assert np.abs(got - ref).max() <= INT8_TOL * np.abs(ref).max()
    assert not np.allclose(got, ref, rtol=1e-6, atol=0)         # it did quantize

    # the saved statistics give the same int8 graph without the samples
    text = tmp_path / "mlp.mlir"
    code, stdout, err = run_cli(["quantize", "mlp_small", "--calibration-stats", stats, "-o", text,
                                 "--quantize-first-last"], capsys)
    assert code == 0, err
    graph = tensorforge.ir.load_module(text)
    assert graph.attributes["tf.quantized"] == ("0:gemm at addmm", "1:gemm at addmm_1", "2:gemm at addmm_2")
    assert sum(op.name == "graph.qmatmul" for op in graph.walk()) == 3
    np.testing.assert_allclose(tensorforge.compile(graph, db=None)(x.numpy()), got, rtol=0, atol=1e-6)


def test_wrong_shape_calibration_names_the_input(tmp_path, capsys):
    pytest.importorskip("torch")
    data = _samples(tmp_path / "bad.npz", (783,))
    code, _, err = run_cli(["quantize", "mlp_small", "--calibration", data, "-o", tmp_path / "m.tfm"], capsys)
    assert code == 1
    (line,) = _error_lines(err)
    assert "input 'x' has shape [6, 783]; the model takes [1, 784]" in line
    assert not (tmp_path / "m.tfm").exists()


@pytest.mark.parametrize("argv, message", [
    (["-o", "{tmp}/m.tfm"], "quantize needs calibration data: --calibration DATA.npz"),
    (["--calibration", "{tmp}/cal.npz", "-o", "{tmp}/m.onnx"], "no exporter from its graph to ONNX; write"),
    (["--calibration", "{tmp}/cal.npz", "-o", "{tmp}/m.bin"], "the output must end in .tfm"),
    (["--calibration", "{tmp}/missing.npz", "-o", "{tmp}/m.tfm"], "--calibration {tmp}/missing.npz: no such file"),
    (["--calibration", "{tmp}/cal.npz", "--exclude", "7", "-o", "{tmp}/m.tfm"],
     "--exclude 7 matches no quantizable layer; the layers are: 0:gemm at addmm;"),
])
def test_errors_are_one_line_and_write_nothing(argv, message, tmp_path, capsys):
    pytest.importorskip("torch")
    _samples(tmp_path / "cal.npz", (784,), n=2)
    argv = [a.format(tmp=tmp_path) for a in argv]
    code, _, err = run_cli(["quantize", "mlp_small", *argv], capsys)
    assert code == 1
    (line,) = _error_lines(err)
    assert message.format(tmp=tmp_path) in line
    assert not any(p.suffix in (".tfm", ".onnx", ".bin") for p in tmp_path.iterdir())


def test_calibration_arrays_by_either_spelling_of_the_sample_axis(tmp_path):
    lm = LoadedModel("m", "onnx", None, [np.zeros((2, 4), np.float32), np.zeros((2,), np.int64)],
                     input_names=["x", "ids"])
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((6, 4))                           # float64 rows, batch 2: 3 samples
    np.savez(tmp_path / "a.npz", x=rows, ids=np.arange(6))
    samples = read_calibration(str(tmp_path / "a.npz"), lm)
    assert len(samples) == 3 and samples[1][0].dtype == np.float32 and samples[1][0].shape == (2, 4)
    np.testing.assert_array_equal(samples[2][0], rows[4:6].astype(np.float32))
    np.testing.assert_array_equal(samples[2][1], [4, 5])
    # a leading sample axis, keys as np.savez names positional arrays
    np.savez(tmp_path / "b.npz", rows.reshape(3, 2, 4), np.arange(6).reshape(3, 2))
    stacked = read_calibration(str(tmp_path / "b.npz"), lm)
    assert all(np.array_equal(a, b) for s, t in zip(samples, stacked) for a, b in zip(s, t))
    for bad, message in [({"x": rows, "ids": np.arange(4)}, "different numbers of samples ('x' 3, 'ids' 2)"),
                         ({"x": rows}, "has no array for input 'ids' (it has x); name it ids or arr_1"),
                         ({"x": rows, "ids": np.arange(6), "y": rows}, "array 'y' is not an input of the model"),
                         ({"x": rows, "ids": np.linspace(0, 1, 6)}, "input 'ids' is float64; the model takes int64"),
                         ({"x": rows[:5], "ids": np.arange(6)}, "input 'x' has shape [5, 4]")]:
        np.savez(tmp_path / "c.npz", **bad)
        with pytest.raises(TensorforgeError, match=message.replace("(", r"\(").replace(")", r"\)")
                           .replace("[", r"\[").replace("]", r"\]")):
            read_calibration(str(tmp_path / "c.npz"), lm)


def test_drawn_samples_are_other_inputs_of_the_same_kind():
    pytest.importorskip("torch")
    from tensorforge.commands.loading import load_model
    lm = load_model("bert_tiny")
    samples = draw_samples(lm, 3)
    assert len(samples) == 3
    for s in samples:
        assert [(a.shape, a.dtype) for a in s] == [(a.shape, a.dtype) for a in lm.inputs]
    assert not np.array_equal(samples[0][0], samples[1][0]) and not np.array_equal(samples[0][0], lm.inputs[0])
    assert np.array_equal(draw_samples(lm, 1)[0][0], samples[0][0])        # deterministic


def test_max_error_reports_the_held_out_error_and_the_promoted_layers(tmp_path, capsys):
    """``--max-error``: a target the int8 MLP misses tries layers back in float32 and reports the
    held-out error before and after (never worse) and which layers; the written graph records them."""
    pytest.importorskip("torch")
    data = _samples(tmp_path / "cal.npz", (784,), n=10)
    text = tmp_path / "mlp.mlir"
    code, stdout, err = run_cli(["quantize", "mlp_small", "--calibration", data, "-o", text, "--quantize-first-last",
                                 "--max-error", "1e-6"], capsys)
    assert code == 0, err
    first, final, n = re.search(r"held-out error \(relative RMS vs float32\): ([\d.e+-]+) all int8 -> ([\d.e+-]+) with "
                                r"(\d+) layer\(s\) back to float32", stdout).groups()
    assert float(final) <= float(first) and int(n) <= 1        # a quarter of 3 layers: at most 1
    graph = tensorforge.ir.load_module(text)
    assert len(graph.attributes["tf.fallback"]) == int(n) and len(graph.attributes["tf.quantized"]) == 3 - int(n)
