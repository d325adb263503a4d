"""C helpers the library convolutions share (``qconv.py``, ``bf16conv.py``): per-thread scratch
buffers and the padding of one channel plane, generated per kernel family so each family's
names stay its own (several can share one model file); the team-size clause of the kernels
that fork their own threads (``team``) and their split of a batch (``each_image``)."""
from __future__ import annotations


def scratch(name: str, slots: int) -> str:
    """``static void *NAME(int slot, size_t n)``: scratch buffer ``slot`` (< ``slots``) of at least
    ``n`` bytes, kept per calling thread and only grown: a model calls its convolutions one after
    another, and fresh mallocs of megabytes are fresh pages to fault in on every call (OpenMP
    workers use the caller's buffers during its call, or their own).  64-byte aligned: AMX tile
    loads of packed panels that straddle cache lines ran at half speed (an int8 GEMM 1024^3 from
    16-byte aligned operands 1.93 ms, from 64-byte aligned ones 0.99 ms).  NULL when the
    allocation fails."""
    return f"""static void *{name}(int slot, size_t n)
{{
  static __thread void *buf[{slots}];
  static __thread size_t size[{slots}];
  if (size[slot] < n) {{
    free(buf[slot]);
    buf[slot] = aligned_alloc(64, (n + 63) / 64 * 64);
    size[slot] = buf[slot] ? n : 0;
  }}
  return buf[slot];
}}
"""


def pad_plane(name: str, ctype: str) -> str:
    """``static void NAME(const T *src, long H, long W, long ph, long pw, long Hp, long Wp, T pad,
    T *dst)``: one channel's H x W plane padded with ``pad`` (ph rows and pw columns before) to
    Hp x Wp, every element written."""
    return f"""static void {name}(const {ctype} *src, long H, long W, long ph, long pw, long Hp, long Wp, {ctype} pad,
                      {ctype} *dst)
{{
  long lo = pw < 0 ? 0 : (pw > Wp ? Wp : pw), hi = pw + W < Wp ? pw + W : Wp;
  if (hi < lo) hi = lo;
  for (long y = 0; y < Hp; y++) {{
    {ctype} *row = dst + y * Wp;
    const long iy = y - ph;
    if (iy < 0 || iy >= H) {{ for (long t = 0; t < Wp; t++) row[t] = pad; continue; }}
    for (long t = 0; t < lo; t++) row[t] = pad;
    memcpy(row + lo, src + iy * W + (lo - pw), (size_t)(hi - lo) * sizeof({ctype}));
    for (long t = hi; t < Wp; t++) row[t] = pad;
  }}
}}
"""


def im2col_row(name: str, ctype: str) -> str:
    """``static void NAME(const T *x, long k, long H, long W, long kh, long kw, long sh, long sw,
    long ph, long pw, long dh, long dw, long OH, long OW, T pad, T *row)``: row k of the K x P
    im2col of one image (k = (c, i, j) in weight order), padding ``pad``; per output row a copy of
    the span inside the input and fills around it.  Stride 2 has its own loop: with the stride a
    constant gcc loads two vectors and keeps the even lanes, where the general loop stayed a scalar
    gather (the bf16 ResNet-50 stem's im2col, 147 rows of 12544, was most of its packing time)."""
    return f"""static void {name}(const {ctype} *x, long k, long H, long W, long kh, long kw, long sh, long sw,
                      long ph, long pw, long dh, long dw, long OH, long OW, {ctype} pad, {ctype} *row)
{{
  const long c = k / (kh * kw), i = (k / kw) % kh, j = k % kw;
  const {ctype} *plane = x + c * H * W;
  for (long oh = 0; oh < OH; oh++) {{
    {ctype} *dst = row + oh * OW;
    const long ih = oh * sh - ph + i * dh;
    if (ih < 0 || ih >= H) {{ for (long t = 0; t < OW; t++) dst[t] = pad; continue; }}
    const {ctype} *src = plane + ih * W;
    const long off = j * dw - pw;                          /* iw = ow * sw + off */
    long lo = off < 0 ? (-off + sw - 1) / sw : 0;          /* ow with 0 <= iw < W: [lo, hi) */
    long hi = W - off > 0 ? (W - off - 1) / sw + 1 : 0;
    if (hi > OW) hi = OW;
    if (lo > OW) lo = OW;
    if (hi < lo) hi = lo;
    for (long t = 0; t < lo; t++) dst[t] = pad;
    if (sw == 1) memcpy(dst + lo, src + lo + off, (size_t)(hi - lo) * sizeof({ctype}));
    else if (sw == 2) for (long ow = lo; ow < hi; ow++) dst[ow] = src[ow * 2 + off];  /* vectorised: even lanes */
    else for (long ow = lo; ow < hi; ow++) dst[ow] = src[ow * sw + off];
    for (long t = hi; t < OW; t++) dst[t] = pad;
  }}
}}
"""


