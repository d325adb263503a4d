"""Contractions: matmul (NumPy semantics), batch_matmul (exact ranks) and ONNX Gemm.

All three are OUT_ELEMENTWISE_FUSABLE: the fusion pass may attach an elementwise
epilogue (bias, activation) to the kernel that computes them.
"""
from __future__ import annotations

import numpy as np

from ...ir.opdef import PURE, Attr, Cost, FusionKind, OpDef, expect, register
from ...ir.types import TensorType
from .base import (broadcast_shapes, broadcasts_to, expect_numeric, hint_size, io_bytes, match_dims, num_elements,
                   promote, tensor_types)


class Contraction(OpDef):
    """Shared cost: ``2*M*N*K`` per batch element, plus the epilogue work a subclass adds."""

    traits = frozenset({PURE})
    fusion = FusionKind.OUT_ELEMENTWISE_FUSABLE

    def mnk(self, types, attrs) -> tuple[int, int, int, int]:
        """(batch, M, N, K) with symbolic dims counted as their hints."""
        raise NotImplementedError

    def epilogue_flops(self, types, attrs, m: int, n: int) -> float:
        return 0.0

    def cost(self, operand_types, result_types, attrs):
        batch, m, n, k = self.mnk(operand_types, attrs)
        flops = 2.0 * batch * m * n * k + batch * self.epilogue_flops(operand_types, attrs, m, n)
        return Cost(flops, io_bytes(operand_types, result_types))


def _size(d) -> int:
    """A dim as a number for the cost model: symbolic dims count as their hints."""
    return d if isinstance(d, int) else hint_size(d)


@register
class MatMul(Contraction):
    """``numpy.matmul``: 1-D operands are promoted (and the added axis dropped again),
    leading batch dims broadcast."""

    name = "graph.matmul"
    operands = ("lhs", "rhs")

    def infer(self, types, attrs):
        a, b = tensor_types(types, self.name)
        dtype = promote(a.dtype, b.dtype)
        expect_numeric(a, "lhs")
        expect(a.rank >= 1 and b.rank >= 1, f"operands must have rank >= 1, got ranks {a.rank} and {b.rank}")
        k_lhs = a.shape[-1]
        k_rhs = b.shape[0] if b.rank == 1 else b.shape[-2]
        match_dims(k_lhs, k_rhs, f"contraction dim: lhs dim {a.rank - 1} and rhs dim {max(b.rank - 2, 0)} differ")
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        rows = (a.shape[-2],) if a.rank >= 2 else ()
        cols = (b.shape[-1],) if b.rank >= 2 else ()
        return [TensorType(batch + rows + cols, dtype)]

    @staticmethod
    def compute(lhs, rhs):
        return np.matmul(lhs, rhs)

    def mnk(self, types, attrs):
        a, b = types
        m = _size(a.shape[-2]) if a.rank >= 2 else 1
        n = _size(b.shape[-1]) if b.rank >= 2 else 1
        batch = num_elements(broadcast_shapes(a.shape[:-2], b.shape[:-2]))
        return batch, m, n, _size(a.shape[-1])


@register
class BatchMatMul(Contraction):
    """``(B,M,K) x (B,K,N) -> (B,M,N)`` with exact ranks and no broadcasting."""

    name = "graph.batch_matmul"
    operands = ("lhs", "rhs")

    def infer(self, types, attrs):
        a, b = tensor_types(types, self.name)
        dtype = promote(a.dtype, b.dtype)
        expect_numeric(a, "lhs")
        expect(a.rank == 3 and b.rank == 3, f"operands must be rank 3 (B,M,K) and (B,K,N), "
                                            f"got ranks {a.rank} and {b.rank}")
        batch = match_dims(a.shape[0], b.shape[0], "batch dim 0 differs")
        match_dims(a.shape[2], b.shape[1], "contraction dim: lhs dim 2 and rhs dim 1 differ")
        return [TensorType((batch, a.shape[1], b.shape[2]), dtype)]

    @staticmethod
    def compute(lhs, rhs):
        return np.matmul(lhs, rhs)

    def mnk(self, types, attrs):
        a, b = types
        return _size(a.shape[0]), _size(a.shape[1]), _size(b.shape[2]), _size(a.shape[2])


@register
class Gemm(Contraction):
    """ONNX Gemm: ``alpha * op(a) @ op(b) + beta * c``, ``c`` broadcast to (M, N)."""

    name = "graph.gemm"
    operands = ("a", "b", "c?")
    attrs = {"alpha": Attr("float", 1.0), "beta": Attr("float", 1.0),
             "trans_a": Attr("bool", False), "trans_b": Attr("bool", False)}

    @staticmethod
    def _mkn(a: TensorType, b: TensorType, attrs) -> tuple:
        m, k = (a.shape[1], a.shape[0]) if attrs.get("trans_a", False) else a.shape
        k2, n = (b.shape[1], b.shape[0]) if attrs.get("trans_b", False) else b.shape
        return m, k, k2, n

    def infer(self, types, attrs):
        tt = tensor_types(types, self.name)
        a, b = tt[0], tt[1]
        dtype = promote(a.dtype, b.dtype)
        expect_numeric(a, "a")
        expect(a.rank == 2 and b.rank == 2, f"a and b must be rank 2, got ranks {a.rank} and {b.rank}")
        m, k, k2, n = self._mkn(a, b, attrs)
        match_dims(k, k2, f"contraction dim of op(a) (M,K)={m, k} and op(b) (K,N)={k2, n} differ")
        if len(tt) == 3:
            c = tt[2]
            promote(dtype, c.dtype)
            expect(c.rank <= 2, f"c must have rank <= 2, got {c.shape}")
            expect(broadcasts_to(c.shape, (m, n)),
                   f"c of shape {c.shape} does not broadcast to (M, N) = {(m, n)}")
        return [TensorType((m, n), dtype)]

    @staticmethod
    def compute(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
        y = np.matmul(a.T if trans_a else a, b.T if trans_b else b)
        if alpha != 1.0:
            y = y * np.asarray(alpha, dtype=y.dtype if y.dtype.kind == "f" else np.float64)
        if c is not None and beta != 0.0:
            y = y + (c if beta == 1.0 else c * beta)
        return y.astype(a.dtype, copy=False)

    def mnk(self, types, attrs):
        m, k, _, n = self._mkn(types[0], types[1], attrs)
        return 1, _size(m), _size(n), _size(k)

    def epilogue_flops(self, types, attrs, m, n):
        flops = 0.0 if attrs.get("alpha", 1.0) == 1.0 else m * n
        if len(types) == 3:
            flops += m * n * (1 if attrs.get("beta", 1.0) == 1.0 else 2)
        return flops
