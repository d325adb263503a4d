"""PyTorch's PT2E quantization flow as torchao's X86 tutorial writes it, for the PT2E tests and
``benchmarks/pt2e_models.py``: the models a user brings after ``prepare_pt2e`` / ``convert_pt2e``."""
from __future__ import annotations

import logging
import warnings
from typing import Any, Sequence


def quantize_pt2e(model: Any, example: tuple, calibration: Sequence[tuple], dynamic: bool = False) -> Any:
    """``model`` quantized by torchao's PT2E flow with ``X86InductorQuantizer``'s default config
    (uint8 activations per tensor, int8 weights per channel; ``dynamic``: the activations of linear
    layers quantized with parameters chosen at run time): strict ``torch.export`` (torchao's
    X86 annotator fails on non-strict exports when one ReLU module is called twice, as in
    torchvision's ResNets), ``prepare_pt2e``, one call per calibration sample, ``convert_pt2e``.
    torchao's import logs that its CUDA extensions did not load; that log is silenced."""
    import torch

    logging.getLogger("torchao").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq
        exported = torch.export.export(model.eval(), tuple(example), strict=True).module()
        quantizer = xiq.X86InductorQuantizer()
        quantizer.set_global(xiq.get_default_x86_inductor_quantization_config(is_dynamic=dynamic))
        prepared = prepare_pt2e(exported, quantizer)
        with torch.no_grad():
            for sample in calibration:
                prepared(*sample)
        return convert_pt2e(prepared)


__all__ = ["quantize_pt2e"]
