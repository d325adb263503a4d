"""Layout optimisation (``layout``): blocked NCHW[x]c convolutions, with the conversions cancelled.

Each eligible ``graph.conv`` (one group or depthwise, static shapes, float32, constant finite
weights) becomes

    to_plain(conv_nchwc(to_blocked(x), pack(w), b))

where the block is the target's vector width (``Target.host().vector_width`` unless the
``block`` option says otherwise: 16 fp32 lanes on AVX-512).  ``pack(w)`` is a
``layout_transform`` of a constant, which folding turns into a packed constant once, at
compile time.  The input block is the vector width too when the input channels allow it or the
conv is 1x1 (a padded last block), otherwise all the channels (RGB input: NCHW3c) or their largest
common divisor with it.  Output channels that are not whole blocks pad the last one (a constant
bias is padded with zeros; a conv with a computed bias then stays plain).

Then the conversions move out of the way: a ``to_plain`` sinks below every op that works on
the blocked tensor as it is (elementwise ops, including residual adds whose operands are
both blocked, squeeze-excitation gates that broadcast over the spatial dims, and per-channel
constants, which are packed; pools, through their ``_nchwc`` variants, and a mean over the spatial
dims as a global pool; channel concat of whole blocks), and ``to_blocked(to_plain(y))`` cancels to
``y``.  Between two convs nothing is converted; conversions remain only where data enters or
leaves the blocked region (the input, a reshape or GEMM at the end).  A conv then takes its single
residual add and ReLU/ReLU6 into its epilogue (``FuseConvEpilogue``): its kernel is a library
kernel, opaque to the fusion engine, so the pass joins them here as ``int8-contractions`` does.

Last, two joins whose kernels exist only for the host's block: a depthwise conv takes the 1x1
convs around it into one ``mbconv_nchwc`` (``FuseDepthwiseChain``: the project conv that alone reads
its output and the expand conv whose output only it reads, where the traffic they save pays for
what the bands cost, ``dw_pw_pays``, ``expand_pays``), and a 1x1 conv reading a squeeze-excitation's
``a * sigmoid(g)`` takes the gate as an operand (``GateIntoConv``).  ``TENSORFORGE_NCHWC_DW_PW=0``
and ``TENSORFORGE_NCHWC_GATE=0`` leave them out.

Numerics are unchanged (the blocked ops' references unpack, compute and pack).  In the default
pipeline the pass runs in its ``auto`` form (``optimize_layout_where_it_pays``).
"""
from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from ...dialects.graph.elementwise import relu_epilogue
from ...dialects.graph.layout import (BLOCKED_POOLS, DW_ATTRS, EXPAND_ATTRS, PLAIN_ACT, PLAIN_WEIGHT, PROJECT_ATTRS,
                                      gate_shape, nchwc, oihwio, pack_act, packed_act_shape, parse_layout)
from ...errors import TensorforgeError
from ...ir.attributes import Dense
from ...ir.core import Operation, Value
from ...ir.opdef import ELEMENTWISE, lookup
from ...ir.pass_manager import Option
from ...ir.rewrite import (DEFAULT_FOLD_LIMIT, Pattern, PatternRewriter, RewriteStats, apply_patterns_greedily,
                           constant_value)
from ...ir.types import DType, TensorType
from ..registry import register_pass
from .const_fold import with_folding
from .simplify import _GreedyPass

TRANSFORM = "graph.layout_transform"


def host_block() -> int:
    """fp32 lanes of the host's widest vector registers (16 with AVX-512)."""
    from ...codegen.target import Target
    return Target.host().vector_width


def input_block(channels: int, block: int, pointwise: bool = False) -> int:
    """The block for a conv's input channels: ``block`` if it divides them or (a 1x1 conv,
    ``pointwise``) with the last one padded, else all of them when there are fewer (an RGB image),
    else their largest common divisor."""
    if channels % block == 0 or pointwise:
        return block
    return channels if channels < block else math.gcd(channels, block)


