"""Depthwise 2-d convolutions (groups == in channels == out channels) as a direct, vectorised kernel.

A depthwise layer (MobileNet's 3x3, EfficientNet's 5x5) has one input channel per output channel:
``out[n, c, oh, ow] = sum_{kh, kw} w[c, 0, kh, kw] * x[n, c, oh*sh + kh*dh - ph, ow*sw + kw*dw - pw]``.
It is no GEMM (K = kh*kw is 9 or 25, M = 1 per group), and the implicit-GEMM paths of
``tensorize.py`` do not apply; it is memory bound (each input element feeds kh*kw multiply-adds),
so the kernel's job is to stream every channel plane once, at vector width, with no wasted work.

The kernel, per work unit (one image x channel plane x a chunk of output rows):

* **Staging.**  The input rows the chunk needs are copied once into a thread-local scratch
  buffer, each as ``sw`` *phase rows*: phase ``p`` holds the zero-padded row's elements
  ``p, p + sw, p + 2*sw...``.  Output column ``ow``'s tap ``kw`` then reads element ``ow + q // sw``
  of phase ``q % sw`` (``q = kw*dw``): for any stride, consecutive outputs read consecutive
  addresses, so each tap is one unaligned vector load per ``TF_VW`` outputs (stride 2 thus pays a
  deinterleave per input row, not one per tap and output vector).  The scratch rows of a chunk
  (about 16 KiB) stay in L1 while the chunk's outputs are computed.
* **Rows read in place** (AVX-512, column stride 1 or 2: ``direct``, ``_direct_source``).  There
  staging cost more than it saved: 512-bit stores are expensive on Zen 4, and staging was half of
  a stride-2 layer's time.  Each tap is then read from the input row itself: one unaligned load
  at stride 1; at stride 2, two loads of ``2 TF_VW`` consecutive elements and a ``vpermt2ps``
  give a tap's even lanes, another its odd ones (the next tap's).  Border vectors load under lane
  masks (zero outside the image, never a fault).  Same taps, same order, same masked weights.
* **Interior and border.**  Output columns whose every tap lies inside the image (known per layer)
  are computed in blocks of 4 vectors (4 independent accumulator chains hide the FMA latency),
  with no bounds checks; the remaining vectors (the left and right borders and the partial last
  one) use a lane mask per tap ``kw``: the accumulator of a lane whose tap falls outside the image
  is kept (a select after the multiply-add), so out-of-range taps are skipped, never multiplied
  as zeros.  Rows: output row ``oh`` loops only over the taps ``kh`` whose input row exists; rows
  with every ``kh`` inside take a fully unrolled path.
* **Numerics.**  No -ffast-math, no reassociation: each output is ``((0 + t0) + t1) + ...`` over
  its in-range taps in ``(kh, kw)`` order in every path, so a NaN or Inf input reaches exactly the
  outputs whose window holds it (as torch), and results do not depend on threads or chunking.
* **Epilogue.**  The layer's fused elementwise chain (bias, ReLU/clip, SiLU, residual add:
  ``fused_epilogue.py``) runs on each finished chunk while it is in L1, through the chain's
  ``tf_epi_fn`` callback (called by name, so the compiler may inline it).
* **Threads.**  Work units (images x channels x row chunks, several per thread even at batch 1)
  go to the threads in contiguous static shares: whole images where there are enough for every
  thread, the split every kernel of the model makes (``tensorize.KernelPlan._parallel_batch``),
  else the same channel ranges as the layers around it.  A tuned ``group_outputs`` hands units
  out on demand instead (``schedule(dynamic, g)``).

Weights must be compile-time constants (BatchNorm folded in); they are packed as ``[C, kh*kw]``.
The routines depend only on the kernel size, strides and dilations (the geometry is a runtime
struct), so layers that share those share one copy of the C text (``source``, include-guarded).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np

from ...ir.symbolic import Dim
from .contraction import Access, Affine, Contraction, Key, Roles, VAxis, more_than_one

SHAPE_TYPE = "tf_dw_shape"
MAX_KW = 16          # lane-mask bounds per kernel column in the shape struct
MAX_STRIDE = 4       # phase rows per staged input row
UNROLL = 4           # interior vectors per step (independent accumulator chains)
STAGE_BYTES = 16 << 10      # scratch for one chunk's staged input rows (L1)
CHUNK_OUTPUTS = 4096        # at most this many outputs per work unit (the epilogue runs on them in L1)
PARALLEL_MIN_MACS = 1 << 18  # below this a layer runs on one thread (a parallel region costs ~10 us)
ENV = "TENSORFORGE_DEPTHWISE"  # "0": leave depthwise convolutions to the generic paths (comparisons)


@dataclass(frozen=True)
class DepthwiseParams:
    """A tuning record's knobs for one depthwise layer (``tune/space.DepthwiseSpace``); the zero
    values keep the untuned choice.  ``mode``: "rows" (the row-vector kernel) or "lanes" (channels
    in the lanes, where ``lanes_shape`` allows it); ``chunk_outputs``: outputs per work unit of the
    row-vector kernel (``CHUNK_OUTPUTS``); ``group_outputs``: 0 gives each thread one contiguous
    share of the units, a number hands them out on demand, units of about that many outputs at a
    time (except at a batch split between the threads by images)."""

    mode: str = ""
    chunk_outputs: int = 0
    group_outputs: int = 0

    def validate(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"DepthwiseParams.mode must be one of {MODES}, got {self.mode!r}")
        for name in ("chunk_outputs", "group_outputs"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0 or value > (1 << 20):
                raise ValueError(f"DepthwiseParams.{name} must be an int in [0, 2^20], got {value!r}")


MODES = ("", "rows", "lanes")


def enabled() -> bool:
    return os.environ.get("TENSORFORGE_DEPTHWISE", "1").strip().lower() not in ("0", "off", "false", "no")


def lanes_enabled() -> bool:
    """``TENSORFORGE_DEPTHWISE=rows`` keeps narrow planes on the row-vector kernel (comparisons)."""
    return os.environ.get(ENV, "1").strip().lower() != "rows"


# ---------------------------------------------------------------------------------------------
# Analysis


@dataclass
class DepthwisePlan:
    """``out[n, c, oh, ow] = sum_{kh, kw} W[c, kh, kw] * x[n, c, oh*sh + kh*dh - ph, ow*sw + kw*dw - pw]``."""

    contraction: Contraction
    roles: Roles                  # batch (n), m (c), n (oh, ow), k (the unit channel axis, kh, kw)
    x: Access
    w: Access
    channels: int
    in_hw: tuple[int, int]
    out_hw: tuple[int, int]
    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads: tuple[int, int]         # leading pads (top, left)
    x_batch_stride: dict          # batch axis key -> element stride in x
    x_channel_stride: int
    c: Affine                     # output element offset over the virtual axes
    ldc: int                      # output element stride per channel

    @property
    def shape(self) -> "DepthwiseShape":
        (h, w), (oh, ow), (kh, kw), (sh, sw), (dh, dw), (ph, pw) = (self.in_hw, self.out_hw, self.kernel,
                                                                     self.strides, self.dilations, self.pads)
        return DepthwiseShape(h, w, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw)


def plan_depthwise(c: Contraction, constant_args: set[int]) -> DepthwisePlan | None:
    """``c`` as a 2-d depthwise convolution over NCHW data with constant weights, or None.  The
    kernel skips out-of-range taps, so a padded layer qualifies only when its lowering says that
    is exact (``c.skips_padding``: weights finite); torch turns a NaN/Inf weight into NaN at every
    output, padded taps included, which the generic path computes."""
    if not c.skips_padding and any(acc.pad is not None for acc in (c.a, c.b)):
        return None
    if any(t[1] != "" for t in (x.key for x in c.axes)):        # split (grouped) axes: not depthwise
        return None
    axes = {x.key: x for x in c.axes}
    for x_acc, w_acc in ((c.a, c.b), (c.b, c.a)):
        if w_acc.arg not in constant_args or w_acc.arg == x_acc.arg:
            continue
        plan = _match(c, axes, x_acc, w_acc)
        if plan is not None:
            return plan
    return None


def _one(aff: Affine) -> tuple[Key, Dim] | None:
    if len(aff.terms) != 1:
        return None
    ((k, v),) = aff.terms.items()
    return k, v


def _match(c: Contraction, axes: dict[Key, VAxis], x: Access, w: Access) -> DepthwisePlan | None:
    if len(x.shape) != 4 or len(w.shape) != 4 or w.pad is not None or x.pad not in (None, 0.0):
        return None

    def kind(k: Key) -> str:
        return axes[k].kind

    def unit(k: Key) -> bool:
        return axes[k].extent == 1

    # x[n, c (+ unit reduction axes), oh*s + kh*d - p, ow*s + kw*d - p]
    n_aff, ch = x.dims[0], x.dims[1]
    n_key = None
    if n_aff.const != 0:
        return None
    if n_aff.terms:
        one = _one(n_aff)
        if one is None or one[1] != 1 or kind(one[0]) != "p":
            return None
        n_key = one[0]
    par = [(k, v) for k, v in ch.terms.items() if kind(k) == "p"]
    red = [(k, v) for k, v in ch.terms.items() if kind(k) == "r"]
    if ch.const != 0 or len(par) != 1 or par[0][1] != 1 or not all(unit(k) for k, _ in red):
        return None
    c_key = par[0][0]
    sp_out, sp_ker, strides, dils, pads = [], [], [], [], []
    for d in x.dims[2:]:
        p = [(k, v) for k, v in d.terms.items() if kind(k) == "p"]
        r = [(k, v) for k, v in d.terms.items() if kind(k) == "r"]
        if len(p) + len(r) != len(d.terms) or len(p) > 1 or len(r) > 1 or not isinstance(d.const, int):
            return None
        pk, s = p[0] if p else (None, 1)
        rk, dl = r[0] if r else (None, 1)
        if not isinstance(s, int) or not isinstance(dl, int) or s <= 0 or dl <= 0:
            return None
        sp_out.append(pk)
        sp_ker.append(rk)
        strides.append(s)
        dils.append(dl)
        pads.append(-d.const)
    # w[c, (unit axes), kh, kw]
    if w.dims[0].const != 0 or w.dims[0].terms != {c_key: 1}:
        return None
    if w.dims[1].const != 0 or not all(kind(k) == "r" and unit(k) for k in w.dims[1].terms):
        return None
    for d, rk in zip(w.dims[2:], sp_ker):
        if d.const != 0 or d.terms != ({rk: 1} if rk is not None else {}):
            return None
    used = {k for k in (n_key, c_key, *sp_out, *sp_ker, *(k for k, _ in red), *w.dims[1].terms) if k is not None}
    if any(k not in used and more_than_one(ax.extent) for k, ax in axes.items()):
        return None
    # static geometry: only the batch may be symbolic
    h, wd = x.shape[2], x.shape[3]
    cc = axes[c_key].extent
    out_hw = tuple(axes[k].extent if k is not None else 1 for k in sp_out)
    ker = tuple(axes[k].extent if k is not None else 1 for k in sp_ker)
    if not all(isinstance(v, int) for v in (h, wd, cc, *out_hw, *ker, *pads)):
        return None
    if x.shape[1] != cc or tuple(w.shape[2:]) != ker or w.shape[0] != cc:
        return None
    if ker[1] > MAX_KW or strides[1] > MAX_STRIDE or min(out_hw) < 1 or min(pads) < 0:
        return None
    fc, fx = c.space.output(), x.flat()
    oh_k, ow_k = sp_out
    # the output walks (oh, ow) row-major and contiguously within a channel plane
    if ow_k is not None and fc.coeff(ow_k) != 1:
        return None
    if oh_k is not None and fc.coeff(oh_k) != out_hw[1]:
        return None
    ldc, xcs = fc.coeff(c_key), fx.coeff(c_key)
    if not isinstance(ldc, int) or ldc < out_hw[0] * out_hw[1] or xcs != h * wd:
        return None
    batch = [axes[n_key]] if n_key is not None and more_than_one(axes[n_key].extent) else []
    spatial = [axes[k] for k in sp_out if k is not None]
    kernel_axes = [axes[k] for k in (*w.dims[1].terms, *sp_ker) if k is not None]
    roles = Roles(batch, [axes[c_key]], spatial, kernel_axes)
    if fc.const != 0 or not isinstance(fc.coeff(c_key), int):
        return None
    return DepthwisePlan(c, roles, x, w, cc, (h, wd), out_hw, ker, tuple(strides), tuple(dils), tuple(pads),
                         {b.key: fx.coeff(b.key) for b in batch}, xcs, fc, ldc)


def pack_weights(array: np.ndarray, p: DepthwisePlan) -> np.ndarray:
    """The constant ``[C, 1, kh, kw]`` weights as ``[C, kh*kw]`` float32 (taps in (kh, kw) order)."""
    w = np.asarray(array, dtype=np.float32).reshape(p.w.shape)
    return np.ascontiguousarray(w[:, 0, :, :].reshape(p.channels, p.kernel[0] * p.kernel[1]))


# ---------------------------------------------------------------------------------------------
# Geometry


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class DepthwiseShape:
    h: int
    w: int
    oh: int
    ow: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    ph: int
    pw: int

    def nvec(self, vw: int) -> int:
        return _ceil_div(self.ow, vw)

    def lp(self, vw: int) -> int:
        """Floats of one phase row: every vector of the row, plus the widest tap offset."""
        return self.nvec(vw) * vw + (self.kw - 1) * self.dw // self.sw + 1

    def row_stride(self, vw: int) -> int:
        """Floats of one staged input row (its ``sw`` phase rows), a whole number of vectors."""
        return _ceil_div(self.sw * self.lp(vw), vw) * vw

    def interior_columns(self) -> tuple[int, int]:
        """[ca, cb): the output columns whose every tap ``kw`` reads inside the image."""
        ca = _ceil_div(self.pw, self.sw)
        last = self.w - 1 + self.pw - (self.kw - 1) * self.dw
        cb = last // self.sw + 1 if last >= 0 else 0
        cb = min(cb, self.ow)
        return min(ca, self.ow), max(min(ca, self.ow), cb)

    def interior_vectors(self, vw: int) -> tuple[int, int]:
        ca, cb = self.interior_columns()
        va = _ceil_div(ca, vw)
        return va, max(va, cb // vw)

    def tap_columns(self, kw: int) -> tuple[int, int]:
        """[lo, hi): the output columns whose tap ``kw`` reads inside the image."""
        q = kw * self.dw - self.pw
        lo = max(0, _ceil_div(-q, self.sw))
        last = self.w - 1 - q
        hi = last // self.sw + 1 if last >= 0 else 0
        return lo, max(lo, hi)

    def phase_range(self, p: int, vw: int) -> tuple[int, int]:
        """[i0, i1): the elements of phase row ``p`` that hold image columns (the rest are zeros)."""
        lp = self.lp(vw)
        i0 = max(0, _ceil_div(self.pw - p, self.sw))
        last = self.w - 1 + self.pw - p
        i1 = last // self.sw + 1 if last >= 0 else 0
        i0, i1 = min(i0, lp), min(max(i1, 0), lp)
        return i0, max(i0, i1)

    def rows_read(self, rows: int) -> int:
        """Input rows (padding included) that ``rows`` consecutive output rows read."""
        return (rows - 1) * self.sh + (self.kh - 1) * self.dh + 1

    def staged(self, vw: int) -> bool:
        """Whether the row routine stages its input rows (else it reads them in place, ``direct``)."""
        return not direct((self.sh, self.sw), vw)

    def chunk_rows(self, vw: int, outputs: int = 0) -> int:
        """Output rows per work unit: it holds at most ``outputs`` (default ``CHUNK_OUTPUTS``)
        outputs (at least one row) and its staged input rows fit ``STAGE_BYTES``.  Rows read in
        place need no such bound: whole 56x56 planes per unit ran MobileNetV2 1.023-1.029x at
        batch 1 and 1.012x at 8, EfficientNet-B0 0.994x and 1.016x (paired)."""
        rows = max(1, (outputs or CHUNK_OUTPUTS) // max(1, self.ow))
        rs = self.row_stride(vw) * 4
        while rows > 1 and self.staged(vw) and self.rows_read(rows) * rs > STAGE_BYTES:
            rows -= 1
        rows = min(rows, self.oh)
        chunks = _ceil_div(self.oh, rows)
        return _ceil_div(self.oh, chunks)       # even chunks

    def stage_floats(self, vw: int, outputs: int = 0) -> int:
        """Floats of the staged input rows of one chunk (a whole number of vectors; one vector
        where the rows are read in place)."""
        if not self.staged(vw):
            return vw
        rows = self.chunk_rows(vw, outputs)
        staged = min(self.h, self.rows_read(rows))
        return max(1, staged) * self.row_stride(vw)

    def edge_vectors(self, vw: int) -> int:
        """Output vectors per row that are not interior (their weights are masked per lane)."""
        va, vb = self.interior_vectors(vw)
        va = min(va, self.nvec(vw))
        return va + self.nvec(vw) - max(va, vb)

    def scratch_floats(self, vw: int, outputs: int = 0) -> int:
        """Per-thread scratch: the staged rows, then the border vectors' masked weights."""
        return self.stage_floats(vw, outputs) + max(1, self.edge_vectors(vw)) * self.kh * self.kw * vw

    def c_init(self, vw: int) -> str:
        """The ``tf_dw_shape`` initializer of this layer."""
        va, vb = self.interior_vectors(vw)
        lo, hi = zip(*(self.tap_columns(k) for k in range(self.kw)))
        s0, s1 = zip(*(self.phase_range(p, vw) for p in range(self.sw)))
        arr = lambda v: "{" + ", ".join(str(x) for x in v) + "}"      # noqa: E731
        return (f"{{ {self.h}, {self.w}, {self.oh}, {self.ow}, {self.ph}, {self.pw}, {self.lp(vw)}, "
                f"{self.row_stride(vw)}, {self.nvec(vw)}, {va}, {vb}, {arr(lo)}, {arr(hi)}, {arr(s0)}, {arr(s1)} }}")


