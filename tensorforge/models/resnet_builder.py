"""ResNet-50 written directly with the IR builder: a whole-model graph without torch or a frontend.

It exists to exercise the IR at model scale (text round trip, verifier, interpreter, compile
time) and is torchvision's ResNet-50 v1.5 layout (stride on the 3x3 conv of a bottleneck),
with random weights: He-initialised convs and non-trivial batch-norm statistics, so that a
pass that gets batch-norm arithmetic wrong cannot go unnoticed.

The parameters are a plain dict named like torchvision's state dict (``layer2.0.conv1.weight``,
``layer2.0.downsample.1.running_var``), so a test can compute the same network without
reading the IR.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..ir.builder import DialectBuilder
from ..ir.builtin import ModuleOp
from ..ir.core import Value
from ..ir.types import Dim, tensor

LAYERS = (3, 4, 6, 3)
WIDTHS = (64, 128, 256, 512)
EXPANSION = 4
BN_EPSILON = 1e-5


def block_specs(layers: Sequence[int] = LAYERS, widths: Sequence[int] = WIDTHS):
    """``(prefix, in_channels, planes, stride, has_downsample)`` for every bottleneck block."""
    specs = []
    inplanes = widths[0]
    for stage, (planes, count) in enumerate(zip(widths, layers)):
        for i in range(count):
            stride = 2 if stage > 0 and i == 0 else 1
            specs.append((f"layer{stage + 1}.{i}", inplanes, planes, stride,
                          i == 0 and (stride != 1 or inplanes != planes * EXPANSION)))
            inplanes = planes * EXPANSION
    return specs


def resnet50_params(seed: int = 0, num_classes: int = 1000, layers: Sequence[int] = LAYERS,
                    widths: Sequence[int] = WIDTHS) -> dict[str, np.ndarray]:
    """Random float32 parameters, deterministic in ``seed``, named like torchvision's."""
    rng = np.random.default_rng(seed)
    params: dict[str, np.ndarray] = {}

    def conv(name: str, n_out: int, n_in: int, k: int) -> None:
        std = np.float32(np.sqrt(2.0 / (n_out * k * k)))   # He init on fan-out, as torchvision
        params[name + ".weight"] = (rng.standard_normal((n_out, n_in, k, k), dtype=np.float32) * std)

    def bn(name: str, channels: int) -> None:
        params[name + ".weight"] = rng.uniform(0.5, 1.5, channels).astype(np.float32)
        params[name + ".bias"] = rng.normal(0.0, 0.1, channels).astype(np.float32)
        params[name + ".running_mean"] = rng.normal(0.0, 0.1, channels).astype(np.float32)
        params[name + ".running_var"] = rng.uniform(0.5, 1.5, channels).astype(np.float32)

    conv("conv1", widths[0], 3, 7)
    bn("bn1", widths[0])
    for prefix, n_in, planes, _, down in block_specs(layers, widths):
        conv(f"{prefix}.conv1", planes, n_in, 1)
        bn(f"{prefix}.bn1", planes)
        conv(f"{prefix}.conv2", planes, planes, 3)
        bn(f"{prefix}.bn2", planes)
        conv(f"{prefix}.conv3", planes * EXPANSION, planes, 1)
        bn(f"{prefix}.bn3", planes * EXPANSION)
        if down:
            conv(f"{prefix}.downsample.0", planes * EXPANSION, n_in, 1)
            bn(f"{prefix}.downsample.1", planes * EXPANSION)
    features = widths[-1] * EXPANSION
    bound = 1.0 / np.sqrt(features)
    params["fc.weight"] = rng.uniform(-bound, bound, (num_classes, features)).astype(np.float32)
    params["fc.bias"] = rng.uniform(-bound, bound, num_classes).astype(np.float32)
    return params


class _Net:
    """Emits the graph ops of the network, reading weights from ``params`` by name."""

    def __init__(self, g: DialectBuilder, params: dict[str, np.ndarray]):
        self.g, self.params = g, params

    def const(self, name: str) -> Value:
        return self.g.constant(self.params[name])

    def conv_bn(self, x: Value, conv: str, bn: str, stride: int, pad: int, relu: bool) -> Value:
        y = self.g.conv(x, self.const(conv + ".weight"), strides=(stride, stride), pads=(pad,) * 4)
        y = self.g.batch_norm(y, self.const(bn + ".weight"), self.const(bn + ".bias"),
                              self.const(bn + ".running_mean"), self.const(bn + ".running_var"),
                              epsilon=BN_EPSILON)
        return self.g.relu(y) if relu else y

    def bottleneck(self, x: Value, prefix: str, stride: int, down: bool) -> Value:
        out = self.conv_bn(x, f"{prefix}.conv1", f"{prefix}.bn1", 1, 0, True)
        out = self.conv_bn(out, f"{prefix}.conv2", f"{prefix}.bn2", stride, 1, True)
        out = self.conv_bn(out, f"{prefix}.conv3", f"{prefix}.bn3", 1, 0, False)
        identity = self.conv_bn(x, f"{prefix}.downsample.0", f"{prefix}.downsample.1", stride, 0, False) \
            if down else x
        return self.g.relu(self.g.add(out, identity))


def build_resnet50(batch: Dim = 1, seed: int = 0, image_size: int = 224, num_classes: int = 1000,
                   params: dict[str, np.ndarray] | None = None, layers: Sequence[int] = LAYERS,
                   widths: Sequence[int] = WIDTHS) -> ModuleOp:
    """``main(x: (batch, 3, image_size, image_size)) -> logits (batch, num_classes)``.

    ``batch`` may be a symbol name (``"N"``) for a dynamic batch.  ``params`` defaults to
    ``resnet50_params(seed, num_classes, layers, widths)``.
    """
    if params is None:
        params = resnet50_params(seed, num_classes, layers, widths)
    m = ModuleOp.create()
    f = m.add_function("main", [tensor((batch, 3, image_size, image_size))], arg_names=["x"])
    net = _Net(f.builder().graph, params)
    g = net.g
    x = net.conv_bn(f.args[0], "conv1", "bn1", 2, 3, True)
    x = g.max_pool(x, kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    for prefix, _, _, stride, down in block_specs(layers, widths):
        x = net.bottleneck(x, prefix, stride, down)
    x = g.flatten(g.global_avg_pool(x), axis=1)
    logits = g.gemm(x, net.const("fc.weight"), net.const("fc.bias"), trans_b=True)
    f.set_return([logits])
    return m


__all__ = ["build_resnet50", "resnet50_params", "block_specs"]
