"""Native kernels of the blocked layout (``dialects/graph/layout.py``): NCHW[x]c convolutions, pools
and layout conversions, as library kernels (``library_kernels.py``).

**The convolution** (``graph.conv_nchwc``, x in NCHW[i]c, w in OIHW[i]i[o]o with o the vector width,
y in NCHW[o]c).  A register tile is up to 14 output positions times ``blocks`` output-channel
blocks (7 x 4 or 14 x 2 vectors of 16 lanes with AVX-512: 28 accumulators; ``tile_rows`` sizes it
by the target's registers).  Each step of the reduction broadcasts one input value per position,
``x[cb, ih, iw, ci]`` (the positions' values of one channel are ``stride * i`` floats apart, in one
or two cache lines), loads one weight vector per output block and does ``rows x blocks`` FMAs; a
kernel row's taps and lanes are one flat loop.  The sums stay in registers over a chunk of input
blocks (``ConvPlan``: as many as keep the tile's weights in 40% of L1), in y between chunks; on the
last, bias, residual and activation are applied to the registers and each vector is stored where it
belongs: no packing, no im2col and no transpose of the output, which is what the plain layout needs
(its channels are a plane apart, ``tensorize.py``'s kernels pack or transpose around that).

Padding costs nothing: an output row's kernel rows that fall outside the input are left out of its
reduction, and the few positions at the left and right edges whose window leaves the input run
one at a time with their kernel columns clipped; the positions in between run full tiles with no
test.  Leaving a tap out is exact because the layout pass only blocks convolutions whose weights are
finite constants (a padded tap adds ``0 * w = +-0``, and ``s + -0 = s``; ``s + +0`` differs from
``s`` only for ``s = -0``, where the plain kernels' sums start from +0 too).  A padded last input
block (a 1x1 conv on 24 channels) reads only its real lanes.

Work units are (image, group of output blocks, band of output rows of about ``BAND_POSITIONS``
positions); a thread takes consecutive units, so one group's weights stay in its L2 while it sweeps
the bands, except for a 1x1 conv with small weights, whose units go band by band (``rows_first``:
each thread then reads the rows it wrote in the layer before).  A map of at most ``BAND_POSITIONS`` positions is one unit tiled as a whole
(``map_tiles``: several rows a tile over the interior, one column a tile down the edges; a 1x1
stride-1 map, whose positions are one run, in even tiles across its rows).  Where few units are
to share (batch 1, a small map), the groups' widths are chosen so that the threads' shares are
even (``balance``, ``even_groups``: MobileNetV2's 960 -> 160 on 7x7 runs groups of 3, 2, 3, 2
output blocks, 5 a thread, where tiles of 3 gave one thread 6 and the other 4).  3x3
stride-1 layers go to ``nchwc_winograd.py``; depthwise ones (``dw_source``) keep a channel per lane.

**Pools** (``graph.*_pool_nchwc``) reduce 16-lane vectors of one position over the window (max keeps
NaN, as the plain pool), and **layout_transform** copies between the plain and blocked forms.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

from ...errors import CompileError
from ...ir.core import Operation
from ..target import Target
from .microkernels import gemm_prelude

# Vector registers a register tile leaves for its weight vectors and broadcast: the rest are
# accumulators (28 of AVX-512's 32, 12 of AVX2's 16); fewer output blocks give longer rows, up to
# MAX_ROWS positions.
TILE_SPARE_REGISTERS = 4
MAX_ROWS = 14


def tile_rows(blocks: int, target: Target | None = None) -> int:
    """Positions of a register tile of ``blocks`` output blocks on ``target`` (default: AVX-512's 32
    registers)."""
    registers = target.vector_registers if target is not None and target.vector_registers else 32
    return max(1, min(MAX_ROWS, (registers - TILE_SPARE_REGISTERS) // blocks))


MAX_BLOCKS = 4


def untuned_blocks(target: Target) -> int:
    """The widest tile the untuned cut starts from: its accumulators, one weight vector per block
    and (without AVX-512's broadcast FMA operand) the broadcast input in vector registers.  With
    AVX2's 16, 4 blocks x 3 positions needs 17 and spilled: 3 x 4 ran ResNet-50's 1x1 expansions
    up to 1.75x faster in the model (Zen 3, tuner's in-model check)."""
    broadcast = 0 if target.vector_width >= 16 else 1
    return max([b for b in range(1, MAX_BLOCKS + 1)
                if b * tile_rows(b, target) + b + broadcast <= (target.vector_registers or 32)] or [1])


# The weights of one chunk of input blocks for a tile's output blocks take at most this share of L1
# (the rest: the unit's output rows and the input rows being read).
WEIGHT_L1_SHARE = 0.4
# Output positions a work unit sweeps per chunk of weights (whole rows: a 56-wide row, four 14-wide).
BAND_POSITIONS = 56
# Convolutions with fewer multiply-adds run on one thread (a parallel region costs more).
PARALLEL_MIN_MACS = 1 << 20


def _prelude(target: Target) -> str:
    return ("#ifndef TF_GEMM_PRELUDE_DEFINED\n#define TF_GEMM_PRELUDE_DEFINED\n"
            '#define TF_API __attribute__((visibility("hidden")))\n'
            + gemm_prelude(target, threads=2) + "\n#endif\n" + SILU_C + EPILOGUE_C)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _ints(attrs, key: str, n: int, default: int) -> tuple[int, ...]:
    v = tuple(int(a) for a in (attrs.get(key, ()) or ()))
    return v if v else (default,) * n


@dataclass(frozen=True)
class ConvGeometry:
    """A static 2-D blocked convolution: x (N, CB, H, W, BI), w (OB, CB, KH, KW, BI, VW), y (N, OB, OH, OW, VW)."""

    n: int
    cb: int
    h: int
    w: int
    bi: int
    ob: int
    oh: int
    ow: int
    vw: int
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    ci: int = 0          # input channels when x's last block is padded (1x1 convs only); 0: cb * bi

    @property
    def last_lanes(self) -> int:
        """The real lanes of x's last block (its padding is never read)."""
        return self.ci - (self.cb - 1) * self.bi if self.ci else self.bi

    @staticmethod
    def of(kernel: Operation, op: Operation) -> "ConvGeometry":
        x, w = kernel.operands[0].type, kernel.operands[1].type
        y = kernel.results[0].type
        if x.rank != 5 or not (x.is_static and w.is_static and y.is_static):
            raise CompileError(f"conv_nchwc{op.location_str()}: the native kernel takes static 2-D convolutions "
                               f"(x {x.shape}, w {w.shape}); run the layout pass only on such models")
        n, cb, h, wd, bi = x.shape
        ob, _, kh, kw, _, vw = w.shape
        _, _, oh, ow, _ = y.shape
        at = op.attributes
        sh, sw = _ints(at, "strides", 2, 1)
        ph, pw = _ints(at, "pads", 4, 0)[:2]
        dh, dw = _ints(at, "dilations", 2, 1)
        ci = int(at.get("in_channels", 0) or 0)
        if ci and (kh, kw) != (1, 1):
            raise CompileError(f"conv_nchwc{op.location_str()}: a padded input block ({ci} channels) is taken by "
                               f"1x1 convolutions only, not {kh}x{kw}")
        return ConvGeometry(n, cb, h, wd, bi, ob, oh, ow, vw, kh, kw, sh, sw, ph, pw, dh, dw, ci)

    @property
    def macs(self) -> int:
        return self.n * self.ob * self.vw * self.oh * self.ow * self.cb * self.bi * self.kh * self.kw

    def interior(self) -> tuple[int, int]:
        """[lo, hi): the output columns whose whole window lies inside the input's columns."""
        lo = -(-self.pw // self.sw)
        hi = (self.w - 1 - (self.kw - 1) * self.dw + self.pw) // self.sw + 1
        lo, hi = min(lo, self.ow), max(0, min(hi, self.ow))
        return (lo, hi) if hi > lo else (0, 0)


@dataclass(frozen=True)
class BlockedParams:
    """A tuned blocked convolution (the tuner's ``{"kind": "blocked"}`` configs): which algorithm
    runs it and how its work is cut.  0 (or "" for the algorithm) leaves a knob to the untuned
    rule, so a config names only what it changes.

    ``algorithm``: "direct", "winograd2"/"winograd4" (3x3 stride-1 layers with constant weights:
    ``nchwc_winograd.py``), "depthwise" (the only one a depthwise conv takes) or "mbconv" (a depthwise
    conv fused with the 1x1 convs around it, ``nchwc_mbconv.py``: the knobs cut its project conv,
    else its expand conv; ``band`` is the fused unit's output rows).  ``blocks`` output
    blocks x ``rows`` positions a register tile (the depthwise tile: ``rows`` positions); ``chunk``
    input blocks whose weights stay in L1 while a unit sweeps; ``band`` output rows a work unit
    (the direct kernel) or tile rows a chunk (Winograd: what its transformed input and products
    keep in L2).  Why tune: the untuned rules size these by L1/L2 budgets and register counts, and
    the best cut also depends on the layer's edges, its map width against the tile and how the
    units share out among the threads."""

    algorithm: str = ""
    blocks: int = 0
    rows: int = 0
    chunk: int = 0
    band: int = 0

    def validate(self, g: "ConvGeometry", groups: int, algorithms: tuple[str, ...], target: Target) -> None:
        """Raises ValueError when these params do not apply to the blocked conv ``g`` with
        ``groups`` groups whose possible algorithms are ``algorithms``."""
        for field_name in ("blocks", "rows", "chunk", "band"):
            v = getattr(self, field_name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{field_name} must be a count >= 0 (0: untuned), got {v!r}")
        if self.algorithm and self.algorithm not in algorithms:
            raise ValueError(f"algorithm {self.algorithm!r} does not apply to this layer (it takes {list(algorithms)})")
        if groups > 1:
            if self.blocks or self.chunk or self.band:
                raise ValueError("a depthwise conv takes only rows (positions a register tile)")
            if self.rows > tile_rows(1, target):
                raise ValueError(f"rows {self.rows}: a depthwise tile holds at most {tile_rows(1, target)} positions")
            return
        if self.blocks > min(MAX_BLOCKS, g.ob):
            raise ValueError(f"blocks {self.blocks}: at most {min(MAX_BLOCKS, g.ob)} output blocks a tile")
        if self.chunk and g.cb % self.chunk:
            raise ValueError(f"chunk {self.chunk} does not divide the {g.cb} input blocks")
        winograd = self.algorithm.startswith("winograd")
        # Winograd's products are 1x1 blocked convs over the tiles: their tile is cut as such
        plan = (ConvPlan.of(replace(g, kh=1, kw=1, ph=0, pw=0), target, self) if winograd
                else conv_plan(g, target, self))
        most = tile_rows(plan.blocks, target)
        if plan.rows > most:
            raise ValueError(f"rows {plan.rows}: a tile of {plan.blocks} output blocks holds at most {most} "
                             f"positions in the registers")
        if self.band > g.oh and not winograd:
            raise ValueError(f"band {self.band}: the output has {g.oh} rows")


@dataclass(frozen=True)
class ConvPlan:
    """How a blocked convolution is cut: ``blocks`` output blocks x ``rows`` positions a register
    tile; input blocks in chunks of ``chunk`` whose weights (for the tile's output blocks) stay in
    L1 while a unit's ``band`` output rows are swept (partial sums wait in y between chunks)."""

    blocks: int
    rows: int
    chunk: int
    band: int
    groups: tuple[int, ...] = ()   # output blocks of each group, where they are uneven (``even_groups``)
    row_major: bool = False        # work units band by band (``rows_first``), else group by group

    def group_sizes(self, ob: int) -> tuple[int, ...]:
        """Output blocks of each group of a conv with ``ob`` output blocks: ``groups``, or
        ``uniform_groups``."""
        return self.groups or uniform_groups(ob, self.blocks)

    @staticmethod
    def of(g: ConvGeometry, target: Target, params: BlockedParams | None = None, threads: int = 1) -> "ConvPlan":
        """The untuned cut, with what ``params`` sets (validated by the caller) instead.  ``threads``:
        how many share the work units (the tile's blocks are chosen so that they share evenly)."""
        p = params or BlockedParams()
        per_block = g.kh * g.kw * g.bi * g.vw * 4         # bytes: one input block x one output block
        budget = WEIGHT_L1_SHARE * target.l1d
        band = p.band or max(1, min(g.oh, BAND_POSITIONS // max(1, g.ow)))
        row_major = threads > 1 and rows_first(g, target.l2)
        blocks = min(MAX_BLOCKS, g.ob)
        while blocks > 1 and blocks * per_block > budget:
            blocks //= 2
        cap = untuned_blocks(target)
        groups: tuple[int, ...] = ()
        if threads > 1 and not p.blocks and BALANCE_BLOCKS:
            # the most even share among the tiles of a block or two fewer (within the registers:
            # AVX2's 4, 3, 2 become 3, 2), or groups of uneven widths that give every thread the
            # same output blocks (ties: the wider tile; uneven groups only where they share more evenly)
            widest = min(blocks, cap)
            blocks = max({min(b, cap) for b in range(blocks, max(1, blocks - 2) - 1, -1)},
                         key=lambda b: (round(balance(g, b, band, threads, row_major=row_major), 2), b))
            even = even_groups(g.ob, widest, threads)
            if even and (balance(g, max(even), band, threads, even, row_major)
                         > balance(g, blocks, band, threads, row_major=row_major) + 0.02):
                groups, blocks = even, max(even)
        blocks = p.blocks or min(blocks, cap)
        rows = p.rows or tile_rows(blocks, target)
        chunk = p.chunk or max([d for d in range(1, g.cb + 1)
                                if g.cb % d == 0 and d * blocks * per_block <= budget] or [1])
        return ConvPlan(blocks, rows, chunk, band, groups, row_major)

    def rows_for(self, blocks: int, target: Target) -> int:
        """Positions a tile of ``blocks`` output blocks: the plan's rows for its own block count,
        the untuned count for a narrower tail group."""
        return self.rows if blocks == self.blocks else tile_rows(blocks, target)


# Whether the untuned tile's output blocks are chosen for an even share between threads (``balance``).
BALANCE_BLOCKS = True


def conv_plan(g: ConvGeometry, target: Target, params: BlockedParams | None = None,
              threads: int | None = None) -> ConvPlan:
    """The cut of the direct kernel of ``g`` run by ``threads`` (default: the target's cores): its
    work units are shared only when the conv is big enough for a parallel region."""
    threads = max(1, target.cores or 1) if threads is None else threads
    return ConvPlan.of(g, target, params, threads if threads > 1 and g.macs >= PARALLEL_MIN_MACS else 1)


def uniform_groups(ob: int, blocks: int) -> tuple[int, ...]:
    """Groups of ``blocks`` of the ``ob`` output blocks and a narrower tail group."""
    n = -(-ob // blocks)
    return (blocks,) * (n - 1) + (ob - (n - 1) * blocks,)


def even_groups(ob: int, blocks: int, threads: int) -> tuple[int, ...] | None:
    """Groups of at most ``blocks`` output blocks, ``k`` for each thread's even share of the ``ob``
    blocks (the same ``k`` for every thread, so that a static schedule deals each its own share),
    widths within a share as even as they go: 10 blocks for 2 threads, tiles of 4 at most, give
    3, 2, 3, 2.  None where a share would be empty."""
    shares = [ob * (t + 1) // threads - ob * t // threads for t in range(threads)]
    k = -(-max(shares) // blocks)
    if min(shares) < k:
        return None
    return tuple(share * (i + 1) // k - share * i // k for share in shares for i in range(k))[::-1]


# A 1x1 conv with at most this many bytes of weights deals out its work units band by band
# (``rows_first``).
ROW_MAJOR_MAX_WEIGHT_BYTES = 64 << 10
# So does one whose image's input is larger than one core's L2 and whose weights fit in this share
# of it (``rows_first``): the weights, a band's input rows (56 positions) and its output rows then
# stay in L2 together (ResNet-50's 512 -> 128 at 28x28: 256 + 112 + 28 KB of 512 KB).
ROW_MAJOR_L2_WEIGHT_SHARE = 0.5


def rows_first(g: ConvGeometry, l2: int = 0) -> bool:
    """Whether the work units of ``g`` go band by band (each thread a run of output rows, all their
    output blocks) rather than group by group (each thread its output blocks, all rows).  Group by
    group keeps a group's weights in one thread's L2 while it sweeps the rows; but a thread then
    reads every row of x, half of which the other core just wrote.  Where the weights are small
    (MobileNetV2's 24 -> 144 at 56x56: 18 KB) the rows matter more: band by band, each thread reads
    the rows it wrote in the layer before, and the next layer reads what it writes.  Measured on
    MobileNetV2 at batch 1 (kernel timers, one process, 24 rounds, every banded conv switched):
    24 -> 144 1.05x, 32 -> 192 at 28x28 1.06-1.07x, the fused chains reading their outputs
    1.07-1.15x; but 96 -> 576 at 14x14 (221 KB of weights) 0.90-0.93x.  Small maps are one band.

    Larger weights go band by band too where an image's input does not fit in one core's L2 (``l2``
    bytes; 0: unknown) and the weights fit in half of it: group by group, each thread then streams
    the whole input from L3 once per group; band by band its rows stay in L2 while every group's
    weights pass over them.  On Zen 3 (2 threads, L2 512 KB; kernel timers, builds alternated in
    one process): ResNet-50's 256 -> 128 at 56x56 (128 KB of weights, 3.1 MB of input an image)
    2.21 -> 1.55 ms at batch 1, 14.9 -> 13.1 ms at batch 8; its 512 -> 128 at 28x28 (256 KB, 1.5
    MB) 0.85-0.89 -> 0.72-0.76 ms at batch 1, 6.7-7.2 -> 6.1-6.7 ms at batch 8 (two runs).  No
    other convolution of the zoo's CNNs at batch 1 or 8 changes side."""
    if (g.kh, g.kw) != (1, 1) or small_map(g):
        return False
    weights = g.ob * g.cb * g.kh * g.kw * g.bi * g.vw * 4
    if weights <= ROW_MAJOR_MAX_WEIGHT_BYTES:
        return True
    image = g.cb * g.bi * g.h * g.w * 4
    return bool(l2) and image > l2 and weights <= ROW_MAJOR_L2_WEIGHT_SHARE * l2


def balance(g: ConvGeometry, blocks: int, band: int, threads: int, sizes: tuple[int, ...] = (),
            row_major: bool = False) -> float:
    """The share of ``threads``' time spent working when OpenMP's static schedule deals out the
    work units (image, group of ``blocks`` output blocks, band of ``band`` rows; a small map is one
    band) in contiguous runs: a unit's work is its blocks times its rows.  MobileNetV2's 960 -> 160
    1x1 on a 7x7 map has 10 output blocks: tiles of 4 make 3 units, 8 blocks for one thread and 2
    for the other (0.62); tiles of 3 make 4 units, 6 and 4 (0.83).  Choosing by it made
    MobileNetV2 and EfficientNet-B0 at batch 1 1.10x faster (one process, interleaved), ResNet-50
    and batch 8 unchanged (their units are many).  Groups of 3, 2, 3, 2 (``sizes``, from
    ``even_groups``) give 5 and 5 (1.0): that layer's kernel 1.11-1.15x faster in the model's kernel
    timers, 1.17x alone (45 against 53 us, hot caches)."""
    sizes = sizes or uniform_groups(g.ob, blocks)
    heights = [g.oh] if small_map(g) else [min(band, g.oh - b0) for b0 in range(0, g.oh, band)]
    work = ([size * h for _ in range(g.n) for h in heights for size in sizes] if row_major
            else [size * h for _ in range(g.n) for size in sizes for h in heights])
    q, r = divmod(len(work), threads)
    loads, at = [], 0
    for t in range(threads):
        take = q + (1 if t < r else 0)
        loads.append(sum(work[at:at + take]))
        at += take
    return sum(work) / (threads * max(loads)) if max(loads) else 1.0


def epilogue(acc: str, bias: str, off: str, residual: bool, act: str, y: str = "y", res: str = "res") -> str:
    """C finishing accumulator ``acc`` for its place ``y + off``: the bias vector, the residual read
    at ``res + off``, the activation (``relu`` against ``lo``, ``clip`` to [lo, hi], ``silu`` = x *
    sigmoid(x) lane by lane with the inline ``tf_sigmoidf`` the plain graph's sigmoid runs), the
    store.  ``lo`` and ``hi`` are the caller's (``epilogue_inputs``)."""
    line = f"{acc} += {bias};"
    if residual:
        line += f" {acc} += tf_ld({res} + {off});"
    if act == "relu":
        line += f" {acc} = tf_relu_lo({acc}, lo);"
    elif act == "clip":
        line += f" {acc} = tf_clamp({acc}, lo, hi);"
    line += f" tf_st({y} + {off}, {acc});"
    if act == "silu":
        line += f" tf_silu_at({y} + {off});"
    return line


def epilogue_inputs(act: str, biases: dict[str, int]) -> str:
    """C declaring what the ``epilogue`` lines of ``act`` read, loaded where they run through
    ``TF_OPAQUE`` pointers: each bias vector ``name`` at ``bias + offset`` (``biases``), and the
    ``lo`` and ``hi`` vectors from the two floats at ``bounds`` (relu and clip only)."""
    text = "const float *bb_ = bias; TF_OPAQUE(bb_); " + " ".join(
        f"const tf_vf {name} = tf_ld(bb_ + {off});" for name, off in biases.items())
    if act in ("relu", "clip"):
        text += (" const float *eb_ = bounds; TF_OPAQUE(eb_); "
                 "const tf_vf lo = tf_bcast(eb_[0]), hi = tf_bcast(eb_[1]); (void)hi;")
    return text


def bounds_c(name: str, clip_max: float | None) -> str:
    """C defining ``name``, the two floats an epilogue clamps to: 0 and ``clip_bound``."""
    return f"static const float {name}[2] = {{0.0f, {clip_bound(clip_max)}}};"


def epilogue_act(attrs, prefix: str = "") -> str:
    """The activation ``epilogue`` applies ("relu", "clip", "silu" or "") from a blocked conv's
    attributes (``prefix``: a fused op's conv, ``dw_`` or ``expand_``)."""
    if attrs.get(prefix + "relu", False):
        return "clip" if attrs.get(prefix + "clip_max") is not None else "relu"
    return "silu" if attrs.get(prefix + "silu", False) else ""


def clip_bound(clip_max: float | None) -> str:
    """C of the epilogue's upper clamp ``hi`` (ReLU6: 6; a plain ReLU: +inf), exact as a hex float."""
    return "INFINITY" if clip_max is None else f"{float.hex(float(clip_max))}f"


SILU_C = """#ifndef TF_SILU_DEFINED
#define TF_SILU_DEFINED
/* x * sigmoid(x) on one stored vector, as the plain graph computes it (vmath.py's tf_sigmoidf) */
TF_MATH_INLINE void tf_silu_at(float *p) {
  for (int l = 0; l < TF_VW; l++) { const float x = p[l]; p[l] = x * tf_sigmoidf(x); }
}
#endif
"""

EPILOGUE_C = """#ifndef TF_OPAQUE_DEFINED
#define TF_OPAQUE_DEFINED
/* p unchanged, as a value the compiler cannot see through (an empty asm): what an epilogue loads
   through it (bias, clamp bounds) is loaded where the epilogue runs, neither hoisted above the loop
   around the register tile nor kept from the previous tile's epilogue.  A tile of 12 accumulators,
   3 weight vectors and the broadcast input fills AVX2's 16 vector registers: a bias vector or a
   zero kept live across its loop spilled an accumulator, whose stack round trip then ran every
   step (ResNet-50's conv+ReLU layers 1.5-2x slower on Zen 3). */
#define TF_OPAQUE(p) __asm__ volatile("" : "+r"(p))
#endif
"""


def _tile_name(name: str, tr: int, tc: int, blocks: int) -> str:
    return f"{name}_t{tr}x{tc}x{blocks}" if tr > 1 else f"{name}_t{tc}x{blocks}"


def _tile_function(name: str, g: ConvGeometry, tc: int, blocks: int, residual: bool, act: str, tr: int = 1) -> str:
    """``tr`` output rows x ``tc`` positions x ``blocks`` vectors of y summed over ``ncb`` input blocks
    and the taps ``kh0 <= kh < kh1``, ``kw0 <= kw < kw1`` (``x`` at the tile's first window origin in
    its first input block), added to y's partial sums unless ``first``; the epilogue if ``last``."""
    vw = g.vw
    xkw, xkh, xcb = g.dw * g.bi, g.dh * g.w * g.bi, g.h * g.w * g.bi
    wcb = g.kh * g.kw * g.bi * vw          # floats of one input block's weights of one output block
    wob = g.cb * wcb                       # floats between two output blocks' weights
    yob = g.oh * g.ow * vw
    rows = tr * tc
    # position r: output row r // tc, column r % tc of the tile; its window and its vector of y
    xoff = [(r // tc) * g.sh * g.w * g.bi + (r % tc) * g.sw * g.bi for r in range(rows)]
    yoff = [(r // tc) * g.ow * vw + (r % tc) * vw for r in range(rows)]
    acc = [(r, b) for r in range(rows) for b in range(blocks)]
    decl = ", ".join(f"c{r}_{b} = {{0}}" for r, b in acc)
    reload = " ".join(f"c{r}_{b} = tf_ld(y + {b * yob + yoff[r]});" for r, b in acc)
    loads = " ".join(f"const tf_vf w{b} = tf_ld(ws + {b * wob});" for b in range(blocks))
    fmas = "\n".join(f"          {{ const tf_vf a = tf_bcast(xs[{xoff[r]}]); "
                     + " ".join(f"c{r}_{b} += w{b} * a;" for b in range(blocks)) + " }" for r in range(rows))
    epi = [epilogue(f"c{r}_{b}", f"bias{b}", str(b * yob + yoff[r]), residual, act) for r, b in acc]
    stores = " ".join(f"tf_st(y + {b * yob + yoff[r]}, c{r}_{b});" for r, b in acc)
    step = f"""          {loads}
{fmas}"""
    # a padded last input block (1x1 only): its padding lanes are never read, they may hold anything
    lanes = g.bi if g.last_lanes == g.bi else f"(last && cb == ncb - 1 ? {g.last_lanes} : {g.bi})"
    if g.dw == 1:
        # one kernel row's taps and lanes are one run of floats in x and in w: one flat loop
        inner = f"""      const float *restrict xs = x + cb * {xcb} + kh * {xkh} + kw0 * {g.bi};
      const float *restrict ws = w + cb * {wcb} + (kh * {g.kw} + kw0) * {g.bi * vw};
      const long kn = (kw1 - kw0) * {lanes};
      TF_UNROLL(4)
      for (long k = 0; k < kn; k++, xs++, ws += {vw}) {{
{step}
      }}"""
    else:
        inner = f"""      for (long kw = kw0; kw < kw1; kw++) {{
        const float *restrict xs = x + cb * {xcb} + kh * {xkh} + kw * {xkw};
        const float *restrict ws = w + cb * {wcb} + (kh * {g.kw} + kw) * {g.bi * vw};
        TF_UNROLL(4)
        for (long ci = 0; ci < {g.bi}; ci++, xs++, ws += {vw}) {{
{step}
        }}
      }}"""
    return f"""
static inline __attribute__((always_inline)) void {_tile_name(name, tr, tc, blocks)}(const float *restrict x,
    const float *restrict w, float *y, const float *restrict bias, const float *res, const float *bounds,
    long kh0, long kh1, long kw0, long kw1, long ncb, int first, int last) {{
  (void)res; (void)bounds;
  tf_vf {decl};
  if (!first) {{ {reload} }}
  for (long cb = 0; cb < ncb; cb++)
    for (long kh = kh0; kh < kh1; kh++) {{
{inner}
    }}
  if (last) {{
    {epilogue_inputs(act, {f"bias{b}": b * vw for b in range(blocks)})}
    {chr(10).join("    " + e for e in epi)}
  }} else {{
    {stores}
  }}
}}
"""


def _row_function(name: str, g: ConvGeometry, blocks: int, rows: int) -> tuple[str, set[int]]:
    """One output row of ``blocks`` output blocks: clipped edge positions one at a time, the interior
    in tiles of ``rows``; and the tile heights it calls."""
    lo, hi = g.interior()
    span = hi - lo
    full, rem = divmod(span, rows)
    heights = {1} | ({rows} if full else set()) | ({rem} if rem else set())
    tail = "res ? res + ow * {vw} : 0, bounds".format(vw=g.vw)
    edge = f"""    {{
      const long iw = ow * {g.sw} - {g.pw};
      {_taps_c("kw0", "kw1", "iw", g.w, g.dw, g.kw)}
      if (kw0 < kw1) {name}_t1x{blocks}(x + iw * {g.bi}, w, y + ow * {g.vw}, bias, {tail}, kh0, kh1, kw0, kw1, ncb, first, last);
      else {name}_t1x{blocks}(x, w, y + ow * {g.vw}, bias, {tail}, 0, 0, 0, 0, 0, first, last);
    }}"""
    body = [f"  for (long ow = 0; ow < {lo}; ow++)", edge]

    def call(r: int) -> str:
        return (f"{name}_t{r}x{blocks}(x + (ow * {g.sw} - {g.pw}) * {g.bi}, w, y + ow * {g.vw}, bias, {tail}, "
                f"kh0, kh1, 0, {g.kw}, ncb, first, last);")
    if full:
        body.append(f"  for (long ow = {lo}; ow < {lo + full * rows}; ow += {rows}) " + call(rows))
    if rem:
        body.append(f"  {{ const long ow = {lo + full * rows}; " + call(rem) + " }")
    body += [f"  for (long ow = {max(hi, lo)}; ow < {g.ow}; ow++)", edge]
    text = f"""
static void {name}_row{blocks}(const float *restrict x, const float *restrict w, float *y, const float *restrict bias,
    const float *res, const float *bounds, long kh0, long kh1, long ncb, int first, int last) {{
  (void)res;
{chr(10).join(body)}
}}
"""
    return text, heights


def _taps_c(k0: str, k1: str, start: str, size: int, dilation: int, extent: int) -> str:
    """C declaring [k0, k1): the taps of a window of ``extent`` taps ``dilation`` apart starting at
    ``start`` (a C expression, possibly negative) that fall inside ``[0, size)``; empty when k1 <= k0.
    The same bounds as ``_ranges``, at run time."""
    return (f"const long {k0} = {start} < 0 ? (-{start} + {dilation - 1}) / {dilation} : 0; "
            f"long {k1} = ({size} - {start} + {dilation - 1}) / {dilation}; if ({k1} > {extent}) {k1} = {extent};")


def _ranges(start: int, size: int, step: int, dilation: int, extent: int) -> tuple[int, int]:
    """[k0, k1): the taps of a window starting at ``start`` that fall inside ``[0, size)``."""
    k0 = -(-max(0, -start) // dilation)
    k1 = min(extent, -(-(size - start) // dilation))
    return (k0, k1) if k1 > k0 else (0, 0)


def map_tiles(g: ConvGeometry, blocks: int, target: Target | None = None,
              rows: int = 0) -> list[tuple[int, int, int, int]]:
    """The tiles (oh, ow, tr, tc) covering a whole small output map, every tile's positions sharing
    their window's clipped taps: the rows whose windows keep every kernel row, in tiles of several
    rows over the interior columns and of one column down each edge column; the other rows one by
    one.  A 7x7 map with 3x3 windows then runs 2 x 5 and 5 x 1 tiles where row by row its 14 edge
    positions each ran alone.  ``rows``: positions a tile (default: as many as the registers hold)."""
    most = rows or tile_rows(blocks, target)
    if flat_map(g):
        # positions are one run in x and in y: tiles as even as they go, across rows
        positions = g.oh * g.ow
        count = -(-positions // most)
        starts = [positions * i // count for i in range(count + 1)]
        return [(a // g.ow, a % g.ow, 1, b - a) for a, b in zip(starts, starts[1:])]
    lo, hi = g.interior()
    span = hi - lo
    full_rows = [oh for oh in range(g.oh) if _ranges(oh * g.sh - g.ph, g.h, g.sh, g.dh, g.kh) == (0, g.kh)]
    fa, fb = (full_rows[0], full_rows[-1] + 1) if full_rows else (0, 0)
    edges = [ow for ow in range(g.ow) if not lo <= ow < hi]
    tiles = []
    for oh in range(g.oh):
        if fa <= oh < fb:
            continue
        tiles += [(oh, ow, 1, 1) for ow in edges]
        tiles += [(oh, ow, 1, min(most, hi - ow)) for ow in range(lo, hi, most)]
    if fb > fa and span:
        if span >= most:
            tiles += [(oh, ow, 1, min(most, hi - ow)) for oh in range(fa, fb) for ow in range(lo, hi, most)]
        else:
            tr = max(1, most // span)
            tiles += [(oh, lo, min(tr, fb - oh), span) for oh in range(fa, fb, tr)]
    if fb > fa:
        tiles += [(oh, ow, min(most, fb - oh), 1) for ow in edges for oh in range(fa, fb, most)]
    return tiles


def flat_map(g: ConvGeometry) -> bool:
    """Whether a map's positions are one run of vectors in x as in y (a 1x1 stride-1 unpadded conv),
    so that a register tile may cross output rows."""
    return (g.kh, g.kw, g.sh, g.sw, g.ph, g.pw) == (1, 1, 1, 1, 0, 0) and (g.h, g.w) == (g.oh, g.ow)


def _map_function(name: str, g: ConvGeometry, blocks: int, target: Target,
                  rows: int = 0) -> tuple[str, set[tuple[int, int]]]:
    """A whole small output map of ``blocks`` output blocks, tile by tile (``map_tiles``, tiles of
    at most ``rows`` positions), as straight-line calls with constant offsets and taps; and the
    tile shapes it calls."""
    calls, shapes = [], set()
    for oh, ow, tr, tc in map_tiles(g, blocks, target, rows):
        ih, iw = oh * g.sh - g.ph, ow * g.sw - g.pw
        kh0, kh1 = _ranges(ih, g.h, g.sh, g.dh, g.kh)
        kw0, kw1 = _ranges(iw, g.w, g.sw, g.dw, g.kw)
        if tc > 1:
            kw0, kw1 = 0, g.kw
        ncb = "ncb" if kw1 > kw0 and kh1 > kh0 else "0"
        at = (oh * g.ow + ow) * g.vw
        calls.append(f"  {_tile_name(name, tr, tc, blocks)}(x + {(ih * g.w + iw) * g.bi}, w, y + {at}, bias, "
                     f"res ? res + {at} : 0, bounds, {kh0}, {kh1}, {kw0}, {kw1}, {ncb}, first, last);")
        shapes.add((tr, tc))
    text = f"""
static void {name}_map{blocks}(const float *restrict x, const float *restrict w, float *y, const float *restrict bias,
    const float *res, const float *bounds, long ncb, int first, int last) {{
  (void)res;
{chr(10).join(calls)}
}}
"""
    return text, shapes


def small_map(g: ConvGeometry) -> bool:
    """Whether a work unit takes a whole output map (``map_tiles``): at most ``BAND_POSITIONS``."""
    return g.oh * g.ow <= BAND_POSITIONS


# Whether strided 1x1 convs run on a subsampled copy of their input (``subsample_entry``).
SUBSAMPLE_STRIDED = True


def subsampled(g: ConvGeometry, gated: bool = False) -> ConvGeometry | None:
    """The stride-1 geometry that a strided, unpadded 1x1 conv runs as on a compact copy of the
    input positions it reads (``subsample_entry``), else None (also where a bottom or right pad
    puts output positions past the input, for a gated conv, and with ``SUBSAMPLE_STRIDED`` off)."""
    if not SUBSAMPLE_STRIDED or gated or (g.kh, g.kw) != (1, 1) or (g.sh, g.sw) == (1, 1) or g.ph or g.pw:
        return None
    if (g.oh - 1) * g.sh >= g.h or (g.ow - 1) * g.sw >= g.w:
        return None
    return replace(g, h=g.oh, w=g.ow, sh=1, sw=1)


def subsample_entry(name: str, g: ConvGeometry, threads: int) -> str:
    """``name(x, w, bias, residual, y)`` of a strided 1x1 conv: copies the input positions it reads
    (every ``sh``-th row, ``sw``-th column) into a compact buffer, then runs ``{name}_s``, the
    stride-1 conv of ``subsampled(g)``.  Read in place, a tile's positions are ``sw`` vectors apart,
    so half of every line it fetches is unused, and the rows it reads of a map too big for L2 are
    fetched again for every group of output blocks; the copy is read once and stays in L2.  Zen 3,
    2 threads, ResNet-50's downsampling convs with residual and ReLU alone: 1024 -> 2048 at 14x14
    1.42x, 512 -> 1024 at 28x28 1.26x, 256 -> 512 at 56x56 1.11x; whole models (plain builds,
    interleaved) ResNet-50 1.02-1.035x, ResNet-18 1.01x; the same sums bit for bit."""
    rows = g.n * g.cb * g.oh
    par = f"#pragma omp parallel for schedule(static) if ({rows * g.ow * g.bi * 4}L >= 65536L)" if threads > 1 else ""
    return f"""
static void {name}(const float *restrict x, const float *restrict w, const float *restrict bias, const float *res,
    float *y) {{
  float *xs = tf_alloc({rows * g.ow * g.bi});
  {par}
  for (long q = 0; q < {rows}; q++) {{       /* (image, input block, output row) */
    const float *src = x + (q / {g.oh} * {g.h} + q % {g.oh} * {g.sh}) * {g.w * g.bi};
    float *dst = xs + q * {g.ow * g.bi};
    for (long ow = 0; ow < {g.ow}; ow++)
      for (long l = 0; l < {g.bi}; l++) dst[ow * {g.bi} + l] = src[ow * {g.sw * g.bi} + l];
  }}
  {name}_s(xs, w, bias, res, y);
  free(xs);
}}
"""


def conv_source(name: str, g: ConvGeometry, target: Target, residual: bool, act: str, clip_max: float | None,
                threads: int, params: BlockedParams | None = None, gated: bool = False) -> str:
    """The C of ``name(x, w, bias, residual, y, gate)`` for geometry ``g`` (guarded helpers
    included), cut as ``ConvPlan.of(g, target, params)``.  ``gated``: x is read as x *
    sigmoid(gate) per image and input channel (``gate_scaling``).  A strided 1x1 conv runs on its
    subsampled input (``subsample_entry``)."""
    if g.vw != target.vector_width:
        raise CompileError(f"conv_nchwc: the output block {g.vw} is not the target's vector width "
                           f"{target.vector_width}; run the layout pass with block={target.vector_width}")
    sub = subsampled(g, gated)
    if sub is not None:
        return (conv_source(name + "_s", sub, target, residual, act, clip_max, threads, params)
                + _guard(name, subsample_entry(name, g, threads)))
    plan = conv_plan(g, target, params, threads)
    if gated:
        # the scaled weights live on the stack: a tuned whole-K chunk is cut down (same sums, same bits)
        per_chunk = plan.blocks * g.kh * g.kw * g.bi * g.vw
        plan = replace(plan, chunk=max(d for d in range(1, plan.chunk + 1)
                                       if g.cb % d == 0 and (d == 1 or d * per_chunk <= GATE_WEIGHT_FLOATS)))
    sizes = plan.group_sizes(g.ob)
    groups = len(sizes)
    whole = small_map(g)
    # a gated conv's tiles read the chunk's scaled weights: output blocks ``chunk`` input blocks apart
    gt = replace(g, cb=plan.chunk) if gated else g
    parts = []
    for bl in sorted(set(sizes)):
        rows = plan.rows_for(bl, target)
        if whole:
            map_text, shapes = _map_function(name, gt, bl, target, rows)
            parts += [_tile_function(name, gt, tc, bl, residual, act, tr) for tr, tc in sorted(shapes)]
            parts.append(map_text)
            continue
        row_text, heights = _row_function(name, gt, bl, rows)
        parts += [_tile_function(name, gt, r, bl, residual, act) for r in sorted(heights)]
        parts.append(row_text)
    bounds = bounds_c("bounds", clip_max)
    par = (f"#pragma omp parallel for schedule(static) if ({g.macs}L >= {PARALLEL_MIN_MACS}L)"
           if threads > 1 else "")
    if whole:
        return _prelude(target) + _guard(name, "".join(parts) + _map_entry(name, g, plan, bounds, par, gated))
    bands = -(-g.oh // plan.band)
    units = g.n * groups * bands
    weights = "wsb" if gated else f"wg + c0 * {g.kh * g.kw * g.bi * g.vw}"
    args = (f"xr + c0 * {g.h * g.w * g.bi}, {weights}, yr, bias + ob0 * {g.vw}, "
            f"res ? res + ((n * {g.ob} + ob0) * {g.oh} + oh) * {g.ow * g.vw} : 0, bounds, kh0, kh1, "
            f"{plan.chunk}, c0 == 0, c0 + {plan.chunk} == {g.cb}")
    tables, first, width = _group_c(sizes)
    dispatch = _group_dispatch(sizes, width, lambda bl: f"{name}_row{bl}({args});", "        ")
    unit = (f"const long og = u % {groups}, band = u / {groups} % {bands}, n = u / {bands * groups};"
            if plan.row_major else
            f"const long band = u % {bands}, og = u / {bands} % {groups}, n = u / {bands * groups};")
    gate, gate_begin, scale, gate_end = gate_scaling(g, plan, width) if gated else ("", "", "", "")
    entry = f"""
static void {name}(const float *restrict x, const float *restrict w, const float *restrict bias, const float *res,
    float *y{gate}) {{
  {bounds}{tables}{gate_begin}
  {par}
  for (long u = 0; u < {units}; u++) {{
    {unit}
    const long ob0 = {first}, oh0 = band * {plan.band};
    const long oh1 = oh0 + {plan.band} < {g.oh} ? oh0 + {plan.band} : {g.oh};
    const float *wg = w + ob0 * {g.cb * g.kh * g.kw * g.bi * g.vw};
    (void)og;
    for (long c0 = 0; c0 < {g.cb}; c0 += {plan.chunk}) {{{scale}
      for (long oh = oh0; oh < oh1; oh++) {{
        const long ih = oh * {g.sh} - {g.ph};
        {_taps_c("kh0", "kh1", "ih", g.h, g.dh, g.kh)}
        const float *xr = x + n * {g.cb * g.h * g.w * g.bi} + ih * {g.w * g.bi};
        float *yr = y + ((n * {g.ob} + ob0) * {g.oh} + oh) * {g.ow * g.vw};
        {dispatch}
      }}
    }}
  }}{gate_end}
}}
"""
    return _prelude(target) + _guard(name, "".join(parts) + entry)


# Floats of a gated conv's scaled weights per work unit and chunk (on the stack: 64 KB).
GATE_WEIGHT_FLOATS = 16384


def _group_c(sizes: tuple[int, ...]) -> tuple[str, str, str]:
    """C for the groups of output blocks of ``sizes``: tables (uneven groups only), the group
    ``og``'s first output block and its width, as expressions."""
    blocks, groups = sizes[0], len(sizes)
    if all(size == blocks for size in sizes[:-1]) and sizes[-1] <= blocks:
        width = str(blocks) if sizes[-1] == blocks else f"(og < {groups - 1} ? {blocks} : {sizes[-1]})"
        return "", f"og * {blocks}", width
    starts = [sum(sizes[:i]) for i in range(groups)]
    tables = (f"\n  static const long group_first[{groups}] = {{{', '.join(map(str, starts))}}}, "
              f"group_width[{groups}] = {{{', '.join(map(str, sizes))}}};")
    return tables, "group_first[og]", "group_width[og]"


def _group_dispatch(sizes: tuple[int, ...], width: str, call, indent: str) -> str:
    """The call ``call(w)`` for the group ``og``'s width ``w`` among those of ``sizes`` (``width``:
    that width as a C expression, ``_group_c``'s)."""
    widths = sorted(set(sizes), key=sizes.index)
    branches = [f"if ({width} == {bl}) {call(bl)}" for bl in widths[:-1]] + [call(widths[-1])]
    return f"\n{indent}else ".join(branches)


def gate_scaling(g: ConvGeometry, plan: ConvPlan, width: str) -> tuple[str, str, str, str]:
    """C pieces of a gated conv (a squeeze-excitation's ``x * sigmoid(gate)`` read by a 1x1 conv):
    the entry's extra parameter; the gate's sigmoids computed once a call (``tf_sigmoidf``, as the
    plain graph's sigmoid); per work unit and chunk of input blocks, the weights of the unit's
    output blocks scaled by them into ``wsb`` (output blocks ``chunk`` input blocks apart, at
    most the chunk's L1 share), which the tiles then read; freeing the sigmoids.  Scaling the
    weights instead of x costs a multiply per weight and unit where scaling x costs one per
    input value: the gated tensor is never written.  ``(x * s) * w`` becomes ``x * (s * w)``:
    the same products rounded differently; NaN and Inf propagate as in the plain graph."""
    per_block = g.kh * g.kw * g.bi * g.vw
    size = g.n * g.cb * g.bi
    begin = (f"\n  float *sg = tf_alloc({size});\n"
             f"  for (long i = 0; i < {size}; i++) sg[i] = tf_sigmoidf(gate[i]);")
    scale = f"""
      float wsb[{plan.blocks * plan.chunk * per_block}] __attribute__((aligned(64)));
      const long nbl = {width};
      for (long b = 0; b < nbl; b++)
        for (long c = 0; c < {plan.chunk}; c++)
          for (long t = 0; t < {g.kh * g.kw}; t++)
            for (long ci = 0; ci < {g.bi}; ci++) {{
              const tf_vf s = tf_bcast(sg[(n * {g.cb} + c0 + c) * {g.bi} + ci]);
              const long at = ((c0 + c) * {g.kh * g.kw} + t) * {g.bi * g.vw} + ci * {g.vw};
              tf_st(wsb + b * {plan.chunk * per_block} + (at - c0 * {per_block}), tf_ld(wg + b * {g.cb * per_block} + at) * s);
            }}"""
    return ", const float *restrict gate", begin, scale, "\n  free(sg);"


def _guard(name: str, body: str) -> str:
    return f"#ifndef {name.upper()}_DEFINED\n#define {name.upper()}_DEFINED\n{body}#endif\n"


def _map_entry(name: str, g: ConvGeometry, plan: ConvPlan, bounds: str, par: str, gated: bool = False) -> str:
    """The conv's entry for small maps: work units (image, group of output blocks), each a whole map
    per chunk of input blocks (``_map_function``)."""
    sizes = plan.group_sizes(g.ob)
    groups = len(sizes)
    tables, first, width = _group_c(sizes)
    weights = "wsb" if gated else f"wg + c0 * {g.kh * g.kw * g.bi * g.vw}"
    gate, gate_begin, scale, gate_end = gate_scaling(g, plan, width) if gated else ("", "", "", "")
    args = (f"xn + c0 * {g.h * g.w * g.bi}, {weights}, yn, bias + ob0 * {g.vw}, "
            f"res ? res + (n * {g.ob} + ob0) * {g.oh * g.ow * g.vw} : 0, bounds, {plan.chunk}, c0 == 0, "
            f"c0 + {plan.chunk} == {g.cb}")
    dispatch = _group_dispatch(sizes, width, lambda bl: f"{name}_map{bl}({args});", "      ")
    return f"""
static void {name}(const float *restrict x, const float *restrict w, const float *restrict bias, const float *res,
    float *y{gate}) {{
  {bounds}{tables}{gate_begin}
  {par}
  for (long u = 0; u < {g.n * groups}; u++) {{
    const long og = u % {groups}, n = u / {groups}, ob0 = {first};
    const float *xn = x + n * {g.cb * g.h * g.w * g.bi};
    const float *wg = w + ob0 * {g.cb * g.kh * g.kw * g.bi * g.vw};
    float *yn = y + (n * {g.ob} + ob0) * {g.oh * g.ow * g.vw};
    for (long c0 = 0; c0 < {g.cb}; c0 += {plan.chunk}) {{{scale}
      {dispatch}
    }}
  }}{gate_end}
}}
"""


# ---- depthwise ----------------------------------------------------------------------------
DW_ROWS = 14      # positions a depthwise register tile (one accumulator each)


def dw_rows(target: Target | None = None) -> int:
    """Positions of a depthwise register tile: ``DW_ROWS``, fewer where the target has fewer registers."""
    return min(DW_ROWS, tile_rows(1, target))


def _dw_tile(name: str, g: ConvGeometry, rows: int, full: bool, residual: bool, act: str) -> str:
    """``rows`` positions of one block of a depthwise conv: every window column (``full``, unrolled
    with constant offsets, so an input vector shared by neighbouring windows is loaded once) or the
    clipped ones ``kw0 <= kw < kw1``."""
    vw = g.vw
    accs = [f"c{r}" for r in range(rows)]
    if full:
        taps = []
        for kw in range(g.kw):
            taps.append(f"      {{ const tf_vf wk = tf_ld(ws + {kw * vw}); "
                        + " ".join(f"c{r} += tf_ld(xs + {(r * g.sw + kw * g.dw) * vw}) * wk;" for r in range(rows)) + " }")
        inner = "\n".join(taps)
    else:
        inner = (f"      for (long kw = kw0; kw < kw1; kw++) {{ const tf_vf wk = tf_ld(ws + kw * {vw}); "
                 + " ".join(f"c{r} += tf_ld(xs + ({r * g.sw} + kw * {g.dw}) * {vw}) * wk;" for r in range(rows)) + " }")
    epi = [epilogue(a, "bv", str(r * vw), residual, act) for r, a in enumerate(accs)]
    return f"""
static inline __attribute__((always_inline)) void {name}_d{rows}{"f" if full else "e"}(const float *restrict x,
    const float *restrict w, float *y, const float *bias, const float *res, const float *bounds, long kh0, long kh1,
    long kw0, long kw1) {{
  (void)res; (void)bounds; (void)kw0; (void)kw1;
  tf_vf {", ".join(f"{a} = {{0}}" for a in accs)};
  for (long kh = kh0; kh < kh1; kh++) {{
    const float *restrict xs = x + kh * {g.dh * g.w * vw};
    const float *restrict ws = w + kh * {g.kw * vw};
{inner}
  }}
  {epilogue_inputs(act, {"bv": 0})}
  {" ".join(epi)}
}}
"""


def dw_row_source(name: str, g: ConvGeometry, target: Target, residual: bool, act: str, rows: int = 0) -> str:
    """The C of ``{name}_dwrow(xr, wb, yr, bias, resr, bounds, kh0, kh1)``: one output row of one
    block of a depthwise blocked conv (``xr`` at the input row of its window's first kernel row,
    ``bias`` at the block's bias, ``bounds`` its clamp's two floats, kernel rows ``kh0 <= kh < kh1`` inside the input): the edge positions one by one with their
    window columns clipped, the interior in tiles of ``rows`` positions (default ``dw_rows``:
    ``DW_ROWS``, fewer where the target has fewer vector registers).  ``dw_source`` sweeps it over
    the rows, ``nchwc_mbconv.py`` over a band's rows into its buffer or the result."""
    lo, hi = g.interior()
    rows = rows or dw_rows(target)
    full, rem = divmod(hi - lo, rows)
    parts = [_dw_tile(name, g, 1, False, residual, act)]
    heights = ({rows} if full else set()) | ({rem} if rem else set())
    parts += [_dw_tile(name, g, r, True, residual, act) for r in sorted(heights)]
    tail = f"resr ? resr + ow * {g.vw} : 0"

    def interior(r: int, ow: str) -> str:
        return (f"{name}_d{r}f(xr + ({ow} * {g.sw} - {g.pw}) * {g.vw}, wb, yr + {ow} * {g.vw}, bias, "
                f"resr ? resr + {ow} * {g.vw} : 0, bounds, kh0, kh1, 0, {g.kw});")
    edge = (f"{{ const long iw = ow * {g.sw} - {g.pw}; {_taps_c('kw0', 'kw1', 'iw', g.w, g.dw, g.kw)} "
            f"{name}_d1e(xr + iw * {g.vw}, wb, yr + ow * {g.vw}, bias, {tail}, bounds, kh0, kw0 < kw1 ? kh1 : kh0, kw0, kw1); }}")
    row = [f"  for (long ow = 0; ow < {lo}; ow++) {edge}"]
    if full:
        row.append(f"  for (long ow = {lo}; ow < {lo + full * rows}; ow += {rows}) {interior(rows, 'ow')}")
    if rem:
        row.append(f"  {interior(rem, str(lo + full * rows))}")
    row.append(f"  for (long ow = {max(lo, hi)}; ow < {g.ow}; ow++) {edge}")
    return "".join(parts) + f"""
static inline __attribute__((always_inline)) void {name}_dwrow(const float *restrict xr, const float *restrict wb,
    float *yr, const float *bias, const float *resr, const float *bounds, long kh0, long kh1) {{
  (void)resr;
{chr(10).join(row)}
}}
"""


def dw_source(name: str, g: ConvGeometry, target: Target, residual: bool, act: str, clip_max: float | None,
              threads: int, rows: int = 0) -> str:
    """The C of ``name(x, w, bias, residual, y)`` for a depthwise blocked conv (channels in the lanes,
    w (CB, 1, KH, KW, 1, VW)): work units (image, block, output row), each a ``dw_row_source`` row."""
    work = g.n * g.ob * g.oh * g.ow * g.kh * g.kw * g.vw
    par = (f"#pragma omp parallel for schedule(static) if ({work}L >= {PARALLEL_MIN_MACS // 4}L)"
           if threads > 1 else "")
    entry = f"""
static void {name}(const float *restrict x, const float *restrict w, const float *restrict bias, const float *res,
    float *y) {{
  {bounds_c("bounds", clip_max)}
  {par}
  for (long u = 0; u < {g.n * g.ob * g.oh}; u++) {{
    const long oh = u % {g.oh}, b = u / {g.oh} % {g.ob}, n = u / {g.oh * g.ob};
    const long ih = oh * {g.sh} - {g.ph};
    {_taps_c("kh0", "kh1", "ih", g.h, g.dh, g.kh)}
    const float *xr = x + ((n * {g.ob} + b) * {g.h} + ih) * {g.w * g.vw};
    const float *wb = w + b * {g.kh * g.kw * g.vw};
    float *yr = y + ((n * {g.ob} + b) * {g.oh} + oh) * {g.ow * g.vw};
    const float *resr = res ? res + ((n * {g.ob} + b) * {g.oh} + oh) * {g.ow * g.vw} : 0;
    {name}_dwrow(xr, wb, yr, bias + b * {g.vw}, resr, bounds, kh0, kh1);
  }}
}}
"""
    return _prelude(target) + _guard(name, dw_row_source(name, g, target, residual, act, rows) + entry)


def conv_name(g: ConvGeometry, residual: bool, act: str, clip_max: float | None, groups: int = 1,
              params: BlockedParams | None = None) -> str:
    """The C name of a blocked conv: one function per geometry, epilogue and tuned params."""
    return "tf_nchwc_" + _digest(repr((g, residual, act, clip_max, groups) + ((params,) if params else ())))


# ---- pools --------------------------------------------------------------------------------
def _pool_ops(kind: str) -> tuple[str, str]:
    """(initial value, C statement folding ``v`` into ``m``) on one position's lanes: the max keeps
    a NaN (the first one met, as the plain pool) and takes the later of equal values."""
    if kind.endswith("max"):
        return ("tf_pool_fill(-INFINITY)",
                "{ const tf_pvi keep = (m > v) | (m != m); m = (tf_pv)(((tf_pvi)m & keep) | ((tf_pvi)v & ~keep)); }")
    return "tf_pool_fill(0.0f)", "m += v;"


def pool_helpers(vw: int) -> str:
    """The vector type of one position's ``vw`` lanes (a power of two) and the tap counter."""
    return f"""#ifndef TF_POOL{vw}_DEFINED
#define TF_POOL{vw}_DEFINED
typedef float tf_pv __attribute__((vector_size({4 * vw}), aligned(4), may_alias));
typedef int tf_pvi __attribute__((vector_size({4 * vw})));
static inline tf_pv tf_pool_fill(float s) {{ return s - (tf_pv){{0}}; }}
/* window taps a = 0..k-1 whose position i0 + a * d lies in [lo, hi) */
static inline long tf_taps(long i0, long k, long d, long lo, long hi) {{
  long c = 0;
  for (long a = 0; a < k; a++) c += i0 + a * d >= lo && i0 + a * d < hi;
  return c;
}}
#endif
"""


def pool_source(kind: str, x_shape: tuple[int, ...], y_shape: tuple[int, ...], attrs) -> list[str]:
    """The body of a blocked pool (``in0`` -> ``out0``): ``kind`` max / avg (windowed) or
    global_max / global_avg, one position's lanes a vector (``pool_helpers``)."""
    n, cb, h, w, vw = x_shape
    _, _, oh, ow, _ = y_shape
    planes = n * cb
    init, step = _pool_ops(kind)
    if kind.startswith("global"):
        fin = "m" if kind == "global_max" else f"m / {float(h * w)!r}f"
        return [f"  #pragma omp parallel for schedule(static) if ({planes * h * w * vw} >= 262144)",
                f"  for (long p = 0; p < {planes}; p++) {{",
                f"    const float *xp = in0 + p * {h * w * vw};",
                f"    tf_pv m = {init};",
                f"    for (long q = 0; q < {h * w}; q++) {{ const tf_pv v = *(const tf_pv *)(xp + q * {vw}); {step} }}",
                f"    *(tf_pv *)(out0 + p * {vw}) = {fin};",
                "  }"]
    kh, kw = (int(v) for v in attrs["kernel"])
    sh, sw = _ints(attrs, "strides", 2, 1)
    pads = _ints(attrs, "pads", 4, 0)
    ph, pw = pads[0], pads[1]
    dh, dw = _ints(attrs, "dilations", 2, 1)
    if kind == "max":
        fin, count = "m", "1"
    elif attrs.get("count_include_pad", False):
        # the taps inside the explicitly padded input count, the ceil-mode overhang does not
        fin = "m / cnt"
        count = f"(float)(tf_taps(ih0, {kh}, {dh}, {-ph}, {h + pads[2]}) * tf_taps(iw0, {kw}, {dw}, {-pw}, {w + pads[3]}))"
    else:
        fin, count = "m / cnt", "(float)((kh1 - kh0) * (kw1 - kw0))"
    return [f"  #pragma omp parallel for schedule(static) if ({planes * oh * ow * kh * kw * vw} >= 262144)",
            f"  for (long u = 0; u < {planes * oh}; u++) {{",
            f"    const long p = u / {oh}, oy = u % {oh}, ih0 = oy * {sh} - {ph};",
            f"    {_taps_c('kh0', 'kh1', 'ih0', h, dh, kh)}",
            f"    const float *xp = in0 + p * {h * w * vw};",
            f"    float *yp = out0 + (p * {oh} + oy) * {ow * vw};",
            f"    for (long ox = 0; ox < {ow}; ox++) {{",
            f"      const long iw0 = ox * {sw} - {pw};",
            f"      {_taps_c('kw0', 'kw1', 'iw0', w, dw, kw)}",
            f"      tf_pv m = {init};",
            "      for (long a = kh0; a < kh1; a++)",
            "        for (long b = kw0; b < kw1; b++) {",
            f"          const tf_pv v = *(const tf_pv *)(xp + ((ih0 + a * {dh}) * {w} + iw0 + b * {dw}) * {vw});",
            f"          {step}",
            "        }",
            f"      const float cnt = {count}; (void)cnt;",
            f"      *(tf_pv *)(yp + ox * {vw}) = {fin};",
            "    }",
            "  }"]


# ---- layout conversions -------------------------------------------------------------------
def transform_source(src_shape: tuple[int, ...], dst_shape: tuple[int, ...], to_blocked: bool) -> list[str]:
    """``in0`` (plain N, C, *S or blocked N, ceil(C/x), *S, x) copied into ``out0`` in the other form;
    a padded last block's extra lanes are written as 0 and never read back."""
    plain, blocked = (src_shape, dst_shape) if to_blocked else (dst_shape, src_shape)
    n, c = int(plain[0]), int(plain[1])
    block, cb = int(blocked[-1]), int(blocked[1])
    spatial = 1
    for d in plain[2:]:
        spatial *= int(d)
    p = f"in0[(n * {c} + ch) * {spatial} + s]" if to_blocked else f"out0[(n * {c} + ch) * {spatial} + s]"
    q = f"out0[((n * {cb} + b) * {spatial} + s) * {block} + l]" if to_blocked else \
        f"in0[((n * {cb} + b) * {spatial} + s) * {block} + l]"
    assign = f"{q} = ch < {c} ? {p} : 0;" if to_blocked else f"if (ch < {c}) {p} = {q};"
    return [f"  #pragma omp parallel for schedule(static) if ({n * c * spatial} >= 262144)",
            f"  for (long u = 0; u < {n * cb}; u++) {{",
            f"    const long n = u / {cb}, b = u % {cb};",
            f"    for (long s = 0; s < {spatial}; s++)",
            f"      for (long l = 0; l < {block}; l++) {{ const long ch = b * {block} + l; {assign} }}",
            "  }"]


def weight_transform_source(src_shape: tuple[int, ...], dst_shape: tuple[int, ...], to_blocked: bool) -> list[str]:
    """OIHW <-> OIHW[i]i[o]o of a weight that was not folded (a non-constant weight): plain loops."""
    (o, i), k = (src_shape[:2], src_shape[2:]) if to_blocked else (dst_shape[:2], dst_shape[2:])
    bi, bo = (dst_shape[-2], dst_shape[-1]) if to_blocked else (src_shape[-2], src_shape[-1])
    taps = 1
    for d in k:
        taps *= int(d)
    plain = f"((oo * {i} + ii) * {taps} + t)"
    blocked = f"(((((oo / {bo}) * {-(-i // bi)} + ii / {bi}) * {taps} + t) * {bi} + ii % {bi}) * {bo} + oo % {bo})"
    dst, srcx = (blocked, plain) if to_blocked else (plain, blocked)
    size = 1
    for d in dst_shape:
        size *= int(d)
    clear = [f"  memset(out0, 0, sizeof(*out0) * {size});"] if to_blocked else []    # the padding's weights
    return clear + [f"  for (long oo = 0; oo < {o}; oo++)",
            f"    for (long ii = 0; ii < {i}; ii++)",
            f"      for (long t = 0; t < {taps}; t++) out0[{dst}] = in0[{srcx}];"]


__all__ = ["BALANCE_BLOCKS", "ROW_MAJOR_L2_WEIGHT_SHARE", "ROW_MAJOR_MAX_WEIGHT_BYTES", "BlockedParams", "ConvGeometry", "ConvPlan", "DW_ROWS", "MAX_BLOCKS", "MAX_ROWS",
           "PARALLEL_MIN_MACS", "SILU_C", "EPILOGUE_C", "bounds_c", "epilogue_inputs", "TILE_SPARE_REGISTERS", "balance", "clip_bound", "conv_name", "conv_plan",
           "conv_source", "dw_row_source", "subsampled", "subsample_entry", "SUBSAMPLE_STRIDED", "epilogue_act", "gate_scaling", "rows_first", "uniform_groups", "dw_rows", "dw_source", "epilogue", "map_tiles",
           "pool_helpers", "pool_source", "small_map", "tile_rows", "transform_source", "weight_transform_source"]