SHAPE_TYPEDEF = f"""#ifndef TF_DW_SHAPE_DEFINED
#define TF_DW_SHAPE_DEFINED
/* One channel plane of a depthwise convolution (depthwise.py): image and output sizes, leading
   pads, staged phase row length and staged row stride (floats), output vectors per row, the
   interior vectors [va, vb), per kernel column kw the output columns [lo, hi) whose tap is inside
   the image, per phase p the elements [s0, s1) of a phase row that hold image columns. */
typedef struct {{ long h, w, oh, ow, ph, pw, lp, rs, nvec, va, vb;
  int lo[{MAX_KW}], hi[{MAX_KW}]; long s0[{MAX_STRIDE}], s1[{MAX_STRIDE}]; }} {SHAPE_TYPE};
#endif
"""


# ---------------------------------------------------------------------------------------------
# C text


def routine_name(kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int], vw: int) -> str:
    text = f"{kernel}/{strides}/{dilations}/{vw}/{UNROLL}/{'direct' if direct(strides, vw) else 'staged'}"
    return "tfdw_" + hashlib.sha256(text.encode()).hexdigest()[:12]


def direct(strides: tuple[int, int], vw: int) -> bool:
    """Whether the row routine reads the input rows in place (AVX-512, column stride 1 or 2) rather
    than staging them (``TENSORFORGE_DEPTHWISE=staged`` keeps the staged form, for comparisons)."""
    return (vw == 16 and strides[1] in (1, 2)
            and os.environ.get("TENSORFORGE_DEPTHWISE", "1").strip().lower() != "staged")


