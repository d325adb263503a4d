"""Grouped-query attention in graph.attention: k and v with fewer heads than q.

Every case runs the reference interpreter, the structured kernel and native C (through the
lowering harness) and compares them with torch's ``scaled_dot_product_attention(...,
enable_gqa=True)``, NaN and +inf included: a NaN or +inf score makes its whole row NaN in torch,
masked or not, and native code must not lose it (its ``exp`` clamps its argument).
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tensorforge.errors import ShapeError
from tensorforge.ir import tensor

from ..lowering.harness import check_op
from .nn_harness import cost, rand, result_type


def _sdpa_gqa(q, k, v, mask=None, causal=False, scale=None):
    t = [torch.from_numpy(x) for x in (q, k, v)]
    m = None if mask is None else torch.from_numpy(mask)
    return F.scaled_dot_product_attention(*t, attn_mask=m, is_causal=causal, scale=scale, enable_gqa=True).numpy()


def _check_all_levels(q, k, v, mask=None, **attrs):
    """Interpreter, structured kernel and native C agree with each other and with torch."""
    inputs = [q, k, v] + ([mask] if mask is not None else [])
    (ref,) = check_op("graph.attention", inputs, **attrs)
    expected = _sdpa_gqa(q, k, v, mask, attrs.get("causal", False), attrs.get("scale"))
    np.testing.assert_allclose(ref, expected, rtol=1e-4, atol=1e-5, err_msg="interpreter vs torch SDPA")
    return ref


def _qkv(rng, hq=4, hkv=2, lq=5, lk=5, d=8, dv=3, batch=2):
    return rand(rng, batch, hq, lq, d), rand(rng, batch, hkv, lk, d), rand(rng, batch, hkv, lk, dv)


@pytest.mark.parametrize("causal", [False, True])
def test_gqa_four_query_heads_two_kv_heads(rng, causal):
    q, k, v = _qkv(rng)
    y = _check_all_levels(q, k, v, causal=causal)
    # Query heads 0,1 use KV head 0 and heads 2,3 use KV head 1 (repeat_interleave, not tile).
    wide = _check_all_levels(q, np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1), causal=causal)
    np.testing.assert_array_equal(y, wide)


def test_gqa_with_masks_scale_and_unequal_lengths(rng):
    q, k, v = _qkv(rng, lq=3, lk=7)
    keep = rng.random((2, 1, 3, 7)) > 0.3
    keep[..., 0] = True                                   # every row sees a key (torch would give NaN)
    _check_all_levels(q, k, v, keep)
    additive = rand(rng, 3, 7)
    _check_all_levels(q, k, v, additive, scale=0.25)
    _check_all_levels(q, k, v, causal=True)


def test_multi_query_attention_and_eight_heads_over_two(rng):
    _check_all_levels(*_qkv(rng, hq=4, hkv=1), causal=True)     # MQA: one KV head, plain broadcast
    _check_all_levels(*_qkv(rng, hq=8, hkv=2, batch=1), causal=True)


def test_gqa_nan_in_a_query_row_poisons_that_row_only(rng):
    q, k, v = _qkv(rng)
    q[1, 3, 2, 5] = np.nan
    y = _check_all_levels(q, k, v, causal=True)
    assert np.isnan(y[1, 3, 2]).all()
    assert np.isnan(y).sum() == y.shape[-1]


def test_gqa_nan_in_a_future_key_poisons_every_row_of_its_group(rng):
    """torch adds -inf to masked scores: NaN + -inf is NaN, so even rows that the causal mask
    hides the key from are NaN, in both query heads that share the KV head."""
    q, k, v = _qkv(rng)
    k[0, 1, 4, 0] = np.nan
    y = _check_all_levels(q, k, v, causal=True)
    assert np.isnan(y[0, 2:4]).all()
    assert not np.isnan(y[0, 0:2]).any() and not np.isnan(y[1]).any()


def test_gqa_nan_in_values_and_infinite_scores(rng):
    q, k, v = _qkv(rng)
    v[0, 0, 2, 1] = np.nan          # column 1 of both query heads of KV head 0; masked rows too (0 * NaN)
    y = _check_all_levels(q, k, v, causal=True)
    assert np.isnan(y[0, 0:2, :, 1]).all() and np.isnan(y).sum() == 2 * 5
    q2 = q.copy()
    q2[0, 0, 1, 0] = np.inf                               # +inf and -inf scores: NaN as in torch
    _check_all_levels(q2, k, np.nan_to_num(v), causal=True)


def test_gqa_result_types_and_errors():
    assert result_type("attention", tensor((2, 4, 5, 8)), tensor((2, 2, 6, 8)),
                       tensor((2, 2, 6, 3))) == tensor((2, 4, 5, 3))
    assert result_type("attention", tensor(("B", 8, "S", 16)), tensor(("B", 2, "S", 16)),
                       tensor(("B", 2, "S", 16))) == tensor(("B", 8, "S", 16))
    assert result_type("attention", tensor((1, 1, 5, 8)), tensor((1, 3, 5, 8)),
                       tensor((1, 3, 5, 8))) == tensor((1, 3, 5, 8))      # q's heads broadcast
    with pytest.raises(ShapeError, match="multiple of the KV heads") as e:
        result_type("attention", tensor((1, 4, 5, 8)), tensor((1, 3, 5, 8)), tensor((1, 3, 5, 8)))
    assert "graph.attention" in str(e.value)
    with pytest.raises(ShapeError, match="does not broadcast to the scores"):
        result_type("attention", tensor((1, 4, 5, 8)), tensor((1, 2, 6, 8)), tensor((1, 2, 6, 8)),
                    tensor((1, 2, 5, 6), "i1"))


def test_gqa_cost_counts_query_heads_and_reads_kv_once():
    c = cost("attention", tensor((1, 4, 16, 32)), tensor((1, 2, 24, 32)), tensor((1, 2, 24, 8)))
    pairs = 4 * 16 * 24
    assert c.flops == 2 * pairs * (32 + 8) + 5 * pairs
    assert c.bytes == 4 * (4 * 16 * 32 + 2 * 24 * 32 + 2 * 24 * 8 + 4 * 16 * 8)
