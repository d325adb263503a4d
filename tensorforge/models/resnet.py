"""ResNet-18/50 with torchvision's architecture (v1.5: stride on the 3x3 conv of a bottleneck).

Module and parameter names follow torchvision, so a torchvision state dict loads into these
modules unchanged; nothing here imports torchvision.
"""
from __future__ import annotations

from typing import Sequence, Type

import torch
from torch import nn

from . import init_conv_weights, randomize_norms


def conv3x3(n_in: int, n_out: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(n_in, n_out, 3, stride=stride, padding=1, bias=False)


def conv1x1(n_in: int, n_out: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(n_in, n_out, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, n_in: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = conv3x3(n_in, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, n_in: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = conv1x1(n_in, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """Stem (7x7/2 conv, 3x3/2 max pool), four stages, global average pool, classifier."""

    def __init__(self, block: Type[BasicBlock | Bottleneck], layers: Sequence[int],
                 widths: Sequence[int] = (64, 128, 256, 512), num_classes: int = 1000):
        super().__init__()
        self.inplanes = widths[0]
        self.conv1 = nn.Conv2d(3, self.inplanes, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, widths[0], layers[0])
        self.layer2 = self._make_layer(block, widths[1], layers[1], stride=2)
        self.layer3 = self._make_layer(block, widths[2], layers[2], stride=2)
        self.layer4 = self._make_layer(block, widths[3], layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[3] * block.expansion, num_classes)
        init_conv_weights(self)
        randomize_norms(self)

    def _make_layer(self, block, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(conv1x1(self.inplanes, planes * block.expansion, stride),
                                       nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


_SMALL_WIDTHS = (8, 16, 32, 64)


def resnet18() -> ResNet:
    return ResNet(BasicBlock, (2, 2, 2, 2))


def resnet50() -> ResNet:
    return ResNet(Bottleneck, (3, 4, 6, 3))


def resnet18_small() -> ResNet:
    return ResNet(BasicBlock, (2, 2, 2, 2), _SMALL_WIDTHS, num_classes=10)


def resnet50_small() -> ResNet:
    """Bottleneck blocks, one per stage: every op and shape pattern of ResNet-50, in little time."""
    return ResNet(Bottleneck, (1, 1, 1, 1), _SMALL_WIDTHS, num_classes=10)


def imagenet_inputs(batch: int, generator: torch.Generator) -> tuple[torch.Tensor]:
    """NCHW 224x224 RGB images."""
    return (torch.randn(batch, 3, 224, 224, generator=generator),)


def cifar_inputs(batch: int, generator: torch.Generator) -> tuple[torch.Tensor]:
    """NCHW 32x32 RGB images (the small variants)."""
    return (torch.randn(batch, 3, 32, 32, generator=generator),)
