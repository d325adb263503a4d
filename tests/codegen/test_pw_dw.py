"""A 1x1 convolution fused with the depthwise convolution after it (``codegen/c/pw_dw.py``).

EfficientNet-like halves of blocks (1x1 expand + activation, depthwise + activation, its output
read by more than a 1x1 convolution, so ``dw_pw`` cannot take it) at a batch that gives both
threads whole images: the fused kernel must be used, its outputs bit-identical to the two kernels'
(``TENSORFORGE_PW_DW=0``: the same arithmetic in the same order) and agree with torch, NaN and Inf
at the same positions.  The cases cover stride 1 and 2, odd sizes, bands with halo rows, a 5x5
depthwise with SiLU (epilogue callbacks on both layers), and a tensor too small to fuse.
"""
import numpy as np
import pytest

import tensorforge
from tensorforge.codegen.c import pw_dw

from .test_dw_pw import Blocks, check_pairs

torch = pytest.importorskip("torch")

MARK = "pointwise + depthwise fused (pw_dw.py)"


class Half(torch.nn.Module):
    """Expand, depthwise, then a squeeze-excitation-like scale: the depthwise output has two users."""

    def __init__(self, c, e, k, stride, act):
        super().__init__()
        self.expand = torch.nn.Conv2d(c, e, 1)
        self.dw = torch.nn.Conv2d(e, e, k, stride, k // 2, groups=e)
        self.act = torch.nn.functional.silu if act == "silu" else torch.nn.functional.relu6

    def forward(self, x):
        y = self.act(self.dw(self.act(self.expand(x))))
        return y * y.mean((2, 3), keepdim=True)


# (in channels, expanded, kernel, stride, activation), input size
SPECS = [((8, 64, 3, 1, "relu6"), 64),      # 1 MB expanded per image: 2 bands
         ((8, 96, 3, 2, "relu6"), 61),      # stride 2, odd size
         ((8, 48, 5, 1, "silu"), 75)]       # 5x5, SiLU callbacks
SMALL = ((8, 16, 3, 1, "relu6"), 32)        # 64 KB expanded: stays two kernels


def _inputs(batch, specs):
    g = torch.Generator().manual_seed(0)
    xs = []
    for (c, *_), hw in specs:
        x = torch.randn(batch, c, hw, hw, generator=g)
        x[0, 0, 3, 4] = float("nan")            # image 0's specials reach all of it through the mean
        x[0, 1, 5, 5] = -float("inf")
        x[0, c - 1, hw - 1, hw // 2] = float("inf")
        xs.append(x)
    return xs


def test_fused_halves_match_the_two_kernels_and_torch(monkeypatch):
    torch.manual_seed(0)
    specs = SPECS + [SMALL]
    model = Blocks([s for s, _ in specs], Half).eval()

    def image_one_finite(out):
        assert np.isfinite(out[1:]).all()      # image 1 holds no specials
    # the small one is not fused
    described = check_pairs(monkeypatch, model, _inputs(2, specs), pw_dw.ENV, MARK, len(SPECS), image_one_finite)
    assert any("2 band(s)" in t for t in described)


def test_batch_one_keeps_two_kernels():
    """One image split between the threads: the bands' halo and narrow GEMMs ate the saving."""
    model = Blocks([SPECS[0][0]], Half).eval()
    cm = tensorforge.compile(model, tuple(_inputs(1, SPECS[:1])), threads=2)
    assert not any(MARK in t for t in cm.native.layout.schedules.values())
