"""EfficientNet-B0 with torchvision's architecture: MBConv blocks, depthwise 3x3/5x5, SiLU and
squeeze-excitation.  Stochastic depth is the identity at inference and is left out."""
from __future__ import annotations

import torch
from torch import nn

from . import init_conv_weights, randomize_norms
from .mobilenet import make_divisible
from .resnet import cifar_inputs, imagenet_inputs  # noqa: F401  (the zoo's input makers)

# expansion t, kernel k, first stride s, output channels c, repeats n (B0: width 1.0, depth 1.0)
_SETTINGS = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
             (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))
# The small variant: every stage, but one block each except one residual pair (8 blocks, not 16).
_SMALL_SETTINGS = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 1), (6, 3, 2, 80, 1),
                   (6, 5, 1, 112, 1), (6, 5, 2, 192, 1), (6, 3, 1, 320, 1))


class ConvBNSiLU(nn.Sequential):
    def __init__(self, n_in: int, n_out: int, kernel_size: int = 3, stride: int = 1, groups: int = 1,
                 activation: bool = True):
        layers: list[nn.Module] = [nn.Conv2d(n_in, n_out, kernel_size, stride, (kernel_size - 1) // 2,
                                             groups=groups, bias=False), nn.BatchNorm2d(n_out)]
        if activation:
            layers.append(nn.SiLU(inplace=True))
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    """Global average pool, 1x1 reduce + SiLU, 1x1 expand + sigmoid, channel-wise scale."""

    def __init__(self, n_channels: int, n_squeeze: int):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(n_channels, n_squeeze, 1)
        self.fc2 = nn.Conv2d(n_squeeze, n_channels, 1)
        self.activation = nn.SiLU(inplace=True)
        self.scale_activation = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


class MBConv(nn.Module):
    """1x1 expand, kxk depthwise, squeeze-excitation, 1x1 linear projection; residual when shapes allow."""

    def __init__(self, n_in: int, n_out: int, kernel_size: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = make_divisible(n_in * expand_ratio)
        self.use_res_connect = stride == 1 and n_in == n_out
        layers: list[nn.Module] = []
        if hidden != n_in:
            layers.append(ConvBNSiLU(n_in, hidden, kernel_size=1))
        layers += [ConvBNSiLU(hidden, hidden, kernel_size, stride, groups=hidden),
                   SqueezeExcitation(hidden, max(1, n_in // 4)),
                   ConvBNSiLU(hidden, n_out, kernel_size=1, activation=False)]
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.use_res_connect else self.block(x)


class EfficientNet(nn.Module):
    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, settings=_SETTINGS,
                 dropout: float = 0.2):
        super().__init__()
        n_in = make_divisible(32 * width_mult)
        features: list[nn.Module] = [ConvBNSiLU(3, n_in, stride=2)]
        for t, k, s, c, n in settings:
            n_out = make_divisible(c * width_mult)
            stage = []
            for i in range(n):
                stage.append(MBConv(n_in, n_out, k, s if i == 0 else 1, t))
                n_in = n_out
            features.append(nn.Sequential(*stage))
        last = 4 * make_divisible(320 * width_mult)          # 1280 at width 1.0, as torchvision
        features.append(ConvBNSiLU(n_in, last, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(dropout, inplace=True), nn.Linear(last, num_classes))
        init_conv_weights(self)
        randomize_norms(self)
        init_range = 1.0 / (num_classes ** 0.5)
        nn.init.uniform_(self.classifier[1].weight, -init_range, init_range)
        nn.init.zeros_(self.classifier[1].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def efficientnet_b0() -> EfficientNet:
    return EfficientNet()


def efficientnet_b0_small() -> EfficientNet:
    return EfficientNet(num_classes=10, width_mult=0.25, settings=_SMALL_SETTINGS)
