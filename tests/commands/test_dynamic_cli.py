"""`--shape NAME=MIN..MAX`: compile once with a dynamic dim, run the .tfm at sizes inside the range."""
import numpy as np
import pytest

from tensorforge.commands.loading import parse_shape_specs, parse_shapes
from tensorforge.errors import TensorforgeError

from .conftest import run_cli


def test_parse_shape_specs_splits_sizes_and_ranges():
    assert parse_shape_specs(["N=2", "batch=1..64", "seq = 8..512"]) == ({"N": 2}, {"batch": (1, 64), "seq": (8, 512)})
    for bad in (["b=1.."], ["b=..4"], ["b=5..4"], ["b=0..4"], ["=1..2"]):
        with pytest.raises(TensorforgeError, match="--shape"):
            parse_shape_specs(bad)
    with pytest.raises(TensorforgeError, match="only `tensorforge compile` does; here give one size, e.g. --shape b=4"):
        parse_shapes(["b=1..4"])


def test_onnx_compiled_with_a_range_runs_at_any_size_in_it(tiny_onnx, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    path, numpy_model = tiny_onnx
    tfm = tmp_path / "tiny_dyn.tfm"
    code, out, err = run_cli(["compile", path, "--shape", "N=1..16", "-o", tfm, "--threads", "1"], capsys)
    assert code == 0, err
    assert "outputs match onnxruntime" in out and "'x' float32[N, 4]" in out and "symbols: N in 1..16" in out
    code, out, err = run_cli(["run", tfm, "--describe"], capsys)
    assert code == 0, err
    assert "x: f32[N, 4]  N in 1..16" in out and "y: f32[N, 5]" in out
    for n in (1, 5, 16):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        np.save(tmp_path / "x.npy", x)
        code, out, err = run_cli(["run", tfm, "--inputs", tmp_path / "x.npy", "--out", tmp_path / "res",
                                  "--repeats", "0"], capsys)
        assert code == 0, err
        np.testing.assert_allclose(np.load(tmp_path / "res" / "y.npy"), numpy_model(x), rtol=1e-5, atol=1e-6)
    code, out, err = run_cli(["run", tfm, "--random", "--shape", "N=7", "--repeats", "0"], capsys)
    assert code == 0 and "y: float32[7, 5]" in out, err
    code, out, err = run_cli(["run", tfm, "--random", "--shape", "N=17", "--repeats", "0"], capsys)
    assert code == 1 and "--shape N=17: outside N's range 1..16" in err
    np.save(tmp_path / "big.npy", np.ones((17, 4), np.float32))
    code, out, err = run_cli(["run", tfm, "--inputs", tmp_path / "big.npy", "--repeats", "0"], capsys)
    assert code == 1 and "input 'x' axis 0 is 17, outside N's range 1..16" in err