def max_threads(name: str) -> str:
    """``static inline int NAME(void)``: the caller's OpenMP team size (1 without OpenMP)."""
    return f"""/* The caller's OpenMP team size (1 without OpenMP). */
static inline int {name}(void)
{{
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}}
"""


def expand(text: str, family: str, ctype: str, slots: int) -> str:
    """``text`` with ``@IM2COL@``, ``@PAD_PLANE@``, ``@SCRATCH@`` and ``@MAX_THREADS@`` replaced by
    this module's helpers named ``FAMILY_im2col_row``, ``FAMILY_pad_plane`` (elements ``ctype``),
    ``FAMILY_scratch`` (``slots`` buffers) and ``FAMILY_max_threads`` (``each_image`` calls it)."""
    return (text.replace("@IM2COL@", im2col_row(f"{family}_im2col_row", ctype))
            .replace("@PAD_PLANE@", pad_plane(f"{family}_pad_plane", ctype))
            .replace("@SCRATCH@", scratch(f"{family}_scratch", slots))
            .replace("@MAX_THREADS@", max_threads(f"{family}_max_threads")))


def team(threads: int) -> str:
    """An OpenMP ``num_threads`` clause of at most ``threads`` and at most the caller's setting
    (``omp_get_max_threads``: what ``omp_set_num_threads``, i.e. ``compile(threads=...)`` and
    ``tf_set_num_threads``, asked for).  A fixed ``num_threads(threads)`` overrode it: a model
    compiled for one thread ran its int8, bf16 and narrow convolutions on every core."""
    return f"num_threads({threads} < omp_get_max_threads() ? {threads} : omp_get_max_threads())"


def each_image(call: str, threads: int, family: str) -> str:
    """C statements running ``call`` (which reads ``n``) for images ``n < N``.  A batch of at least as
    many images as the caller's threads (``FAMILY_max_threads``, which ``expand`` defines) shares
    out whole images, each thread with its own buffers in its own cache, the images' own
    regions running as teams of one.  The share is static, the same contiguous images to the same
    thread in every layer, as the float32 kernels split a batch: handed out on demand, a layer's
    images were read from the other core's cache about half the time (QDQ MobileNetV2 at batch 8:
    1.036x).  An explicit branch, not an ``if`` clause: under the runtime a region inside even a
    one-thread region runs as a team of one, which would serialise batch 1."""
    if threads <= 1:
        return f"  for (long n = 0; n < N; n++) {call}"
    team_size = f"{family}_max_threads()"
    return f"""  if (N > 1 && N >= {team_size} && {team_size} > 1) {{
    #pragma omp parallel for schedule(static) {team(threads)}
    for (long n = 0; n < N; n++) {call}
  }} else {{
    for (long n = 0; n < N; n++) {call}
  }}"""


__all__ = ["each_image", "expand", "im2col_row", "max_threads", "pad_plane", "scratch", "team"]
