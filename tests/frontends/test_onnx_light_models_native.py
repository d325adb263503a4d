"""The nine ``light_*`` onnx CNNs compiled to native code (untuned, default pipeline, C with
GEMM micro-kernels) against onnxruntime, with the seeded random weights of
test_onnx_light_models.py; max error relative to the largest logit, 1e-4 (the final softmax
is dropped: see ``_strip_final_softmax``).

Every model links the same cached GEMM translation units (``toolchain.unit``), so after the
first model gcc compiles only each model's own kernels: measured ~40 s for all nine on the
2-core machine with a cold compile cache, split over two xdist workers in CI.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import tensorforge  # noqa: E402

from .test_onnx_light_models import MAX_REL_ERR, NAMES, _rel_err, random_case  # noqa: E402


@pytest.mark.parametrize("name", NAMES)
def test_native_matches_onnxruntime(name):
    model, x, ref = random_case(name, logits=True)
    cm = tensorforge.compile(model, db=None)
    out = cm(x)
    out = out[0] if isinstance(out, (tuple, list)) else out
    assert cm.target == "cpu" and np.isfinite(out).all()
    assert _rel_err(np.asarray(out), ref) < MAX_REL_ERR
