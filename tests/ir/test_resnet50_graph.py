"""ResNet-50 (full-size weights, small image) through the IR: text round trip, verifier, speed,
and the interpreter against an independent NumPy forward pass of the same network."""
from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from tensorforge.ir import interpret, verify
from tensorforge.ir.parser import load_module, parse_module, save_module
from tensorforge.ir.printer import print_module
from tensorforge.ir.structure import structural_diff, structural_hash
from tensorforge.models.resnet_builder import BN_EPSILON, block_specs, build_resnet50, resnet50_params
from tests.ir.test_text import mlir_accepts

IMAGE = 64                       # small input keeps the interpreter fast; weights stay full size
TORCHVISION_RESNET50_PARAMS = 25_557_032


@pytest.fixture(scope="module")
def params():
    return resnet50_params(seed=0)


@pytest.fixture(scope="module")
def model(params):
    return build_resnet50(batch=1, image_size=IMAGE, params=params)


@pytest.fixture(scope="module")
def text_and_resources(model):
    resources: dict = {}
    return print_module(model, resources=resources), resources


@pytest.fixture(scope="module")
def parsed(text_and_resources):
    text, resources = text_and_resources
    return parse_module(text, resources, source="resnet50.mlir")


# ---- an independent NumPy ResNet-50 (float64; no tensorforge op definitions involved) -------
def np_conv(x, w, stride, pad):
    """im2col through a strided window view, then one contraction."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k = w.shape[2]
    cols = sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]   # N,C,OH,OW,kh,kw
    return np.einsum("ncyxij,ocij->noyx", cols, w.astype(np.float64), optimize=True)


def np_bn(x, p, name):
    c = lambda a: p[f"{name}.{a}"].astype(np.float64)[None, :, None, None]  # noqa: E731
    return (x - c("running_mean")) / np.sqrt(c("running_var") + BN_EPSILON) * c("weight") + c("bias")


def np_max_pool_3x3_s2_p1(x):
    x = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    return sliding_window_view(x, (3, 3), axis=(2, 3))[:, :, ::2, ::2].max(axis=(4, 5))


def np_resnet50(p, x):
    relu = lambda v: np.maximum(v, 0.0)  # noqa: E731
    y = relu(np_bn(np_conv(x.astype(np.float64), p["conv1.weight"], 2, 3), p, "bn1"))
    y = np_max_pool_3x3_s2_p1(y)
    for prefix, _, _, stride, down in block_specs():
        out = relu(np_bn(np_conv(y, p[f"{prefix}.conv1.weight"], 1, 0), p, f"{prefix}.bn1"))
        out = relu(np_bn(np_conv(out, p[f"{prefix}.conv2.weight"], stride, 1), p, f"{prefix}.bn2"))
        out = np_bn(np_conv(out, p[f"{prefix}.conv3.weight"], 1, 0), p, f"{prefix}.bn3")
        if down:
            y = np_bn(np_conv(y, p[f"{prefix}.downsample.0.weight"], stride, 0), p, f"{prefix}.downsample.1")
        y = relu(out + y)
    features = y.mean(axis=(2, 3))
    return features @ p["fc.weight"].T.astype(np.float64) + p["fc.bias"]


# ---- tests ------------------------------------------------------------------------------------
def test_architecture_is_resnet50(model, params):
    verify(model)
    counts = Counter(op.name for op in model.main.body)
    assert counts["graph.conv"] == 53 and counts["graph.batch_norm"] == 53
    assert counts["graph.relu"] == 49 and counts["graph.add"] == 16
    assert counts["graph.max_pool"] == counts["graph.global_avg_pool"] == counts["graph.flatten"] == 1
    assert counts["graph.gemm"] == 1
    trainable = sum(a.size for k, a in params.items() if "running_" not in k)
    assert trainable == TORCHVISION_RESNET50_PARAMS
    weights = sum(op.attributes["value"].array.size for op in model.main.body if op.name == "graph.constant")
    assert weights == sum(a.size for a in params.values())
    assert [str(a.type) for a in model.main.args] == ["tensor<1x3x64x64xf32>"]
    assert str(model.main.function_type.results[0]) == "tensor<1x1000xf32>"


def test_text_round_trip_is_exact(model, parsed, text_and_resources):
    text, resources = text_and_resources
    assert structural_diff(model, parsed) is None
    assert structural_hash(parsed) == structural_hash(model)
    assert len(text) < 200_000                      # weights live in resources, not in the text
    assert sum(a.size for a in resources.values()) > 25_000_000
    assert print_module(parsed, resources={}) == text
    verify(parsed)


def test_print_and_parse_are_fast(params):
    """Under 2 s for print + parse with ~25M weights in resources (best of 2, machines are noisy).

    Each round gets a freshly built module, so the content hashes that name the resources are
    computed inside the measurement, as they would be for a model just imported."""
    times = []
    for _ in range(2):
        model = build_resnet50(batch=1, image_size=IMAGE, params=params)
        start = time.perf_counter()
        resources: dict = {}
        text = print_module(model, resources=resources)
        back = parse_module(text, resources)
        times.append(time.perf_counter() - start)
    assert len(back.main.body) == len(model.main.body)
    assert min(times) < 2.0, f"print+parse took {times} s"


def test_save_and_load(model, tmp_path):
    path = tmp_path / "resnet50.mlir"
    save_module(model, path)
    loaded = load_module(path)
    assert structural_diff(model, loaded) is None


def test_interpreter_matches_numpy(parsed, params):
    x = np.random.default_rng(1).standard_normal((1, 3, IMAGE, IMAGE)).astype(np.float32)
    (got,) = interpret(parsed, x)
    want = np_resnet50(params, x)
    assert got.shape == (1, 1000) and got.dtype == np.float32
    scale = np.abs(want).max()
    assert scale > 1.0                              # the network did not collapse to zeros
    # float32 interpreter vs float64 reference through 53 convs
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * scale)
    assert got.argmax() == want.argmax()


def test_symbolic_batch_round_trips_and_runs(params):
    m = build_resnet50(batch="N", image_size=32, params=params)
    resources: dict = {}
    text = print_module(m, resources=resources)
    assert 'tensor<?x3x32x32xf32, "N">' in text and 'tensor<?x1000xf32, "N">' in text
    back = parse_module(text, resources)
    assert structural_diff(m, back) is None
    x = np.random.default_rng(2).standard_normal((2, 3, 32, 32)).astype(np.float32)
    (got,) = interpret(back, x)
    want = np_resnet50(params, x)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * np.abs(want).max())


def test_mlir_opt_accepts_the_resnet_layout(tmp_path):
    """Same ops and attributes at toy widths (the full model is 200 MB of hex: checked by hand)."""
    m = build_resnet50(batch="N", image_size=32, num_classes=10, layers=(1, 1, 1, 1), widths=(8, 8, 8, 8))
    back = parse_module(mlir_accepts(print_module(m, inline_resources=True), tmp_path))
    assert structural_diff(m, back) is None
