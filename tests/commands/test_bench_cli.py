"""`tensorforge bench`: the table, the JSON and the chart agree and hold every contender.

Peers that take long to set up (torch.compile) are replaced by a stand-in or left out with
``--peers``; timings are never asserted, only how they are reported.
"""
import json
import re

import numpy as np
import pytest

from tensorforge.benchmark import roofline as roofline_mod
from tensorforge.benchmark.work import graph_bytes, graph_flops

from .conftest import run_cli

FAST = ["--repeats", "2", "--warmup", "1", "--threads", "1", "--no-progress"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private cache directory holding a known roofline (so % of peak is checkable)."""
    monkeypatch.setenv("TENSORFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(roofline_mod, "measure_gemm_gflops", lambda: 100.0)
    monkeypatch.setattr(roofline_mod, "measure_copy_gbs", lambda threads: 10.0)
    roofline_mod.get_roofline(measure=True)
    return tmp_path


def _rows_by_key(model: dict) -> dict:
    return {c["key"]: c for c in model["contenders"]}


def test_zoo_bench_reports_every_contender_consistently(cache, capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    compiled = []

    def fake_compile(module, backend=None, options=None):      # Inductor would take seconds
        compiled.append((backend, options))
        return module

    monkeypatch.setattr(torch, "compile", fake_compile)
    js, png = cache / "b.json", cache / "b.png"
    code, out, err = run_cli(["bench", "mlp_small", "--json", js, "--chart", png, *FAST], capsys)
    assert code == 0, err
    assert compiled == [("inductor", None), ("inductor", {"freezing": True})]
    result = json.loads(js.read_text())
    (model,) = result["models"]
    assert model["check"]["ok"] and model["check"]["reference"] == "torch"
    assert model["check"]["max_rel_err"] < 1e-4
    rows = _rows_by_key(model)
    assert list(rows) == ["tensorforge", "eager", "inductor", "inductor-freezing", "onnxruntime"]
    tf_ms = rows["tensorforge"]["median_ms"]
    # mlp_small: 784*64 + 64*64 + 64*10 multiply-adds per sample at batch 1, plus bias and ReLU
    assert 2 * (784 * 64 + 64 * 64 + 64 * 10) <= model["gflop"] * 1e9 <= 2.1 * (784 * 64 + 64 * 64 + 64 * 10)
    for key, row in rows.items():
        assert row["median_ms"] > 0 and row["rounds"] == 2
        assert row["max_rel_err"] < 1e-4, key
        assert row["gflops"] == pytest.approx(model["gflop"] / (row["median_ms"] / 1e3), rel=1e-9)
        assert row["pct_peak"] == pytest.approx(100 * row["gflops"] / model["peak_gflops"], rel=1e-9)
        if key != "tensorforge":
            assert row["tf_speedup"] == pytest.approx(row["median_ms"] / tf_ms, rel=1e-9)
            assert re.search(rf"{re.escape(row['name'])}\s+{row['median_ms']:.2f}\s+{row['tf_speedup']:.2f}x", out)
    # 100 GFLOP/s on all cores, scaled to the one thread used; 10 GB/s
    assert model["peak_gflops"] == pytest.approx(100.0 / roofline_mod.host_key()["threads"])
    assert model["memory_bound"] is (model["intensity"] < model["peak_gflops"] / 10.0)
    assert "outputs match torch" in out and "100 GFLOP/s GEMM peak" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_onnx_bench_skips_torch_peers_with_a_note(tiny_onnx, cache, capsys):
    pytest.importorskip("onnxruntime")
    path, _ = tiny_onnx
    js = cache / "o.json"
    code, out, err = run_cli(["bench", path, "--shape", "N=3", "--json", js, "--chart", cache / "o.png",
                              "--peers", "eager,onnxruntime", *FAST], capsys)
    assert code == 0, err
    (model,) = json.loads(js.read_text())["models"]
    assert [c["key"] for c in model["contenders"]] == ["tensorforge", "onnxruntime"]
    assert model["check"]["reference"] == "onnxruntime"
    assert [s["peer"] for s in model["skipped"]] == ["eager"]
    assert "skipped torch eager: needs a PyTorch model" in out
    assert model["gflop"] * 1e9 == 2 * 3 * 4 * 5 + 3 * 5 + 3 * 5                # matmul, add, relu
    assert model["mbytes"] * 1e6 == 4 * (3 * 4 + 3 * 5 + 4 * 5 + 5)              # x, y, W, b


def test_output_mismatch_exits_3(tiny_onnx, cache, capsys, monkeypatch):
    from tensorforge.commands import loading
    path, _ = tiny_onnx
    monkeypatch.setattr(loading, "_onnxruntime_reference",
                        lambda proto, names, threads: (lambda arrays: [np.zeros((3, 5), np.float32) + 7], ""))
    code, out, err = run_cli(["bench", path, "--shape", "N=3", "--peers", "none", "--json", cache / "m.json",
                              "--chart", cache / "m.png", *FAST], capsys)
    assert code == 3
    assert "OUTPUT MISMATCH" in out and "output mismatch in tiny" in err


def test_tuned_build_is_tuned_within_the_budget_and_timed_with_the_rest(cache, capsys):
    """--tuned DB --tune-budget S: the model is tuned into DB first, then a second tensorforge
    build with DB's records is checked and timed beside the untuned one (--db none)."""
    from tensorforge.tune.database import TuningDatabase
    db, js = cache / "tune.sqlite", cache / "t.json"
    code, out, err = run_cli(["bench", "mlp_small", "--peers", "none", "--db", "none", "--tuned", db,
                              "--tune-budget", "30", "--tune-trials", "4", "--json", js, "--chart", cache / "t.png",
                              *FAST], capsys)
    assert code == 0, err
    (model,) = json.loads(js.read_text())["models"]
    rows = _rows_by_key(model)
    assert list(rows) == ["tensorforge", "tensorforge-tuned"]
    tuning = model["tuning"]
    assert 1 <= tuning["trials"] <= 4 + tuning["tasks"] and tuning["budget_s"] == 30.0
    with TuningDatabase(str(db)) as opened:
        assert opened.count() >= 1
    tuned, untuned = rows["tensorforge-tuned"], rows["tensorforge"]
    assert tuned["max_rel_err"] < 1e-4 and "tuned_speedup" not in tuned
    assert untuned["tuned_speedup"] == pytest.approx(untuned["median_ms"] / tuned["median_ms"], rel=1e-9)
    assert tuned["tf_speedup"] == pytest.approx(tuned["median_ms"] / untuned["median_ms"], rel=1e-9)
    assert "tuned x" in out and f"{untuned['tuned_speedup']:.2f}x" in out
    assert re.search(r"tuning took \d+ s \(budget 30 s for the whole tune: setup \d+ s, search \d+ s", out)
    assert set(tuning["phases"]) >= {"setup", "search", "confirmation", "model check"}


def test_tune_budget_without_a_database_is_an_error(capsys):
    code, _, err = run_cli(["bench", "mlp_small", "--tune-budget", "5", "--no-progress"], capsys)
    assert code == 1 and "--tune-budget needs --tuned DB" in err


def test_bad_model_is_exit_1_with_one_line(capsys):
    code, out, err = run_cli(["bench", "not_a_model", "--peers", "none", "--no-progress"], capsys)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("tensorforge: error: unknown model 'not_a_model'")


def test_unknown_peer_is_a_usage_error(capsys):
    code, _, err = run_cli(["bench", "mlp_small", "--peers", "eager,tvm"], capsys)
    assert code == 2 and "unknown peer tvm" in err


def test_roofline_is_measured_cached_and_scaled(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORFORGE_CACHE", str(tmp_path))
    assert roofline_mod.get_roofline() is None
    assert roofline_mod.measure_gemm_gflops(n=128, repeats=1) > 0
    assert roofline_mod.measure_copy_gbs(threads=2, mib=4, repeats=1) > 0
    monkeypatch.setattr(roofline_mod, "measure_gemm_gflops", lambda: 200.0)
    monkeypatch.setattr(roofline_mod, "measure_copy_gbs", lambda threads: 20.0)
    measured = roofline_mod.get_roofline(measure=True)
    assert roofline_mod.get_roofline() == measured
    assert measured.peak_gflops(measured.threads) == 200.0
    assert measured.peak_gflops(1) == pytest.approx(200.0 / measured.threads)
    assert measured.balance() == pytest.approx(10.0)


def test_gemm_peak_is_measured_without_blas_core_overrides(monkeypatch):
    """OPENBLAS_CORETYPE=Haswell (as this workplace sets) runs AVX2 kernels on an AVX-512 machine:
    the peak is measured in a child process whose environment drops it."""
    import subprocess

    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.setenv("OPENBLAS_L2_SIZE", "512")
    seen = {}

    def fake_run(cmd, env, **kw):
        seen["env"] = env
        return subprocess.CompletedProcess(cmd, 0, stdout="123.5\n", stderr="")

    monkeypatch.setattr(roofline_mod.subprocess, "run", fake_run)
    assert roofline_mod.measure_gemm_gflops(n=64, repeats=1) == 123.5
    assert "OPENBLAS_CORETYPE" not in seen["env"] and "OPENBLAS_L2_SIZE" not in seen["env"]


def test_graph_work_of_a_matmul():
    from tensorforge.ir.builtin import ModuleOp
    from tensorforge.ir.types import tensor

    m = ModuleOp.create()
    f = m.add_function("main", [tensor((8, 16)), tensor((16, 4))], arg_names=["a", "b"])
    f.set_return([f.builder().graph.matmul(f.args[0], f.args[1])])
    assert graph_flops(m) == 2 * 8 * 16 * 4
    assert graph_bytes(m) == 4 * (8 * 16 + 16 * 4 + 8 * 4)


def test_tfm_bench_times_tensorforge_alone_and_says_why(tiny_onnx, cache, capsys):
    path, _ = tiny_onnx
    tfm = cache / "tiny.tfm"
    assert run_cli(["compile", path, "--shape", "N=2", "-o", tfm, "--no-check"], capsys)[0] == 0
    js = cache / "t.json"
    code, out, err = run_cli(["bench", tfm, "--json", js, "--chart", cache / "t.png", *FAST], capsys)
    assert code == 0, err
    (model,) = json.loads(js.read_text())["models"]
    assert [c["key"] for c in model["contenders"]] == ["tensorforge"]
    assert {s["peer"] for s in model["skipped"]} == {"eager", "inductor", "inductor-freezing", "onnxruntime"}
    assert model["check"]["reference"] is None and "outputs not checked" in out


def test_output_errors_see_a_nan_the_reference_lacks():
    """A NaN in tensorforge's output where the reference has a number is an infinite error (the
    first real-GPU run reported 'max abs err 0.0' for NaN outputs: max(0.0, nan) is 0.0); a NaN
    or infinity both sides have is agreement; the scale ignores the reference's infinities."""
    from tensorforge.benchmark.stats import max_abs_diff_all, max_rel_err
    nan, inf = np.nan, np.inf
    assert max_abs_diff_all([np.array([nan, 1.0])], [np.array([0.0, 1.0])]) == inf
    assert max_rel_err(np.array([0.0, nan]), np.array([0.0, 2.0])) == inf
    assert max_rel_err(np.array([1.0, nan, -inf, 3.0]), np.array([1.0, nan, -inf, 4.0])) == 0.25
    assert max_rel_err(np.array([1.0, inf]), np.array([1.0, -inf])) == inf
    assert max_abs_diff_all([np.array([nan, 2.5])], [np.array([nan, 2.0])]) == 0.5


def test_tensorforge_rows_time_the_users_call_with_torch_tensors(cache, capsys, monkeypatch):
    """The timed tensorforge call is ``cm(x)`` with the torch tensors a zoo model's user holds
    (argument checks, outputs back to torch included), not ``cm.run`` on arrays."""
    torch = pytest.importorskip("torch")
    from tensorforge.api import CompiledModel
    seen = []
    call = CompiledModel.__call__

    def recording_call(self, *inputs):
        seen.append(tuple(type(x) for x in inputs))
        return call(self, *inputs)

    monkeypatch.setattr(CompiledModel, "__call__", recording_call)
    code, _, err = run_cli(["bench", "mlp_small", "--peers", "eager", *FAST], capsys)
    assert code == 0, err
    assert len(seen) >= 2 + 2                  # warm-up and timed rounds at least
    assert all(types == (torch.Tensor,) for types in seen)
