"""``precision="bf16"``: the contractions by constant weights run as ``graph.bf16_matmul``.

Weights are stored as bf16 (half the bytes), activations are rounded to bf16 inside the kernel,
products are summed in float32 by AVX512_BF16's ``vdpbf16ps`` (twice fp32's multiply-adds per
instruction).  Everything else (elementwise ops, softmax, normalisations, convolutions for now)
stays float32.  The rounding of both operands to 8 significant bits is the accuracy cost: about
3 decimal digits per product; the sums keep float32's.

The instructions exist only on CPUs with avx512_bf16: elsewhere ``precision="bf16"`` is an error
that says so, and ``precision="bf16-or-f32"`` compiles float32 with a warning.
"""
from __future__ import annotations

import warnings

import numpy as np

from ..dialects.graph.quant import pack_bf16
from ..errors import TensorforgeError, TensorforgeWarning
from ..ir.builder import Builder
from ..ir.builtin import ModuleOp
from ..ir.core import Operation
from ..ir.rewrite import constant_value
from ..ir.types import DType
from .rewrite import add_gemm_addend, candidates, contraction_weights, gemm_alpha

REQUIRED = ("avx512f", "avx512bw", "avx512_bf16")


def supported(target=None) -> bool:
    """Whether ``target`` (default: this machine) has the bf16 dot-product instructions."""
    from ..codegen.target import Target
    features = (target or Target.host()).features or frozenset()
    return set(REQUIRED) <= set(features)


def check_supported(precision: str) -> bool:
    """True when bf16 kernels can be used; raises (``bf16``) or warns and returns False
    (``bf16-or-f32``) on a CPU without avx512_bf16."""
    if supported():
        return True
    if precision == "bf16":
        raise TensorforgeError("precision='bf16' needs a CPU with avx512_bf16 (vdpbf16ps), which this one lacks; "
                               "use precision='bf16-or-f32' to fall back to float32, or precision='int8'")
    warnings.warn("this CPU has no avx512_bf16: compiling in float32 (precision='bf16-or-f32')", TensorforgeWarning,
                  stacklevel=3)
    return False


def _constant_bias(op: Operation, n: int) -> np.ndarray | None:
    """A gemm's ``beta * c`` as the kernel's per-column bias, when ``c`` is a constant vector."""
    if op.name == "graph.gemm" and len(op.operands) > 2:
        c = constant_value(op.operands[2])
        if c is not None and c.size in (1, n) and c.ndim <= 1:
            beta = float(op.attributes.get("beta", 1.0))
            return np.broadcast_to(np.asarray(c, np.float64).reshape(-1) * beta, (n,)).astype(np.float32)
    return None


def to_bf16(module: ModuleOp) -> list[str]:
    """Rewrites every candidate contraction of ``module`` (optimised) in place; their descriptions."""
    done = []
    for op in candidates(module, convolutions=False):      # no bf16 convolution kernel yet
        w = contraction_weights(op).astype(np.float32)
        alpha = gemm_alpha(op)
        if alpha != 1.0:
            w = (w * np.float32(alpha)).astype(np.float32)
        k, n = w.shape
        bias = _constant_bias(op, n)
        b = Builder.before(op).graph
        y = b.bf16_matmul(op.operands[0], b.constant(pack_bf16(w), DType.u16),
                          b.constant(np.zeros(n, np.float32) if bias is None else bias), k=k, n=n)
        if bias is None:
            y = add_gemm_addend(b, op, y)
        op.results[0].replace_all_uses_with(y)
        done.append(f"{op.name.split('.', 1)[1]}{op.location_str()}")
        op.erase()
    return done


def bf16_module(model, example_inputs) -> ModuleOp:
    """``model`` optimised, its linear layers on the bf16 kernel (``tf.bf16`` lists them)."""
    from . import optimized_module
    module = optimized_module(model, example_inputs)
    module.attributes["tf.bf16"] = tuple(to_bf16(module))
    return module


__all__ = ["REQUIRED", "bf16_module", "check_supported", "supported", "to_bf16"]