def source(kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int], vw: int, name: str) -> str:
    """The C routines (static; guarded by the caller) for one kernel size, stride and dilation:
    ``{name}_chunk(shape, x plane, w taps, y plane, oh0, oh1, st, et)`` computes output rows
    [oh0, oh1) of one channel plane (``st``: scratch for the staged input rows, ``et``: for the
    border vectors' masked weights)."""
    if direct(strides, vw):
        return _direct_source(kernel, strides, dilations, vw, name)
    KH, KW = kernel
    SH, SW = strides
    DH, DW = dilations
    taps = KH * KW
    off_of = (lambda kw: f"o{kw}") if SW > 1 else (lambda kw: str(kw * DW))
    offs = "\n".join(f"  const long o{kw} = {(kw * DW) % SW} * s->lp + {(kw * DW) // SW};"
                      for kw in range(KW)) if SW > 1 else ""

    def taps_text(nv: int, weight, indent: str) -> list[str]:
        """The multiply-adds of ``nv`` vectors at vector v (accumulators a0..), taps kh guarded."""
        lines = []
        for kh in range(KH):
            lines.append(f"{indent}if ({kh} >= kh_lo && {kh} < kh_hi) {{")
            lines.append(f"{indent}  const float *r = st + (off + {kh * DH}L * rs + v * {vw});")
            for kw in range(KW):
                t = kh * KW + kw
                lines += [f"{indent}  a{u} += tf_ld(r + {off_of(kw)} + {u * vw}) * {weight(t)};" for u in range(nv)]
            lines.append(f"{indent}}}")
        return lines

    def block(nv: int) -> str:
        acc = ", ".join(f"a{u} = {{0}}" for u in range(nv))
        lines = [f"    tf_vf {acc};", *taps_text(nv, lambda t: f"w{t}", "    ")]
        lines += [f"    tf_st(yr + v * {vw} + {u * vw}, a{u});" for u in range(nv)]
        return "\n".join(lines)

    edge = "\n".join(["    tf_vf a0 = {0};",
                      f"    const tf_vf *restrict we = (const tf_vf *)et + e * {taps};",
                      *taps_text(1, lambda t: f"we[{t}]", "    "),
                      f"    {name}_put(yr, v * {vw}, a0, s->ow, room);"])
    weights = "\n".join(f"  const tf_vf w{t} = tf_bcast(wc[{t}]);" for t in range(taps))
    if SW == 1:
        stage = """  const long i0 = s->s0[0], i1 = s->s1[0], lp = s->lp;
  for (long i = 0; i < i0; i++) dst[i] = 0.0f;
  for (long i = i0; i < i1; i++) dst[i] = xr[i - s->pw];
  for (long i = i1; i < lp; i++) dst[i] = 0.0f;"""
    else:
        stage = "  const long lp = s->lp;\n" + "\n".join(f"""  {{
    float *restrict d = dst + {p} * lp;
    const float *restrict xs = xr + ({p} - s->pw);
    const long i0 = s->s0[{p}], i1 = s->s1[{p}];
    for (long i = 0; i < i0; i++) d[i] = 0.0f;
    for (long i = i0; i < i1; i++) d[i] = xs[{SW} * i];
    for (long i = i1; i < lp; i++) d[i] = 0.0f;
  }}""" for p in range(SW))
    return f"""/* Depthwise {KH}x{KW} convolution, stride {SH}x{SW}, dilation {DH}x{DW} (depthwise.py). */
/* One input row (x, w floats) into its staged form: {SW} phase row(s) of lp floats, phase p holding
   the zero-padded row's elements p, p + {SW}, ... */
static inline void {name}_stage(const {SHAPE_TYPE} *s, const float *restrict xr, float *restrict dst) {{
{stage}
}}

{_put(name, vw)}
/* One output row: taps kh in [kh_lo, kh_hi) (their input rows exist); st + off is where the
   staged row of tap kh = 0 would be.  Interior vectors [va, vb) multiply broadcast weights; border
   vectors (e: their index among them) multiply weights whose lanes are zero where the tap falls
   outside the image (the staged zeros there are multiplied by 0, never by the weight: the tap adds
   exactly +0, it is skipped). */
static inline __attribute__((always_inline)) void {name}_row(const {SHAPE_TYPE} *s, const float *restrict st,
    long off, const float *restrict wc, const float *restrict et, float *restrict yr, long room,
    long kh_lo, long kh_hi) {{
  const long rs = s->rs, va = tf_min(s->va, s->nvec), vb = s->vb, nvec = s->nvec;
{offs}
{weights}
{_vector_loops(edge, block)}
}}

/* Output rows [oh0, oh1) of one channel plane: x (h x w), y (oh x ow), wc its {taps} taps;
   st: scratch for the chunk's staged input rows, et: for the border vectors' weights. */
static void {name}_chunk(const {SHAPE_TYPE} *s, const float *restrict x, const float *restrict wc,
    float *restrict y, long oh0, long oh1, float *restrict st, float *restrict et) {{
  const long h = s->h, rs = s->rs, va = tf_min(s->va, s->nvec);
  long ih_a = oh0 * {SH} - s->ph, ih_b = (oh1 - 1) * {SH} - s->ph + {(KH - 1) * DH + 1};
  if (ih_a < 0) ih_a = 0;
  if (ih_b > h) ih_b = h;
  for (long ih = ih_a; ih < ih_b; ih++) {name}_stage(s, x + ih * s->w, st + (ih - ih_a) * rs);
{_edge_weights(name, KH, KW, vw)}
{_row_loop(KH, SH, DH)}
    const long off = (ihb - ih_a) * rs, room = end - (oh - oh0) * s->ow;
    float *yr = y + oh * s->ow;
    if (kh_lo == 0 && kh_hi == {KH}) {name}_row(s, st, off, wc, et, yr, room, 0, {KH});
    else {name}_row(s, st, off, wc, et, yr, room, kh_lo, kh_hi);
  }}
}}
"""