def blocked_source(v: Value) -> tuple[Value, int, int] | None:
    """(y, x, channels) when ``v = layout_transform(y) {src = NCHW<x>c, dst = NCHW, channels}``
    (channels 0: whole blocks)."""
    op = v.op
    if op is None or op.name != TRANSFORM or op.attributes["dst"] != PLAIN_ACT:
        return None
    kind, block = parse_layout(op.attributes["src"])
    return (op.operands[0], block[0], op.attributes.get("channels", 0)) if kind == "NCHWc" else None


def _padded(channels: int, block: int) -> int:
    """The ``channels`` attribute of a blocked activation: 0 when the blocks are whole."""
    return channels if channels % block else 0


def _transform(rewriter: PatternRewriter, v: Value, src: str, dst: str, channels: int = 0) -> Value:
    attrs = {"src": src, "dst": dst} | ({"channels": channels} if channels else {})
    return rewriter.create(TRANSFORM, [v], attrs).results[0]


def _infer(name: str, operands: list, attrs: dict) -> TensorType | None:
    d = lookup(name)
    try:
        types = d.infer([o.type for o in operands], d.normalize_attrs(dict(attrs)))
    except TensorforgeError:
        return None
    return types[0] if len(types) == 1 else None


class ConvToNCHWc(Pattern):
    """A conv becomes ``to_plain(conv_nchwc(to_blocked(x), pack(w), b))``."""

    name = "conv-to-nchwc"
    root = ("graph.conv",)

    def __init__(self, block: int, depthwise: bool = True):
        super().__init__()
        self.block = block
        self.depthwise = depthwise

    def match_and_rewrite(self, op, rewriter):
        x, w = op.operands[0], op.operands[1]
        y = op.results[0].type
        groups = op.attributes.get("groups", 1)
        depthwise = groups > 1 and groups == x.type.shape[1] == y.shape[1] == w.type.shape[0] and w.type.shape[1] == 1
        if (groups != 1 and not depthwise) or not (x.type.is_static and y.is_static):
            return False
        wc = constant_value(w)
        # finite weights: the native kernel leaves padded taps out, exact only when 0 * w is +-0
        if x.type.dtype is not DType.f32 or wc is None or not np.isfinite(wc).all() or x.type.rank != 4:
            return False
        out_ch, in_ch = y.shape[1], x.type.shape[1]
        if depthwise and (in_ch % self.block or not self.depthwise):
            return False
        bias = list(op.operands[2:])
        if out_ch % self.block and bias:
            # padded output channels: the bias is read a whole block at a time
            b = constant_value(bias[0])
            if b is None:
                return False
            bias = [rewriter.constant(np.pad(np.asarray(b, np.float32), (0, -out_ch % self.block)))]
        pointwise = tuple(w.type.shape[2:]) == (1, 1)
        bi, bo = input_block(in_ch, self.block, pointwise), self.block
        xb = _transform(rewriter, x, PLAIN_ACT, nchwc(bi))
        wb = _packed_weight(rewriter, op, w, oihwio(1 if depthwise else bi, bo))
        attrs = {k: v for k, v in op.attributes.items() if k != "groups"} | ({"groups": groups} if depthwise else {})
        attrs |= {k: v for k, v in (("in_channels", _padded(in_ch, bi)), ("out_channels", _padded(out_ch, bo))) if v}
        yb = rewriter.create("graph.conv_nchwc", [xb, wb] + bias, attrs).results[0]
        rewriter.replace_op(op, [_transform(rewriter, yb, nchwc(bo), PLAIN_ACT, _padded(out_ch, bo))])
        return True


def _packed_weight(rewriter: PatternRewriter, conv: Operation, w: Value, layout: str) -> Value:
    """``w`` packed to ``layout``: one ``layout_transform`` per weight and layout, right after the
    weight's constant, shared by every conv that reads it.  Then folding it never copies a
    weight (the plain one dies with the transform), however many convs share it."""
    for user in w.users:
        if user.name == TRANSFORM and (user.attributes["src"], user.attributes["dst"]) == (PLAIN_WEIGHT, layout):
            return user.results[0]
    if w.op is None or w.op.parent is not conv.parent:
        return _transform(rewriter, w, PLAIN_WEIGHT, layout)
    rewriter.set_insertion_point_after(w.op)
    packed = _transform(rewriter, w, PLAIN_WEIGHT, layout)
    rewriter.set_insertion_point_before(conv)
    return packed


