"""``schedule/index_fold.py``: a split axis joined again (heads split off and merged back) addresses
memory as ``(e // d) * d + e % d``, which is ``e``; the fold gives the loads their loop index back
(contiguous vector loads instead of gathers) and changes no value."""
import numpy as np
import pytest

import tensorforge
import tensorforge.codegen.c.model as model_c

torch = pytest.importorskip("torch")


class Heads(torch.nn.Module):
    """Split the channels into heads, an elementwise op per head, merge them back: one kernel."""

    def forward(self, x):
        h = x.view(1, 16, 4, 8).permute(0, 2, 1, 3)
        h = torch.round(h * 3.0) + 1.0
        return h.permute(0, 2, 1, 3).reshape(1, 16, 32) * 0.5


def test_split_and_joined_axis_is_addressed_by_its_loop_index(monkeypatch):
    folded = []
    real = model_c.fold_div_mod
    monkeypatch.setattr(model_c, "fold_div_mod", lambda fn: folded.append(real(fn)) or folded[-1])
    x = torch.randn(1, 16, 32)
    x.view(-1)[:4] = torch.tensor([float("nan"), float("inf"), -0.0, 2.5])
    cm = tensorforge.compile(Heads(), (x,), db=None)
    assert sum(folded) >= 1
    np.testing.assert_array_equal(cm(x).numpy(), Heads()(x).numpy())


@pytest.mark.parametrize("e", [-130, -65, -64, -1, 0, 1, 63, 64, 65, 1000])
def test_the_identity_holds_for_every_integer(e):
    """floor division and its non-negative remainder, as the kernels' helpers compute them."""
    for d in (1, 3, 64):
        assert (e // d) * d + e % d == e