def _put(name: str, vw: int) -> str:
    return f"""/* Stores output vector a at column j of row yr: whole when it ends inside the row, or inside the
   chunk (room: floats from yr to the chunk's end; the lanes past the row land on the next rows'
   first columns, which are stored after this one), else only its lanes inside the row. */
static inline void {name}_put(float *restrict yr, long j, tf_vf a, long ow, long room) {{
  if (j + {vw} <= ow || j + {vw} <= room) {{ tf_st(yr + j, a); return; }}
  tf_st_n(yr + j, a, (int)(ow - j));
}}
"""


def _vector_loops(edge: str, block) -> str:
    """A row routine's loop over its output vectors: the left border vectors, the interior ones
    ``UNROLL`` at a time then one at a time (``block(n)``: the C of ``n`` vectors at vector v),
    the right border ones (``edge``: one border vector, e its index among them)."""
    return f"""  long v = 0, e = 0;
  for (; v < va; v++, e++) {{
{edge}
  }}
  for (; v + {UNROLL} <= vb; v += {UNROLL}) {{
{block(UNROLL)}
  }}
  for (; v < vb; v++) {{
{block(1)}
  }}
  for (; v < nvec; v++, e++) {{
{edge}
  }}"""


def _row_loop(KH: int, SH: int, DH: int) -> str:
    """The head of a chunk's loop over its output rows oh: ``ihb``, the input row of tap kh = 0, and
    [kh_lo, kh_hi), the taps whose input rows exist (``end``: the chunk's outputs)."""
    return f"""  const long end = (oh1 - oh0) * s->ow;
  for (long oh = oh0; oh < oh1; oh++) {{
    const long ihb = oh * {SH} - s->ph;
    const long kh_lo = ihb >= 0 ? 0 : (-ihb + {DH - 1}) / {DH};
    long kh_hi = h - ihb <= 0 ? 0 : (h - ihb + {DH - 1}) / {DH};
    if (kh_hi > {KH}) kh_hi = {KH};"""


