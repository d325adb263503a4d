"""Small models and helpers shared by the tuner's tests (kept tiny: every candidate is a gcc run)."""
from __future__ import annotations

import numpy as np
import torch

from tensorforge.tune.tasks import extract_tasks


class Stack(torch.nn.Module):
    """Three identical Linear+ReLU layers (one task, weight 3), then a softmax (a loop task)."""

    def __init__(self, width: int = 32, depth: int = 3):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return torch.softmax(x, -1)


class Conv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 16, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


def stack_model(rows: int = 16, width: int = 32, depth: int = 3):
    torch.manual_seed(0)
    return Stack(width, depth).eval(), (torch.from_numpy(np.random.default_rng(0).standard_normal(
        (rows, width), dtype=np.float32)),)


def conv_model():
    torch.manual_seed(0)
    return Conv().eval(), (torch.from_numpy(np.random.default_rng(0).standard_normal((1, 4, 8, 8), dtype=np.float32)),)


def task_of(model, inputs, kind: str):
    return next(t for t in extract_tasks(model, inputs) if t.kind == kind)


class ListSpace:
    """A stand-in space for search-order tests: ``seeds`` as given, configs whose ``v`` is in
    ``illegal`` rejected, and a feature row that is ``v`` everywhere (so a model can score by it)."""

    costly = False

    def __init__(self, seeds: list[dict], illegal: tuple = ()):
        self._seeds, self.illegal = seeds, illegal

    def seeds(self) -> list[dict]:
        return list(self._seeds)

    def check(self, config: dict) -> dict:
        if config.get("v") in self.illegal:
            from tensorforge.tune.space import InvalidCandidate
            raise InvalidCandidate("not in this space")
        return config

    def features(self, config: dict, checked) -> np.ndarray:
        from tensorforge.tune.features import FEATURE_NAMES
        return np.full(len(FEATURE_NAMES), float(config.get("v", 0)))


class ScoreModel:
    """A stand-in cost model that predicts the first feature (``v``); ``warm``: it learned from
    other workloads."""

    trained = False

    def __init__(self, warm: bool):
        self.warm = warm

    def predict(self, X: np.ndarray) -> np.ndarray:
        return X[:, 0]
