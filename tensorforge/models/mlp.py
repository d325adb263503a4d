"""A multi-layer perceptron on flattened 28x28 images: the smallest end-to-end model."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn


class MLP(nn.Module):
    """Linear layers with ReLU between them (none after the last: it gives logits)."""

    def __init__(self, sizes: Sequence[int]):
        super().__init__()
        layers: list[nn.Module] = []
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(n_in, n_out))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def mlp() -> MLP:
    return MLP((784, 1024, 1024, 10))


def mlp_small() -> MLP:
    return MLP((784, 64, 64, 10))


def example_inputs(batch: int, generator: torch.Generator) -> tuple[torch.Tensor]:
    """Flattened images, one row per sample."""
    return (torch.randn(batch, 784, generator=generator),)
