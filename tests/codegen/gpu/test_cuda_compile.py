"""Every kernel of the small zoo models, compiled for CUDA: NVRTC builds the cubin for sm_90 (no GPU
needed), and ptxas reports no spills and nothing over the H200's limits (threads, registers per
SM, static shared memory).  The full-size models are checked by ``benchmarks/gpu_correctness.py``."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from tensorforge.codegen.cuda.nvrtc import check_resources, nvrtc_available  # noqa: E402

pytestmark = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC missing (pip install 'tensorforge[cuda]')")

import tensorforge as tf  # noqa: E402
from tensorforge.models import get  # noqa: E402
from tensorforge.report.gpu import kernel_rows  # noqa: E402

SMALL = ["mlp_small", "resnet18_small", "resnet50_small", "mobilenet_v2_small", "efficientnet_b0_small",
         "bert_tiny", "gpt2_tiny"]


@pytest.mark.parametrize("name", SMALL)
def test_every_kernel_compiles_for_sm90_without_spills_within_limits(name):
    module, inputs = get(name)
    cm = tf.compile(module, inputs, target="cuda", db=None)
    native = cm.native
    kernels = native.program.kernels
    assert native.binary is not None and native.binary.cubin
    assert set(kernels) <= set(native.binary.resources)
    assert check_resources(native.binary.resources, native.target, {k: v.threads for k, v in kernels.items()}) == []
    rows = kernel_rows(native.program, native.target)       # the table explain --html --target cuda shows
    assert all(r["registers"] and r["spill_bytes"] == 0 and not r["problems"] for r in rows)
    assert all(0 < r["threads"] <= 1024 and r["shared_bytes"] <= 48 * 1024 for r in rows)