class CancelLayout(Pattern):
    """``layout_transform(layout_transform(y, A -> B), B -> A)`` is ``y``."""

    name = "cancel-layout"
    root = (TRANSFORM,)

    def match_and_rewrite(self, op, rewriter):
        inner = op.operands[0].op
        if inner is None or inner.name != TRANSFORM:
            return False
        if (inner.attributes["src"], inner.attributes["dst"]) != (op.attributes["dst"], op.attributes["src"]):
            return False
        rewriter.replace_op(op, [inner.operands[0]])
        return True


def packed_constant(c: np.ndarray, rank: int, channels: int, block: int) -> np.ndarray | None:
    """A constant operand of an elementwise op on (N, C, *S), rearranged for (N, C/x, *S, x).

    ``c`` is aligned to ``rank`` (leading 1s); a channel dim of 1 broadcasts over blocks and
    lanes, a full one is packed.  A 0-d constant needs nothing (None means "not packable").
    """
    if c.ndim > rank:
        return None
    aligned = np.asarray(c).reshape((1,) * (rank - c.ndim) + c.shape)
    if aligned.shape[1] == 1:
        return aligned.reshape(aligned.shape + (1,))
    if aligned.shape[1] != channels:
        return None
    return pack_act(aligned, block)


class SinkElementwise(Pattern):
    """``f(to_plain(a), to_plain(b) | constant, ...)`` becomes ``to_plain(f(a, b', ...))``."""

    name = "sink-elementwise"

    def match_and_rewrite(self, op, rewriter):
        d = op.opdef
        if d is None or ELEMENTWISE not in d.traits or op.regions or len(op.results) != 1:
            return False
        out = op.results[0].type
        sources = [blocked_source(v) for v in op.operands]
        blocks = {s[1:] for s in sources if s is not None}
        if len(blocks) != 1 or not out.is_static:
            return False
        ((block, channels),) = blocks
        operands: list = []
        for v, src in zip(op.operands, sources):
            if src is not None:
                if not _broadcasts_per_channel(v.type.shape, out.shape):
                    return False
                operands.append(src[0])
                continue
            c = constant_value(v)
            if c is None:
                return False
            if c.ndim == 0:
                operands.append(v)
                continue
            packed = packed_constant(c, out.rank, out.shape[1], block)
            if packed is None:
                return False
            operands.append(Dense(packed, v.type.dtype))
        typed = [o if isinstance(o, Value) else _Typed(o) for o in operands]
        if _infer(op.name, typed, op.attributes) != out.with_shape(packed_act_shape(out.shape, block)):
            return False
        values = [o if isinstance(o, Value) else rewriter.constant(o) for o in operands]
        new = rewriter.create(op.name, values, op.attributes).results[0]
        rewriter.replace_op(op, [_transform(rewriter, new, nchwc(block), PLAIN_ACT, channels)])
        return True


def _broadcasts_per_channel(shape: tuple, out: tuple) -> bool:
    """An operand of ``shape`` broadcasts to ``out`` over its spatial dims only (a squeeze-excitation
    gate (N, C, 1, 1) times (N, C, H, W)), so its blocked form broadcasts the same way."""
    return len(shape) == len(out) and tuple(shape[:2]) == tuple(out[:2]) and \
        all(d == o or d == 1 for d, o in zip(shape[2:], out[2:]))


