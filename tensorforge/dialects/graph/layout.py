"""Blocked data layouts: ``layout_transform`` and the ops that work on blocked tensors.

CPU convolutions run fastest when the channels are split into blocks of the vector width and
the block is the innermost dim: NCHW[x]c, shape ``(N, ceil(C/x), *spatial, x)``, so that one vector
holds ``x`` channels of one pixel.  Weights go with it as OIHW[i]i[o]o, shape
``(ceil(O/o), ceil(I/i), *kernel, i, o)``.  ("HW" stands for however many spatial dims there are.)
When ``x`` does not divide C, the last block is padded: its extra lanes hold values nobody reads
(packing writes zeros there, the kernels whatever their arithmetic gives), and the ops that must
know C carry it: ``layout_transform``'s ``channels``, ``conv_nchwc``'s ``in_channels`` and
``out_channels`` (0 when the blocks are whole).  Padded weights are zeros.

- ``layout_transform(x) {src, dst, channels}`` converts between a plain layout and its blocked form:
  ``NCHW <-> NCHW{x}c`` for activations, ``OIHW <-> OIHW{i}i{o}o`` for conv weights.  On a
  constant it folds, so weights are packed once at compile time.
- ``conv_nchwc(x, w, b?, residual?)``: a conv with x in NCHW[i]c, w in OIHW[i]i[o]o (depthwise,
  ``groups`` = channels: OIHW1i[o]o), b per output channel, result in NCHW[o]c; with its epilogue
  taken in (the ``layout`` pass): a ``residual`` of the result's type added after the bias, then
  ``relu`` (and ``clip_max``: ReLU6) or ``silu`` (y * sigmoid(y)).
- ``max_pool_nchwc``, ``avg_pool_nchwc``, ``global_avg_pool_nchwc``, ``global_max_pool_nchwc``:
  the pools of ``pool.py`` (same attributes) on NCHW[x]c, result in the same layout.

Elementwise ops and channel concat need no blocked variant: they work on the blocked tensor
as they are (concat along axis 1 joins channel blocks when every part is whole blocks).

Reference semantics unpack, run the plain op and pack again, so a blocked graph computes
exactly what the plain one does.  Every op here is a library kernel: its C is hand-written in
``codegen/c/nchwc.py`` and ``nchwc_winograd.py`` (the CPU backend is the only one that runs
blocked layouts).
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from ...ir.opdef import PURE, Attr, Cost, FusionKind, OpDef, expect, lookup, register
from ...ir.types import Dim, TensorType
from .base import io_bytes, tensor_types

_ACT = re.compile(r"^NCHW(\d+)c$")
_WEIGHT = re.compile(r"^OIHW(\d+)i(\d+)o$")
PLAIN_ACT, PLAIN_WEIGHT = "NCHW", "OIHW"


def nchwc(block: int) -> str:
    return f"NCHW{block}c"


def oihwio(block_in: int, block_out: int) -> str:
    return f"OIHW{block_in}i{block_out}o"


def parse_layout(layout: str) -> tuple[str, tuple[int, ...]]:
    """("NCHW", ()) / ("NCHWc", (x,)) / ("OIHW", ()) / ("OIHWio", (i, o)); a ShapeError otherwise."""
    if layout in (PLAIN_ACT, PLAIN_WEIGHT):
        return layout, ()
    m = _ACT.match(layout)
    if m:
        return "NCHWc", (int(m.group(1)),)
    m = _WEIGHT.match(layout)
    if m:
        return "OIHWio", (int(m.group(1)), int(m.group(2)))
    expect(False, f"unknown layout '{layout}' (NCHW, NCHW<x>c, OIHW or OIHW<i>i<o>o)")
    raise AssertionError


def _blocks(d: Dim, block: int, what: str) -> int:
    """Blocks of ``block`` covering ``d`` (the last one padded when ``block`` does not divide it)."""
    expect(block >= 1, f"block size {block} must be >= 1")
    expect(isinstance(d, int), f"{what} = {d} must be static to be blocked")
    return -(-d // block)


# ---- shapes -------------------------------------------------------------------------------
def packed_act_shape(shape: Sequence[Dim], block: int) -> tuple[Dim, ...]:
    """(N, C, *S) -> (N, ceil(C/x), *S, x): channels past C in the last block are padding."""
    expect(len(shape) >= 3, f"NCHW needs (N, C, *spatial), got shape {tuple(shape)}")
    return (shape[0], _blocks(shape[1], block, "channels (dim 1)")) + tuple(shape[2:]) + (block,)


def unpacked_act_shape(shape: Sequence[Dim], channels: int = 0) -> tuple[Dim, ...]:
    """(N, C/x, *S, x) -> (N, C, *S); ``channels`` (0: all C/x * x) drops the last block's padding."""
    expect(len(shape) >= 4, f"NCHW<x>c needs (N, C/x, *spatial, x), got shape {tuple(shape)}")
    cb, x = shape[1], shape[-1]
    expect(isinstance(cb, int) and isinstance(x, int), f"channel dims of {tuple(shape)} must be static")
    expect(channels == 0 or (cb - 1) * x < channels <= cb * x,
           f"{channels} channels do not fill the {cb} blocks of {x} of shape {tuple(shape)}")
    return (shape[0], channels or cb * x) + tuple(shape[2:-1])


