"""``precision="bf16"``: the contractions by constant weights run as ``graph.bf16_matmul`` and
one-group convolutions as ``graph.bf16_conv``.

Weights are stored as bf16 (half the bytes), activations are rounded to bf16 inside the kernel,
products are summed in float32 by AVX512_BF16's ``vdpbf16ps`` (twice fp32's multiply-adds per
instruction), or on AMX tiles by ``tdpbf16ps`` where the CPU has AMX-BF16 (``codegen/c/bf16gemm_amx.py``:
16 x 16 x 32 multiply-adds per instruction).  Everything else (elementwise ops, softmax, normalisations, grouped convolutions)
stays float32.  The rounding of both operands to 8 significant bits is the accuracy cost: about
3 decimal digits per product; the sums keep float32's.

The instructions exist only on CPUs with avx512_bf16: elsewhere ``precision="bf16"`` is an error
that says so, and ``precision="bf16-or-f32"`` compiles float32 with a warning.
"""
from __future__ import annotations

import warnings

import numpy as np

from ..dialects.graph.elementwise import relu_epilogue
from ..dialects.graph.quant import bf16_conv_weights, pack_bf16
from ..errors import TensorforgeError, TensorforgeWarning
from ..ir.builder import Builder
from ..ir.builtin import ModuleOp
from ..ir.core import Operation
from ..ir.rewrite import constant_value
from ..ir.types import DType
from .rewrite import add_gemm_addend, candidates, contraction_weights, conv_weights, gemm_alpha

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


def _conv_to_bf16(op: Operation) -> None:
    """A one-group 2-D conv by constant weights -> ``graph.bf16_conv``, taking the conv's single
    residual add and relu (or clip from 0, ReLU6) after it into the kernel's epilogue."""
    w = conv_weights(op)
    bias = constant_value(op.operands[2]) if len(op.operands) > 2 else np.zeros(w.shape[0], np.float32)
    attrs = {k: op.attributes[k] for k in ("kernel", "strides", "pads", "dilations") if k in op.attributes}
    attrs.setdefault("kernel", tuple(w.shape[2:]))
    chain, residual = [op], None

    def only_user(o: Operation) -> Operation | None:
        uses = list(o.results[0].uses)
        return uses[0][0] if len(uses) == 1 else None

    add = only_user(op)
    if add is not None and add.name == "graph.add":
        r = add.operands[1] if add.operands[0] is op.results[0] else add.operands[0]
        if r.type == op.results[0].type and add.results[0].type == r.type:
            chain, residual = chain + [add], r
    act = only_user(chain[-1])
    if relu_epilogue(act) is not None:
        attrs |= relu_epilogue(act)
        chain.append(act)
    b = Builder.before(chain[-1])
    operands = [op.operands[0], b.graph.constant(bf16_conv_weights(w), DType.u16),
                b.graph.constant(np.asarray(bias, np.float32).reshape(-1))] + ([residual] if residual is not None else [])
    y = b.create("graph.bf16_conv", operands, attrs).results[0]
    chain[-1].results[0].replace_all_uses_with(y)
    for dead in reversed(chain):
        dead.erase()


def to_bf16(module: ModuleOp) -> list[str]:
    """Rewrites every candidate contraction of ``module`` (optimised) in place; their descriptions."""
    done = []
    for op in candidates(module, convolutions=True):
        if op.name == "graph.conv":
            # candidates() holds 2-D convs with constant weights and bias; depthwise ones stay float32
            if op.attributes.get("groups", 1) != 1:
                continue
            done.append(f"conv{op.location_str()}")
            _conv_to_bf16(op)
            continue
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
