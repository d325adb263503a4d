"""ConvNeXt's channel LayerNorm in its three spellings, and its block, for the channel-norm work.

Not zoo models (no weights of a real network): the building blocks that the channel-norm tests
(tests/passes/test_channel_norm.py) and benchmark (benchmarks/channel_norm.py) compile, kept in
one place.  ``build`` gives a module with its norm parameters away from the identity, so that a
wrong affine shows.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNorm2d(nn.Module):
    """timm's LayerNorm2d: permute to channels-last, LayerNorm over the last dim, permute back."""

    def __init__(self, c: int, eps: float = 1e-6):
        super().__init__()
        self.ln = nn.LayerNorm(c, eps=eps)

    def forward(self, x):
        return self.ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class LayerNorm2dFunctional(nn.Module):
    """The same through ``F.layer_norm``."""

    def __init__(self, c: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.w, self.b = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c))

    def forward(self, x):
        return F.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), self.w, self.b, self.eps).permute(0, 3, 1, 2)


class LayerNorm2dManual(nn.Module):
    """ConvNeXt's channels_first LayerNorm, written out as means over dim 1."""

    def __init__(self, c: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.w, self.b = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c))

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.w[:, None, None] * x + self.b[:, None, None]


class ConvNeXtBlock(nn.Module):
    """7x7 depthwise conv, LayerNorm over channels (channels-last), pointwise MLP, layer scale,
    residual."""

    def __init__(self, c: int):
        super().__init__()
        self.dwconv = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c, eps=1e-6)
        self.pwconv1, self.act, self.pwconv2 = nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.gamma * self.pwconv2(self.act(self.pwconv1(self.norm(y))))
        return x + y.permute(0, 3, 1, 2)


def build(cls: type[nn.Module], c: int, seed: int = 0) -> nn.Module:
    """``cls(c)`` in eval mode, seeded, with norm weights in [0.5, 1.5] and biases in [-0.5, 0.5]."""
    torch.manual_seed(seed)
    m = cls(c)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name in ("ln.weight", "norm.weight", "w"):
                p.uniform_(0.5, 1.5)
            elif name in ("ln.bias", "norm.bias", "b"):
                p.uniform_(-0.5, 0.5)
    return m.eval()
