"""Low-precision contractions: ``graph.qmatmul`` (8-bit, exact int32 accumulation) and
``graph.bf16_matmul`` (bf16 operands, float32 accumulation).

``qmatmul(lhs, rhs_packed, rhs_sums, lhs_zero_point)[..., m, n] = sum_k (lhs[..., m, k] - zp) * rhs[k, n]``
in int32, where ``lhs`` is uint8 or int8 (the activations), ``rhs`` a constant int8 ``K x N``
matrix (the weights) and ``zp`` an int32 scalar (the activations' zero point; it may be computed
at run time, as ONNX ``DynamicQuantizeLinear`` does).  It is what ``MatMulInteger`` and the
integer core of ``QLinearMatMul`` compute, found by the ``int8-contractions`` pass
(``passes/graph/int8_contractions.py``) in the int32 matmul the ONNX importer writes for them.

The weights are stored in the layout the int8 kernels read (``pack_vnni``): panels of ``nr``
columns, and in each panel groups of 4 consecutive k, so that one 64-byte vector holds 16 columns
x 4 k, the operand of AVX-512 VNNI's ``vpdpbusd`` (u8 x s8 products summed in fours into int32
lanes).  The layout is part of the op (its ``k``, ``n`` and ``nr`` attributes), done once at
compile time, and the reference semantics below unpack it.  ``rhs_sums`` holds the column sums of
the weights: the kernel folds the zero point into one per-column term, ``-zp * sums[n]``, so the
products need no subtraction, and int8 activations become uint8 by the +128 shift in the same term.

The op is OPAQUE and lowers to a library kernel (hand-written C, ``codegen/c/library_kernels.py``
with the generator of ``codegen/c/qgemm.py``): no tensor expression states a VNNI dot product.
"""
from __future__ import annotations

import numpy as np

from ...ir.lowbits import from_bf16_bits, to_bf16_bits
from ...ir.opdef import PURE, Attr, Cost, FusionKind, expect, register
from ...ir.types import DType, TensorType
from .base import FoldStaticOnly, io_bytes, num_elements, tensor_types

VNNI_NR = 16          # columns per packed panel: one 512-bit vector of int32 accumulators
VNNI_KG = 4           # consecutive k per group: vpdpbusd sums four products per lane


