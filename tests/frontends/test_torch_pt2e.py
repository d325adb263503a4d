"""PT2E-quantized PyTorch models (torchao's ``prepare_pt2e`` / ``convert_pt2e`` with
``X86InductorQuantizer``) through the torch importer: the ``quantized_decomposed`` ops bit for bit
against torch, and a quantized CNN running on the int8 kernels with outputs close to the PT2E model
run eagerly (its own float32 simulation of the int8 arithmetic)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchao")

import tensorforge  # noqa: E402
from tensorforge.errors import UnsupportedOpError  # noqa: E402
from tensorforge.passes.graph.qdq import recover_int8  # noqa: E402
from tensorforge.testing.pt2e import quantize_pt2e  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning", "ignore::DeprecationWarning")


class QuantOps(torch.nn.Module):
    """Each quantized_decomposed op of a PT2E graph on its own, with the parameters as PT2E writes
    them (Python numbers per tensor, tensors per channel)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scales", torch.tensor([0.02, 0.5, 0.0371, 3.0e-4], dtype=torch.float32))
        self.register_buffer("zps", torch.tensor([0, 3, -7, 100], dtype=torch.int64))
        self.register_buffer("wq", torch.randint(-128, 128, (4, 3, 2, 2), generator=torch.Generator().manual_seed(1),
                                                 dtype=torch.int8))

    def forward(self, x):
        ops = torch.ops.quantized_decomposed
        q = ops.quantize_per_tensor.default(x, 0.0731, 117, 0, 255, torch.uint8)
        s = ops.quantize_per_tensor.default(x, 0.05, -3, -128, 127, torch.int8)
        dq = ops.dequantize_per_tensor.default(q, 0.0731, 117, 0, 255, torch.uint8)
        qc = ops.quantize_per_channel.default(x, self.scales, self.zps, 1, -128, 127, torch.int8)
        dqc = ops.dequantize_per_channel.default(qc, self.scales, self.zps, 1, -128, 127, torch.int8)
        w = ops.dequantize_per_channel.default(self.wq, self.scales, None, 0, -128, 127, torch.int8)
        return q, s, dq, qc, dqc, w


def test_quantized_decomposed_ops_match_torch():
    """Rounding ties (x exactly half a level from two levels), saturation on both sides, the
    infinities, per-tensor and per-channel parameters, int8 and uint8: the quantized integers bit for
    bit.  The dequantized floats within a few ulps of the zero point's term: the default pipeline
    reassociates ``(q - z) * s`` as ``q * s + (-z * s)`` (``simplify-extra``'s documented constant
    reassociation), as it does for ONNX's DequantizeLinear."""
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers the ops)

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 4, 5, 6)) * 4).astype(np.float32)
    x.reshape(-1)[:8] = np.float32(0.0731) * (np.arange(8) + np.float32(0.5))      # ties
    x.reshape(-1)[8:12] = [np.inf, -np.inf, 1e30, -1e30]
    m = QuantOps().eval()
    xt = torch.from_numpy(x)
    cm = tensorforge.compile(m, (xt,))
    with torch.no_grad():
        want = m(xt)
    got = cm(xt)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        if w.dtype.is_floating_point:
            np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=0, atol=4 * np.spacing(np.float32(300 * 0.0731)))
        else:
            np.testing.assert_array_equal(np.asarray(g), w.numpy())