class SinkReduceMean(Pattern):
    """``reduce_mean(to_plain(y), axes = spatial, keepdims)`` becomes ``to_plain(global_avg_pool_nchwc(y))``
    (a network's global pooling written as a mean, as torchvision's models export it)."""

    name = "sink-reduce-mean"
    root = ("graph.reduce_mean",)

    def match_and_rewrite(self, op, rewriter):
        src = blocked_source(op.operands[0])
        if src is None:
            return False
        y, block, channels = src
        rank = op.operands[0].type.rank
        axes = sorted(a % rank for a in op.attributes.get("axes", ()) or ())
        if axes != list(range(2, rank)) or not op.attributes.get("keepdims", True):
            return False
        new = rewriter.create("graph.global_avg_pool_nchwc", [y], {}).results[0]
        rewriter.replace_op(op, [_transform(rewriter, new, nchwc(block), PLAIN_ACT, channels)])
        return True


class _Typed:
    """A not-yet-built constant seen by type inference."""

    __slots__ = ("type",)

    def __init__(self, dense: Dense):
        self.type = dense.type


class SinkPool(Pattern):
    """``pool(to_plain(y))`` becomes ``to_plain(pool_nchwc(y))``."""

    name = "sink-pool"
    root = tuple(BLOCKED_POOLS)

    def match_and_rewrite(self, op, rewriter):
        src = blocked_source(op.operands[0])
        if src is None:
            return False
        y, block, channels = src
        blocked = BLOCKED_POOLS[op.name]
        if _infer(blocked, [y], op.attributes) is None:
            return False
        new = rewriter.create(blocked, [y], op.attributes).results[0]
        rewriter.replace_op(op, [_transform(rewriter, new, nchwc(block), PLAIN_ACT, channels)])
        return True


class SinkConcat(Pattern):
    """A channel concat of ``to_plain`` values with one block becomes a concat of the blocked ones."""

    name = "sink-concat"
    root = ("graph.concat",)

    def match_and_rewrite(self, op, rewriter):
        rank = op.results[0].type.rank
        if rank < 3 or op.attributes["axis"] % rank != 1:
            return False
        sources = [blocked_source(v) for v in op.operands]
        # whole blocks only: a padded part would leave its padding between the channels
        if any(s is None or s[2] for s in sources) or len({s[1] for s in sources}) != 1:
            return False
        block = sources[0][1]
        new = rewriter.create("graph.concat", [s[0] for s in sources], {"axis": 1}).results[0]
        rewriter.replace_op(op, [_transform(rewriter, new, nchwc(block), PLAIN_ACT)])
        return True


def _only_user(op: Operation) -> Operation | None:
    uses = list(op.results[0].uses)
    return uses[0][0] if len(uses) == 1 else None


def _silu_of(op: Operation) -> Operation | None:
    """The ``mul(y, sigmoid(y))`` (either order) that is all ``op``'s result ``y`` feeds, or None."""
    users = {id(u): u for u, _ in op.results[0].uses}
    if len(users) != 2:
        return None
    gate = next((u for u in users.values() if u.name == "graph.sigmoid"), None)
    mul = next((u for u in users.values() if u.name == "graph.mul"), None)
    if gate is None or mul is None or _only_user(gate) is not mul:
        return None
    pair = {id(v) for v in mul.operands}
    return mul if pair == {id(op.results[0]), id(gate.results[0])} else None


