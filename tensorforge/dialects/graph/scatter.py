"""Scatter: ``graph.scatter_nd`` (ONNX ScatterND, and through index arithmetic ScatterElements,
Scatter).

``out = copy(data)``; then, in the order of the update rows, ``out[indices[u]] = f(out[indices[u]],
updates[u])`` where ``indices[u]`` (the last axis of ``indices``, ``k`` entries) names a slice of
``data`` of shape ``data.shape[k:]`` and ``f`` is the reduction: ``none`` (the update replaces;
with duplicate indices the last one wins), ``add``, ``mul``, ``min``, ``max`` (NumPy's
minimum/maximum: a NaN on either side gives NaN).  Negative indices count from the end.

The op writes at positions named by data, so no output element is a function of its own
coordinate: it is OPAQUE and lowers to a library kernel (hand-written C,
``codegen/c/library_kernels.py``) that copies ``data`` and then walks the update rows once,
O(|data| + |updates|), rather than to a tensor expression that would search every update row for
each output element.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ...ir.opdef import PURE, Attr, Cost, FusionKind, expect, register
from ...ir.rules import same_dim
from .base import FoldStaticOnly, expect_choice, expect_int, io_bytes, num_elements, tensor_types

SCATTER_REDUCTIONS = ("none", "add", "mul", "min", "max")


@register
class ScatterND(FoldStaticOnly):
    name = "graph.scatter_nd"
    operands = ("data", "indices", "updates")
    attrs = {"reduction": Attr("str", "none", "none | add | mul | min | max")}
    traits = frozenset({PURE})
    fusion = FusionKind.OPAQUE
    library_kernel = True            # lowered to hand-written C (passes/lower/graph_to_kernels.py)

    def infer(self, types, attrs):
        data, ind, upd = tensor_types(types, self.name)
        expect_choice(attrs["reduction"], SCATTER_REDUCTIONS, "reduction")
        expect_int(ind, "indices")
        expect(ind.rank >= 1, "indices must have rank >= 1")
        k = ind.shape[-1]
        expect(isinstance(k, int), f"the last axis of indices must be static, got {k!r}")
        expect(k <= data.rank, f"indices address {k} axes of a rank-{data.rank} data")
        want = tuple(ind.shape[:-1]) + tuple(data.shape[k:])
        expect(len(want) == upd.rank and all(same_dim(a, b) for a, b in zip(want, upd.shape)),
               f"updates have shape {upd.shape}; indices {ind.shape} and data {data.shape} need {want}")
        expect(upd.dtype == data.dtype, f"updates are {upd.dtype}, data is {data.dtype}")
        expect(attrs["reduction"] == "none" or data.dtype.name != "bool",
               f"reduction '{attrs['reduction']}' on bool data")
        return [data]

    def compute(self, data, indices, updates, reduction):
        k = indices.shape[-1]
        lead = data.shape[:k]
        idx = indices.reshape(-1, k).astype(np.int64)
        sizes = np.asarray(lead, dtype=np.int64)
        bad = (idx < -sizes) | (idx >= sizes)
        if bad.any():
            raise ShapeError(f"'{self.name}': index {idx[bad.any(axis=1)][0].tolist()} is out of range "
                             f"for data of shape {data.shape}")
        idx = np.where(idx < 0, idx + sizes, idx)
        lin = np.ravel_multi_index(tuple(idx.T), lead) if k else np.zeros(len(idx), np.int64)
        out = np.array(data, copy=True)
        flat = out.reshape((int(np.prod(lead, dtype=np.int64)),) + data.shape[k:])
        upd = updates.reshape((len(lin),) + data.shape[k:])
        if reduction == "none":
            for u, i in enumerate(lin):          # in order: the last duplicate wins
                flat[i] = upd[u]
        else:
            ufunc = {"add": np.add, "mul": np.multiply, "min": np.minimum, "max": np.maximum}[reduction]
            with np.errstate(invalid="ignore"):  # NaN propagates (minimum/maximum), no warning
                ufunc.at(flat, lin, upd)         # unbuffered, in order of the update rows
        return out

    def cost(self, operand_types, result_types, attrs):
        return Cost(float(num_elements(operand_types[2].shape)), io_bytes(operand_types, result_types))