class SmallCNN(torch.nn.Module):
    """conv-bn-relu, a residual block, a strided conv, a depthwise conv, pooling and a linear head:
    the patterns X86InductorQuantizer annotates."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.c1 = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.c2 = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16))
        self.relu = nn.ReLU()
        self.down = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU())
        self.dw = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = self.stem(x)
        x = self.relu(self.c2(self.c1(x)) + x)
        x = self.dw(self.down(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def _randomized(model):
    torch.manual_seed(0)
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.2, 0.2)
            mod.running_var.uniform_(0.5, 1.5)
            mod.weight.data.uniform_(0.5, 1.5)
    return model.eval()


def test_a_pt2e_cnn_runs_on_the_int8_kernels():
    """Every conv and the linear layer become int8 kernels; the outputs agree with the PT2E model run
    eagerly: the same top-1 on every input, the logits within a few of the head's quantization steps
    (requantized values may differ by one level where float32 rounding lands on the other side
    of a tie)."""
    torch.manual_seed(0)
    model = _randomized(SmallCNN())
    g = torch.Generator().manual_seed(1)
    samples = [torch.randn(1, 3, 16, 16, generator=g) for _ in range(8)]
    q = quantize_pt2e(model, (samples[0],), [(s,) for s in samples[:4]])
    cm = tensorforge.compile(q, (samples[0],), threads=2)

    from tensorforge.report.collect import collect
    names = [k.name for k in collect(cm.module, "t").code]
    assert sum("qconv" in n for n in names) == 5 and sum("qmatmul" in n for n in names) == 1, names
    assert not any("_conv" in n and "qconv" not in n for n in names), names       # no float conv left

    with torch.no_grad():
        want = [q(s).numpy() for s in samples[4:]]
        f32 = [model(s).numpy() for s in samples[4:]]
    got = [np.asarray(cm(s)) for s in samples[4:]]
    quant_err = max(np.abs(w - f).max() for w, f in zip(want, f32))       # PT2E's own distance to float
    for gt, w in zip(got, want):
        assert gt.argmax() == w.argmax()
        assert np.abs(gt - w).max() <= 0.5 * quant_err, (np.abs(gt - w).max(), quant_err)


class TokenMLP(torch.nn.Module):
    """Linear layers over a batch of sequences (3-D input, which a PyTorch ``linear`` flattens to a
    matrix), the first with more weights than constant folding expands (its transposed
    dequantized weight stays an op chain)."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(300, 256)
        self.down = torch.nn.Linear(256, 64)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def test_pt2e_linear_layers_over_sequences_run_on_qmatmul():
    torch.manual_seed(0)
    model = TokenMLP().eval()
    g = torch.Generator().manual_seed(2)
    samples = [torch.randn(2, 5, 300, generator=g) for _ in range(6)]
    q = quantize_pt2e(model, (samples[0],), [(s,) for s in samples[:3]])
    cm = tensorforge.compile(q, (samples[0],))

    from tensorforge.report.collect import collect
    names = [k.name for k in collect(cm.module, "t").code]
    assert sum("qmatmul" in n for n in names) == 2, names
    assert not any("gemm" in n or "matmul" in n.replace("qmatmul", "") for n in names), names
    with torch.no_grad():
        for s in samples[3:]:
            want, f32 = q(s).numpy(), model(s).numpy()
            got = np.asarray(cm(s))
            assert np.abs(got - want).max() <= 0.5 * np.abs(want - f32).max()


def test_weights_with_pytorch_scales_are_recovered_exactly():
    """PyTorch's symmetric int8 weights: -128 in a row (its scale is max|w| / 128, not / 127), a row
    whose scale the observer raised to its minimum (2**-12: largest level below 127), a zero row."""
    rng = np.random.default_rng(3)
    q = rng.integers(-127, 128, (4, 18)).astype(np.int8)
    q[0, 5] = -128
    q[1] = np.clip(q[1], -40, 40)
    q[1, 0] = 37
    q[2] = 0
    s = np.array([1.7e-3, 2.0 ** -12, 0.25, 4.1e-2], np.float32)
    w = (q.astype(np.float32) * s[:, None]).astype(np.float32)
    got = recover_int8(w)
    assert got is not None
    wq, ws = got
    np.testing.assert_array_equal((wq.astype(np.float32) * ws[:, None]).astype(np.float32), w)
    np.testing.assert_array_equal(wq[[0, 3]], q[[0, 3]])       # any exact factorisation serves: row 1's is 3q, s/3
    assert recover_int8((w + np.float32(1e-7)).astype(np.float32)) is None      # no longer int8 levels


