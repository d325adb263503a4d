"""The built-in model zoo: PyTorch definitions written here, random weights, nothing downloaded.

    module, inputs = tensorforge.models.get("resnet18", batch=8)
    module(*inputs)                                   # eval mode, deterministic

Every model is built under a fixed seed, so two ``get`` calls give identical weights and
inputs; the global torch RNG is left as it was.  Normalisation layers get non-trivial random
statistics and affine parameters, because identity BatchNorm/LayerNorm would let a frontend or a
folding pass get their arithmetic wrong without any test noticing.

Builders are referenced by name and imported on first use: listing and describing models
is cheap, and ``import tensorforge.models`` itself does not import torch.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import TensorforgeError

__all__ = ["ModelInfo", "describe", "get", "init_conv_weights", "names", "randomize_norms"]

SEED = 0


@dataclass(frozen=True)
class _Spec:
    module: str          # submodule of tensorforge.models
    build: str           # function there: () -> nn.Module
    inputs: str          # function there: (batch, torch.Generator) -> tuple of tensors
    summary: str
    default_batch: int = 1


_ZOO: dict[str, _Spec] = {
    "mlp": _Spec("mlp", "mlp", "example_inputs", "MLP 784-1024-1024-10 with ReLU"),
    "mlp_small": _Spec("mlp", "mlp_small", "example_inputs", "MLP 784-64-64-10 with ReLU"),
    "resnet18": _Spec("resnet", "resnet18", "imagenet_inputs", "ResNet-18 (torchvision architecture), 224x224"),
    "resnet18_small": _Spec("resnet", "resnet18_small", "cifar_inputs",
                            "ResNet-18 layout with widths 8-64, 32x32 input, 10 classes"),
    "resnet50": _Spec("resnet", "resnet50", "imagenet_inputs", "ResNet-50 v1.5 (torchvision architecture), 224x224"),
    "resnet50_small": _Spec("resnet", "resnet50_small", "cifar_inputs",
                            "bottleneck ResNet, one block per stage, widths 8-64, 32x32 input, 10 classes"),
    "mobilenet_v2": _Spec("mobilenet", "mobilenet_v2", "imagenet_inputs",
                          "MobileNetV2 (torchvision architecture, width 1.0), 224x224"),
    "mobilenet_v2_small": _Spec("mobilenet", "mobilenet_v2_small", "cifar_inputs",
                                "MobileNetV2 at width 0.25, 8 blocks (17 in full), 32x32 input, 10 classes"),
    "efficientnet_b0": _Spec("efficientnet", "efficientnet_b0", "imagenet_inputs",
                             "EfficientNet-B0 (torchvision architecture, SiLU, squeeze-excitation), 224x224"),
    "efficientnet_b0_small": _Spec("efficientnet", "efficientnet_b0_small", "cifar_inputs",
                                   "EfficientNet-B0 at width 0.25, 8 blocks (16 in full), 32x32 input, 10 classes"),
    "bert_base": _Spec("bert", "bert_base", "example_inputs_base",
                       "BERT-base encoder + pooler: 12 layers, hidden 768, 12 heads, seq 128"),
    "bert_tiny": _Spec("bert", "bert_tiny", "example_inputs_tiny",
                       "BERT encoder + pooler: 2 layers, hidden 128, 2 heads, vocab 1000, seq 32"),
    "gpt2_small": _Spec("gpt2", "gpt2_small", "example_inputs_small",
                        "GPT-2 small LM: 12 layers, hidden 768, 12 heads, seq 128, tied LM head"),
    "gpt2_tiny": _Spec("gpt2", "gpt2_tiny", "example_inputs_tiny",
                       "GPT-2 LM: 2 layers, hidden 64, 2 heads, vocab 1000, seq 32, tied LM head"),
}


@dataclass(frozen=True)
class ModelInfo:
    """What a model is: a summary, its parameter count and its inputs at the default batch."""

    name: str
    summary: str
    params: int
    inputs: tuple[tuple[tuple[int, ...], str], ...]   # (shape, dtype) per input
    default_batch: int

    def __str__(self) -> str:
        ins = ", ".join(f"{dtype}{list(shape)}" for shape, dtype in self.inputs)
        return (f"{self.name}: {self.summary}; {self.params / 1e6:.2f}M params; "
                f"inputs {ins} (default batch {self.default_batch})")


def names() -> list[str]:
    """Every model name, full-size and small variants."""
    return list(_ZOO)


def _spec(name: str) -> _Spec:
    try:
        return _ZOO[name]
    except KeyError:
        raise TensorforgeError(f"unknown model '{name}' (known: {', '.join(_ZOO)})") from None


def _function(spec: _Spec, attr: str) -> Callable[..., Any]:
    return getattr(importlib.import_module(f"{__name__}.{spec.module}"), getattr(spec, attr))


def get(name: str, batch: int | None = None, input_seed: int | None = None):
    """``(module in eval mode, example_inputs tuple)``; ``batch`` defaults to the model's (1).
    ``input_seed`` draws other inputs of the same kind (calibration or held-out samples); the
    weights never change."""
    import torch

    spec = _spec(name)
    batch = spec.default_batch if batch is None else int(batch)
    if batch < 1:
        raise TensorforgeError(f"model '{name}': batch must be at least 1, got {batch}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        module = _function(spec, "build")()
    module.eval()
    generator = torch.Generator().manual_seed(SEED + 1 if input_seed is None else int(input_seed))
    inputs = tuple(_function(spec, "inputs")(batch, generator))
    return module, inputs


def describe(name: str) -> ModelInfo:
    """Summary, parameter count and input shapes, without allocating the weights."""
    import torch

    spec = _spec(name)
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        module = _function(spec, "build")()
    params = sum(p.numel() for p in module.parameters())
    inputs = _function(spec, "inputs")(spec.default_batch, torch.Generator().manual_seed(0))
    shapes = tuple((tuple(t.shape), str(t.dtype).removeprefix("torch.")) for t in inputs)
    return ModelInfo(name, spec.summary, params, shapes, spec.default_batch)


def init_conv_weights(module) -> None:
    """He initialisation on fan-out, as torchvision does for its CNNs."""
    from torch import nn

    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)


def randomize_norms(module, gamma_spread: float = 0.5, beta_std: float = 0.1) -> None:
    """Random affine parameters for every norm layer and random running stats for BatchNorm.

    Uses the global torch RNG, which ``get`` has seeded.  Running variances stay in [0.5, 1.5]
    and gammas around 1, so activations keep their scale through deep stacks.
    """
    import torch
    from torch import nn

    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm)):
                if getattr(m, "weight", None) is not None:
                    m.weight.uniform_(1 - gamma_spread, 1 + gamma_spread)
                    m.bias.normal_(0, beta_std)
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