def _edge_weights(name: str, KH: int, KW: int, vw: int) -> str:
    """C filling ``et`` with the border vectors' weights, zero in the lanes whose tap ``kw`` falls
    outside the image (``s->lo``, ``s->hi``), in the order the row routine meets the vectors."""
    iota = "{" + ", ".join(str(i) for i in range(vw)) + "}"
    return f"""  for (long v = 0, e = 0; v < s->nvec; v++) {{
    if (v >= va && v < s->vb) continue;
    const tf_vi lane = (tf_vi){iota} + (int)(v * {vw});
    tf_vf *we = (tf_vf *)et + e * {KH * KW};
    for (long kw = 0; kw < {KW}; kw++) {{
      const tf_vi m = (lane >= s->lo[kw]) & (lane < s->hi[kw]);
      for (long kh = 0; kh < {KH}; kh++) we[kh * {KW} + kw] = (tf_vf)((tf_vi)tf_bcast(wc[kh * {KW} + kw]) & m);
    }}
    e++;
  }}"""


def _direct_source(kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int], vw: int,
                   name: str) -> str:
    """``source`` where the routine reads each tap straight from the input row (AVX-512, column
    stride 1 or 2): at stride 1 a tap of ``vw`` outputs is one unaligned load; at stride 2 two
    loads of ``2 vw`` consecutive elements give a tap's even lanes and the next tap's odd ones
    (one ``vpermt2ps`` each).  Border vectors load under a lane mask, zero where the column lies
    outside the image (a masked-off lane neither faults nor reads), and multiply the masked
    weights: every output is the chain of fused multiply-adds the staged routine specifies (gcc
    keeps that chain here; in the staged 5x5 routine it left a few taps as a multiply and an add,
    an ulp apart).  Staging
    the rows cost more than the taps: at stride 2 the deinterleave's loads, permutes and stores
    (a 512-bit store takes two cycles on Zen 4) were 47% of MobileNetV2's 96-channel 112x112
    stride-2 layer by ``perf``, the multiply-adds 40%."""
    KH, KW = kernel
    SH, SW = strides
    DH, DW = dilations
    taps = KH * KW
    qs = [kw * DW for kw in range(KW)]                 # each tap's column offset from the vector's base
    bases = sorted({q - q % 2 for q in qs}) if SW == 2 else []
    lone = {e for e in bases if e + 1 not in qs}        # pairs whose odd lanes no tap reads

    def row_taps(nv: int, weight, edge: bool, indent: str) -> list[str]:
        lines = []
        for kh in range(KH):
            lines.append(f"{indent}if ({kh} >= kh_lo && {kh} < kh_hi) {{")
            lines.append(f"{indent}  const float *r = x + (ihb + {kh * DH}L) * s->w + b;")
            done: set[int] = set()
            for kw, q in enumerate(qs):
                t = kh * KW + kw
                for u in range(nv):
                    if SW == 1:
                        src = (f"(tf_vf)_mm512_maskz_loadu_ps(m{q}, r + {q})" if edge
                               else f"tf_ld(r + {q + u * vw})")
                    else:
                        e, phase = q - q % 2, q % 2
                        if (e, u) not in done:
                            done.add((e, u))
                            lo = f"r + {e + 2 * u * vw}"
                            hi = f"r + {e + vw + 2 * u * vw}"
                            if edge:
                                a, bb = f"_mm512_maskz_loadu_ps(m{e}, {lo})", f"_mm512_maskz_loadu_ps(m{e + vw}, {hi})"
                            else:
                                a = f"_mm512_loadu_ps({lo})"
                                bb = f"_mm512_maskz_loadu_ps(0x7fff, {hi})" if e in lone else f"_mm512_loadu_ps({hi})"
                            lines.append(f"{indent}  const __m512 p{e}_{u}a = {a}, p{e}_{u}b = {bb};")
                        src = f"(tf_vf)_mm512_permutex2var_ps(p{e}_{u}a, {'iodd' if phase else 'ieven'}, p{e}_{u}b)"
                    lines.append(f"{indent}  a{u} += {src} * {weight(t)};")
            lines.append(f"{indent}}}")
        return lines

    def block(nv: int) -> str:
        acc = ", ".join(f"a{u} = {{0}}" for u in range(nv))
        lines = [f"    const long b = v * {vw * SW}L - s->pw;", f"    tf_vf {acc};",
                 *row_taps(nv, lambda t: f"w{t}", False, "    ")]
        lines += [f"    tf_st(yr + v * {vw} + {u * vw}, a{u});" for u in range(nv)]
        return "\n".join(lines)

    offsets = sorted(set(qs)) if SW == 1 else sorted({e + h for e in bases for h in (0, vw)})
    edge = "\n".join([f"    const long b = v * {vw * SW}L - s->pw;",
                       *(f"    const __mmask16 m{o} = {name}_mask(b + {o}, s->w);" for o in offsets),
                       "    tf_vf a0 = {0};",
                       f"    const tf_vf *restrict we = (const tf_vf *)et + e * {taps};",
                       *row_taps(1, lambda t: f"we[{t}]", True, "    "),
                       f"    {name}_put(yr, v * {vw}, a0, s->ow, room);"])
    weights = "\n".join(f"  const tf_vf w{t} = tf_bcast(wc[{t}]);" for t in range(taps))
    perms = ""
    if SW == 2:
        even = ", ".join(str(i) for i in range(2 * vw - 2, -1, -2))
        odd = ", ".join(str(i) for i in range(2 * vw - 1, 0, -2))
        perms = f"  const __m512i ieven = _mm512_set_epi32({even}), iodd = _mm512_set_epi32({odd});\n"
    return f"""/* Depthwise {KH}x{KW} convolution, stride {SH}x{SW}, dilation {DH}x{DW}, input rows read in place (depthwise.py). */
/* The lanes j of a load at column c that lie inside a row of w columns: 0 <= c + j < w. */
static inline __mmask16 {name}_mask(long c, long w) {{
  const long lo = c < 0 ? -c : 0, hi = w - c < {vw} ? w - c : {vw};
  return hi <= lo ? (__mmask16)0 : (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}}

{_put(name, vw)}
/* One output row: taps kh in [kh_lo, kh_hi) (their input rows exist); ihb: the input row of tap
   kh = 0 in the plane x.  Interior vectors [va, vb) load whole vectors and multiply broadcast
   weights; border vectors (e: their index among them) load under the image's lane masks and
   multiply weights whose lanes are zero where the tap falls outside. */
static inline __attribute__((always_inline)) void {name}_row(const {SHAPE_TYPE} *s, const float *restrict x,
    long ihb, const float *restrict wc, const float *restrict et, float *restrict yr, long room, long kh_lo,
    long kh_hi) {{
  const long va = tf_min(s->va, s->nvec), vb = s->vb, nvec = s->nvec;
{perms}{weights}
{_vector_loops(edge, block)}
}}

/* Output rows [oh0, oh1) of one channel plane: x (h x w), y (oh x ow), wc its {taps} taps;
   st: unused (the staged form's scratch), et: for the border vectors' weights. */
static void {name}_chunk(const {SHAPE_TYPE} *s, const float *restrict x, const float *restrict wc,
    float *restrict y, long oh0, long oh1, float *restrict st, float *restrict et) {{
  (void)st;
  const long h = s->h, va = tf_min(s->va, s->nvec);
{_edge_weights(name, KH, KW, vw)}
{_row_loop(KH, SH, DH)}
    const long room = end - (oh - oh0) * s->ow;
    float *yr = y + oh * s->ow;
    if (kh_lo == 0 && kh_hi == {KH}) {name}_row(s, x, ihb, wc, et, yr, room, 0, {KH});
    else {name}_row(s, x, ihb, wc, et, yr, room, kh_lo, kh_hi);
  }}
}}
"""