class ChooseQparams(torch.nn.Module):
    """Dynamic quantization's ops as PT2E writes them: parameters chosen from the tensor at run time."""

    def forward(self, x):
        ops = torch.ops.quantized_decomposed
        scale, zp = ops.choose_qparams.tensor(x, 0, 255, 2.0 ** -12, torch.uint8)
        q = ops.quantize_per_tensor.tensor(x, scale, zp, 0, 255, torch.uint8)
        return scale, zp, q, ops.dequantize_per_tensor.tensor(q, scale, zp, 0, 255, torch.uint8)


def test_choose_qparams_matches_torch():
    """Scale, zero point and the quantized tensor bit for bit: tensors of both signs, all positive,
    all negative, and a range so small that the scale is raised to eps."""
    import torch.ao.quantization.fx._decomposed  # noqa: F401

    m = ChooseQparams()
    rng = np.random.default_rng(4)
    cases = [rng.standard_normal((3, 7)) * 5, rng.random((3, 7)) * 2 + 0.5, -rng.random((3, 7)) * 9,
             rng.standard_normal((3, 7)) * 1e-4]
    cm = tensorforge.compile(m, (torch.zeros(3, 7),))
    for x in cases:
        xt = torch.from_numpy(x.astype(np.float32))
        want = m(xt)
        got = cm(xt)
        for g, w in zip(got[:3], want[:3]):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(np.asarray(g), w.numpy())
        np.testing.assert_allclose(np.asarray(got[3]), want[3].numpy(), rtol=0, atol=4 * np.spacing(np.float32(255 * want[0].item())))


def test_dynamic_pt2e_linear_layers_run_on_qmatmul():
    """X86InductorQuantizer's dynamic config: each linear layer's input quantized with parameters
    chosen at run time, the product on qmatmul with that zero point and scale.  The first layer's
    integer products are exact, but torch's eager module computes them as a float32 GEMM of the
    dequantized values, so the second layer's input can differ by an ulp there and a value near a
    rounding tie by one quantization level: the outputs are held to half of PT2E's own distance to
    float32, as the static models are, and most of them to float32 rounding."""
    from tensorforge.report.collect import collect

    torch.manual_seed(0)
    model = TokenMLP().eval()
    g = torch.Generator().manual_seed(5)
    samples = [torch.randn(2, 5, 300, generator=g) * (1 + i) for i in range(4)]
    q = quantize_pt2e(model, (samples[0],), [(s,) for s in samples[:2]], dynamic=True)
    cm = tensorforge.compile(q, (samples[0],))
    names = [k.name for k in collect(cm.module, "t").code]
    assert sum("qmatmul" in n for n in names) == 2, names
    with torch.no_grad():
        for s in samples:
            want, f32 = q(s).numpy(), model(s).numpy()
            got = np.asarray(cm(s))
            assert np.abs(got - want).max() <= 0.5 * np.abs(want - f32).max()
            assert np.mean(np.abs(got - want) <= 1e-5 * np.abs(want).max()) >= 0.75


def test_other_dynamic_quantization_is_refused_with_the_node_named():
    import torch.ao.quantization.fx._decomposed  # noqa: F401

    class Symmetric(torch.nn.Module):
        def forward(self, x):
            scale, zp = torch.ops.quantized_decomposed.choose_qparams_symmetric.tensor(x, -128, 127, 1e-5, torch.int8)
            return torch.ops.quantized_decomposed.quantize_per_tensor.tensor(x, scale, zp, -128, 127, torch.int8)

    with pytest.raises(UnsupportedOpError, match="choose_qparams_symmetric.*choose_qparams.tensor") as err:
        tensorforge.compile(Symmetric(), (torch.randn(2, 8),))
    assert "eval()" not in str(err.value)      # in training mode, but nothing in it trains
