"""MobileNetV2 with torchvision's architecture: inverted residuals, depthwise convs, ReLU6."""
from __future__ import annotations

import torch
from torch import nn

from . import init_conv_weights, randomize_norms
from .resnet import cifar_inputs, imagenet_inputs  # noqa: F401  (the zoo's input makers)

# expansion t, output channels c, repeats n, first stride s (the paper's table 2)
_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
             (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))
# The small variant: every stage, but one block each except one residual pair (8 blocks, not 17).
_SMALL_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 1, 2), (6, 64, 1, 2),
                   (6, 96, 1, 1), (6, 160, 1, 2), (6, 320, 1, 1))


def make_divisible(v: float, divisor: int = 8) -> int:
    """Rounds a scaled channel count to a multiple of ``divisor``, never below 90% of ``v``."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class ConvBNReLU6(nn.Sequential):
    def __init__(self, n_in: int, n_out: int, kernel_size: int = 3, stride: int = 1, groups: int = 1):
        super().__init__(nn.Conv2d(n_in, n_out, kernel_size, stride, (kernel_size - 1) // 2,
                                   groups=groups, bias=False),
                         nn.BatchNorm2d(n_out), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    """1x1 expand, 3x3 depthwise, 1x1 linear projection; a residual when shapes allow."""

    def __init__(self, n_in: int, n_out: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = int(round(n_in * expand_ratio))
        self.use_res_connect = stride == 1 and n_in == n_out
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(n_in, hidden, kernel_size=1))
        layers += [ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, n_out, 1, bias=False), nn.BatchNorm2d(n_out)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, settings=_SETTINGS):
        super().__init__()
        n_in = make_divisible(32 * width_mult)
        last = make_divisible(1280 * max(1.0, width_mult))
        features: list[nn.Module] = [ConvBNReLU6(3, n_in, stride=2)]
        for t, c, n, s in settings:
            n_out = make_divisible(c * width_mult)
            for i in range(n):
                features.append(InvertedResidual(n_in, n_out, s if i == 0 else 1, t))
                n_in = n_out
        features.append(ConvBNReLU6(n_in, last, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))
        init_conv_weights(self)
        randomize_norms(self)
        nn.init.normal_(self.classifier[1].weight, 0, 0.01)
        nn.init.zeros_(self.classifier[1].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


def mobilenet_v2() -> MobileNetV2:
    return MobileNetV2()


def mobilenet_v2_small() -> MobileNetV2:
    return MobileNetV2(num_classes=10, width_mult=0.25, settings=_SMALL_SETTINGS)