# ---------------------------------------------------------------------------------------------
# Narrow planes: channels in the vector lanes

# Output rows this narrow (7x7 and 14x14 maps) leave much of a vector empty along a row, and over
# kernels of at least LANES_WIDE_TAPS taps (5x5) rows up to LANES_MAX_OW_WIDE (28x28 maps) too:
# there the lanes kernel's two transposes (tf_store_t) cost less than the row kernel's masked
# vectors and its reloads of the staged rows.  Alone, best of 15 runs, 2 threads: EfficientNet's
# 480-channel 5x5 at 14x14 0.057 -> 0.046 ms, its 240-channel 5x5 at 28x28 0.136 -> 0.090 ms,
# MobileNetV2's 384-channel 3x3 at 14x14 0.030 -> 0.026 ms; a 3x3 at 28x28 was slower (192
# channels: 0.042 -> 0.048 ms).  Whole EfficientNet-B0 1.07x at batch 1 and 8.
LANES_MAX_OW = 16
# Where the row kernel reads its input rows in place (``direct``) it beats the lanes kernel on 3x3
# layers down to 14-wide rows: paired, 2 threads, lanes time over rows time at batch 1 (and 8):
# 192 channels 28x28 stride 2 2.0-2.3x (1.85x), 384 at 14x14 1.34x (1.18x), 576 at 14x14 1.6-2.1x
# (1.43x); on 7-wide rows the lanes kernel stays ahead at batch 1 (576 channels 14x14 stride 2
# 0.93x, 960 at 7x7 0.80x).  5x5 layers keep ``LANES_MAX_OW_WIDE`` (240 at 28x28: 0.88-1.48x).
LANES_MAX_OW_DIRECT = 8
LANES_MAX_OW_WIDE = 32
LANES_WIDE_TAPS = 25
LANES_STAGE_BYTES = 96 << 10  # the padded, lane-interleaved input of one channel group (L2)
# the lanes kernel's time goes into moving elements in and out of the lanes, not into multiply-adds:
# a layer moving fewer runs on one thread (576 planes 14x14 -> 7x7: 141K elements, 65 us on one)
LANES_PARALLEL_MIN_ELEMENTS = 1 << 16


