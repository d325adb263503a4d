"""The small zoo models compiled with ``target="opencl"`` and run on an OpenCL driver (PoCL in CI):
outputs within 1e-4 (max error relative to the largest reference value) of torch and of the C
backend.  The full-size models are measured by ``benchmarks/gpu_correctness.py``."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from tensorforge.runtime.opencl import opencl_available  # noqa: E402

pytestmark = pytest.mark.skipif(not opencl_available(), reason="no OpenCL driver (install pocl-opencl-icd)")

import tensorforge as tf  # noqa: E402
from tensorforge.models import get  # noqa: E402

SMALL = ["mlp_small", "resnet18_small", "resnet50_small", "mobilenet_v2_small", "efficientnet_b0_small",
         "bert_tiny", "gpt2_tiny"]
MAX_REL_ERR = 1e-4


def _first(out):
    out = out[0] if isinstance(out, (tuple, list)) else out
    return out.detach().numpy() if hasattr(out, "detach") else np.asarray(out)


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / max(np.abs(want).max(), 1e-30))


@pytest.mark.parametrize("name", SMALL)
def test_small_zoo_model_on_opencl_matches_torch_and_c(name):
    module, inputs = get(name)
    with torch.no_grad():
        want = _first(module(*inputs)).astype(np.float64)
    gpu = tf.compile(module, inputs, target="opencl", db=None)
    got = _first(gpu(*inputs))
    assert got.shape == want.shape
    assert _rel_err(got, want) < MAX_REL_ERR
    cpu = _first(tf.compile(module, inputs, db=None)(*inputs))
    assert _rel_err(got, cpu.astype(np.float64)) < MAX_REL_ERR
    program = gpu.native.program
    assert program.language == "opencl" and len(program.launches) >= len(program.kernels) > 0
    assert all(k.threads <= 256 for k in program.kernels.values())


def test_padded_convolution_runs_as_a_tiled_contraction():
    """A 3x3 convolution with padding: the taps outside the image are a mask on the input factor,
    staged as zeros, so the convolution still maps onto the shared-memory tiled GEMM."""
    conv = torch.nn.Sequential(torch.nn.Conv2d(8, 24, 3, padding=1), torch.nn.ReLU()).eval()
    x = torch.randn(2, 8, 10, 9)
    cm = tf.compile(conv, (x,), target="opencl", db=None)
    schedules = [k.schedule for k in cm.native.program.kernels.values()]
    assert any(s.startswith("tiled contraction") for s in schedules), schedules
    with torch.no_grad():
        want = conv(x).numpy().astype(np.float64)
    assert _rel_err(_first(cm(x)), want) < MAX_REL_ERR


def test_elementwise_kernels_move_float4_vectors():
    """A flat elementwise kernel whose innermost extent is a multiple of 4: each thread takes four
    neighbours, loaded and stored as one vector each (vload4/vstore4; float4 in CUDA)."""
    class Mix(torch.nn.Module):
        def forward(self, x, y):
            return torch.relu(x * 2 + y) - x

    x, y = torch.randn(4, 6, 40), torch.randn(4, 6, 40)
    x[0, 0, :4] = float("nan")
    y[1, 2, 8] = float("inf")
    cm = tf.compile(Mix(), (x, y), target="opencl", db=None)
    assert "vload4(0, " in cm.source and "vstore4(" in cm.source
    with torch.no_grad():
        want = Mix()(x, y).numpy()
    np.testing.assert_array_equal(_first(cm(x, y)), want)       # NaN and Inf where torch has them


def test_attention_runs_as_tiled_scores_a_row_fused_softmax_and_tiled_values():
    """``scaled_dot_product_attention`` (one graph.attention op): the scores and the weighted sum
    of v are tiled contractions, the masked softmax between them one launch with a block per
    query row; a NaN query poisons its row as in torch, the causal mask holds."""
    class Attend(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    q, k, v = (torch.randn(2, 3, 80, 16) for _ in range(3))
    q[1, 2, 7, 5] = float("nan")
    cm = tf.compile(Attend(), (q, k, v), target="opencl", db=None)
    kernel = next(iter(cm.native.program.kernels.values()))
    plan = kernel.schedule
    assert plan.startswith("row fusion (4 nests") and plan.count("tiled contraction") == 2, plan
    assert len(cm.native.program.launches) == 3
    with torch.no_grad():
        want = Attend()(q, k, v).numpy()
    got = _first(cm(q, k, v))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    keep = ~np.isnan(want)
    assert _rel_err(got[keep], want[keep].astype(np.float64)) < MAX_REL_ERR