class FuseConvEpilogue(Pattern):
    """``conv_nchwc`` takes its single user into its epilogue: an add of a tensor of its own type
    (a residual, after the bias), then a relu or a clip from 0 (ReLU6); or the SiLU
    ``y * sigmoid(y)`` its result feeds.  The native kernel applies them to its registers before
    the one store (SiLU right after it, lane by lane), in this order, as the graph did."""

    name = "fuse-conv-epilogue"
    root = ("graph.conv_nchwc",)

    def match_and_rewrite(self, op, rewriter):
        if op.attributes.get("relu", False) or op.attributes.get("silu", False):
            return False
        silu = _silu_of(op)
        if silu is not None:
            rewriter.set_insertion_point_before(silu)
            new = rewriter.create("graph.conv_nchwc", list(op.operands), dict(op.attributes, silu=True)).results[0]
            gate = silu.operands[0].op if silu.operands[0].op is not op else silu.operands[1].op
            rewriter.replace_op(silu, [new])
            rewriter.erase_op(gate)
            rewriter.erase_op(op)
            return True
        user = _only_user(op)
        if user is None:
            return False
        y = op.results[0]
        operands, attrs = list(op.operands), dict(op.attributes)
        if user.name == "graph.add" and len(operands) < 4:
            r = user.operands[1] if user.operands[0] is y else user.operands[0]
            if r is y or r.type != y.type or user.results[0].type != y.type:
                return False
            if len(operands) == 2:
                rewriter.set_insertion_point_before(user)
                operands.append(rewriter.constant(np.zeros(y.type.shape[1] * y.type.shape[-1], np.float32)))
            operands.append(r)
        elif relu_epilogue(user) is not None:
            attrs |= relu_epilogue(user)
        else:
            return False
        rewriter.set_insertion_point_before(user)
        new = rewriter.create("graph.conv_nchwc", operands, attrs).results[0]
        rewriter.replace_op(user, [new])
        rewriter.erase_op(op)
        return True


def _on(setting: str) -> bool:
    return setting.strip().lower() not in ("0", "off", "false", "no")


def dw_pw_enabled() -> bool:
    """False when ``TENSORFORGE_NCHWC_DW_PW`` is 0: depthwise and 1x1 blocked convs stay apart
    (for comparisons)."""
    import os
    return _on(os.environ.get("TENSORFORGE_NCHWC_DW_PW", "1"))


def gate_enabled() -> bool:
    """False when ``TENSORFORGE_NCHWC_GATE`` is 0: a squeeze-excitation's gating multiply stays a
    kernel of its own (for comparisons)."""
    import os
    return _on(os.environ.get("TENSORFORGE_NCHWC_GATE", "1"))


def _ones(attrs, key: str, value: int) -> bool:
    return all(int(v) == value for v in (attrs.get(key) or ()))


def dw_pw_pays(dw: Operation, pw: Operation, threads: int) -> bool:
    """Whether running ``dw`` and the 1x1 ``pw`` after it as one kernel is expected to win: its
    units are bands of output rows of an image, so at a batch smaller than the threads each
    thread reads all the 1x1 conv's weights where the unfused kernel splits them by output
    blocks; that costs more than keeping the depthwise output out of memory saves when the weights
    are large beside the depthwise output (MobileNetV2's 7x7 layers) or the rows few."""
    n, _, oh, ow, _ = dw.results[0].type.shape
    if n * oh < 2 * threads:
        return False
    if n >= threads:
        return True
    saved = dw.results[0].type.nbytes                  # written and read back, unfused
    extra = (threads - 1) * pw.operands[1].type.nbytes  # the weights every thread reads, fused
    return saved >= DW_PW_TRAFFIC_RATIO * extra


# Fuse at a batch below the threads when the depthwise output is at least this many times the
# weight bytes the fused kernel's threads read again.
DW_PW_TRAFFIC_RATIO = 1.0
# An expand conv whose bands recompute some of its rows (the halo rows two bands' windows share:
# bands split the images at a batch below the threads) joins the chain when they recompute at
# most this share of its work ...
MAX_RECOMPUTE = 0.15
# ... and its output, which the chain then never writes, is at least this big (bytes): a smaller
# one stays in L2 between the two kernels anyway (MobileNetV2's and EfficientNet-B0's 14x14 blocks
# at batch 1 ran 0.87-0.95x fused, kernel timers in one process; the 112x112 ones 1.08-1.15x).
MIN_EXPANDED_BYTES = 1 << 20


