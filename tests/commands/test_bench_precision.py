"""`tensorforge bench --precision int8`: tensorforge int8 against onnxruntime's quantize_static model
calibrated on the same samples; the report holds both and their agreement with float32.  Timings
are never asserted."""
import json
import sys

import numpy as np
import pytest

from .conftest import run_cli

FAST = ["--repeats", "2", "--warmup", "1", "--threads", "1", "--no-progress"]


def test_int8_bench_compares_with_onnxruntime_quantized_on_the_same_samples(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    from tensorforge.benchmark import peers

    seen = []
    real = peers._quantize_static
    monkeypatch.setattr(peers, "_quantize_static",
                        lambda model, lm, samples: seen.append(samples) or real(model, lm, samples))
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "cal.npz", x=rng.standard_normal((3, 1, 784)).astype(np.float32))
    js = tmp_path / "b.json"
    code, out, err = run_cli(["bench", "mlp_small", "--precision", "int8", "--calibration", tmp_path / "cal.npz",
                              "--json", js, "--chart", tmp_path / "b.png", *FAST], capsys)
    assert code == 0, err
    (model,) = json.loads(js.read_text())["models"]
    assert model["precision"] == "int8" and model["calibration"] == {"source": str(tmp_path / "cal.npz"), "samples": 3}
    (samples,) = seen                                            # onnxruntime got the very same samples
    assert len(samples) == 3 and np.array_equal(samples[2][0], np.load(tmp_path / "cal.npz")["x"][2])
    rows = {c["key"]: c for c in model["contenders"]}
    assert list(rows) == ["tensorforge", "onnxruntime"]          # --precision: onnxruntime by default
    assert rows["tensorforge"]["precision"] == "int8" and rows["onnxruntime"]["precision"] == "int8 QDQ"
    for row in rows.values():
        assert 0 < row["max_abs_diff"] and row["max_rel_err"] < 0.5 and row["median_ms"] > 0
        assert row["top1"] in (0.0, 1.0)                         # batch 1: one row of 10 classes
    assert model["check"]["tol"] is None and model["check"]["ok"]   # reported against float32, not checked
    assert "tf speedup" in out and "agreement with float32 torch on the bench inputs:" in out
    assert "onnxruntime int8 QDQ" in out and "1 layer(s) in int8" in out


def test_without_onnxruntime_the_peer_is_skipped_with_a_reason(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)       # import onnxruntime now fails
    js = tmp_path / "b.json"
    code, out, err = run_cli(["bench", "mlp_small", "--precision", "int8", "--calibration-samples", "2",
                              "--json", js, "--chart", tmp_path / "b.png", *FAST], capsys)
    assert code == 0, err
    (model,) = json.loads(js.read_text())["models"]
    assert [c["key"] for c in model["contenders"]] == ["tensorforge"]
    assert model["calibration"] == {"source": "the zoo's input generator", "samples": 2}
    assert "skipped onnxruntime: onnxruntime is not installed" in out


@pytest.mark.parametrize("argv, message", [
    (["--precision", "bf16", "--calibration", "x.npz"], "--calibration needs --precision int8"),
    (["--precision", "int8", "--calibration-samples", "0"], "--calibration-samples must be at least 1"),
])
def test_precision_option_errors(argv, message, capsys):
    code, _, err = run_cli(["bench", "mlp_small", *argv, *FAST], capsys)
    assert code == 1 and message in err
