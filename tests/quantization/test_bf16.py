"""``compile(precision="bf16")``: linear layers and one-group convolutions on the AVX512_BF16
kernels (``graph.bf16_matmul``, ``graph.bf16_conv``).

Exactness of the kernel itself is tests/codegen/test_bf16gemm.py's; here the whole path: the
rewrite, the library kernel against the emulated reference (bit for bit), accuracy on the digits
MLP, and the messages on a CPU without avx512_bf16.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorforge  # noqa: E402
from tensorforge.codegen.c import bf16gemm  # noqa: E402
from tensorforge.errors import TensorforgeError, TensorforgeWarning  # noqa: E402
from tensorforge.quantization import bf16  # noqa: E402

needs_bf16 = pytest.mark.skipif(not bf16.supported(), reason="this CPU has no avx512_bf16")


@needs_bf16
@pytest.mark.parametrize("amx", [False, True])
def test_linear_layer_matches_the_emulated_kernel(amx, request):
    """The vector kernel (on an AMX host: built without AMX, ``TENSORFORGE_CPU_FEATURES_OFF``) bit
    for bit; the host's own build (AMX tiles for 9 rows where it has AMX-BF16, another summation
    order) within float32 rounding of the float64 sum of the same bf16 products."""
    from tensorforge.codegen.c import bf16gemm_amx
    if amx and not bf16gemm_amx.available():
        pytest.skip("host lacks AMX-BF16")
    if not amx:
        request.getfixturevalue("one_test_without_amx")
    torch.manual_seed(0)
    layer = torch.nn.Linear(70, 37).eval()
    x = torch.randn(9, 70)
    cm = tensorforge.compile(layer, (x,), precision="bf16")
    got = np.asarray(cm(x))
    assert "tf_bf16gemm" in cm.source
    assert ("_amx_sweep" in cm.source) == amx
    w = layer.weight.detach().numpy().T.copy()
    want = bf16gemm.reference(x.numpy(), w, layer.bias.detach().numpy())
    if not amx:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=72 * 2.0 ** -24 * np.abs(want).max())


class _Block(torch.nn.Module):
    """conv-bn-relu, conv + identity, relu, then a depthwise conv (stays float32) and a linear."""

    def __init__(self):
        super().__init__()
        self.c1, self.bn = torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.dw = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.fc = torch.nn.Linear(16, 5)

    def forward(self, x):
        r = torch.relu(self.bn(self.c1(x)))
        y = torch.relu(self.c2(r) + r)
        return self.fc(self.dw(y).mean((2, 3)))


@needs_bf16
def test_convolutions_run_bf16_with_their_residual_and_relu():
    """One-group convs become ``graph.bf16_conv`` (the residual add and relu in its epilogue), the
    depthwise one stays float32; the outputs within bf16 rounding of float32."""
    torch.manual_seed(2)
    model = _Block().eval()
    x = torch.randn(2, 3, 12, 12)
    module = bf16.bf16_module(model, (x,))
    names = [op.name for op in module.main.body]
    assert names.count("graph.bf16_conv") == 2 and names.count("graph.conv") == 1
    fused = [op for op in module.main.body if op.name == "graph.bf16_conv"][1]
    assert len(fused.operands) == 4 and fused.attributes["relu"]
    assert "graph.relu" not in names and module.attributes["tf.bf16"][0].startswith("conv")
    cm = tensorforge.compile(model, (x,), precision="bf16")
    assert "tf_bf16conv" in cm.source
    with torch.no_grad():
        want = model(x).numpy()
    got = np.asarray(cm(x))
    assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()
    assert not np.array_equal(got, np.asarray(tensorforge.compile(model, (x,))(x)))     # it did round


@needs_bf16
def test_digits_mlp_accuracy_within_a_third_of_a_point():
    datasets = pytest.importorskip("sklearn.datasets")
    d = datasets.load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target
    order = np.random.default_rng(1).permutation(len(x))
    train, test = order[:1200], order[1200:1600]
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(150):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.from_numpy(x[train])), torch.from_numpy(y[train])).backward()
        opt.step()
    model.eval()
    xs = torch.from_numpy(x[test])
    f32 = np.asarray(tensorforge.compile(model, (xs,))(xs)).argmax(1)
    b16 = np.asarray(tensorforge.compile(model, (xs,), precision="bf16")(xs)).argmax(1)
    acc32, acc16 = (f32 == y[test]).mean(), (b16 == y[test]).mean()
    assert acc32 > 0.9 and acc16 >= acc32 - 0.003, (acc32, acc16)


def test_cpu_without_bf16_gets_a_clear_message(monkeypatch):
    monkeypatch.setattr(bf16, "supported", lambda target=None: False)
    layer = torch.nn.Linear(8, 4).eval()
    x = torch.randn(2, 8)
    with pytest.raises(TensorforgeError, match="avx512_bf16"):
        tensorforge.compile(layer, (x,), precision="bf16")
    with pytest.warns(TensorforgeWarning, match="float32"):
        cm = tensorforge.compile(layer, (x,), precision="bf16-or-f32")
    assert "tf_bf16gemm" not in cm.source
    np.testing.assert_allclose(np.asarray(cm(x)), layer(x).detach().numpy(), rtol=1e-5, atol=1e-6)