def expand_pays(chain, threads: int) -> bool:
    """Whether the 1x1 conv before a depthwise one joins the fused chain (``chain``, an
    ``nchwc_mbconv.Chain`` with it): always where the bands are whole images (nothing recomputed;
    EfficientNet-B0's chains at batch 8 1.03x in the kernel timers, MobileNetV2's with their
    project conv 1.16x end to end), else where its output is big and little of it is recomputed,
    and, for a chain without its project conv, the batch gives every thread whole images
    (``EXPAND_ONLY_MIN_IMAGES``)."""
    from ...codegen.c import nchwc_mbconv
    e = chain.expand
    again = nchwc_mbconv.recompute(chain, threads)
    if again == 0:
        return True
    if chain.project is None and e.n < EXPAND_ONLY_MIN_IMAGES * threads:
        return False
    return again <= MAX_RECOMPUTE and e.n * e.ob * e.h * e.w * e.vw * 4 >= MIN_EXPANDED_BYTES


# A chain without its project conv (a squeeze-excitation reads the depthwise output, which the
# chain then writes anyway: it saves only the expanded tensor's round trip) takes an expand conv
# whose rows its bands recompute only at a batch of at least this many images a thread.
# EfficientNet-B0's two such chains at batch 1 (16 -> 96 at 112x112 before a stride-2 depthwise
# conv, 24 -> 144 at 56x56, 11% recomputed) ran 0.99x and 0.84x fused; at batch 8 1.15x and 0.95x
# (``benchmarks/nchwc_joins.py --kernels``, one process each).
EXPAND_ONLY_MIN_IMAGES = 1


def _is_pointwise(op: Operation | None) -> bool:
    """A plain 1x1 stride-1 unpadded ``conv_nchwc`` with groups 1 and no gate."""
    if op is None or op.name != "graph.conv_nchwc":
        return False
    at = op.attributes
    return (not at.get("gate", False) and at.get("groups", 1) == 1 and all(k == 1 for k in op.operands[1].type.shape[2:-2])
            and _ones(at, "strides", 1) and _ones(at, "pads", 0))


class FuseDepthwiseChain(Pattern):
    """A depthwise ``conv_nchwc`` becomes one ``mbconv_nchwc`` with the 1x1 convs around it
    (``codegen/c/nchwc_mbconv.py``: bands whose expanded rows and depthwise outputs stay in L2):
    the 1x1 stride-1 conv that is its output's only reader (``project``, where ``dw_pw_pays``)
    and the 1x1 stride-1 conv whose output only it reads (``expand``, without a residual, where
    ``expand_pays``).  Runs after the epilogues are taken in (``FuseConvEpilogue``), so each conv
    brings its own."""

    name = "fuse-depthwise-chain"
    root = ("graph.conv_nchwc",)

    def __init__(self, threads: int):
        super().__init__()
        self.threads = threads

    def match_and_rewrite(self, op, rewriter):
        from ...codegen.c.nchwc import ConvGeometry
        from ...codegen.c.nchwc_mbconv import Chain
        at = op.attributes
        if at.get("groups", 1) == 1 or len(op.operands) > 3 or not op.results[0].type.is_static:
            return False
        y = op.results[0]
        pw = _only_user(op)
        if not (_is_pointwise(pw) and pw.operands[0] is y and all(v is not y for v in pw.operands[1:])
                and dw_pw_pays(op, pw, self.threads)):
            pw = None
        ex = op.operands[0].op
        if not (_is_pointwise(ex) and len(ex.operands) <= 3 and _only_user(ex) is op):
            ex = None
        if ex is not None:
            dw = ConvGeometry.of(op, op)
            n, cb, h, w, vw = op.operands[0].type.shape
            expand = ConvGeometry(n, 1, h, w, vw, cb, h, w, vw, 1, 1, 1, 1, 0, 0, 1, 1)   # its output's shape
            project = (ConvGeometry(n, cb, dw.oh, dw.ow, vw, 1, dw.oh, dw.ow, vw, 1, 1, 1, 1, 0, 0, 1, 1)
                       if pw is not None else None)
            chain = Chain(expand, dw, project, ())
            if not expand_pays(chain, self.threads):
                ex = None
        if ex is None and pw is None:
            return False
        rewriter.set_insertion_point_before(pw if pw is not None else op)

        def bias(conv: Operation, channels: int) -> list:
            return list(conv.operands[2:3]) or [rewriter.constant(np.zeros(channels, np.float32))]
        operands = [ex.operands[0] if ex is not None else op.operands[0]]
        attrs = {"expand": ex is not None, "project": pw is not None}
        attrs |= {f"dw_{k}": v for k, v in at.items() if k in DW_ATTRS}
        if ex is not None:
            w = ex.operands[1].type.shape
            operands += [ex.operands[1]] + bias(ex, w[0] * w[-1])
            attrs |= {f"expand_{k}": v for k, v in ex.attributes.items() if k in EXPAND_ATTRS}
        operands += [op.operands[1]] + bias(op, y.type.shape[1] * y.type.shape[-1])
        last = op
        if pw is not None:
            w = pw.operands[1].type.shape
            operands += [pw.operands[1]] + bias(pw, w[0] * w[-1]) + list(pw.operands[3:])
            attrs |= {k: v for k, v in pw.attributes.items() if k in PROJECT_ATTRS}
            last = pw
        new = rewriter.create("graph.mbconv_nchwc", operands, attrs).results[0]
        rewriter.replace_op(last, [new])
        for dead in (op, ex):
            if dead is not None and dead is not last:
                rewriter.erase_op(dead)
        return True