def lanes_shape(s: "DepthwiseShape", vw: int) -> tuple[int, int] | None:
    """(rows, columns) of the padded input a channel group's outputs read, when ``s`` takes the
    channels-in-lanes kernel: output rows of at most ``LANES_MAX_OW`` columns (``LANES_MAX_OW_DIRECT``
    where the row kernel reads its rows in place), or ``LANES_MAX_OW_WIDE`` for kernels of
    ``LANES_WIDE_TAPS`` taps and more, whose staged group fits ``LANES_STAGE_BYTES``; None otherwise."""
    hp = (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1
    wp = (s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1
    widest = (LANES_MAX_OW_WIDE if s.kh * s.kw >= LANES_WIDE_TAPS else
              LANES_MAX_OW_DIRECT if direct((s.sh, s.sw), vw) else LANES_MAX_OW)
    if s.ow > widest or hp * wp * vw * 4 > LANES_STAGE_BYTES:
        return None
    return hp, wp


def pack_lane_weights(array: np.ndarray, p: DepthwisePlan, vw: int) -> np.ndarray:
    """The ``[C, 1, kh, kw]`` weights as ``[ceil(C/vw), kh*kw, vw]``: per channel group, one vector
    of the group's weights per tap, zeros in the lanes past the last channel."""
    taps = p.kernel[0] * p.kernel[1]
    w = pack_weights(array, p)
    groups = -(-p.channels // vw)
    out = np.zeros((groups * vw, taps), np.float32)
    out[:p.channels] = w
    return np.ascontiguousarray(out.reshape(groups, vw, taps).transpose(0, 2, 1))


def lanes_source(s: "DepthwiseShape", vw: int, name: str) -> str:
    """``{name}_group(x, xcs, wv, y, ldc, nch, st)``: every output of ``nch`` <= vw channel planes
    (x: the first input plane, planes xcs floats apart; y: the first output plane, ldc apart), with
    the channels in the vector lanes.  The planes' pixels are staged lane-interleaved into a
    zero-padded buffer, each output is ``((0 + t0) + t1) + ...`` over the taps in (kh, kw) order (one
    FMA per tap) as one vector of ``vw`` channels (a padding tap adds an exact +-0: the weights are
    finite, so NaN and Inf reach exactly the outputs whose window holds them), and the outputs go
    back to their planes."""
    rows_cols = lanes_shape(s, vw)
    assert rows_cols is not None
    hp, wp = rows_cols
    taps = s.kh * s.kw
    ih0, ih1 = max(0, -s.ph), min(s.h, hp - s.ph)      # image rows and columns the group reads
    iw0, iw1 = max(0, -s.pw), min(s.w, wp - s.pw)
    outputs = s.oh * s.ow
    unroll = min(4, s.ow)
    acc = ", ".join(f"a{u} = {{0}}" for u in range(unroll))

    def fmas(nacc: int) -> str:
        lines = []
        for kh in range(s.kh):
            for kw in range(s.kw):
                t = kh * s.kw + kw
                lines += [f"        a{u} += tf_ld(r + ({kh * s.dh * wp + kw * s.dw} + {u * s.sw}) * {vw}) * wv[{t}];"
                          for u in range(nacc)]
        return "\n".join(lines)

    return f"""/* Depthwise {s.kh}x{s.kw} convolution, stride {s.sh}x{s.sw}, dilation {s.dh}x{s.dw}, {s.h}x{s.w} -> {s.oh}x{s.ow},
   channels in the vector lanes (depthwise.py, lanes_source). */
static void {name}_group(const float *restrict x, long xcs, const float *restrict wt, float *restrict y, long ldc,
    long nch, float *restrict st) {{
  float *restrict ot = st + {hp * wp * vw}L, *restrict pix = ot + {outputs * vw}L;
  /* st came zeroed (lanes_scratch): the padding cells are never written, the image cells of lanes
     < nch are overwritten here (lanes >= nch may keep an earlier group's values, or pix's: their
     weights are 0 and their outputs are never stored).  The planes go into pix pixel by pixel, 8
     channels at a time (tf_store_t: permutes and masked stores, where element by element each
     value took two scalar memory operations), then each image row into its padded place. */
  for (long l = 0; l < nch; l += 8)
    tf_store_t(x + l * xcs, xcs, tf_min(8, nch - l), {s.h * s.w}, pix + l, {vw});
  for (long ih = {ih0}; ih < {ih1}; ih++)
    memcpy(st + ((ih + {s.ph}) * {wp} + {iw0 + s.pw}) * {vw}, pix + (ih * {s.w} + {iw0}) * {vw},
           sizeof(float) * {(iw1 - iw0) * vw});
  tf_vf wv[{taps}];
  for (int t = 0; t < {taps}; t++) wv[t] = tf_ld(wt + t * {vw});
  for (long oh = 0; oh < {s.oh}; oh++) {{
    long ow = 0;
    for (; ow + {unroll} <= {s.ow}; ow += {unroll}) {{
      const float *r = st + (oh * {s.sh * wp} + ow * {s.sw}) * {vw};
      tf_vf {acc};
{fmas(unroll)}
{chr(10).join(f"      tf_st(ot + (oh * {s.ow} + ow + {u}) * {vw}, a{u});" for u in range(unroll))}
    }}
    for (; ow < {s.ow}; ow++) {{
      const float *r = st + (oh * {s.sh * wp} + ow * {s.sw}) * {vw};
      tf_vf a0 = {{0}};
{fmas(1)}
      tf_st(ot + (oh * {s.ow} + ow) * {vw}, a0);
    }}
  }}
  for (long q = 0; q < {outputs}; q += 8)      /* back to the planes, 8 outputs at a time */
    tf_store_t(ot + q * {vw}, {vw}, tf_min(8, {outputs} - q), nch, y + q, ldc);
}}
"""


def lanes_elements(p: DepthwisePlan) -> int:
    """Elements one image moves through the lanes (every input and output of its planes): the
    lanes kernel's work, which decides its threads (``LANES_PARALLEL_MIN_ELEMENTS``)."""
    s = p.shape
    return p.channels * (s.h * s.w + s.oh * s.ow)


def lanes_scratch_floats(s: "DepthwiseShape", vw: int) -> int:
    """Per-thread scratch of the channels-in-lanes kernel: the staged group, its outputs, and its
    unpadded pixels on the way in."""
    hp, wp = lanes_shape(s, vw)
    return (hp * wp + s.oh * s.ow + s.h * s.w) * vw


def lanes_routine_name(s: "DepthwiseShape", vw: int) -> str:
    return "tfdwl_" + hashlib.sha256(repr((s, vw)).encode()).hexdigest()[:12]