def packed_weight_shape(shape: Sequence[Dim], bi: int, bo: int) -> tuple[Dim, ...]:
    """(O, I, *K) -> (ceil(O/o), ceil(I/i), *K, i, o), padded with zero weights."""
    expect(len(shape) >= 3, f"OIHW needs (O, I, *kernel), got shape {tuple(shape)}")
    return (_blocks(shape[0], bo, "output channels (dim 0)"), _blocks(shape[1], bi, "input channels (dim 1)")) \
        + tuple(shape[2:]) + (bi, bo)


def unpacked_weight_shape(shape: Sequence[Dim]) -> tuple[Dim, ...]:
    """(O/o, I/i, *K, i, o) -> (O, I, *K) (padding included)."""
    expect(len(shape) >= 5, f"OIHW<i>i<o>o needs (O/o, I/i, *kernel, i, o), got shape {tuple(shape)}")
    expect(all(isinstance(d, int) for d in shape), f"a packed weight must be static, got shape {tuple(shape)}")
    return (shape[0] * shape[-1], shape[1] * shape[-2]) + tuple(shape[2:-2])


# ---- arrays -------------------------------------------------------------------------------
def _pad_axis(x: np.ndarray, axis: int, block: int) -> np.ndarray:
    extra = -x.shape[axis] % block
    if not extra:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    return np.pad(x, widths)