def _gate_of(x: Value) -> tuple[Value, Value] | None:
    """(a, g) when ``x = a * sigmoid(g)`` (either order) with g one value per image and channel
    block lane, (N, C/x, 1, 1, x), and ``x`` read by nothing else than its one user."""
    mul = x.op
    if mul is None or mul.name != "graph.mul" or len(list(x.uses)) != 1:
        return None
    for gate, a in (mul.operands, mul.operands[::-1]):
        sig = gate.op
        if (sig is not None and sig.name == "graph.sigmoid" and tuple(gate.type.shape) == gate_shape(a.type.shape)
                and a.type == x.type):
            return a, sig.operands[0]
    return None


class GateIntoConv(Pattern):
    """A squeeze-excitation's ``a * sigmoid(g)`` read only by a 1x1 stride-1 ``conv_nchwc`` becomes
    that conv's gate (``conv_nchwc {gate}``): the kernel scales its weights by the sigmoids per
    image and chunk instead of a kernel writing the gated tensor (``nchwc.gate_scaling``)."""

    name = "gate-into-conv"
    root = ("graph.conv_nchwc",)

    def match_and_rewrite(self, op, rewriter):
        at = op.attributes
        if not _is_pointwise(op) or at.get("in_channels", 0) or len(op.operands) < 3:
            return False
        found = _gate_of(op.operands[0])
        if found is None:
            return False
        a, g = found
        rewriter.set_insertion_point_before(op)
        new = rewriter.create("graph.conv_nchwc", [a] + list(op.operands[1:]) + [g], dict(at, gate=True)).results[0]
        mul = op.operands[0].op
        rewriter.replace_op(op, [new])
        rewriter.erase_op(mul)
        return True


def layout_patterns(block: int) -> list[Pattern]:
    return [ConvToNCHWc(block), CancelLayout(), SinkElementwise(), SinkPool(), SinkReduceMean(), SinkConcat(),
            FuseConvEpilogue()]


def optimize_layout(root: Operation, *, block: int | None = None, fold_limit: int = DEFAULT_FOLD_LIMIT,
                    max_iterations: int = 10) -> RewriteStats:
    """Blocked convs with the conversions between them cancelled, weights packed by folding; then
    the depthwise convs fused with the 1x1 convs around them where it pays
    (``FuseDepthwiseChain``) and the squeeze-excitation gates taken into the 1x1 convs that read
    them (``GateIntoConv``); not for a forced ``block`` other than the host's, whose kernels the
    host does not run."""
    from ...codegen.target import Target
    host = host_block()
    block = block or host
    stats = apply_patterns_greedily(root, with_folding(layout_patterns(block), fold_limit), fold=False,
                                    max_iterations=max_iterations)
    joins = ([FuseDepthwiseChain(max(1, Target.host().cores or 1))] if dw_pw_enabled() else []) + \
        ([GateIntoConv()] if gate_enabled() else [])
    if block == host and joins:
        stats = stats.merge(apply_patterns_greedily(root, joins, fold=False, max_iterations=max_iterations))
    return stats


