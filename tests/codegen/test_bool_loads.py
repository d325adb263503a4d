"""Loop kernels read bool buffers as bytes (``emit_loop``: ``((const uint8_t *)in)[i]``).

gcc leaves a loop that loads ``_Bool`` next to float elements unvectorised ("no vectype"), so
GPT-2's causal softmax (select by the mask, max, exp, sum, divide) ran scalar.  The byte read
converts to the same bool; the results must stay torch's, a fully masked row's NaN included.
"""
import re

import numpy as np
import pytest

import tensorforge

torch = pytest.importorskip("torch")


class MaskedSoftmax(torch.nn.Module):
    def forward(self, scores, keep):
        return torch.where(keep, scores, torch.tensor(float("-inf"))).softmax(-1)


def test_masked_softmax_reads_the_mask_as_bytes():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 4, 37, 37, generator=g) * 4
    keep = torch.ones(37, 37, dtype=torch.bool).tril()
    keep[5] = False                              # a row with nothing kept: NaN, as torch
    scores[0, 1, 9, 3] = float("nan")            # a kept NaN spreads over its row
    scores[1, 2, 20, 30] = float("inf")          # a masked +inf is dropped
    cm = tensorforge.compile(MaskedSoftmax(), (scores, keep))
    assert re.search(r"const bool v\d+ = \(\(const uint8_t \*\)in\d+\)\[", cm.source)
    want = MaskedSoftmax()(scores, keep).numpy()
    got = np.asarray(cm(scores, keep))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[:, :, 5]).all() and np.isnan(got[0, 1, 9]).all()
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5, atol=1e-6)
