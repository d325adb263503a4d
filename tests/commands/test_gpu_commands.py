"""``--target opencl|cuda`` on the command line: ``run`` compiles and runs on the OpenCL driver,
``explain --html --target cuda`` writes the per-kernel table (threads, shared memory, registers)."""
from __future__ import annotations

import pytest

from tests.commands.conftest import run_cli

pytest.importorskip("torch")


def test_explain_html_for_cuda_lists_kernels_with_registers(tmp_path, capsys):
    from tensorforge.codegen.cuda.nvrtc import nvrtc_available
    if not nvrtc_available():
        pytest.skip("NVRTC missing")
    page = tmp_path / "r.html"
    code, out, err = run_cli(["explain", "mlp_small", "--target", "cuda", "--html", page], capsys)
    assert code == 0, err
    assert "cuda kernels" in out and "0 over a limit" in out
    html = page.read_text()
    for column in ("threads", "shared B", "registers", "spill B"):
        assert f"<th>{column}</th>" in html
    assert "k0_" in html and "compiled by NVRTC for sm_90" in html


def test_run_on_opencl(capsys):
    from tensorforge.runtime.opencl import opencl_available
    if not opencl_available():
        pytest.skip("no OpenCL driver")
    code, out, err = run_cli(["run", "mlp_small", "--target", "opencl", "--random", "--repeats", "2"], capsys)
    assert code == 0, err
    assert "target opencl" in out and "latency: median" in out


def test_tune_for_opencl_writes_gpu_records(tmp_path, capsys):
    from tensorforge.runtime.opencl import opencl_available
    if not opencl_available():
        pytest.skip("no OpenCL driver")
    db = tmp_path / "t.sqlite"
    code, out, err = run_cli(["tune", "mlp_small", "--target", "opencl", "--trials", "4", "--db", db, "--quiet"],
                             capsys)
    assert code == 0, err
    from tensorforge.codegen.target import GpuTarget
    from tensorforge.tune.database import TuningDatabase
    with TuningDatabase(db) as database:
        assert database.count(target_key=GpuTarget.opencl_default().key()) >= 3
