"""LayerNorm over the channels of NCHW (issue 15, item 6), end to end on the C backend.

Three spellings of a LayerNorm over dim 1 and a ConvNeXt block, compiled with
``tensorforge.compile`` and compared with torch eager (1e-4 relative), NaN/Inf included; then what
the compiled model is made of:

* a LayerNorm over channels is ONE kernel with no transpose kernel left, and in it the statistics
  of a row of pixels (SIMD lanes along W) are reduced across the channel planes right before that
  row is normalised: one parallel loop, no full-size statistics buffer (``reorder_for_attach`` in
  ``schedule/default.py``, ``read_runs`` in ``fusion/inline.py``);
* in the ConvNeXt block the LayerNorm writes NCHW, read by the first Linear as a transposed operand
  (``channel-norm-into-gemm-a``), and the GELU is that GEMM's epilogue (``reshape-unary-reshape``).
"""
from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorforge  # noqa: E402
from tensorforge.api import import_model  # noqa: E402
from tensorforge.models import convnext  # noqa: E402
from tensorforge.passes.pipeline import optimize  # noqa: E402


LN2d, LN2dFunctional, LN2dManual = convnext.LayerNorm2d, convnext.LayerNorm2dFunctional, convnext.LayerNorm2dManual
ConvNeXtBlock = convnext.ConvNeXtBlock
_model = convnext.build


def _input(shape, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * 2 + 0.5


def _compare(m, x, cm=None):
    cm = cm or tensorforge.compile(m, (x,), threads=2)
    with torch.no_grad():
        ref = m(x).numpy()
    out = cm(x.numpy())
    assert out.shape == ref.shape
    nan = np.isnan(ref)
    np.testing.assert_array_equal(np.isnan(out), nan)
    fin = ~nan
    err = np.abs(out[fin] - ref[fin]).max() / np.abs(ref[fin]).max()
    assert err < 1e-4, f"relative error {err:.2e}"
    return cm


def _kernels(cm) -> list[str]:
    return re.findall(r"^static void (k\d+_\w+)\(", cm.source, flags=re.M)


def _kernel_body(cm, name: str) -> str:
    src = cm.source
    start = src.index(f"static void {name}(")
    return src[start:src.index("\n}\n", start)]


NORMS = [LN2d, LN2dFunctional, LN2dManual]
SHAPES = [(1, 96, 56, 56), (2, 64, 14, 14), (1, 768, 7, 7)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("cls", NORMS, ids=lambda c: c.__name__)
def test_channel_layer_norm_is_one_row_at_a_time_kernel(cls, shape):
    m = _model(cls, shape[1])
    cm = _compare(m, _input(shape))
    names = _kernels(cm)
    assert len(names) == 1, names
    body = _kernel_body(cm, names[0])
    # one parallel loop over (n, h): statistics of a row computed inside it, not a pass over x each
    assert body.count("#pragma omp parallel for") == 1, body
    n, c, h, w = shape
    assert f"[{n * h * w}]" not in body, "a full-size statistics buffer is left"
    assert f"< {n * h}; " in body and f"< {c}; " in body and f"< {w}; " in body


@pytest.mark.parametrize("cls", NORMS, ids=lambda c: c.__name__)
def test_channel_layer_norm_nan_inf_like_torch(cls):
    shape = (2, 64, 14, 14)
    x = _input(shape)
    x[0, 5, 3, 7] = float("nan")
    x[1, 0, 9, 2] = float("inf")
    x[1, 63, 0, 0] = float("-inf")
    x[0, :, 13, 13] = 3.0e38                      # a huge constant row: (x - mean) is exactly 0
    m = _model(cls, shape[1])
    with torch.no_grad():
        ref = m(x).numpy()
    assert np.isnan(ref[0, :, 3, 7]).all() and np.isnan(ref[1, :, 9, 2]).all()
    _compare(m, x)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_convnext_block(shape):
    m = _model(ConvNeXtBlock, shape[1])
    x = _input(shape)
    cm = _compare(m, x)
    names = _kernels(cm)
    assert not [k for k in names if re.fullmatch(r"k\d+_(transpose|reshape)(_(transpose|reshape))*", k)], names
    assert any(k.endswith("_gemm_gelu") for k in names), names          # GELU is the GEMM's epilogue
    norm = [k for k in names if "layer_norm" in k]
    assert len(norm) == 1, names
    assert len(names) == 5, names       # dwconv, LayerNorm, gemm+gelu, gemm, gamma * y^T + x

    mod = import_model(m, (x,))
    optimize(mod)
    gemms = [op for op in mod.main.body if op.name == "graph.gemm"]
    # batch 1: the LayerNorm writes NCHW and the first Linear reads it as a transposed operand
    assert gemms[0].attributes["trans_a"] is (shape[0] == 1)
    body = _kernel_body(cm, norm[0])
    n, c, h, w = shape
    if n == 1:
        # (C, H*W) written a channel row at a time: out0[c * H*W + pixel], not out0[pixel * C + c]
        assert re.search(r"out0\[\(i\d+\) \* %d \+ [iv]\d+\]" % (h * w), body), body
    if w >= 8:
        # the flattened pixel axis is split back into rows: one row of pixels at a time, statistics
        # reduced across the channel planes right before the row is normalised (no full-size buffers)
        assert body.count("#pragma omp parallel for") == 1, body
        assert f"[{n * h * w}]" not in body, body


def test_convnext_block_nan_inf_like_torch():
    shape = (1, 96, 14, 14)
    x = _input(shape)
    x[0, 4, 5, 6] = float("nan")
    x[0, 7, 1, 1] = float("inf")
    _compare(_model(ConvNeXtBlock, shape[1]), x)


def test_norm_layout_option_turns_the_gemm_rewrite_off():
    m = _model(ConvNeXtBlock, 32)
    x = _input((1, 32, 8, 8))
    pipeline = ("const-fold,fold-control-flow,shape-prop,dce,cse,simplify-extra{norm_layout=false},"
                "fold-inference,trim-window,cse,dce,reorder{goal=memory}")
    mod = import_model(m, (x,))
    optimize(mod, passes=pipeline)
    assert not any(op.attributes.get("trans_a") for op in mod.main.body if op.name == "graph.gemm")
    _compare(m, x, tensorforge.compile(m, (x,), threads=2, passes=pipeline))
