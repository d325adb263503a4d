"""The auto-tuner's GPU space (tune/gpu.py) on OpenCL (PoCL in CI): a small MLP tuned into a
temporary database, compile applying what it found, and candidates rejected before measurement."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from tensorforge.runtime.opencl import opencl_available  # noqa: E402

pytestmark = pytest.mark.skipif(not opencl_available(), reason="no OpenCL driver (install pocl-opencl-icd)")

import tensorforge  # noqa: E402
from tensorforge.codegen.target import GpuTarget  # noqa: E402
from tensorforge.schedule.gpu import DEFAULT_CONFIG, GpuConfig  # noqa: E402
from tensorforge.tune.database import Record, TuningDatabase  # noqa: E402
from tensorforge.tune.gpu import (DEFAULT_KEY, GpuMeasurer, GpuTuneReport, config_dict,  # noqa: E402
                                  gpu_lowered_function, gpu_space, gpu_tasks, gpu_tuning_from_db, printed_form, resolve_target,
                                  schedule_strategies, tune_gpu)

MAX_REL_ERR = 1e-4


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 32)).eval()
    return model, torch.randn(16, 64)


@pytest.fixture(scope="module")
def target():
    return resolve_target("opencl")


@pytest.fixture(scope="module")
def tasks(mlp, target):
    model, x = mlp
    return gpu_tasks(gpu_lowered_function(model, (x,), target))


@pytest.fixture(scope="module")
def tuned(mlp, tmp_path_factory):
    """(db path, report) of 6 trials through ``tensorforge.tune(..., target="opencl")``."""
    model, x = mlp
    path = tmp_path_factory.mktemp("gpu-tune") / "tune.sqlite"
    report = tensorforge.tune(model, (x,), trials=6, db=str(path), target="opencl", progress=False)
    return str(path), report


def _rel_err(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def _expected_schedules(tasks, target, config_for) -> dict[str, str]:
    """Kernel name -> the schedule description its applied config gives (what KernelInfo shows)."""
    return {t.name: "; ".join(schedule_strategies(t.kernel, target, config_for(t.kernel))) for t in tasks}


def test_space_varies_only_the_tile_knobs_of_a_gemm_and_prints_each_candidate_once(tasks, target):
    kernel = tasks[0].kernel
    space = gpu_space(kernel, target)
    assert space[0] == DEFAULT_CONFIG and len(space) > 4
    assert all(not c.problems(target.max_threads_per_block) for c in space)
    assert {(c.flat_threads, c.reduce_threads) for c in space} == {(256, 256)}      # no flat/reduce nest
    forms = [printed_form(kernel, c, target) for c in space]
    assert len(set(forms)) == len(forms)


def test_tune_records_configs_for_the_gpu_target(tuned, tasks, target):
    path, report = tuned
    assert isinstance(report, GpuTuneReport) and report.trials == 6
    assert {k.name for k in report.kernels} == {t.name for t in tasks}
    assert all(np.isfinite(k.default_s) and k.best_s <= k.default_s for k in report.kernels)
    assert "gemm" in str(report) and json.loads(json.dumps(report.to_dict()))["trials"] == 6
    with TuningDatabase(path, readonly=True) as db:
        for t in tasks:
            records = db.records(t.key, target.key())
            assert records and DEFAULT_KEY in db.measured_configs(t.key, target.key())
            assert all(GpuConfig(**r.config) for r in records)
        assert {w.key for w in db.workloads()} >= {t.key for t in tasks}


def test_a_second_run_with_the_same_database_measures_nothing(tuned, mlp):
    path, _ = tuned
    model, x = mlp
    report = tensorforge.tune(model, (x,), trials=6, db=path, target="opencl", progress=False)
    assert report.trials == 0


def test_compile_applies_the_best_config_and_matches_torch(tuned, mlp, tasks, target):
    path, _ = tuned
    model, x = mlp
    config_for = gpu_tuning_from_db(path, target)
    cm = tensorforge.compile(model, (x,), target="opencl", db=path)
    got = {k.origin: k.schedule for k in cm.native.program.kernels.values()}
    assert got == _expected_schedules(tasks, target, config_for)
    with torch.no_grad():
        assert _rel_err(cm(x).numpy(), model(x).numpy()) < MAX_REL_ERR


def test_compile_applies_a_non_default_config_that_was_best(tmp_path, mlp, tasks, target):
    """A database whose fastest record for every kernel is a 16x16 tile with 2x2 micro-tiles."""
    model, x = mlp
    tuned = GpuConfig(tm=16, tn=16, tk=8, micro=2)
    path = str(tmp_path / "forced.sqlite")
    with TuningDatabase(path) as db:
        db.add_records([Record(t.key, target.key(), config_dict(cfg), (s,))
                        for t in tasks for cfg, s in ((DEFAULT_CONFIG, 2e-3), (tuned, 1e-3))])
    config_for = gpu_tuning_from_db(path, target)
    assert all(config_for(t.kernel) == tuned for t in tasks)
    cm = tensorforge.compile(model, (x,), target="opencl", db=path)
    schedules = {k.origin: k.schedule for k in cm.native.program.kernels.values()}
    assert schedules == _expected_schedules(tasks, target, config_for)
    assert all("2x2 registers per thread" in s for s in schedules.values())
    untuned = tensorforge.compile(model, (x,), target="opencl", db=None)
    assert untuned.native.program.source != cm.native.program.source
    with torch.no_grad():
        assert _rel_err(cm(x).numpy(), model(x).numpy()) < MAX_REL_ERR


def test_no_database_means_no_tuning(tmp_path, target):
    assert gpu_tuning_from_db(None, target) is None
    assert gpu_tuning_from_db("auto", target) is None          # tests/conftest.py: no default database


def test_a_candidate_over_the_shared_memory_limit_is_rejected_before_measurement(tmp_path, mlp):
    model, x = mlp
    small = dataclasses.replace(GpuTarget.opencl_default(), shared_per_block=1024)
    path = str(tmp_path / "small.sqlite")
    report = tune_gpu(model, (x,), small, trials=1, db=path)
    first = report.kernels[0]
    assert (first.measured, first.rejected) == (0, 1) and first.best_config is None
    with TuningDatabase(path, readonly=True) as db:
        (rec,) = db.records(first.key, small.key())
    assert not rec.latencies and rec.error.startswith("rejected before measurement")
    assert "bytes of shared memory" in rec.error and "1024" in rec.error


def test_a_candidate_over_the_register_limit_is_rejected_through_nvrtc(tasks):
    from tensorforge.codegen.cuda.nvrtc import nvrtc_available
    if not nvrtc_available():
        pytest.skip("NVRTC is not installed: OpenCL candidates are not register-checked")
    few = dataclasses.replace(GpuTarget.opencl_default(), registers_per_thread=8)
    result = GpuMeasurer(few).measure(tasks[0], DEFAULT_CONFIG)
    assert not result.latencies and result.error.startswith("rejected before measurement")
    assert "registers per thread, more than the 8" in result.error
