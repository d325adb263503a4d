"""Structured outputs of torch models: dicts, nested containers and registered pytree classes come
back from the compiled model as eager returns them (torch callers), flat for NumPy callers, and
as a flat tuple when the container cannot be rebuilt."""
from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np
import pytest
import torch
import torch.utils._pytree as pytree

import tensorforge
from tensorforge.errors import TensorforgeWarning
from tensorforge.frontends.torch import output_tree


class Pair(NamedTuple):
    low: torch.Tensor
    high: torch.Tensor


class Nested(torch.nn.Module):
    def forward(self, x):
        return {"sum": x + 1, "parts": [x * 2, Pair(x.clamp(max=0), x.clamp(min=0))]}


class Stubborn:
    """A container whose pytree unflatten needs state that only exists inside the traced forward
    (here: it accepts the fake tensors of tracing and rejects real ones)."""

    def __init__(self, a, b, secret):
        self.a, self.b, self.secret = a, b, secret


def _flatten_stubborn(s):
    return [s.a, s.b], None


def _unflatten_stubborn(values, context):
    if all(type(v) is torch.Tensor for v in values):
        raise TypeError("Stubborn needs its secret")
    return Stubborn(*values, secret=None)


pytree.register_pytree_node(Stubborn, _flatten_stubborn, _unflatten_stubborn)


class ReturnsStubborn(torch.nn.Module):
    def forward(self, x):
        return Stubborn(x - 1, x.exp(), secret=42)


@pytest.mark.parametrize("target", ["interpreter", "cpu"])
def test_nested_outputs_keep_their_structure_for_torch_callers(target):
    x = torch.randn(3, 4)
    cm = tensorforge.compile(Nested(), (x,), target=target)
    out, ref = cm(x), Nested()(x)
    assert pytree.tree_structure(out) == pytree.tree_structure(ref)
    assert isinstance(out["parts"][1], Pair)
    for g, w in zip(pytree.tree_leaves(out), pytree.tree_leaves(ref)):
        torch.testing.assert_close(g, w)


def test_numpy_callers_and_run_get_flat_outputs_in_leaf_order():
    x = torch.randn(3, 4)
    cm = tensorforge.compile(Nested(), (x,), target="interpreter")
    want = [t.numpy() for t in pytree.tree_leaves(Nested()(x))]
    flat = cm(x.numpy())
    assert isinstance(flat, tuple) and len(flat) == 4
    for g, w in zip(flat, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    assert [r.shape for r in cm.run(x)] == [w.shape for w in want]


def test_a_container_that_cannot_be_rebuilt_comes_back_as_a_flat_tuple():
    x = torch.randn(2, 5)
    cm = tensorforge.compile(ReturnsStubborn(), (x,), target="interpreter")
    with pytest.warns(TensorforgeWarning, match="Stubborn.*flat tuple"):
        out = cm(x)
    assert isinstance(out, tuple) and len(out) == 2
    torch.testing.assert_close(out[0], x - 1)
    torch.testing.assert_close(out[1], x.exp())
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # warned once, then flat without trying again
        assert isinstance(cm(x), tuple)


def test_plain_tensor_and_tuple_outputs_are_unchanged():
    class Two(torch.nn.Module):
        def forward(self, x):
            return x + 1, x * 3

    x = torch.randn(4)
    cm = tensorforge.compile(Two(), (x,), target="interpreter")
    assert output_tree(cm.module) is None
    a, b = cm(x)
    torch.testing.assert_close(a, x + 1)
    torch.testing.assert_close(b, x * 3)
    single = tensorforge.compile(torch.nn.ReLU(), (x,), target="interpreter")
    assert isinstance(single(x), torch.Tensor)
