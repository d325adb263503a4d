"""A depthwise convolution fused with the 1x1 convolution after it (``codegen/c/dw_pw.py``).

Inverted-residual blocks (1x1 expand + ReLU6, depthwise + epilogue, 1x1 project, residual) at a
batch that gives both threads whole images: the fused kernel must be used, its outputs must be
bit-identical to the two kernels' (``TENSORFORGE_DW_PW=0``: the same arithmetic in the same
order), and agree with torch, NaN and Inf at the same positions.  The blocks cover stride 1 and
2, odd map sizes, several bands per image, a 5x5 depthwise with SiLU (its epilogue a callback),
and a project layer as wide as the expand layer.  That the memory plan keeps the depthwise input
alive until the fused call is tested with the planner (tests/runtime/test_arena_plan.py).
"""
import numpy as np
import pytest

import tensorforge
from tensorforge.codegen.c import dw_pw

torch = pytest.importorskip("torch")

MARK = "depthwise + pointwise fused (dw_pw.py)"


class Block(torch.nn.Module):
    def __init__(self, c, e, co, k, stride, act):
        super().__init__()
        self.expand = torch.nn.Conv2d(c, e, 1)
        self.dw = torch.nn.Conv2d(e, e, k, stride, k // 2, groups=e)
        self.project = torch.nn.Conv2d(e, co, 1)
        self.act, self.residual = act, stride == 1 and c == co

    def forward(self, x):
        y = torch.nn.functional.relu6(self.expand(x))
        y = self.dw(y)
        y = torch.nn.functional.silu(y) if self.act == "silu" else torch.nn.functional.relu6(y)
        y = self.project(y)
        return y + x if self.residual else y


class Blocks(torch.nn.Module):
    def __init__(self, specs, block=Block):
        super().__init__()
        self.blocks = torch.nn.ModuleList([block(*s) for s in specs])

    def forward(self, *xs):
        return tuple(b(x) for b, x in zip(self.blocks, xs))


# (in channels, expanded, out channels, kernel, stride, depthwise activation), input size
SPECS = [((16, 48, 16, 3, 1, "relu6"), 40),      # residual; 48 x 40 x 40 x 4 B: 2 bands
         ((8, 32, 12, 3, 2, "relu6"), 61),       # stride 2, odd size
         ((8, 24, 24, 5, 1, "silu"), 45),        # 5x5, SiLU callback; project as wide as the expand
         ((12, 96, 24, 3, 1, "relu6"), 56)]      # several bands per image


def _inputs(batch):
    g = torch.Generator().manual_seed(0)
    xs = []
    for (c, *_), hw in SPECS:
        x = torch.randn(batch, c, hw, hw, generator=g)
        x[0, 0, 3, 4] = float("nan")
        x[-1, c - 1, hw - 1, hw // 2] = float("inf")
        x[-1, 1, hw // 2, 0] = -float("inf")
        xs.append(x)
    return xs


def _close(out, ref):
    out, ref = np.asarray(out), ref.detach().numpy()
    for test in (np.isnan, np.isposinf, np.isneginf):
        assert np.array_equal(test(out), test(ref))
    fin = np.isfinite(ref)
    scale = float(np.abs(ref[fin]).max())
    assert float(np.abs(out[fin] - ref[fin]).max()) <= 1e-4 * scale


def check_pairs(monkeypatch, model, xs, env: str, mark: str, pairs: int, each=None) -> list[str]:
    """Compiles ``model`` with a fusion on and off (``env`` set to "0"): the fused build has
    ``pairs`` kernels described by ``mark`` (one name per kernel, the pair's twice), the other
    none; both give bit-identical outputs that match torch, twice (the per-thread band buffers
    carry nothing over), ``each`` run on every fused output.  Returns the fused descriptions."""
    fused = tensorforge.compile(model, tuple(xs), threads=2)
    monkeypatch.setenv(env, "0")
    plain = tensorforge.compile(model, tuple(xs), threads=2)
    described = [t for t in fused.native.layout.schedules.values() if mark in t]
    assert len(described) == pairs
    assert not any(mark in t for t in plain.native.layout.schedules.values())
    names = fused.native.layout.kernel_names
    assert len(names) == len(plain.native.layout.kernel_names)
    assert sum(a == b for a, b in zip(names, names[1:])) == pairs
    with torch.no_grad():
        refs = model(*xs)
    for _ in range(2):
        for a, b, r in zip(fused(*xs), plain(*xs), refs):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
            _close(a, r)
            if each is not None:
                each(np.asarray(a))
    return described


def test_fused_blocks_match_the_two_kernels_and_torch(monkeypatch):
    torch.manual_seed(0)
    model = Blocks([s for s, _ in SPECS]).eval()
    described = check_pairs(monkeypatch, model, _inputs(2), dw_pw.ENV, MARK, len(SPECS))
    assert any("band(s) of" in t and "2 band(s)" not in t and "1 band(s)" not in t for t in described)


def test_batch_one_keeps_two_kernels():
    """At batch 1 the bands' costs outweigh the saved traffic (see ``dw_pw.fusable``)."""
    model = Blocks([SPECS[0][0]]).eval()
    cm = tensorforge.compile(model, (torch.randn(1, 16, 40, 40),), threads=2)
    assert not any(MARK in t for t in cm.native.layout.schedules.values())


def test_bands_cover_the_plane_evenly():
    class Plan:                     # the fields band_rows reads
        def __init__(self, channels, oh, ow):
            self.plan = type("P", (), {"channels": channels, "shape": type("S", (), {"oh": oh, "ow": ow})()})()
    for channels, oh, ow in [(32, 112, 112), (144, 56, 56), (192, 28, 28), (8, 3, 3)]:
        rows, bands = dw_pw.band_rows(Plan(channels, oh, ow))
        assert rows * bands >= oh > rows * (bands - 1)
        assert bands == 1 or channels * rows * ow * 4 <= dw_pw.BAND_BYTES
