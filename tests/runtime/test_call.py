"""The call path of a native model: NumPy and torch in/out, out= buffers, and input checking."""
from __future__ import annotations

import numpy as np
import pytest

import tensorforge
from tensorforge.errors import TensorforgeError

from . import models

RTOL, ATOL = 1e-5, 1e-5     # f32 kernels vs an f64 NumPy reference on 8-term dot products


def test_numpy_in_numpy_out_matches_reference(small):
    x, b = models.inputs()
    h, h2 = small(x, b)
    ref_h, ref_h2 = models.reference(x, b)
    assert isinstance(h, np.ndarray) and h.dtype == np.float32 and h.shape == (4, 16)
    np.testing.assert_allclose(h, ref_h, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(h2, ref_h2, rtol=1e-4, atol=ATOL)
    assert (h > 0).any() and (h == 0).any()            # relu really clipped something


def test_signature_names_come_from_the_graph(small):
    assert [s.name for s in small.native.inputs] == ["x", "b"]
    assert [(s.shape, s.dtype) for s in small.native.outputs] == [((4, 16), "f32")] * 2
    assert [str(t) for t in small.input_types] == ["tensor<4x8xf32>", "tensor<16xf32>"]


def test_awkward_numpy_inputs_are_accepted(small):
    x, b = models.inputs(1)
    expected = small(x, b)[0]
    strided = np.asfortranarray(x)                       # not C-contiguous: copied
    readonly = x.copy()
    readonly.flags.writeable = False                     # no writable buffer: other address path
    for variant in (strided, readonly, x.tolist()):
        np.testing.assert_array_equal(small(variant, b)[0], expected)


def test_out_buffers_are_filled_and_returned(small):
    x, b = models.inputs(2)
    out = [np.full((4, 16), np.nan, np.float32), np.full((4, 16), np.nan, np.float32)]
    result = small.run(x, b, out=out)
    assert result[0] is out[0] and result[1] is out[1]
    ref_h, ref_h2 = models.reference(x, b)
    np.testing.assert_allclose(out[0], ref_h, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out[1], ref_h2, rtol=1e-4, atol=ATOL)


def test_torch_in_torch_out(small):
    torch = pytest.importorskip("torch")
    x, b = models.inputs(3)
    expected = small(x, b)
    tx = torch.from_numpy(x).requires_grad_(True)
    h, h2 = small(tx, torch.from_numpy(b))
    assert isinstance(h, torch.Tensor) and h.dtype == torch.float32 and tuple(h.shape) == (4, 16)
    np.testing.assert_array_equal(h.numpy(), expected[0])
    np.testing.assert_array_equal(h2.numpy(), expected[1])
    # a transposed (non-contiguous) view and mixed torch/NumPy inputs
    h_t = small(torch.from_numpy(np.ascontiguousarray(x.T)).T, b)[0]
    np.testing.assert_array_equal(h_t.numpy(), expected[0])
    # torch out= buffers are written in place
    out = [torch.empty(4, 16), torch.empty(4, 16)]
    result = small.run(tx, b, out=out)
    assert result[0] is out[0]
    np.testing.assert_array_equal(out[1].numpy(), expected[1])


@pytest.mark.parametrize("args, words", [
    (lambda x, b: (x,), ["2 input(s)", "x, b", "got 1"]),
    (lambda x, b: (x[:2], b), ["'x'", "[2, 8]", "[4, 8]"]),
    (lambda x, b: (x, b.astype(np.float64)), ["'b'", "float64", "astype(np.float32)"]),
    (lambda x, b: (x, "nonsense"), ["'b'", "str"]),
])
def test_bad_inputs_raise_naming_the_input(small, args, words):
    x, b = models.inputs()
    with pytest.raises(TensorforgeError) as info:
        small(*args(x, b))
    for w in words:
        assert w in str(info.value)


def test_bad_torch_inputs_and_out_buffers(small):
    torch = pytest.importorskip("torch")
    x, b = models.inputs()
    with pytest.raises(TensorforgeError, match=r"input #1 'b'.*torch.float64.*\.to\(torch.float32\)"):
        small(x, torch.from_numpy(b).double())
    with pytest.raises(TensorforgeError, match=r"input #0 'x'.*\[4, 9\]"):
        small(torch.zeros(4, 9), b)
    with pytest.raises(TensorforgeError, match=r"out\[1\].*output1.*float32\[4, 16\].*got float32\[16, 4\]"):
        small.run(x, b, out=[np.empty((4, 16), np.float32), np.empty((16, 4), np.float32)])
    with pytest.raises(TensorforgeError, match=r"out= needs 2"):
        small.run(x, b, out=[np.empty((4, 16), np.float32)])


def test_interpreter_models_cannot_be_saved_or_threaded(tmp_path):
    cm = tensorforge.compile(models.two_in_two_out(), target="interpreter")
    x, b = models.inputs()
    np.testing.assert_allclose(cm.run(x, b)[0], models.reference(x, b)[0], rtol=RTOL, atol=ATOL)
    with pytest.raises(TensorforgeError, match="save needs a native target"):
        cm.save(tmp_path / "m.tfm")
    with pytest.raises(TensorforgeError, match="set_threads needs a native target"):
        cm.set_threads(1)


def test_calls_from_several_threads_take_turns(small):
    from concurrent.futures import ThreadPoolExecutor
    cases = [models.inputs(seed) for seed in range(8)]
    expected = [small(x, b)[1] for x, b in cases]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: small(*cases[i % 8])[1], range(64)))
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, expected[i % 8])