def pack_act(x: np.ndarray, block: int) -> np.ndarray:
    x = _pad_axis(x, 1, block)
    n, c = x.shape[:2]
    s = x.shape[2:]
    y = x.reshape((n, c // block, block) + s)
    return np.ascontiguousarray(np.moveaxis(y, 2, -1))


def unpack_act(y: np.ndarray, channels: int = 0) -> np.ndarray:
    n, cb, x = y.shape[0], y.shape[1], y.shape[-1]
    plain = np.ascontiguousarray(np.moveaxis(y, -1, 2)).reshape((n, cb * x) + y.shape[2:-1])
    return np.ascontiguousarray(plain[:, :channels]) if channels else plain


def pack_weight(w: np.ndarray, bi: int, bo: int) -> np.ndarray:
    w = _pad_axis(_pad_axis(w, 0, bo), 1, bi)
    o, i = w.shape[:2]
    k = w.shape[2:]
    y = w.reshape((o // bo, bo, i // bi, bi) + k)             # (Ob, o, Ib, i, *K)
    nk = len(k)
    order = (0, 2) + tuple(range(4, 4 + nk)) + (3, 1)
    return np.ascontiguousarray(y.transpose(order))


def unpack_weight(y: np.ndarray) -> np.ndarray:
    nk = y.ndim - 4
    order = (0, y.ndim - 1, 1, y.ndim - 2) + tuple(range(2, 2 + nk))   # (Ob, o, Ib, i, *K)
    ob, ib, bi, bo = y.shape[0], y.shape[1], y.shape[-2], y.shape[-1]
    return np.ascontiguousarray(y.transpose(order)).reshape((ob * bo, ib * bi) + y.shape[2:-2])


# ---- ops ----------------------------------------------------------------------------------
@register
class LayoutTransform(OpDef):
    """Converts between a plain layout and its blocked form (see the module docstring)."""

    name = "graph.layout_transform"
    operands = ("x",)
    attrs = {"src": Attr("str"), "dst": Attr("str"),
             "channels": Attr("int", 0, "an activation's channels when its last block is padded (0: whole blocks)")}
    traits = frozenset({PURE})
    fusion = FusionKind.OPAQUE
    library_kernel = True

    @staticmethod
    def kinds(attrs) -> tuple[tuple[str, tuple[int, ...]], tuple[str, tuple[int, ...]]]:
        src, dst = parse_layout(attrs["src"]), parse_layout(attrs["dst"])
        pairs = {("NCHW", "NCHWc"), ("NCHWc", "NCHW"), ("OIHW", "OIHWio"), ("OIHWio", "OIHW")}
        expect((src[0], dst[0]) in pairs, f"cannot convert {attrs['src']} to {attrs['dst']}: one side must be "
                                          f"the plain form of the other's blocked layout")
        return src, dst

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        (skind, sblock), (dkind, dblock) = self.kinds(attrs)
        if dkind == "NCHWc":
            shape = packed_act_shape(x.shape, dblock[0])
        elif dkind == "OIHWio":
            shape = packed_weight_shape(x.shape, *dblock)
        elif skind == "NCHWc":
            expect(x.rank >= 4 and x.shape[-1] == sblock[0], f"src {attrs['src']} needs a last dim of "
                                                             f"{sblock[0]}, got shape {x.shape}")
            shape = unpacked_act_shape(x.shape, attrs.get("channels", 0))
        else:
            expect(x.rank >= 5 and tuple(x.shape[-2:]) == sblock, f"src {attrs['src']} needs last dims "
                                                                  f"{sblock}, got shape {x.shape}")
            shape = unpacked_weight_shape(x.shape)
        return [x.with_shape(shape)]

    def compute(self, x, src, dst, channels=0):
        (skind, _), (dkind, dblock) = self.kinds({"src": src, "dst": dst})
        if dkind == "NCHWc":
            return pack_act(x, dblock[0])
        if dkind == "OIHWio":
            return pack_weight(x, *dblock)
        return unpack_act(x, channels) if skind == "NCHWc" else unpack_weight(x)

    def cost(self, operand_types, result_types, attrs):
        return Cost(0.0, io_bytes(operand_types, result_types))


def gate_shape(shape: Sequence[Dim]) -> tuple[Dim, ...]:
    """The shape of a ``conv_nchwc`` gate for blocked input ``shape``: one value per image and
    channel, (N, C/x, 1, ..., 1, x)."""
    return (shape[0], shape[1]) + (1,) * (len(shape) - 3) + (shape[-1],)


def _act_block(t: TensorType, what: str) -> int:
    expect(t.rank >= 4 and isinstance(t.shape[-1], int), f"{what} must be NCHW<x>c (N, C/x, *spatial, x), "
                                                         f"got shape {t.shape}")
    return t.shape[-1]


@register
class ConvNCHWc(OpDef):
    """Conv (groups 1, or depthwise) on blocked tensors: x NCHW[i]c, w OIHW[i]i[o]o, b (O,) -> NCHW[o]c."""

    name = "graph.conv_nchwc"
    operands = ("x", "w", "b?", "residual?", "gate?")     # the gate comes last, after the residual if any
    attrs = {"strides": Attr("ints", (), "per spatial axis; () = all 1"),
             "pads": Attr("ints", (), "(begin..., end...); () = all 0"),
             "dilations": Attr("ints", (), "per spatial axis; () = all 1"),
             "groups": Attr("int", 1, "1, or the channel count: depthwise (w is OIHW1i<o>o, one filter a channel)"),
             "in_channels": Attr("int", 0, "x's channels when its last block is padded (0: whole blocks)"),
             "out_channels": Attr("int", 0, "the result's channels when its last block is padded (0: whole blocks)"),
             "relu": Attr("bool", False, "max(y, 0) after the bias and residual (NaN passes)"),
             "clip_max": Attr("float", None, "with relu: min(y, clip_max) after it (ReLU6: clip(y, 0, 6))"),
             "silu": Attr("bool", False, "y * sigmoid(y) after the bias and residual (not with relu)"),
             "gate": Attr("bool", False, "the last operand g (N, C/x, 1, 1, x) gates the input: the conv reads "
                                         "x * sigmoid(g) per image and input channel (a squeeze-excitation; 1x1 "
                                         "stride-1 convs on whole blocks, with a bias)")}
    traits = frozenset({PURE})
    fusion = FusionKind.OPAQUE
    library_kernel = True

    @staticmethod
    def split_operands(operands: Sequence, attrs) -> tuple[Sequence, object, object]:
        """(x, w and the bias if any; the residual or None; the gate or None) of a conv_nchwc's
        operands (or their types): the gate is the last one when ``attrs["gate"]``."""
        ops = list(operands)
        gate = ops.pop() if attrs.get("gate", False) else None
        residual = ops.pop() if len(ops) > 3 else None
        return ops, residual, gate

    def plain_types(self, types, attrs) -> tuple[list[TensorType], int]:
        tt = tensor_types(types, self.name)[:3]
        x, w = tt[0], tt[1]
        groups = attrs.get("groups", 1)
        bi = _act_block(x, "x")
        expect(w.rank == x.rank + 1, f"w must be OIHW<i>i<o>o of rank {x.rank + 1}, got shape {w.shape}")
        want = bi if groups == 1 else 1
        expect(w.shape[-2] == want, f"w's input block (dim {w.rank - 2}) = {w.shape[-2]} must be {want} "
                                    f"(x's block {bi}, groups {groups})")
        xs = unpacked_act_shape(x.shape, attrs.get("in_channels", 0))
        o, i, *k = unpacked_weight_shape(w.shape)
        o = attrs.get("out_channels", 0) or o
        i = xs[1] if groups == 1 else 1
        plain = [x.with_shape(xs), w.with_shape((o, i, *k))]
        if len(tt) > 2:
            expect(tt[2].rank == 1 and tt[2].shape[0] in (o, w.shape[0] * w.shape[-1]),
                   f"b must have {o} (or the padded {w.shape[0] * w.shape[-1]}) values, got shape {tt[2].shape}")
            plain.append(tt[2].with_shape((o,)))
        return plain, w.shape[-1]

    @staticmethod
    def conv_attrs(attrs) -> dict:
        """The plain conv's attributes (the epilogue's and the padding's are this op's own)."""
        own = ("relu", "clip_max", "silu", "in_channels", "out_channels", "gate")
        return {k: v for k, v in attrs.items() if k not in own} | {"groups": attrs.get("groups", 1)}

    def infer(self, types, attrs):
        main, residual, gate = self.split_operands(types, attrs)
        plain, bo = self.plain_types(main, attrs)
        (out,) = lookup("graph.conv").infer(plain, self.conv_attrs(attrs))
        y = out.with_shape(packed_act_shape(out.shape, bo))
        if residual is not None:
            expect(len(plain) == 3, f"{self.name}: a residual needs the bias operand before it")
            expect(residual == y, f"{self.name}: the residual must have the result's type {y}, got {residual}")
        if gate is not None:
            want = gate_shape(types[0].shape)
            expect(len(plain) == 3 and attrs.get("groups", 1) == 1 and not attrs.get("in_channels", 0),
                   f"{self.name}: a gate takes a conv with groups 1, whole input blocks and a bias")
            expect(tuple(gate.shape) == want, f"{self.name}: the gate must have shape {want}, got {gate.shape}")
        expect(attrs.get("clip_max") is None or attrs.get("relu", False), f"{self.name}: clip_max needs relu")
        expect(not (attrs.get("silu", False) and attrs.get("relu", False)), f"{self.name}: silu or relu, not both")
        return [y]

    def compute(self, x, w, *rest, strides=(), pads=(), dilations=(), groups=1, in_channels=0,
                out_channels=0, relu=False, clip_max=None, silu=False, gate=False):
        (_, _, *bias), residual, g = self.split_operands([x, w, *rest], {"gate": gate})
        b = bias[0] if bias else None
        if g is not None:
            x = x * lookup("graph.sigmoid").compute(g)
        xp = unpack_act(x, in_channels)
        o = out_channels or w.shape[0] * w.shape[-1]
        wp = unpack_weight(w)[:o, :xp.shape[1] if groups == 1 else 1]
        y = lookup("graph.conv").compute(xp, wp, None if b is None else b[:o], strides, pads, dilations, groups)
        y = pack_act(y, w.shape[-1])
        if residual is not None:
            y = y + residual
        if relu:
            y = lookup("graph.clip").compute(y, 0.0, clip_max)
        if silu:
            y = y * lookup("graph.sigmoid").compute(y)
        return y

    def cost(self, operand_types, result_types, attrs):
        plain, _ = self.plain_types(operand_types, attrs)
        (out,) = lookup("graph.conv").infer(plain, self.conv_attrs(attrs))
        base = lookup("graph.conv").cost(plain, [out], self.conv_attrs(attrs))
        return Cost(base.flops, io_bytes(operand_types, result_types))


DW_ATTRS = ("strides", "pads", "dilations", "relu", "clip_max", "silu")
"""The depthwise conv's attributes an ``mbconv_nchwc`` carries, ``dw_``-prefixed."""
EXPAND_ATTRS = ("in_channels", "relu", "clip_max", "silu")
"""The expanding 1x1 conv's attributes an ``mbconv_nchwc`` carries, ``expand_``-prefixed."""
PROJECT_ATTRS = ("out_channels", "relu", "clip_max", "silu")
"""The projecting 1x1 conv's attributes an ``mbconv_nchwc`` carries, unprefixed (the result's)."""


@register
class MBConvNCHWc(OpDef):
    """A depthwise ``conv_nchwc`` with the 1x1 ``conv_nchwc`` whose output only it reads (``expand``)
    and/or the 1x1 ``conv_nchwc`` that alone reads its output (``project``), as one op: a mobile
    inverted bottleneck (MobileNetV2, EfficientNet) or part of one.  Made by the layout pass
    (``passes/graph/layout.py``, ``FuseDepthwiseChain``): its kernel (``codegen/c/nchwc_mbconv.py``)
    works in bands of output rows whose expanded input rows and depthwise outputs stay in L2, so
    neither goes to memory.  Operands: x, the expand conv's weight and bias (``expand``), the
    depthwise conv's, the project conv's (``project``), a residual of the result's type (with
    ``project``).  Attributes: the depthwise conv's window and epilogue ``dw_``-prefixed (its
    channels are whole blocks, its groups its channels), the expand conv's padded input and
    epilogue ``expand_``-prefixed, the project conv's unprefixed.  The result is exactly the convs'
    in turn (the reference runs them so)."""

    name = "graph.mbconv_nchwc"
    operands = ("x", "weights*")
    attrs = ({"expand": Attr("bool", False, "a 1x1 conv before the depthwise one"),
              "project": Attr("bool", False, "a 1x1 conv after the depthwise one")}
             | {f"expand_{k}": ConvNCHWc.attrs[k] for k in EXPAND_ATTRS}
             | {f"dw_{k}": ConvNCHWc.attrs[k] for k in DW_ATTRS}
             | {k: ConvNCHWc.attrs[k] for k in PROJECT_ATTRS})
    traits = frozenset({PURE})
    fusion = FusionKind.OPAQUE
    library_kernel = True

    @staticmethod
    def stages(operands: Sequence, attrs) -> list[tuple[str, list, dict]]:
        """(stage, its operands after x: weight, bias and for the last stage the residual if any,
        its ``conv_nchwc`` attributes) of each conv in turn: "expand", "dw", "project"."""
        ops = list(operands[1:])
        names = (["expand"] if attrs.get("expand", False) else []) + ["dw"] + \
            (["project"] if attrs.get("project", False) else [])
        out = []
        for i, stage in enumerate(names):
            keys, prefix = {"expand": (EXPAND_ATTRS, "expand_"), "dw": (DW_ATTRS, "dw_"),
                            "project": (PROJECT_ATTRS, "")}[stage]
            conv = {k: attrs[prefix + k] for k in keys if prefix + k in attrs}
            take = ops[2 * i:2 * i + 2] + (ops[2 * i + 2:] if i == len(names) - 1 else [])
            out.append((stage, take, conv))
        return out

    def _chain(self, x, operands, attrs, run):
        """Folds ``run(stage, x, its operands, its conv attributes)`` over the stages."""
        for stage, ops, conv in self.stages([x] + list(operands), attrs):
            w = ops[0]
            conv["groups"] = w.shape[0] * w.shape[-1] if stage == "dw" else 1
            x = run(x, ops, conv)
        return x

    def infer(self, types, attrs):
        tt = tensor_types(types, self.name)
        want = 3 + 2 * attrs.get("expand", False) + 2 * attrs.get("project", False)
        expect(len(tt) in (want, want + attrs.get("project", False)),
               f"{self.name}: takes x, a weight and a bias per conv and, with project, an optional residual; "
               f"got {len(tt)} operands")
        for stage, ops, _ in self.stages(tt, attrs):
            expect(stage == "dw" or all(k == 1 for k in ops[0].shape[2:-2]),
                   f"{self.name}: the {stage} conv must be 1x1, got its weight of shape {ops[0].shape}")
        conv = lookup("graph.conv_nchwc")
        return [self._chain(tt[0], tt[1:], attrs, lambda x, ops, a: conv.infer([x] + ops, a)[0])]

    def compute(self, x, *operands, **attrs):
        conv = lookup("graph.conv_nchwc")
        return self._chain(x, operands, attrs, lambda x, ops, a: conv.compute(x, *ops, **a))

    def cost(self, operand_types, result_types, attrs):
        conv = lookup("graph.conv_nchwc")
        flops = []

        def run(x, ops, a):
            (y,) = conv.infer([x] + ops, a)
            flops.append(conv.cost([x] + ops, [y], a).flops)
            return y
        self._chain(operand_types[0], operand_types[1:], attrs, run)
        return Cost(sum(flops), io_bytes(operand_types, result_types))


class BlockedPool(OpDef):
    """A pool of ``pool.py`` on NCHW[x]c: same attributes, result in the same layout."""

    operands = ("x",)
    traits = frozenset({PURE})
    fusion = FusionKind.OPAQUE
    library_kernel = True
    base = ""

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        block = _act_block(x, "x")
        (out,) = lookup(self.base).infer([x.with_shape(unpacked_act_shape(x.shape))], attrs)
        return [out.with_shape(packed_act_shape(out.shape, block))]

    def compute(self, x, **attrs):
        return pack_act(lookup(self.base).compute(unpack_act(x), **attrs), x.shape[-1])

    def cost(self, operand_types, result_types, attrs):
        plain_in = [t.with_shape(unpacked_act_shape(t.shape)) for t in operand_types]
        plain_out = [t.with_shape(unpacked_act_shape(t.shape)) for t in result_types]
        return lookup(self.base).cost(plain_in, plain_out, attrs)


def _blocked_pool(base: str) -> type[BlockedPool]:
    d = lookup(base)
    cls = type(d.name.split(".")[1].title().replace("_", "") + "NCHWc", (BlockedPool,), {
        "name": f"{base}_nchwc", "base": base, "attrs": dict(d.attrs), "__module__": __name__,
        "doc": f"``{base}`` on NCHW<x>c.",
    })
    return register(cls)


BLOCKED_POOLS = {base: _blocked_pool(base).name for base in
                 ("graph.max_pool", "graph.avg_pool", "graph.global_avg_pool", "graph.global_max_pool")}
"""Plain pool op name -> its NCHW[x]c variant."""

__all__ = ["BLOCKED_POOLS", "ConvNCHWc", "DW_ATTRS", "EXPAND_ATTRS", "MBConvNCHWc", "PROJECT_ATTRS", "gate_shape", "LayoutTransform", "nchwc", "oihwio", "pack_act", "pack_weight",
           "packed_act_shape", "packed_weight_shape", "parse_layout", "unpack_act", "unpack_weight",
           "unpacked_act_shape", "unpacked_weight_shape"]
