"""graph.attention vs torch scaled_dot_product_attention and a NumPy reference, shape rules, cost."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tensorforge.errors import ShapeError
from tensorforge.ir import tensor

from .nn_harness import assert_close, cost, rand, result_type, run


def _t(a):
    return torch.from_numpy(a)


def _sdpa(q, k, v, mask=None, causal=False, scale=None):
    return F.scaled_dot_product_attention(_t(q), _t(k), _t(v), attn_mask=None if mask is None else _t(mask),
                                          is_causal=causal, scale=scale).numpy()


def _reference(q, k, v, keep=None, add=None, scale=None):
    """Row by row in float64: the textbook definition."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2)) * scale
    if add is not None:
        s = s + add
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    with np.errstate(invalid="ignore"):                   # fully masked rows become NaN here
        p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("lq,lk", [(5, 5), (3, 7)])
def test_attention_matches_torch_sdpa(rng, lq, lk):
    q, k, v = rand(rng, 2, 3, lq, 8), rand(rng, 2, 3, lk, 8), rand(rng, 2, 3, lk, 4)
    assert_close(run("attention", q, k, v), _sdpa(q, k, v))
    assert_close(run("attention", q, k, v, scale=0.3), _sdpa(q, k, v, scale=0.3))
    assert_close(run("attention", q, k, v, causal=True), _sdpa(q, k, v, causal=True))


def test_attention_masks_match_torch_sdpa(rng):
    q, k, v = rand(rng, 2, 2, 4, 8), rand(rng, 2, 2, 6, 8), rand(rng, 2, 2, 6, 8)
    keep = rng.random((2, 1, 4, 6)) > 0.3
    keep[..., 0] = True                                   # every row sees at least one key
    assert_close(run("attention", q, k, v, keep), _sdpa(q, k, v, keep))
    additive = rand(rng, 4, 6)
    assert_close(run("attention", q, k, v, additive), _sdpa(q, k, v, additive))


def test_attention_causal_plus_mask_and_broadcast_batch(rng):
    q, k, v = rand(rng, 2, 4, 5, 8), rand(rng, 1, 4, 5, 8), rand(rng, 2, 1, 5, 3)    # leading dims broadcast
    keep = rng.random((5, 5)) > 0.4
    y = run("attention", q, k, v, keep, causal=True)
    assert y.shape == (2, 4, 5, 3)
    tri = np.tril(np.ones((5, 5), bool))
    expected = np.zeros(y.shape)
    rows = (keep & tri).any(-1)                            # rows that see no key give 0
    ref = _reference(q, k, v, keep=keep & tri)
    expected[..., rows, :] = ref[..., rows, :]
    assert not rows.all()                                  # the test covers a fully masked row
    assert_close(y, expected)


def test_attention_fully_masked_rows_are_zero(rng):
    q, k, v = rand(rng, 1, 3, 4), rand(rng, 1, 5, 4), rand(rng, 1, 5, 4)
    keep = np.ones((3, 5), bool)
    keep[1] = False
    y = run("attention", q, k, v, keep)
    assert np.isfinite(y).all() and (y[0, 1] == 0).all()
    assert_close(y[0, [0, 2]], _reference(q, k, v)[0, [0, 2]])


def test_attention_shapes_and_errors():
    assert result_type("attention", tensor(("B", 12, "S", 64)), tensor(("B", 12, "S", 64)),
                       tensor(("B", 12, "S", 32))) == tensor(("B", 12, "S", 32))
    cases = [
        ((2, 5, 8), (2, 6, 4), (2, 6, 4), None, "head dim"),
        ((2, 5, 8), (2, 6, 8), (2, 7, 8), None, "key length"),
        ((2, 5, 8), (2, 6, 8), (2, 6, 8), tensor((5, 7), "i1"), "does not broadcast to the scores"),
        ((2, 5, 8), (2, 6, 8), (2, 6, 8), tensor((5, 6), "i32"), "mask must be i1"),
        ((8,), (6, 8), (6, 8), None, "q must be"),
    ]
    for q, k, v, mask, needle in cases:
        types = [tensor(q), tensor(k), tensor(v)] + ([mask] if mask is not None else [])
        with pytest.raises(ShapeError, match=needle) as e:
            result_type("attention", *types)
        assert "graph.attention" in str(e.value)


def test_attention_cost():
    c = cost("attention", tensor((2, 4, 16, 32)), tensor((2, 4, 24, 32)), tensor((2, 4, 24, 8)))
    pairs = 2 * 4 * 16 * 24
    assert c.flops == 2 * pairs * (32 + 8) + 5 * pairs