# A blocked function is kept (``layout{auto=1}``) when its remaining conversions of activations move
# at most this many bytes per multiply-add of its blocked convolutions: converting costs about 15x
# a multiply-add per byte on a CPU (~10 GB/s against ~150 G multiply-adds/s), so 0.005 is ~7% of the
# convolutions' time, less than the blocked kernels gain (ResNet-50: 0.0005; MobileNetV2 with its
# depthwise convolutions left plain, a conversion around each of them: 0.07).
MAX_CONVERSION_BYTES_PER_MAC = 0.005


def conversion_bytes_per_mac(func: Operation) -> float:
    """Bytes the activation ``layout_transform`` ops of ``func`` move (read and written) per
    multiply-add of its ``conv_nchwc`` ops (inf when it has none)."""
    moved = macs = 0
    for op in func.walk():
        if op.name == TRANSFORM and constant_value(op.operands[0]) is None:
            moved += 2 * op.results[0].type.nbytes
        elif op.name == "graph.conv_nchwc":
            w = op.operands[1].type.shape
            macs += math.prod(op.results[0].type.shape) * math.prod(w[1:-1])
        elif op.name == "graph.mbconv_nchwc":
            macs += op.opdef.cost([v.type for v in op.operands], [op.results[0].type], op.attributes).flops / 2
    return moved / macs if macs else math.inf


def optimize_layout_where_it_pays(module: Operation, *, block: int | None = None,
                                  fold_limit: int = DEFAULT_FOLD_LIMIT, max_iterations: int = 10) -> RewriteStats:
    """``optimize_layout`` on a copy of each function, kept in its place only when its conversions
    cost little beside its blocked convolutions (``MAX_CONVERSION_BYTES_PER_MAC``)."""
    stats = RewriteStats()
    for func in list(module.functions):
        if not any(op.name == "graph.conv" for op in func.walk()):
            continue            # nothing to block: no copy (0.24 s for BERT-base's function)
        trial = func.clone()
        module.body.insert_after(trial, func)
        done = optimize_layout(trial, block=block, fold_limit=fold_limit, max_iterations=max_iterations)
        if done.changed and conversion_bytes_per_mac(trial) <= MAX_CONVERSION_BYTES_PER_MAC:
            func.erase()
            stats = stats.merge(done)
        else:
            trial.erase()
    return stats


@register_pass
class LayoutPass(_GreedyPass):
    name = "layout"
    summary = "blocked NCHW[x]c convs (x = vector width), pre-packed weights, conversions cancelled"
    options: ClassVar[dict[str, Option]] = {
        "block": Option(0, "channel block; 0: the host's fp32 vector width"),
        "limit": Option(DEFAULT_FOLD_LIMIT, "largest folded result (elements) allowed to grow the IR"),
        "max_iterations": Option(10, "greedy driver iterations before giving up"),
        "auto": Option(False, "keep a function blocked only where its conversions cost little "
                              "(MAX_CONVERSION_BYTES_PER_MAC)"),
    }

    def run(self, module):
        run = optimize_layout_where_it_pays if self.auto else optimize_layout
        return self._finish(run(module, block=self.block or None, fold_limit=self.limit,
                                max_iterations=self.max_iterations))


__all__ = ["CancelLayout", "ConvToNCHWc", "FuseConvEpilogue", "FuseDepthwiseChain", "GateIntoConv", "LayoutPass",
           "SinkConcat", "SinkElementwise", "SinkPool", "SinkReduceMean", "dw_pw_pays", "expand_pays",
           "MAX_CONVERSION_BYTES_PER_MAC", "blocked_source", "conversion_bytes_per_mac", "host_block", "input_block",
           "layout_patterns", "optimize_layout", "optimize_layout_where_it_pays",
           "packed_constant"]
