"""Differential-fuzzer regression: the sign of Selu's zero at x = -0.0.

Found by python -m tensorforge.testing.fuzz --seed 10101 --cases 20000 --jobs 2 (case
s10101b125c2: Selu -> Pow(-1) gave -inf where onnxruntime gives +inf).  The ONNX spec defines
Selu(x <= 0) as gamma * (alpha * exp(x) - alpha), which is +0.0 at -0.0; tensorforge lowered it to
an Elu (PyTorch's expm1 form), which keeps -0.0.  Now the ONNX frontend builds the spec's formula;
PyTorch's selu (through the torch frontend) keeps PyTorch's -0.0.
"""
import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402

from tensorforge.testing.fuzz_check import check_model  # noqa: E402


def build(op: str, **attrs):
    nodes = [helper.make_node(op, ['x'], ['s'], **attrs),
             helper.make_node('Reciprocal', ['s'], ['y']),
             helper.make_node('Pow', ['s', 'e'], ['p'])]
    graph = helper.make_graph(
        nodes, "fuzz", [helper.make_tensor_value_info('x', 1, [7])],
        [helper.make_tensor_value_info('s', 1, [7]), helper.make_tensor_value_info('y', 1, [7]),
         helper.make_tensor_value_info('p', 1, [7])],
        [helper.make_tensor('e', 1, [], [-1.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


FEEDS = [np.array([-0.0, 0.0, -1e-30, -1e-45, -2.5, 3.0, -np.inf], dtype=np.float32)]


@pytest.mark.parametrize("op,attrs", [("Selu", {}), ("Selu", {"alpha": 2.0, "gamma": 0.5}),
                                      ("Elu", {}), ("Celu", {"alpha": 1.5})])
def test_fuzz_selu_negative_zero(op, attrs):
    assert check_model(build(op, **attrs), FEEDS, targets=('cpu', 'interpreter')) == []


@pytest.mark.parametrize("fn", ["selu", "celu", "elu"])
def test_torch_elu_family_keeps_pytorch_sign(fn):
    """PyTorch's SELU and CELU (aten.elu with scale / input_scale) keep PyTorch's -0.0."""
    torch = pytest.importorskip("torch")
    import tensorforge

    act = {"selu": torch.nn.functional.selu, "elu": lambda x: torch.nn.functional.elu(x, 0.7),
           "celu": lambda x: torch.nn.functional.celu(x, 1.5)}[fn]

    class M(torch.nn.Module):
        def forward(self, x):
            return act(x), 1.0 / act(x)

    x = torch.tensor([-0.0, 0.0, -1e-30, -2.5, 3.0, -float("inf"), float("nan")])
    got = tensorforge.compile(M().eval(), example_inputs=(x,))(x)
    for g, w in zip(got, M()(x)):
        np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-6, atol=0)
        assert (np.signbit(np.asarray(g)) == np.signbit(w.numpy())).all()


def test_torch_expm1_keeps_tiny_values():
    torch = pytest.importorskip("torch")
    import tensorforge

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.expm1(x)

    x = torch.tensor([-0.0, 0.0, -1e-30, 1e-30, 1e-7, -1e-7, -0.3, 0.3, 2.0, -20.0, 100.0,
                      -float("inf"), float("inf"), float("nan")])
    got = np.asarray(tensorforge.compile(M(), example_inputs=(x,))(x))
    want = M()(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    assert (np.signbit(got) == np.signbit(want)).all()


def test_torch_log1p_keeps_tiny_values():
    torch = pytest.importorskip("torch")
    import tensorforge

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.log1p(x)

    x = torch.tensor([-0.0, 0.0, 1e-30, -1e-30, 1e-10, -1e-7, 0.3, -0.3, 2.0, 1e30, -1.0, -2.0,
                      float("inf"), -float("inf"), float("nan")])
    got = np.asarray(tensorforge.compile(M(), example_inputs=(x,))(x))
    want = M()(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all()