def vnni_packed_size(k: int, n: int, nr: int = VNNI_NR) -> int:
    """Bytes of ``pack_vnni`` of a ``k x n`` matrix."""
    return -(-n // nr) * -(-k // VNNI_KG) * nr * VNNI_KG


def pack_vnni(b: np.ndarray, nr: int = VNNI_NR) -> np.ndarray:
    """An int8 ``K x N`` matrix as ``[ceil(N/nr)][ceil(K/4)][nr][4]`` int8 (flat), zero padded."""
    k, n = b.shape
    kq, panels = -(-k // VNNI_KG), -(-n // nr)
    padded = np.zeros((kq * VNNI_KG, panels * nr), np.int8)
    padded[:k, :n] = b
    # [kq, 4, panels, nr] -> [panels, kq, nr, 4]
    return np.ascontiguousarray(padded.reshape(kq, VNNI_KG, panels, nr).transpose(2, 0, 3, 1)).reshape(-1)


def unpack_vnni(packed: np.ndarray, k: int, n: int, nr: int = VNNI_NR) -> np.ndarray:
    """The ``K x N`` int8 matrix ``pack_vnni`` stored."""
    kq, panels = -(-k // VNNI_KG), -(-n // nr)
    full = np.asarray(packed, np.int8).reshape(panels, kq, nr, VNNI_KG).transpose(1, 3, 0, 2)
    return full.reshape(kq * VNNI_KG, panels * nr)[:k, :n]


@register
class QMatMul(FoldStaticOnly):
    name = "graph.qmatmul"
    operands = ("lhs", "rhs_packed", "rhs_sums", "lhs_zero_point")
    attrs = {"k": Attr("int", doc="rows of the packed weights (the contraction size)"),
             "n": Attr("int", doc="columns of the packed weights"),
             "nr": Attr("int", VNNI_NR, doc="columns per packed panel")}
    traits = frozenset({PURE})
    fusion = FusionKind.OPAQUE
    library_kernel = True            # lowered to hand-written C (passes/lower/graph_to_kernels.py)

    def infer(self, types, attrs):
        a, b, sums, zp = tensor_types(types, self.name)
        k, n, nr = attrs["k"], attrs["n"], attrs["nr"]
        expect(a.dtype in (DType.u8, DType.i8), f"lhs must be uint8 or int8, got {a.dtype}")
        expect(a.rank >= 2, f"lhs must have rank >= 2, got {a.rank}")
        expect(a.shape[-1] == k, f"lhs has {a.shape[-1]} columns, the weights {k} rows")
        expect(b.dtype is DType.i8 and b.rank == 1 and b.shape[0] == vnni_packed_size(k, n, nr),
               f"rhs_packed must be int8[{vnni_packed_size(k, n, nr)}] (pack_vnni of {k}x{n}), got {b}")
        expect(sums.dtype is DType.i32 and tuple(sums.shape) == (n,), f"rhs_sums must be int32[{n}], got {sums}")
        expect(zp.dtype is DType.i32 and zp.rank == 0, f"lhs_zero_point must be an int32 scalar, got {zp}")
        expect(nr > 0 and nr % VNNI_NR == 0, f"nr must be a multiple of {VNNI_NR}, got {nr}")
        return [TensorType(tuple(a.shape[:-1]) + (n,), DType.i32)]

    def compute(self, lhs, rhs_packed, rhs_sums, lhs_zero_point, k, n, nr):
        b = unpack_vnni(rhs_packed, k, n, nr).astype(np.int64)
        acc = (lhs.astype(np.int64) - np.int64(lhs_zero_point)) @ b
        return acc.astype(np.int32)            # exact: |acc| < 2^31 for K < 2^16 (255 * 128 * K)

    def cost(self, operand_types, result_types, attrs):
        a = operand_types[0]
        rows = num_elements(a.shape[:-1])
        return Cost(2.0 * rows * attrs["k"] * attrs["n"], io_bytes(operand_types, result_types))


def qconv_weights(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 conv weights ``(O, C, kh, kw)`` as ``graph.qconv`` stores them: ``(O, Kp)`` uint8
    ``w + 128`` (row ``o`` is the im2col order c, kh, kw; K = C*kh*kw zero padded to a multiple of
    4 with 0, which adds nothing), and the int32 row sums of ``w``."""
    w = np.asarray(w)
    o = w.shape[0]
    flat = w.reshape(o, -1).astype(np.int16)
    k = flat.shape[1]
    shifted = np.zeros((o, -(-k // VNNI_KG) * VNNI_KG), np.uint8)
    shifted[:, :k] = (flat + 128).astype(np.uint8)
    return shifted, flat.astype(np.int32).sum(axis=1, dtype=np.int32)


def qconv_window(conv, weight_shape) -> dict:
    """The ``graph.qconv`` attributes of a ``graph.conv`` (its window and grouping, as they are)
    with weights of ``weight_shape`` ``(O, C/groups, kh, kw)``."""
    at = {key: conv.attributes[key] for key in ("strides", "pads", "dilations", "groups") if key in conv.attributes}
    return {"kernel": tuple(int(d) for d in weight_shape[2:]), **at}


def quantize_u8(x: np.ndarray, multiplier: float, zero_point: int) -> np.ndarray:
    """``clip(round_half_even(x * multiplier) + zero_point, 0, 255)`` as uint8, each step in
    float32: the graph's QuantizeLinear ops as ``qconv``'s ``input_scale`` takes them in."""
    with np.errstate(invalid="ignore"):
        v = np.rint(np.asarray(x, np.float32) * np.float32(multiplier)) + np.float32(zero_point)
        return np.clip(v, np.float32(0), np.float32(255)).astype(np.uint8)


def dequantize_u8(q: np.ndarray, scale: float, offset: float) -> np.ndarray:
    """``float32(q) * scale + offset`` in float32, the graph's DequantizeLinear as the
    ``qconv`` epilogue takes it in (the zero point folded into ``offset = -zp * scale``; -0.0
    when there is none: adding it changes nothing)."""
    return np.asarray(q).astype(np.float32) * np.float32(scale) + np.float32(offset)


@register
class QConv(FoldStaticOnly):
    """``qconv(x, w_shifted, w_sums, x_zero_point)[n, o, oh, ow] = sum_{c,i,j} (xp[n, c, ...] - zp) * w[o, c, i, j]``
    in int32, a 2-D convolution of 8-bit activations ``x`` (uint8 or int8, NCHW) by constant int8
    weights, where ``xp`` is ``x`` padded with the zero point (a float 0), so padding adds
    nothing.  One group.  The weights are stored transposed to how ``qmatmul`` keeps them: the
    kernel (``codegen/c/qconv.py``) computes ``W x im2col(x)``, the weights as the broadcast
    (unsigned, hence ``w + 128``, ``qconv_weights``) operand of ``vpdpbusd`` and the activations,
    packed per image at run time, as the vector operand, so the output comes out NCHW without a
    transpose.  ``w_sums`` (the weights' row sums) carries the zero point's term.

    With ``scale`` and ``bias`` (float32 per output channel) the result is float32 instead, the
    dequantizing epilogue ``y = acc * scale[o] + bias[o] (+ residual) (relu or clip(0, clip_max))``, each operation
    rounded in float32 in that order (the graph ops it replaces, joined by the
    ``int8-contractions`` pass).  An int32 ``bias`` is added to the sums instead, before the
    conversion: ``y = float32(acc + bias[o]) * scale[o] ...``, onnxruntime's QLinearConv arithmetic
    (``passes/graph/qdq_requant.py``).  ``groups`` = the channel count makes it depthwise (one filter per
    channel: a direct loop, ``qconv.depthwise_source``, not the GEMM).  With ``input_scale`` the activations arrive in float32 and are
    quantized to uint8 in the kernel (``quantize_u8``), the QuantizeLinear before the conv taken in,
    so no separate pass writes the uint8 tensor; with ``output_scale`` the float32 result is
    quantized the same way and the result is uint8 (the QuantizeLinear after it, for the next
    quantized layer).  ``requant_scale`` rounds the result through uint8 before a residual is added (a
    QDQ model's Q/DQ pair on the conv's output) and ``residual_scale`` takes a uint8 residual
    dequantized: a QDQ ResNet block's add runs in the conv's epilogue.  OPAQUE, a library kernel."""

    name = "graph.qconv"
    operands = ("x", "w_shifted", "w_sums", "x_zero_point", "scale?", "bias?", "residual?")
    attrs = {"kernel": Attr("ints", doc="(kh, kw)"),
             "strides": Attr("ints", (), "(sh, sw); () = 1, 1"),
             "pads": Attr("ints", (), "(top, left, bottom, right); () = 0"),
             "dilations": Attr("ints", (), "(dh, dw); () = 1, 1"),
             "relu": Attr("bool", False, "max(y, 0) last (float32 result only)"),
             "groups": Attr("int", 1, "1, or the channel count: a depthwise conv (one filter per channel)"),
             "clip_max": Attr("float", None, "with relu: min(y, clip_max) after it (ReLU6: clip(y, 0, 6))"),
             "input_scale": Attr("float", 0.0, "not 0: x is float32, quantized to uint8 in the kernel as "
                                               "clip(round(x * input_scale) + zero point, 0, 255)"),
             "output_scale": Attr("float", 0.0, "not 0: the float32 result quantized to uint8, "
                                                "clip(round(y * output_scale) + output_zero_point, 0, 255)"),
             "output_zero_point": Attr("int", 0),
             "requant_scale": Attr("float", 0.0, "not 0: before the residual, y is quantized to uint8 "
                                                 "(requant_scale, requant_zero_point as output_scale) and "
                                                 "dequantized, q * dequant_scale + dequant_offset (a QDQ pair)"),
             "requant_zero_point": Attr("int", 0),
             "dequant_scale": Attr("float", 1.0),
             "dequant_offset": Attr("float", -0.0, "-0.0: no offset (x + -0.0 is x for every x)"),
             "residual_scale": Attr("float", 0.0, "not 0: the residual is uint8, dequantized as "
                                                  "r * residual_scale + residual_offset"),
             "residual_offset": Attr("float", -0.0)}
    traits = frozenset({PURE})
    fusion = FusionKind.OPAQUE
    library_kernel = True

    def infer(self, types, attrs):
        from .base import Window
        x, w, sums, zp, *epilogue = tensor_types(types, self.name)
        if attrs.get("input_scale", 0.0):
            expect(x.dtype is DType.f32 and x.rank == 4, f"x must be float32 NCHW (input_scale is set), got {x}")
        else:
            expect(x.dtype in (DType.u8, DType.i8) and x.rank == 4, f"x must be uint8 or int8 NCHW, got {x}")
        kh, kw = attrs["kernel"]
        c = x.shape[1]
        expect(isinstance(c, int), f"the channel count of x must be static, got {c}")
        groups = attrs.get("groups", 1)
        expect(groups in (1, c), f"groups must be 1 or the channel count {c} (depthwise), got {groups}")
        k = (c // groups) * kh * kw
        expect(w.dtype is DType.u8 and w.rank == 2 and w.shape[1] == -(-k // VNNI_KG) * VNNI_KG,
               f"w_shifted must be uint8[O, {-(-k // VNNI_KG) * VNNI_KG}] (qconv_weights of O x {c // groups} x {kh} x {kw}), got {w}")
        o = w.shape[0]
        expect(groups == 1 or o == c, f"a depthwise qconv has one filter per channel: {o} filters for {c} channels")
        expect(sums.dtype is DType.i32 and tuple(sums.shape) == (o,), f"w_sums must be int32[{o}], got {sums}")
        expect(zp.dtype is DType.i32 and zp.rank == 0, f"x_zero_point must be an int32 scalar, got {zp}")
        win = Window((kh, kw), attrs)
        shape = (x.shape[0], o) + tuple(win.out_dim(i, s) for i, s in enumerate(x.shape[2:]))
        expect(len(epilogue) != 1, "scale needs bias (the dequantizing epilogue takes both)")
        residual_u8 = bool(attrs.get("residual_scale", 0.0))
        for name, t, want in zip(("scale", "bias", "residual"), epilogue, ((o,), (o,), shape)):
            dtype = DType.u8 if name == "residual" and residual_u8 else DType.f32
            if name == "bias" and t.dtype is DType.i32:            # added to the sums
                dtype = DType.i32
            expect(t.dtype is dtype and tuple(t.shape) == tuple(want), f"{name} must be {dtype}{list(want)}, got {t}")
        expect(len(epilogue) == 3 or not residual_u8, "residual_scale needs a residual")
        expect(epilogue or not attrs.get("relu", False), "relu needs the float32 epilogue (scale and bias)")
        expect(attrs.get("clip_max") is None or attrs.get("relu", False), "clip_max needs relu")
        requant = bool(attrs.get("output_scale", 0.0))
        expect(epilogue or not requant, "output_scale needs the float32 epilogue (scale and bias)")
        expect(epilogue or not attrs.get("requant_scale", 0.0), "requant_scale needs the float32 epilogue (scale and bias)")
        expect(0 <= attrs.get("requant_zero_point", 0) <= 255, "requant_zero_point must be a uint8 value")
        expect(0 <= attrs.get("output_zero_point", 0) <= 255, "output_zero_point must be a uint8 value")
        return [TensorType(shape, DType.u8 if requant else DType.f32 if epilogue else DType.i32)]

    def compute(self, x, w_shifted, w_sums, x_zero_point, scale=None, bias=None, residual=None, kernel=(),
                strides=(), pads=(), dilations=(), groups=1, relu=False, clip_max=None, input_scale=0.0,
                output_scale=0.0, output_zero_point=0, requant_scale=0.0, requant_zero_point=0, dequant_scale=1.0,
                dequant_offset=-0.0, residual_scale=0.0, residual_offset=-0.0):
        from .base import Window
        from .conv import conv_nd
        kh, kw = kernel
        c = x.shape[1]
        if input_scale:
            x = quantize_u8(x, input_scale, int(x_zero_point))
        cg = c // groups
        w = w_shifted[:, :cg * kh * kw].astype(np.int64).reshape(-1, cg, kh, kw) - 128
        shifted = x.astype(np.int64) - np.int64(x_zero_point)
        win = Window((kh, kw), {"strides": strides, "pads": pads, "dilations": dilations})
        acc = conv_nd(shifted, w, None, win, groups).astype(np.int32)     # exact in int64
        if scale is None:
            return acc
        per = (1, -1, 1, 1)
        if bias.dtype == np.int32:
            acc = acc + bias.reshape(per)
        y = acc.astype(np.float32) * scale.astype(np.float32).reshape(per)
        if bias.dtype != np.int32:
            y = y + bias.astype(np.float32).reshape(per)
        if requant_scale:
            y = dequantize_u8(quantize_u8(y, requant_scale, requant_zero_point), dequant_scale, dequant_offset)
        if residual is not None:
            y = y + (dequantize_u8(residual, residual_scale, residual_offset) if residual_scale else residual)
        y = np.where(y < 0, np.float32(0), y) if relu else y
        if relu and clip_max is not None:
            y = np.where(y > np.float32(clip_max), np.float32(clip_max), y)
        return quantize_u8(y, output_scale, output_zero_point) if output_scale else y

    def cost(self, operand_types, result_types, attrs):
        y = result_types[0]
        k = operand_types[0].shape[1] // attrs.get("groups", 1) * attrs["kernel"][0] * attrs["kernel"][1]
        return Cost(2.0 * num_elements(y.shape) * k, io_bytes(operand_types, result_types))


BF16_NR = 16          # columns per packed panel: one 512-bit vector of float32 accumulators


def bf16_packed_size(k: int, n: int, nr: int = BF16_NR) -> int:
    """uint16 elements of ``pack_bf16`` of a ``k x n`` matrix."""
    return -(-n // nr) * nr * -(-k // 2) * 2


def pack_bf16(b: np.ndarray, nr: int = BF16_NR) -> np.ndarray:
    """float32 ``K x N`` weights rounded to bf16 bits (``to_bf16_bits``) as
    ``[ceil(N/nr)][ceil(K/2)][nr][2]`` uint16 (flat), zero padded: the operand of ``vdpbf16ps``."""
    k, n = b.shape
    pairs, panels = -(-k // 2), -(-n // nr)
    padded = np.zeros((2 * pairs, panels * nr), np.uint16)
    padded[:k, :n] = to_bf16_bits(b)
    return np.ascontiguousarray(padded.reshape(pairs, 2, panels, nr).transpose(2, 0, 3, 1)).reshape(-1)


def unpack_bf16(packed: np.ndarray, k: int, n: int, nr: int = BF16_NR) -> np.ndarray:
    """The ``K x N`` bf16 bits ``pack_bf16`` stored."""
    pairs, panels = -(-k // 2), -(-n // nr)
    full = np.asarray(packed, np.uint16).reshape(panels, pairs, nr, 2).transpose(1, 3, 0, 2)
    return full.reshape(2 * pairs, panels * nr)[:k, :n]


@register
class Bf16MatMul(FoldStaticOnly):
    """``bf16_matmul(lhs, rhs_packed, bias) = bf16(lhs) @ rhs + bias`` with float32 accumulation:
    the activations rounded to bf16 (to nearest even) in the kernel, the weights stored as bf16
    (``pack_bf16``), each product exact and summed in float32 (``codegen/c/bf16gemm.py`` states
    the vector kernel's order and the instruction's denormal flushing; on AMX tiles,
    ``bf16gemm_amx.py``, the order within an instruction is the hardware's).  The reference below sums in float64 and
    rounds once, so it differs from the kernel by float32 summation rounding only.  Made by
    ``compile(precision="bf16")`` (``quantization/bf16.py``); OPAQUE, a library kernel."""

    name = "graph.bf16_matmul"
    operands = ("lhs", "rhs_packed", "bias")
    attrs = {"k": Attr("int", doc="rows of the packed weights (the contraction size)"),
             "n": Attr("int", doc="columns of the packed weights"),
             "nr": Attr("int", BF16_NR, doc="columns per packed panel")}
    traits = frozenset({PURE})
    fusion = FusionKind.OPAQUE
    library_kernel = True

    def infer(self, types, attrs):
        a, b, bias = tensor_types(types, self.name)
        k, n, nr = attrs["k"], attrs["n"], attrs["nr"]
        expect(a.dtype is DType.f32 and a.rank >= 2 and a.shape[-1] == k,
               f"lhs must be float32 [..., {k}], got {a}")
        expect(b.dtype is DType.u16 and b.rank == 1 and b.shape[0] == bf16_packed_size(k, n, nr),
               f"rhs_packed must be uint16[{bf16_packed_size(k, n, nr)}] (pack_bf16 of {k}x{n}), got {b}")
        expect(bias.dtype is DType.f32 and tuple(bias.shape) == (n,), f"bias must be float32[{n}], got {bias}")
        expect(nr > 0 and nr % BF16_NR == 0, f"nr must be a multiple of {BF16_NR}, got {nr}")
        return [TensorType(tuple(a.shape[:-1]) + (n,), DType.f32)]

    def compute(self, lhs, rhs_packed, bias, k, n, nr):
        a = from_bf16_bits(to_bf16_bits(lhs)).astype(np.float64)
        b = from_bf16_bits(unpack_bf16(rhs_packed, k, n, nr)).astype(np.float64)
        return (a @ b + bias).astype(np.float32)

    def cost(self, operand_types, result_types, attrs):
        rows = num_elements(operand_types[0].shape[:-1])
        return Cost(2.0 * rows * attrs["k"] * attrs["n"], io_bytes(operand_types, result_types))


def bf16_conv_weights(w: np.ndarray) -> np.ndarray:
    """float32 ``O x C x kh x kw`` weights as the rows ``graph.bf16_conv`` broadcasts: bf16 bits
    ``[O][2 * stride]``, k = (c, i, j) in weight order, zero padded to ``stride`` k-pairs, a
    multiple of 16 (64-byte rows)."""
    o = w.shape[0]
    flat = np.asarray(w, np.float32).reshape(o, -1)
    stride = -(-(-(-flat.shape[1] // 2)) // 16) * 16
    out = np.zeros((o, 2 * stride), np.uint16)
    out[:, :flat.shape[1]] = to_bf16_bits(flat)
    return out


@register
class Bf16Conv(FoldStaticOnly):
    """``bf16_conv(x, w_bf16, bias, residual?)``: a one-group 2-D convolution of float32 ``x``
    (NCHW, zero padded) by weights stored as bf16 (``bf16_conv_weights``), the activations rounded
    to bf16 in the kernel and each output's products summed in float32 by ``vdpbf16ps``
    (``codegen/c/bf16conv.py``: one chain from 0 over the k-pairs of the window in weight order,
    as ``bf16gemm.reference`` states it, or on AMX tiles in the hardware's order); then ``+ bias[o]`` (``+ residual``), relu or
    clip(0, clip_max), each rounded in float32.  The reference below sums in float64 and rounds
    once (as ``bf16_matmul``'s).  Made by ``compile(precision="bf16")``; OPAQUE, a library kernel."""

    name = "graph.bf16_conv"
    operands = ("x", "w_bf16", "bias", "residual?")
    attrs = {"kernel": Attr("ints", doc="(kh, kw)"),
             "strides": Attr("ints", (), "(sh, sw); () = 1, 1"),
             "pads": Attr("ints", (), "(top, left, bottom, right); () = 0"),
             "dilations": Attr("ints", (), "(dh, dw); () = 1, 1"),
             "relu": Attr("bool", False, "max(y, 0) last"),
             "clip_max": Attr("float", None, "with relu: min(y, clip_max) after it")}
    traits = frozenset({PURE})
    fusion = FusionKind.OPAQUE
    library_kernel = True

    def infer(self, types, attrs):
        from .base import Window
        x, w, bias, *rest = tensor_types(types, self.name)
        expect(x.dtype is DType.f32 and x.rank == 4 and isinstance(x.shape[1], int), f"x must be float32 NCHW, got {x}")
        kh, kw = attrs["kernel"]
        k = x.shape[1] * kh * kw
        stride = -(-(-(-k // 2)) // 16) * 16
        expect(w.dtype is DType.u16 and w.rank == 2 and w.shape[1] == 2 * stride,
               f"w_bf16 must be uint16[O, {2 * stride}] (bf16_conv_weights of O x {x.shape[1]} x {kh} x {kw}), got {w}")
        o = w.shape[0]
        expect(bias.dtype is DType.f32 and tuple(bias.shape) == (o,), f"bias must be float32[{o}], got {bias}")
        win = Window((kh, kw), attrs)
        shape = (x.shape[0], o) + tuple(win.out_dim(i, s) for i, s in enumerate(x.shape[2:]))
        for r in rest:
            expect(r.dtype is DType.f32 and tuple(r.shape) == shape, f"residual must be float32{list(shape)}, got {r}")
        expect(attrs.get("clip_max") is None or attrs.get("relu", False), "clip_max needs relu")
        return [TensorType(shape, DType.f32)]

    def compute(self, x, w_bf16, bias, residual=None, kernel=(), strides=(), pads=(), dilations=(), relu=False,
                clip_max=None):
        from .base import Window
        from .conv import conv_nd
        kh, kw = kernel
        c = x.shape[1]
        w = from_bf16_bits(w_bf16[:, :c * kh * kw]).astype(np.float64).reshape(-1, c, kh, kw)
        xb = from_bf16_bits(to_bf16_bits(x)).astype(np.float64)
        win = Window((kh, kw), {"strides": strides, "pads": pads, "dilations": dilations})
        y = conv_nd(xb, w, None, win, 1).astype(np.float32) + bias.astype(np.float32).reshape(1, -1, 1, 1)
        if residual is not None:
            y = y + residual
        y = np.where(y < 0, np.float32(0), y) if relu else y
        if relu and clip_max is not None:
            y = np.where(y > np.float32(clip_max), np.float32(clip_max), y)
        return y

    def cost(self, operand_types, result_types, attrs):
        x = operand_types[0]
        kh, kw = attrs["kernel"]
        macs = num_elements(result_types[0].shape) * x.shape[1] * kh * kw
        return Cost(2.0 * macs, io_bytes(operand_types, result_types))
