"""Float sums of vectorized reduction loops run on several vector accumulators
(``FunctionEmitter.split_sum``): the results still match torch, with a tail of leftover
iterations or without, and NaN, infinities and signed zeros come out as torch gives them."""
from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorforge  # noqa: E402

PARTIALS = re.compile(r"float (t\d+)_p\d+\[(\d+)\]")


class Stats(torch.nn.Module):
    """A row sum, a softmax and a LayerNorm: the sums of the reduction kernels a model has."""

    def __init__(self, width: int):
        super().__init__()
        self.ln = torch.nn.LayerNorm(width)
        with torch.no_grad():
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return x.sum(-1), torch.softmax(x, -1), self.ln(x)


def rows(width: int) -> torch.Tensor:
    x = torch.from_numpy(np.random.default_rng(width).standard_normal((6, width)).astype(np.float32)) * 3
    x[1, width // 3] = float("nan")                # a NaN in one row
    x[2, 5] = float("inf")                         # +inf: the sum is +inf, softmax NaN (inf - inf)
    x[3, 7], x[3, width - 1] = float("inf"), float("-inf")       # inf - inf: NaN
    x[4] = -0.0
    x[5, -3:] = 3e38                               # the tail (when there is one) overflows to +inf
    return x


@pytest.mark.parametrize("width", [100, 768])       # 96 + a tail of 4; 24 blocks of 32, no tail
def test_split_sums_match_torch_with_the_specials(width):
    module, x = Stats(width).eval(), rows(width)
    cm = tensorforge.compile(module, (x,), threads=2)
    lanes = {int(n) for _, n in PARTIALS.findall(cm.native.source)}
    assert lanes == {32}, lanes                    # four AVX2 vectors of partial sums per float sum
    assert ("reduction(tf_fadd:" in cm.native.source) == (width % 32 != 0)    # the tail loop
    with torch.no_grad():
        want = module(x)
    got = cm(x)
    # row 5's mean overflows: LayerNorm gives NaN there, torch a finite row (a difference older
    # than the split sums), so that row is compared for the sum and the softmax only
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = (g[:5], w[:5]) if k == 2 else (g, w)
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-5, atol=2e-6)
        assert torch.equal(torch.isnan(g), torch.isnan(w))
    total = got[0]
    assert total[2].item() == float("inf") and total[5].item() == float("inf")
    assert torch.isnan(total[1]) and torch.isnan(total[3])
    # a row of -0.0s sums to +0.0 in torch (its sum starts at +0.0), and here
    assert total[4].item() == 0.0 and np.signbit(total[4].item()) == np.signbit(want[0][4].item())


def test_short_rows_keep_the_simd_reduction_clause():
    """Under two blocks of two vectors there is nothing to split: one vector accumulator."""
    module, x = Stats(24).eval(), torch.randn(5, 24)
    cm = tensorforge.compile(module, (x,), threads=1)
    assert not PARTIALS.search(cm.native.source) and "reduction(tf_fadd:" in cm.native.source
    with torch.no_grad():
        for g, w in zip(cm(x), module(x)):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-5, atol=2e-6)
