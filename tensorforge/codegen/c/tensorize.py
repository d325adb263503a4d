"""Tensorization: dense contractions of compiled models run on the generated GEMM micro-kernels.

The model compiler (``model.py``) asks ``Tensorizer.prepare(func)`` once per model and then, for
every ``structured.kernel``, ``Prepared.emit(op)``: the C text of the kernel when its contraction
maps onto a GEMM, else None (the kernel takes the scheduled loop path).  A kernel is tensorized
when it is one contraction (``contraction.py``: GEMM-like or a convolution) followed only by an
elementwise chain ending in the kernel's result (``fused_epilogue.py``), and is big enough to
pay for the packing.

Constant B operands (the weights of linear layers) are packed into GEMM panels here, in NumPy,
once per compile: ``Prepared.weights`` are the packed arrays for the weight blob and
``Prepared.operand_weight(op, i)`` tells the caller to pass a packed array instead of operand i.
A constant feeding several kernels the same way is packed once; a constant whose every use is
packed is left out of the blob (``Prepared.replaced``).

Compile time is kept down by sharing code between layers: a GEMM's text depends only on its
tiling and operand layouts (not on M, N, K, nor on the fused epilogue, which it calls back per
finished tile), and it is emitted as its own translation unit (``toolchain.unit``) that is compiled
once and cached as an object for every later model; the fused epilogues are small callbacks whose
row strides are runtime values, so layers with the same chain share one; all convolutions share one
im2col routine whose shape is an argument. Helpers are named by a hash of their text and wrapped in
include guards, so kernels that share one emit it once in the model's C file.

Dynamic shapes (docs/dynamic_shapes.md): M, N, K, the batch count, strides and offsets may be
symbolic dims.  They reach the C text as expressions over ``tf_sym_<name>`` locals, which a kernel
of a model with symbols declares from its last parameter ``const int64_t* restrict tf_dims``
(``Prepared.emit(kernel, symbols=...)``, the model's symbol order).  Choices that only need a
number (register tile, threads, thresholds) take the symbols' hints (``KernelPlan.hint``); counts
that decide what memory is touched (a convolution's images, Winograd's and the folded GEMM's
chunks) are computed in C from the runtime values.  A static model gets exactly the text it did.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ...ir.builtin import FuncOp
from ...ir.core import Operation
from ...ir.structure import structural_hash
from ...ir.symbolic import (Dim, SymbolTable, c_identifier, current_hint, dim_ceildiv, dim_mul, hint_of,
                            hints_from, symbol_table_of, to_c)
from ...passes.lower.graph_to_kernels import is_library_kernel
from ..target import Target
from . import depthwise, direct_conv, narrow_conv, winograd
from .contraction import (Affine, ConvPlan, GemmPlan, Roles, VAxis, match_contraction, matrix_layout, plan_conv,
                          plan_gemm)
from .emit_loop import c_type
from .fused_epilogue import EpilogueChain, match_chain
from .im2col import FOLD_SCATTER_C, GUARDED_SHAPE_TYPEDEF, IM2COL_C, Im2colShape
from .microkernels import (GemmParams, GemmSpec, _round_down, gemm_prelude, generate_gemm, pack_a, pack_b,
                           pack_b_into, packed_b_size, signatures)
from .nchwc import TILE_SPARE_REGISTERS
from .toolchain import unit

KERNEL_NAME = "KERNEL_NAME"      # the placeholder model.py replaces (same as model.KERNEL_NAME)

# Below these sizes the loop path is as good and compiles faster.
MIN_FLOPS = 1 << 14
MIN_N = 8
MIN_M = 1
MIN_K = 4
# Contractions with fewer multiply-adds than this run on one thread: they take ~0.1 ms, and on a
# shared machine a parallel region waits a whole scheduler time slice for a descheduled thread.
PARALLEL_MIN_MACS = 1 << 21
# A Winograd convolution needs this many 2x2 output tiles (all images) to beat the other algorithms
# (benchmarks/conv_layers.py: 49 tiles of one 14x14 image 1.4x faster than direct, 16 of a 7x7 2x slower).
WINOGRAD_MIN_TILES = 32
# F(4x4, 3x3) where it has at least this many 4x4 tiles (all images) and pads at most this share of
# extra outputs (benchmarks/conv_layers.py, ResNet's 3x3 layers).
WINOGRAD4_MIN_TILES = 40
WINOGRAD4_MAX_SHARE = 1.15
# GEMMs whose B is an activation read it in place (GemmSpec.b_direct) when A has at most this many
# rows and K is at most this deep (benchmarks: 24x3136x144 165 -> 141 us, 64x3136x256 595 -> 565 us)
B_DIRECT_MAX_M = 128
B_DIRECT_MAX_K = 1024
# the Winograd conv algorithms (and kernel kinds) and their output tile side
WINOGRAD_TILES = {"winograd": 2, "winograd4": 4}
# the direct kernel turned around (``direct_conv.transposed_source``): output channels in the
# lanes, positions of an output row as the register tile's rows
DIRECT_TRANSPOSED = "direct_t"
# ... chosen over the usual direct kernel where the padded grid wastes at least this much more of its
# columns, for one image (ResNet's 512-channel 3x3 layers at 7x7: a 9-wide grid in 64-wide tiles
# wastes 23%, 7x64 transposed tiles none; measured 1.2x on one thread, 1.3x on two; a batch's
# images are folded or take Winograd instead)
DIRECT_TRANSPOSED_MARGIN = 0.10
# Register tiles (mr, nr in vectors) tried for narrow outputs: the one wasting fewest columns wins.
_TILES = ((6, 4), (8, 3), (12, 2), (14, 1))
# ... with 16 vector registers (AVX2), where the 24 accumulators of those spill: the usual 6 x 2
# vectors (``GemmParams.for_target``) and one-vector tiles for narrow outputs.  The 12 x 16 that
# AVX2 took from the list above stored and reloaded 12 accumulators every k; with these (Zen 3, one
# process, interleaved): GEMMs and 1x1 convolutions 1.5-1.6x faster, 3x3 layers (direct and
# Winograd) 1.3-1.6x, ResNet's 7x7/2 stem 1.7x.
_TILES_16 = ((6, 2), (12, 1), (14, 1))
# Vector registers a register tile leaves besides its accumulators: one broadcast and one B vector
# (further B vectors are FMA memory operands: AVX2's 7 x 2 vectors keeps its 14 in registers).
TILE_OPERAND_REGISTERS = 2
# A GEMM with a constant A computed transposed (``KernelPlan.transposed``) tiles the output's columns
# (a convolution's positions) as rows: 7 rows fit every ImageNet map (7 * 2^k positions a side).
_TRANSPOSED_TILES = ((7, 3), (7, 4), (14, 1), (12, 2), (6, 4), (8, 3))
# ... and for a transposed GEMM (a 1x1 convolution), 7 x 2 vectors too: MobileNetV2's 960 -> 160 at
# 7x7 pads 160 channels to 192 in 64-wide tiles and none in 32-wide ones (alone 1.19-1.22x, paired)
_TRANSPOSED_GEMM_TILES = _TRANSPOSED_TILES + ((7, 2),)
# Accumulator registers from which a transposed tile counts as running at full speed (each k: its
# broadcasts and loads, then this many independent FMAs, more than the FMA latency covers).
TRANSPOSED_FULL_ACCUMULATORS = 14
# ... when the output has at least this many columns (fewer: the GEMV-like shapes of squeeze layers)
TRANSPOSED_MIN_COLUMNS = 16
# ... and when the usual tile wastes at least this much more of its work than the transposed one
# (in one process, steady state: ResNet-50's and EfficientNet's 1x1 layers at 56x56, 28x28 and 14x14,
# whose usual tiles pad 0-6%, ran 1.03-1.2x faster untransposed, MobileNetV2's 14x14 64->384 1.5x;
# the 7x7 maps, whose 49 positions pad a 64-wide tile by 23%, stay transposed unless the channels pad
# the transposed tile nearly as much: 160 channels in 64-wide tiles, 1.02-1.08x untransposed)
TRANSPOSED_MARGIN = 0.10
# ... and, for a convolution that needs im2col, at most this many positions per image: its whole
# x_col [K, P] is built before the GEMM (benchmarks: 3x3 layers at 7x7 and 14x14 1.25x faster; at
# 28x28 0.85x and ResNet's 7x7 stem at 112x112 0.6x, where the chunked im2col keeps panels in L2)
TRANSPOSED_MAX_POSITIONS = 256
# Strided convolutions take the direct kernel's polyphase split by default when their K is at
# least this deep (benchmarks/strided_layers.py: ResNet's 7x7/2 stem, K 147, 1.2x and 3x3/2 at
# 56x56, K 576, 1.35x over im2col; MobileNetV2's 3x3/2 stem, K 27, 1.14-1.31x since the fused
# epilogue runs on the tile buffer with masked tails, 0.8x before: its copy-out dominated such a
# short K) and their outputs too many for the transposed im2col GEMM.
STRIDED_DIRECT_MIN_DEPTH = 16
# ... and for one image, those with at least this deep a K take the transposed direct kernel where
# it pads no more than the usual one, over any number of positions: its register tile reads the
# weights as vector panels and each phase plane row once per 7 positions, where the usual tile
# walks the 4 phase planes of a stride-2 window per 8 channels (ResNet-50's 128->128 3x3/2 at 56x56,
# K 1152, in the model: 1.46 -> 1.25 ms, the whole model 1.028x; ResNet-18's 64->128, K 576, the
# whole model 1.015x; the stems stay: ResNet's 7x7/2, K 147, 1.00-1.02x, MobileNetV2's 3x3/2,
# K 27, 0.99x)
STRIDED_TRANSPOSED_MIN_DEPTH = 512
# ... and one image's strided windows (not 1x1) over outputs few enough for the transposed GEMM take
# the transposed direct kernel on the same phase planes instead of transposed im2col, which copies
# the input 2.25x for a 3x3/2 layer (ResNet's 256->256 3x3/2 at 28x28 and 512->512 at 14x14, one
# process: 1 thread 1.70 -> 1.39 and 1.96 -> 1.55 ms, 2 threads 0.90 -> 0.74 and 1.07 -> 0.86;
# onnxruntime 1.20 / 1.39 and 0.66 / 0.74).  1x1/2 layers stay: the fused subsample of the
# transposed GEMM was as fast.


def _fitting_tiles(target: Target, tiles: tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    """(mr, nr in lanes) of the tiles (mr, nr in vectors) whose accumulators fit the target's
    vector registers beside ``TILE_OPERAND_REGISTERS``."""
    most = target.vector_registers - TILE_OPERAND_REGISTERS
    return [(mr, nv * target.vector_width) for mr, nv in tiles if mr * nv <= most]


def _tile(target: Target, n: int, m: int = 0) -> tuple[int, int]:
    """(mr, nr) for an output with n columns: the least padded work per accumulator register (a
    tile with fewer accumulators hides less of the FMA latency; past all registers but
    ``nchwc.TILE_SPARE_REGISTERS``, 12 of AVX2's, more count as no faster), and per FMA issued where
    a k step loads more operands than it has FMAs (a one-vector tile: a broadcast per FMA; AVX2's
    14 x 8 ran the direct kernel 1.1-1.2x slower than its 6 x 16 on Zen 3, one thread); ties to the
    widest tile.  With ``m`` (convolutions) the padded rows of an m-row output count as well."""
    vw = target.vector_width
    tiles = _fitting_tiles(target, _TILES if target.vector_registers >= 32 else _TILES_16)
    full = min(max(mr * nr for mr, nr in tiles) // vw, target.vector_registers - TILE_SPARE_REGISTERS)

    def padded_work(t: tuple[int, int]) -> float:
        rows = -(-m // t[0]) * t[0] if m else 1
        accumulators, loads = t[0] * t[1] // vw, t[0] + t[1] // vw
        return rows * -(-n // t[1]) * t[1] * full / min(accumulators, full) * max(1.0, loads / accumulators)

    return min(tiles, key=lambda t: (padded_work(t), -t[1]))


def _direct_t_on() -> bool:
    """The transposed direct kernel's default use (``TENSORFORGE_DIRECT_T=0`` turns it off for
    comparisons: the waste rule, ``DIRECT_TRANSPOSED_MARGIN``)."""
    return os.environ.get("TENSORFORGE_DIRECT_T", "1") != "0"


def _transposed_kc(target: Target, depth: int, nr: int) -> int:
    """K block of a transposed GEMM: all of K where one weight panel (K x nr floats) fits half of
    L2.  Its tile is written back transposed and, before every further K block, read back
    element by element, so each block boundary costs two passes over the tile: at K = 1024-2048
    with 256-deep blocks (both passes scalar then) that was 8-15% of ResNet-50's 14x14 and 7x7
    1x1 layers (2048->512 at 7x7, one thread: 0.667 -> 0.565 ms with one block, onnxruntime 0.553).
    The column block nc is then derived from this kc (half of L2 for kc x nc): left at the
    256-deep default's 1024 columns, a 2048-deep block was an 8 MB B block, so every 7-position
    row tile re-read its thread's 2 MB of weights from memory (ResNet-50's 7x7 1x1 layers 0.86 ->
    0.67 ms in the model, the whole model 1.04x; onnxruntime 0.55-0.58 ms).
    ``TENSORFORGE_TRANSPOSED_KC=0`` keeps the usual blocks (comparisons)."""
    if os.environ.get("TENSORFORGE_TRANSPOSED_KC", "1") == "0":
        return 0
    return depth if depth * nr * 4 <= target.l2 // 2 else 0


def _transposed_tile(target: Target, rows: int, columns: int, gemm: bool = False) -> tuple[int, int]:
    """(mr, nr) of a transposed GEMM (``rows`` of the computed C^T: the layer's output columns):
    the fewest padded rows and columns per accumulator register, ties to the least padding, then
    to the widest tile.  ``gemm``: for the GEMM path, whose tiles of ``TRANSPOSED_FULL_ACCUMULATORS``
    registers or more count as equally fast (the transposed direct kernel keeps its measured
    choice: per register of the widest tile)."""
    tiles = _fitting_tiles(target, _TRANSPOSED_GEMM_TILES if gemm else _TRANSPOSED_TILES)
    full = max(mr * nr for mr, nr in tiles)
    if gemm:
        full = min(full, TRANSPOSED_FULL_ACCUMULATORS * target.vector_width)

    def padded(t: tuple[int, int]) -> int:
        return -(-rows // t[0]) * t[0] * -(-columns // t[1]) * t[1]

    return min(tiles, key=lambda t: (padded(t) * full / min(t[0] * t[1], full), padded(t), -t[1]))


def _gemm_params(target: Target, n: int, threads: int, m: int = 0, k: int = 0, by_rows: bool = True) -> GemmParams:
    """Default params: the even static split (``microkernels._SPLIT_N``), each thread one
    contiguous share of the M tiles or N panels.  Consecutive layers then hand the same columns
    (a convolution's positions) to the same thread, which reads on its own core what it wrote:
    blocks handed out on demand, which the GEMMs with many blocks took before, put a residual
    block's 1x1 convolutions at 1.6x their time alone (ResNet-50's 64 -> 256 at 56x56 in the model:
    1.08 -> 0.69 ms).  A GEMM whose output does not fit L2 takes ``_large_output_params``, one
    deeper than the usual K block ``_deep_kc``'s.  ``by_rows``: the tile is chosen for ``m`` rows
    too (False for a symbolic M, whose packed B takes the tile of its columns alone, ``_tile``).

    A deep GEMM whose A (m x k) does not fit L2 packs A per block and runs the micro-tiles rows
    inner (GotoBLAS's order: the packed A block in L2, a B micro-panel reused by every row tile of
    it).  Read in place with columns inner, A went back to L3 for every block of nc columns,
    through mr strided streams: on Zen 3 (512 KB L2, one GEMM in ``tensorforge.compile`` against
    onnxruntime, 2 threads, medians of interleaved blocks) 128 x 3072 -> 768 ran 5.02 against 5.55
    ms (onnxruntime 5.29), 1024 x 3072 -> 768 39.9 against 47.7 (39.8), 1024 x 768 -> 3072 37.4
    against 40.0 (40.1); with A within L2 (128 x 768 -> 3072) both orders ran alike."""
    if m and k and m * n * 4 >= target.l2:
        params = _large_output_params(target, k, threads)
        if params is not None:
            return params
    mr, nr = _tile(target, n, m if by_rows else 0)
    kc = _deep_kc(target, k, mr)
    if kc:
        packed = m * k * 4 > target.l2
        return GemmParams.for_target(target, threads=threads, mr=mr, nr=nr, kc=kc, pack_a=packed,
                                     loop_order="jr_ir" if packed else "ir_jr")
    return GemmParams.for_target(target, threads=threads, mr=mr, nr=nr)


# The share of L1 a deep K block's A micro-panel (mr x kc, read in place or packed) may take.  Half of L1 cut
# K = 768 into two 384-deep blocks on a 32 KB L1 (Zen 3: a 6 x 768 panel is 18 KB), so every C
# tile was loaded and stored twice, from L3 where C outgrows L2.  One 768-deep block measured
# (Zen 3, one GEMM in tensorforge.compile, interleaved with onnxruntime, 2 threads, medians):
# 1024 x 768 -> 3072 40.1 against 46.6 ms (onnxruntime 40.6), 128 x 768 -> 3072 5.44 against
# 5.87 ms (onnxruntime 5.33), 1024 x 3072 -> 768 in four 768-deep blocks 44.6 against 45.4 ms in
# five 616-deep ones (1024-deep ones: 45.7); one thread, 128 x 768 -> 768 1.83 against 2.36 ms
# (minima).  A 48 KB L1 (Sapphire Rapids) keeps the blocks it had for K = 768 to 4096.
DEEP_KC_L1_SHARE = 5 / 8


def _deep_kc(target: Target, k: int, mr: int) -> int:
    """The K block of a GEMM deeper than the usual block (0 where K fits it): K in as few even
    blocks as keep an A micro-panel (mr x kc) within ``DEEP_KC_L1_SHARE`` of L1.  Every further K
    block reloads and stores the C tiles again, and packing A copies it once per B block: BERT's
    GEMMs at batch 1 (M = 128, K = 768 or 3072, outputs within L2) ran 1.08-1.16x faster with one
    block of K (or 1024-deep ones) and A in place than with 256-deep blocks and packed A, and
    1.12-1.18x with the 8 x 48 tile that splits 128 rows evenly (``_tile`` with the rows; measured
    one task at a time by the tuner's runner, 2 threads; the tuner had found these configs).
    Whether A is read in place or packed is ``_gemm_params``'s choice."""
    base = GemmParams.for_target(target).kc
    if not k or k <= base:
        return 0
    cap = max(base, _round_down(int(target.l1d * DEEP_KC_L1_SHARE) // (mr * 4), 8))
    blocks = -(-k // cap)
    per_block = -(-k // blocks)
    return min(cap, -(-per_block // 8) * 8)


def _large_output_params(target: Target, k: int, threads: int) -> GemmParams | None:
    """All of a moderate K in one block, for a GEMM whose output does not fit L2 (a language
    model's head: 128 x 50257 floats, 26 MB; a transformer's FFN: 128 x 3072, 1.5 MB): every
    further K block reads and writes the whole output once more, from L3 or memory.  The 6 x 64
    tile (its A micro-panel, 6 x K, within half of L1), B blocks of K x nc filling 3/4 of L2, A
    read in place (packing it per B block would copy it N / nc times) and blocks on demand.
    2 threads, one process: GPT-2's head (128 x 768 x 50257) 33.2 -> 25.3 ms (onnxruntime 27.9;
    K blocks of 256 and 512 with the usual blocks 29-36 ms), BERT's 768 -> 3072 1.57 -> 1.46 ms;
    whole models, outputs over L2 against over half of L3: BERT-base 1.070x and 1.045x, GPT-2
    small 1.078x, ResNet-50 b8 0.994x.  None where K already fits one usual block or the
    micro-panel would not fit."""
    base = GemmParams.for_target(target, threads=threads)
    if k <= base.kc or k * base.mr * 4 > target.l1d // 2:
        return None
    nc = max(base.nr, _round_down(target.l2 * 3 // 4 // (k * 4), base.nr))
    return GemmParams.for_target(target, threads=threads, kc=k, nc=nc, pack_a=False,
                                 schedule="dynamic" if threads > 1 else "static")


def _c(d: Dim) -> str:
    """A dim as C text: the number as before, or its runtime expression (parenthesised)."""
    return str(d) if isinstance(d, int) else f"({to_c(d)})"


def _cl(d: Dim) -> str:
    """A dim as a C ``long`` operand: ``123L`` for a number, the parenthesised expression otherwise."""
    return f"{d}L" if isinstance(d, int) else _c(d)


def _packed_b_floats(K: Dim, N: Dim, nr: int) -> Dim:
    """``packed_b_size`` over dims (an int when K and N are)."""
    if isinstance(K, int) and isinstance(N, int):
        return packed_b_size(K, N, nr)
    return dim_mul(dim_mul(dim_ceildiv(N, nr), K), nr)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _guarded(name: str, text: str) -> str:
    return f"#ifndef {name.upper()}_DEFINED\n#define {name.upper()}_DEFINED\n{text}\n#endif\n"


def _gemm_source(params: GemmParams, target: Target, trans_a: bool, trans_b: bool,
                 a_packed: bool = False, b_direct: bool = False, trans_c: bool = False) -> tuple[str, str]:
    """(function name, C text) of one generated GEMM with an epilogue callback: its prototypes
    (guarded) for the kernel, and its definition as a translation unit of its own."""
    spec = GemmSpec(trans_a=trans_a, trans_b=trans_b, callback=True, a_packed=a_packed, b_direct=b_direct,
                    trans_c=trans_c)
    probe = generate_gemm(params, target, spec, "TFG", prelude=False)
    name = f"tfg_{_digest(probe)}"
    body = gemm_prelude(target, threads=params.threads) + generate_gemm(params, target, spec, name, prelude=False)
    protos = "".join(f"TF_API void {fn}({', '.join(args)});\n" for fn, args in signatures(spec, name).items())
    return name, _guarded(name, protos) + unit(body)


def _prelude(target: Target) -> str:
    return _guarded("tf_gemm_prelude", '#define TF_API __attribute__((visibility("hidden")))\n'
                    + gemm_prelude(target, threads=2))


# ---------------------------------------------------------------------------------------------
# C fragments shared by both kernel kinds


def _signature(kernel: Operation, packed: set[int], dynamic: bool = False) -> str:
    params = []
    for i, v in enumerate(kernel.operands):
        ct = "float" if i in packed else c_type(v.type)
        params.append(f"const {ct}* restrict in{i}")
    for j, r in enumerate(kernel.results):
        params.append(f"{c_type(r.type)}* restrict out{j}")
    if dynamic:
        params.append("const int64_t* restrict tf_dims")
    return f"static void {KERNEL_NAME}({', '.join(params)})"


def _with_dims(text: str, kernel: Operation, packed: set[int], symbols: list[str]) -> str | None:
    """``text`` (a kernel written with the static signature) taking ``tf_dims`` last and declaring
    the ``tf_sym_<name>`` locals its body reads, at their positions in ``symbols``; None when the
    body reads a symbol the model does not declare (the caller falls back to the loop path)."""
    head = _signature(kernel, packed) + " {\n"
    at = text.index(head)
    body = text[at + len(head):]
    used = set(re.findall(r"\btf_sym_(\w+)", body))
    index = {c_identifier(s): k for k, s in enumerate(symbols)}
    if not used <= set(index):
        return None
    decls = "".join(f"  const int64_t tf_sym_{c} = tf_dims[{index[c]}];\n"
                    for c in sorted(used, key=index.__getitem__))
    return text[:at] + _signature(kernel, packed, True) + " {\n" + decls + body


def _batch_index(batch: list[VAxis], flat: str) -> tuple[list[str], dict]:
    """C declarations of one variable per batch axis from the flat batch index ``flat``."""
    lines, names, inner = [], {}, 1
    for pos in range(len(batch) - 1, -1, -1):
        ax = batch[pos]
        v = f"b{pos}"
        names[ax.key] = v
        lines.append(f"const long {v} = ({flat} / {_c(inner)}) % {_c(ax.extent)};")
        inner = dim_mul(inner, ax.extent)
    return lines, names


def _strided(base: str, strides: dict, names: dict) -> str:
    """``base`` advanced to the batch point ``names`` (batch axis key -> C variable) by ``strides``."""
    return f"{base} + ({' + '.join(f'{_c(strides[k])} * {v}' for k, v in names.items()) or '0'})"


def _offset(aff: Affine, names: dict, const: bool = True) -> str:
    terms = [f"{_c(aff.coeff(k))} * {v}" for k, v in names.items() if aff.coeff(k) != 0]
    if const and aff.const != 0:
        terms.insert(0, _c(aff.const))
    return " + ".join(terms) or "0"


def _epi_args(chain: EpilogueChain | None, names: dict, col0: str | None = None) -> list[str]:
    if chain is None:
        return []
    out = []
    for r in chain.reads:
        off = _offset(r.flat, names)
        if col0 is not None and r.cn:
            off += f" + {r.cn} * {col0}"
        out.append(f"in{r.arg} + ({off})")
    return out


def _epi_callback(chain: EpilogueChain, names: dict, col0: str | None = None,
                  registers: bool = False, whole_tile: bool = False) -> tuple[str, list[str], str]:
    """(guarded helper text, C declarations, the GEMM call's ``epi, epi_ctx`` arguments) of the
    fused epilogue; no helper and null arguments for an empty chain.  ``registers``: the caller
    passes them to a generated GEMM, which applies a chain of ``EpilogueChain.register_form`` to
    its accumulators (``TF_EPI_REGS``) instead of calling back on each stored tile, or to a direct
    convolution, which applies it while copying a tile out.  ``whole_tile``: the caller is a direct
    convolution, which runs a callback that reads nothing per column once on a whole tile
    (``TF_EPI_ROWS``)."""
    if not chain.computes:
        return "", [], "0, 0"
    regs = chain.regs_init(dict(enumerate(_epi_args(chain, names, col0)))) if registers else None
    if regs is not None:
        return "", [f"const tf_epi_regs ectx = {regs};"], "TF_EPI_REGS, &ectx"
    probe = chain.callback("EPI")
    name = f"tfe_{_digest(probe)}"
    text = _guarded(chain.ctx_type(), chain.ctx_typedef()) + _guarded(name, chain.callback(name))
    decl = f"const {chain.ctx_type()} ectx = {chain.ctx_init(_epi_args(chain, names, col0))};"
    if whole_tile and not any(r.cn for r in chain.reads):
        return text, [decl, f"const tf_epi_rows erows = {{ {name}, &ectx }};"], "TF_EPI_ROWS, &erows"
    return text, [decl], f"{name}, &ectx"


def _epi_pair(epi: str) -> tuple[str, str]:
    """The callback and its context of ``_epi_callback``'s ``epi, epi_ctx`` arguments, apart (for
    kernels that call the epilogue themselves): ("0", "0") for an empty chain."""
    fn, ctx = (part.strip() for part in epi.split(","))
    return fn, ctx


# ---------------------------------------------------------------------------------------------
# Plans


@dataclass
class KernelPlan:
    """How one kernel is tensorized; ``emit`` writes its C, ``pack`` its constant operands."""

    kind: str                                 # "gemm", or a convolution: "conv" (im2col), "fold", "direct", "winograd",
                                              # "depthwise" (depthwise.py)
    plan: GemmPlan | ConvPlan | depthwise.DepthwisePlan
    chain: EpilogueChain
    target: Target
    packed_args: set[int] = field(default_factory=set)
    # the auto-tuner's choice (tune/apply.py; DepthwiseParams for a depthwise layer); None: defaults
    params: "GemmParams | depthwise.DepthwiseParams | None" = None
    table: SymbolTable | None = None          # the model's symbols (hints); None: the current table
    # a "gemm" with a constant A computed as C^T = B^T @ A^T into a transposed C (GemmSpec.trans_c):
    # A^T is packed at compile time as the B panels, the activation B read in place as A^T
    transposed: bool = False

    @property
    def roles(self) -> Roles:
        return self.plan.roles

    def hint(self, d: Dim) -> int:
        """A number for ``d`` where a heuristic needs one (the symbol hints); ``d`` when static."""
        if isinstance(d, int):
            return d
        return hint_of(d, self.table) if self.table is not None else current_hint(d)

    def emit(self, kernel: Operation, symbols: list[str] | None = None) -> str | None:
        """The kernel's C: guarded helpers, then ``static void KERNEL_NAME(inputs..., outputs...)``;
        with ``symbols`` (the model's symbol order) the function takes ``tf_dims`` last.  None when
        the kernel reads a symbol that ``symbols`` lacks."""
        text = {"gemm": self._gemm, "conv": self._conv, "fold": self._fold, "direct": self._direct,
                "winograd": self._winograd, "winograd4": self._winograd,
                "depthwise": self._depthwise, "narrow": self._narrow}[self.kind](kernel)
        return _with_dims(text, kernel, self.packed_args, list(symbols)) if symbols else text

    @property
    def macs(self) -> int:
        """Multiply-adds at the hints (heuristics only)."""
        r = self.roles
        return self.hint(r.M) * self.hint(r.N) * self.hint(r.K) * self.hint(r.batch_count)

    @property
    def threads(self) -> int:
        """Threads for this contraction: the target's cores, or 1 when it is too small to share."""
        return self.target.cores if self.macs >= PARALLEL_MIN_MACS else 1

    # -- GEMM-like ----------------------------------------------------------------------------

    def _parallel_batch(self) -> bool:
        """The threads take the batch in even, contiguous shares of images (a GEMM: one
        single-threaded GEMM per batch point; other kernels: ``schedule(static)`` over their
        image-major work units) rather than splitting each image's work between them.

        Every kernel of a model splitting a batch this way, each core reads the images that it
        wrote itself in the kernel before.  Split inside each image, a layer's input arrived from
        the other core's cache: MobileNetV2 at batch 8 ran 1.75x slower (a 14x14 depthwise layer
        took twice as long on two threads as on one), even though each kernel alone scaled."""
        count, T = self.hint(self.roles.batch_count), self.threads
        return T > 1 and count >= T and (count % T == 0 or count >= 4 * T)

    def _units_schedule(self, group: int | None = None) -> str:
        """The OpenMP schedule of image-major work units: each thread one contiguous share, so that
        at batch 1 too a kernel's channels (or rows) go to the threads the same way in every layer
        (EfficientNet-B0 at batch 1: 1.03-1.15x over handing units out on demand, which also costs
        an atomic per unit); a tuned ``group`` (units at a time) hands them out on demand instead,
        which evens out a descheduled thread, except where each thread has its images."""
        return "static" if group is None or self._parallel_batch() else f"dynamic, {group}"

    def _packed_batch(self) -> tuple[list[VAxis], int]:
        """Batch axes the packed B depends on, and the floats of one packed slice."""
        p: GemmPlan = self.plan
        axes = [x for x in self.roles.batch if p.b.flat.coeff(x.key)]
        return axes, packed_b_size(self.roles.K, self.roles.N, self.nr)

    @property
    def nr(self) -> int:
        if self.transposed:
            return self.transposed_tile[1]
        return self.params.nr if self.params is not None else self._untuned_tile[1]

    @property
    def transposed_tile(self) -> tuple[int, int]:
        """(mr, nr) of a transposed GEMM: its rows are the output's N columns, its columns the M rows."""
        return _transposed_tile(self.target, self.hint(self.roles.N), self.hint(self.roles.M), gemm=True)

    @property
    def a_packed(self) -> bool:
        """A GEMM's A arrives packed into row panels at compile time (``Tensorizer._a_packable``)."""
        p = self.plan
        return self.kind == "gemm" and p.a.arg in self.packed_args and p.a.arg != p.b.arg and not self.transposed

    @property
    def mr(self) -> int:
        """The register tile's rows of every GEMM variant of this kernel (a packed A's panel height)."""
        return self.params.mr if self.params is not None else self._untuned_tile[0]

    @property
    def _untuned_tile(self) -> tuple[int, int]:
        """(mr, nr) the GEMM of this kernel takes untuned: ``_gemm_params``'s for a static GEMM
        (whose large-output form has its own tile), ``_tile``'s otherwise (what the threaded forms
        of a symbolic GEMM and the convolutions use)."""
        r = self.roles
        if self.kind == "gemm" and not r.symbolic:
            p = _gemm_params(self.target, self.hint(r.N), 1, self.hint(r.M), self.hint(r.K))
            return p.mr, p.nr
        return _tile(self.target, self.hint(r.N))

    def tuned(self, default: GemmParams) -> GemmParams:
        """The tuned params if any (never more threads than ``default``: this path may need one), else ``default``."""
        if self.params is None:
            return default
        return dataclasses.replace(self.params, threads=min(self.params.threads, default.threads))

    def _gemm(self, kernel: Operation) -> str:
        sig = _signature(kernel, self.packed_args)
        if not self.roles.symbolic or self.target.cores == 1:
            par = self._parallel_batch()
            gtext, etext, body = self._gemm_variant(par, 1 if par else self.threads)
            return f"{_prelude(self.target)}{gtext}{etext}\n{sig} {{\n{body}\n}}\n"
        T = self.target.cores
        forms = [(True, 1, None), (False, T, None), (False, 1, None)]
        gtexts, bodies = [], []
        for par, threads, params in forms:
            gtext, etext, body = self._gemm_variant(par, threads, params)
            gtexts += [gtext] if gtext not in gtexts else []
            bodies.append(body)
        return (f"{_prelude(self.target)}{''.join(gtexts)}{etext}\n{sig} {{\n"
                f"{self._gemm_dispatch(bodies)}\n}}\n")

    def _gemm_dispatch(self, bodies: list[str]) -> str:
        """Sizes known only per call: the choices ``threads`` and ``_parallel_batch`` make from
        numbers, made in C between the compiled forms (one GEMM per thread over the batch; every
        GEMM on all threads; everything on one thread), so small calls (a decode step, batch 1)
        do not pay for a parallel region that the hint's size wanted, nor large ones miss it."""
        r, T = self.roles, self.target.cores
        par, threaded, single = bodies
        return f"""  const long tf_mnk = {_c(r.M)} * {_c(r.N)} * {_c(r.K)}, tf_count = {_c(r.batch_count)};
  if (tf_mnk * tf_count >= {PARALLEL_MIN_MACS} && tf_count >= {T} && (tf_count % {T} == 0 || tf_count >= {4 * T})) {{
{par}
  }} else if (tf_mnk * tf_count >= {PARALLEL_MIN_MACS}) {{
{threaded}
  }} else {{
{single}
  }}"""

    def _gemm_variant(self, par: bool, threads: int, params: GemmParams | None = None) -> tuple[str, str, str]:
        """(GEMM unit text, epilogue helper text, C statements) of the batch loop: ``par`` runs one
        single-threaded GEMM per thread, else each GEMM uses ``threads`` (``params``: a given GEMM,
        else the default for ``threads`` at the hinted sizes, or the tuned one)."""
        if self.transposed:
            return self._transposed_variant(par, threads)
        p: GemmPlan = self.plan
        r = self.roles
        M, N, K = r.M, r.N, r.K
        if params is None:
            params = self.tuned(_gemm_params(self.target, self.hint(N), threads, self.hint(M), self.hint(K),
                                             by_rows=not r.symbolic))
        prepacked = p.b.arg in self.packed_args
        a_packed = self.a_packed
        a_trans, lda = (False, K) if a_packed else matrix_layout(p.a, M, K)
        spec_b = (False, 0) if prepacked else matrix_layout(p.b, K, N)
        # an activation B in row-major [K, N] used by few rows of A (a 1x1 convolution's input):
        # read in place, where packing it would cost a pass over B that few rows pay back
        b_direct = (not prepacked and not spec_b[0] and self.hint(M) <= B_DIRECT_MAX_M
                    and self.hint(K) <= B_DIRECT_MAX_K)
        gname, gtext = _gemm_source(params, self.target, a_trans, spec_b[0], a_packed, b_direct)
        decl, names = _batch_index(r.batch, "t")
        a_ptr = f"in{p.a.arg}" if a_packed else f"in{p.a.arg} + ({_offset(p.a.flat, names)})"
        c_ptr = f"out0 + ({_offset(p.c, names)})"
        etext, edecl, epi = _epi_callback(self.chain, names, registers=True)
        decl += edecl
        if prepacked:
            axes, size = self._packed_batch()
            offs, inner = [], size
            for ax in reversed(axes):
                offs.append(f"{inner} * {names[ax.key]}")
                inner *= ax.extent
            b_ptr = f"in{p.b.arg} + ({' + '.join(offs) or '0'})"
            call = (f"{gname}_prepacked({_c(M)}, {_c(N)}, {_c(K)}, {a_ptr}, {_c(lda)}, {b_ptr}, {c_ptr}, "
                    f"{_c(p.ldc)}, 0, {epi});")
            ws_alloc = ws_free = ""
        else:
            b_ptr = f"in{p.b.arg} + ({_offset(p.b.flat, names)})"
            call = (f"{gname}({_c(M)}, {_c(N)}, {_c(K)}, {a_ptr}, {_c(lda)}, {b_ptr}, {_c(spec_b[1])}, {c_ptr}, "
                    f"{_c(p.ldc)}, 0, {epi}, ws);")
            ws_alloc = f"float *ws = tf_alloc({_c(_packed_b_floats(K, N, params.nr))});"
            ws_free = "free(ws);"
        return gtext, etext, self._batch_loop(par, r.batch_count, decl + [call], ws_alloc, ws_free)

    def _transposed_variant(self, par: bool, threads: int) -> tuple[str, str, str]:
        """``_gemm_variant`` of a transposed GEMM: per batch point, C^T[N, M] = B^T @ A^T with the
        compile-time panels of A^T as its B, the activation B as its A (in place: no copy), and C
        written transposed, i.e. in the layer's own layout."""
        p: GemmPlan = self.plan
        r = self.roles
        M, N, K = r.M, r.N, r.K
        b_trans, ldb = matrix_layout(p.b, K, N)
        # B [K, N] row-major is (B^T)^T stored [K, N]: the new A given transposed
        gname, gtext = self._transposed_gemm(threads, not b_trans)
        decl, names = _batch_index(r.batch, "t")
        etext, edecl, epi = _epi_callback(self.chain, names)
        call = (f"{gname}_prepacked({_c(N)}, {_c(M)}, {_c(K)}, in{p.b.arg} + ({_offset(p.b.flat, names)}), "
                f"{_c(ldb)}, in{p.a.arg}, out0 + ({_offset(p.c, names)}), {_c(p.ldc)}, 0, {epi});")
        return gtext, etext, self._batch_loop(par, r.batch_count, decl + edecl + [call], "", "")

    def _transposed_gemm(self, threads: int, trans_a: bool) -> tuple[str, str]:
        """(name, text) of the GEMM a transposed plan calls: its tile, A read in place (``trans_a``:
        given as A^T), B prepacked, C written transposed with the epilogue called back."""
        mr, nr = self.transposed_tile
        params = GemmParams.for_target(self.target, threads=threads, mr=mr, nr=nr, pack_a=False)
        kc = _transposed_kc(self.target, self.hint(self.roles.K), nr)
        if kc > params.kc:      # the B block (kc x nc) then follows from the deeper K block
            params = GemmParams.for_target(self.target, threads=threads, mr=mr, nr=nr, pack_a=False, kc=kc)
        return _gemm_source(params, self.target, trans_a, False, trans_c=True)

    @staticmethod
    def _batch_loop(par: bool, count: Dim, statements: list[str], ws_alloc: str, ws_free: str) -> str:
        """The loop over the batch points running ``statements`` each: split between the threads
        (``par``: one single-threaded GEMM per thread) or in order, around a per-thread workspace."""
        inner_body = "\n      ".join(statements)
        if par:
            body = f"""  #pragma omp parallel
  {{
    {ws_alloc}
    #pragma omp for schedule(static)
    for (long t = 0; t < {_c(count)}; t++) {{
      {inner_body}
    }}
    {ws_free}
  }}"""
        else:
            body = f"""  {ws_alloc}
  for (long t = 0; t < {_c(count)}; t++) {{
      {inner_body}
  }}
  {ws_free}"""
        return body

    def describe(self) -> str:
        """How the kernel runs, for people (``explain``)."""
        text = (f"tensorized: {self.kind} micro-kernel, operands packed at compile time: "
                f"{sorted(self.packed_args) or 'none'}, fused epilogue computes: {len(self.chain.computes)}")
        if self.kind == "narrow":
            ob, nv = self.narrow_shape.tile(self.target.vector_width)
            return f"{text}\n{narrow_conv.MARKER}: register tile {ob} output channels x {nv} vectors of columns"
        if self.kind == "direct":
            params, shape = self.direct_params, self.direct_shape
            if self.transposed:
                return (f"{text}\ndirect convolution, transposed: register tiles of {params.mr} positions of an "
                        f"output row x {params.nr} output channels (in the vector lanes), "
                        f"{len(shape.phases)} padded phase plane(s) per channel")
            return (f"{text}\ndirect convolution: register tiles of {params.mr} output channels x {params.nr} "
                    f"columns of the padded grid ({shape.padded_w} per output row of {shape.out_w}), "
                    f"{len(shape.phases)} padded phase plane(s) per channel")
        if self.transposed:
            mr, nr = self.transposed_tile
            return (f"{text}\ncomputed transposed (C^T = B^T A^T, C stored transposed): the {self.hint(self.roles.N)} "
                    f"output columns tile as rows ({mr} per register tile), the {self.hint(self.roles.M)} rows "
                    f"fill {nr}-wide vector columns")
        if self.kind != "depthwise":
            return text
        p: depthwise.DepthwisePlan = self.plan
        s, vw = p.shape, self.target.vector_width
        text += (f"\ndepthwise direct kernel {s.kh}x{s.kw} stride {s.sh}x{s.sw} dilation {s.dh}x{s.dw} "
                 f"pad {s.ph}x{s.pw}: {p.channels} channel planes {s.h}x{s.w} -> {s.oh}x{s.ow}, ")
        if self.dw_lanes:
            return (f"{text}channels in the vector lanes ({vw} per group, planes staged lane-interleaved and zero "
                    f"padded), one work unit per image and channel group over {self._depthwise_threads()} "
                    f"thread(s), epilogue per group")
        va, vb = s.interior_vectors(vw)
        if depthwise.direct(p.strides, vw):
            rows = ("input rows read in place" + (" (two loads and a permute give a tap's even lanes and the next "
                                                  "tap's odd ones), " if s.sw > 1 else ", "))
        else:
            rows = f"input rows staged{' as ' + str(s.sw) + ' phase rows' if s.sw > 1 else ''}, "
        return (f"{text}vectorised along output width ({vw} floats; interior vectors [{va}, {vb}) of {s.nvec(vw)} "
                f"without bounds checks, border lanes skip out-of-range taps), {rows}"
                f"work units of {s.chunk_rows(vw, self.dw_params.chunk_outputs)} output rows per plane over "
                f"{self._depthwise_threads()} thread(s), epilogue per unit")

    def pack(self, arg: int, array: np.ndarray) -> np.ndarray:
        """The packed form of constant kernel input ``arg`` (``array``): [slices, panels, K, nr]
        (a direct convolution's weights: [panels, K, mr], ``direct_conv.pack_weights``)."""
        if self.kind == "depthwise":
            if self.dw_lanes:
                return depthwise.pack_lane_weights(array, self.plan, self.target.vector_width)
            return depthwise.pack_weights(array, self.plan)
        if self.kind == "direct":       # panels of mr output channels, or transposed nr
            params = self.direct_params
            width = params.nr if self.transposed else params.mr
            return direct_conv.pack_weights(array, self.roles.M, self.roles.K, width)
        if self.kind == "narrow":
            shape = self.narrow_shape
            return narrow_conv.pack_weights(array, shape, shape.tile(self.target.vector_width)[0])
        if self.kind in WINOGRAD_TILES:
            return winograd.transform_weights(array, self.roles.M, self.plan.channels, WINOGRAD_TILES[self.kind])
        if self.kind in ("conv", "fold"):
            r = self.roles
            if self.transposed:     # W^T [K, M] as the B panels of C^T = x_col^T @ W^T
                return pack_b(np.asarray(array, np.float32).reshape(r.M, r.K), self.nr, trans=True)
            return pack_a(np.asarray(array, np.float32).reshape(r.M, r.K), self.conv_tile[0])
        p: GemmPlan = self.plan
        r = self.roles
        flat = np.ascontiguousarray(array, dtype=np.float32).reshape(-1)
        if self.transposed:      # A^T [K, M] as the B panels of C^T = B^T @ A^T
            view = _matrix_view(flat, p.a.flat.const, _group_offsets(p.a.flat, r.k), _group_offsets(p.a.flat, r.m))
            out = np.empty((-(-r.M // self.nr), r.K, self.nr), np.float32)
            pack_b_into(out, view, self.nr)
            return out
        if arg == p.a.arg and self.a_packed:
            view = _matrix_view(flat, p.a.flat.const, _group_offsets(p.a.flat, r.m), _group_offsets(p.a.flat, r.k))
            return pack_a(view, self.mr)
        ko = _group_offsets(p.b.flat, r.k)
        no = _group_offsets(p.b.flat, r.n)
        axes, _ = self._packed_batch()
        extents = [x.extent for x in axes]
        out = np.empty((int(np.prod(extents)), -(-r.N // self.nr), r.K, self.nr), np.float32)
        for s, point in enumerate(np.ndindex(*extents)):
            off = p.b.flat.const + sum(p.b.flat.coeff(x.key) * i for x, i in zip(axes, point))
            pack_b_into(out[s], _matrix_view(flat, off, ko, no), self.nr)
        return out if out.size else np.zeros(0, np.float32)

    def pack_key(self, arg: int) -> str:
        """What decides ``pack``'s result besides the constant itself."""
        if self.kind == "depthwise":
            return repr(("depthwise", self.plan.w.shape, self.dw_lanes and self.target.vector_width))
        if self.kind == "direct" and self.transposed:
            return repr(("direct^T", self.direct_params.nr, self.roles.M, self.roles.K))
        if self.kind in ("direct", *WINOGRAD_TILES):
            return repr((self.kind, self.direct_params.mr, self.roles.M, self.roles.K))
        if self.kind == "narrow":
            return repr(("narrow", self.narrow_shape, self.target.vector_width))
        if self.kind in ("conv", "fold"):
            if self.transposed:
                return repr(("w^T", self.nr, self.roles.M, self.roles.K))
            return repr(("a", self.conv_tile[0], self.roles.M, self.roles.K))
        p: GemmPlan = self.plan
        r = self.roles
        if self.transposed:
            groups = [[(x.extent, p.a.flat.coeff(x.key)) for x in g] for g in (r.k, r.m)]
            return repr(("a^T", self.nr, p.a.flat.const, groups))
        if arg == p.a.arg and self.a_packed:
            groups = [[(x.extent, p.a.flat.coeff(x.key)) for x in g] for g in (r.m, r.k)]
            return repr(("a", self.mr, p.a.flat.const, groups))
        groups = [[(x.extent, p.b.flat.coeff(x.key)) for x in g] for g in (r.k, r.n, r.batch)]
        return repr((self.nr, p.b.flat.const, groups))

    # -- convolution -----------------------------------------------------------------------------

    @property
    def conv_tile(self) -> tuple[int, int]:
        """(mr, nr) of an im2col ("conv") or folded ("fold") convolution's GEMMs: the tuned tile, else
        the one wasting least for one image's positions (conv) or every image's (fold)."""
        if self.params is not None:
            return self.params.mr, self.params.nr
        r = self.roles
        columns = r.N * self.hint(r.batch_count) if self.kind == "fold" else r.N
        return _tile(self.target, columns, m=r.M)

    def _im2col_shape(self) -> Im2colShape:
        (ih, iw), (oh, ow), (kh, kw), (sh, sw), (dh, dw), (ph, pw) = _spatial(self.plan)
        return Im2colShape(self.plan.channels, ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw)

    def _conv(self, kernel: Operation) -> str:
        if self.transposed:
            return self._conv_transposed(kernel)
        p: ConvPlan = self.plan
        r = self.roles
        M, P, K = r.M, r.N, r.K
        T = self.threads
        mr, nr = self.conv_tile
        a_packed = p.w.arg in self.packed_args
        panels = -(-P // nr)
        shape = self._im2col_shape()
        decl, names = _batch_index(r.batch, "bt")
        x_ptr = _strided(f"in{p.x.arg}", p.x_batch_stride, names)
        w_ptr = _strided(f"in{p.w.arg}", p.w_batch_stride, names)
        c_ptr = f"out0 + ({_offset(p.c, names)})"
        count = r.batch_count
        chunked = T > 1 and panels >= 2 * T
        threads = 1 if chunked else T
        # W is read in place (row-major [O, K]): packing it again for every chunk (or, with few
        # output positions, for one pass over a large W) costs more than the strided reads.
        params = self.tuned(GemmParams.for_target(self.target, threads=threads, mr=mr, nr=nr, pack_a=False))
        gname, gtext = _gemm_source(params, self.target, False, False, a_packed)
        if chunked:
            cp = max(1, min(-(-panels // T), (self.target.l2 // 2) // (K * nr * 4)))
            chunks = -(-panels // cp)
            etext, edecl, epi = _epi_callback(self.chain, names, "col0", registers=True)
            lines = [f"const long ch = t % {chunks}, bt = t / {chunks};", *decl,
                     f"const long q0 = ch * {cp}, q1 = tf_min(q0 + {cp}, {panels});",
                     f"const long col0 = q0 * {nr}, ncols = tf_min(q1 * {nr}, {P}) - col0;", *edecl,
                     f"tf_im2col(&shape, {nr}, {x_ptr}, bp, q0, q1, 1, 0);",
                     f"{gname}_prepacked({M}, ncols, {K}, {w_ptr}, {K}, bp, {c_ptr} + col0, {p.ldc}, 0, {epi});"]
            inner = "\n      ".join(lines)
            body = f"""  #pragma omp parallel
  {{
    float *bp = tf_alloc({cp * K * nr});
    #pragma omp for schedule(static)
    for (long t = 0; t < {_c(dim_mul(count, chunks))}; t++) {{
      {inner}
    }}
    free(bp);
  }}"""
        else:
            etext, edecl, epi = _epi_callback(self.chain, names, registers=True)
            lines = [*decl, *edecl,
                     "#pragma omp parallel for schedule(static)" if panels > 1 and T > 1 else "",
                     f"for (long q = 0; q < {panels}; q++) tf_im2col(&shape, {nr}, {x_ptr}, bp + q * {K * nr}L, q, q + 1, 1, 0);",
                     f"{gname}_prepacked({M}, {P}, {K}, {w_ptr}, {K}, bp, {c_ptr}, {p.ldc}, 0, {epi});"]
            inner = "\n    ".join(x for x in lines if x)
            body = f"""  float *bp = tf_alloc({panels * K * nr});
  for (long bt = 0; bt < {_c(count)}; bt++) {{
    {inner}
  }}
  free(bp);"""
        return (f"{_prelude(self.target)}{IM2COL_C}{gtext}{etext}\n{_signature(kernel, self.packed_args)} {{\n"
                f"  static const tf_conv_shape shape = {shape.c_init()};\n{body}\n}}\n")

    @property
    def narrow_shape(self) -> narrow_conv.NarrowShape:
        p: ConvPlan = self.plan
        (ih, iw), (oh, ow), (kh, kw), (sh, sw), (dh, dw), (ph, pw) = _spatial(p)
        return narrow_conv.NarrowShape(p.channels, ih, iw, oh, ow, self.hint(self.roles.M), kh, kw, sh, sw, dh, dw, ph, pw)

    def _narrow(self, kernel: Operation) -> str:
        """A convolution over few input channels (a network's stem) on ``narrow_conv.py``'s direct
        kernel: no im2col, weights packed in output-channel blocks at compile time."""
        p: ConvPlan = self.plan
        r = self.roles
        decl, names = _batch_index(r.batch, "bt")
        etext, edecl, epi = _epi_callback(self.chain, names)
        body = narrow_conv.kernel_body(self.narrow_shape, self.target, self.threads, f"in{p.x.arg}", f"in{p.w.arg}",
                                       "out0", _c(r.batch_count), (*_epi_pair(epi), decl + edecl))
        return f"{_prelude(self.target)}{etext}\n{_signature(kernel, self.packed_args)} {{\n{body}\n}}\n"

    def _conv_transposed(self, kernel: Operation) -> str:
        """Per image: im2col into x_col [K, P] (the threads split the channels), then the transposed
        GEMM C^T[P, M] = x_col^T @ W^T with the compile-time panels of W^T, C written back in the
        layer's own layout (``_transposed_variant`` for the 1x1 case, which needs no im2col)."""
        p: ConvPlan = self.plan
        r = self.roles
        M, P, K = r.M, r.N, r.K
        T = self.threads
        gname, gtext = self._transposed_gemm(T, True)
        shape = self._im2col_shape()
        per_k = shape.k_h * shape.k_w
        plane = shape.in_h * shape.in_w
        decl, names = _batch_index(r.batch, "bt")
        x_ptr = _strided(f"in{p.x.arg}", p.x_batch_stride, names)
        etext, edecl, epi = _epi_callback(self.chain, names)
        parallel = "#pragma omp parallel for schedule(static)" if T > 1 else ""
        lines = [*decl, *edecl, "const float *xb = " + x_ptr + ";", parallel,
                 f"for (long t = 0; t < {T}; t++) {{",
                 f"  const long c0 = {shape.channels} * t / {T}, c1 = {shape.channels} * (t + 1) / {T};",
                 "  tf_conv_shape part = shape;",
                 "  part.channels = c1 - c0;",
                 f"  if (c1 > c0) tf_im2col(&part, {P}, xb + c0 * {plane}L, xc + c0 * {per_k * P}L, 0, 1, 1, 0);",
                 "}",
                 f"{gname}_prepacked({P}, {M}, {K}, xc, {P}, in{p.w.arg}, out0 + ({_offset(p.c, names)}), {p.ldc}, 0, {epi});"]
        inner = "\n    ".join(x for x in lines if x)
        body = f"""  float *xc = tf_alloc({K * P});
  for (long bt = 0; bt < {_c(r.batch_count)}; bt++) {{
    {inner}
  }}
  free(xc);"""
        return (f"{_prelude(self.target)}{IM2COL_C}{gtext}{etext}\n{_signature(kernel, self.packed_args)} {{\n"
                f"  static const tf_conv_shape shape = {shape.c_init()};\n{body}\n}}\n")

    # -- convolution with the batch folded into N ------------------------------------------------

    def _fold(self, kernel: Operation) -> str:
        """Every image's output positions as the columns of one GEMM (``tf_im2col`` with images):
        for layers with few positions the register tile's padding then falls on the last panel of
        the batch instead of every image, and a weight block is reused across images.  The GEMM
        writes a chunk of columns to a scratch tile; ``tf_fold_scatter`` copies each image's
        segment into place and runs the fused epilogue on it with that image's context.

        How the columns are split depends on the image count; with a symbolic batch the split is
        computed in C and both forms (one threaded GEMM over all panels, or single-threaded GEMMs
        over chunks handed out dynamically) are compiled, chosen per call as a static build would."""
        p: ConvPlan = self.plan
        r = self.roles
        M, P, K = r.M, r.N, r.K
        T = self.threads
        count = r.batch_count
        mr, nr = self.conv_tile
        a_packed = p.w.arg in self.packed_args
        shape = self._im2col_shape()
        cp_max = (self.target.l2 // 2) // (K * nr * 4)
        # A K so deep that one panel per chunk would stream all the weights for nr columns: pack all
        # panels first, then one GEMM (its threads split the rows; its blocking reuses a weight block).
        deep = K * nr * 4 > self.target.l2 // 2
        if isinstance(count, int):
            total = count * P
            panels = -(-total // nr)
            cp = max(1, min(-(-panels // (2 * T)), cp_max))
            chunks = -(-panels // cp)
            # too few chunks to keep every thread busy to the end: one GEMM over all panels too
            whole = (T > 1 and chunks < 4 * T) or deep
            if whole:
                cp, chunks = panels, 1
            z = {"count": str(count), "total": str(total), "panels": str(panels), "cp": str(cp),
                 "chunks": str(chunks), "ld": str(cp * nr), "bp": str(cp * K * nr), "ct": str(M * cp * nr),
                 "bp_all": str(panels * K * nr), "ct_all": str(M * panels * nr)}
            sizes, forms = "", ["whole" if whole else "chunks"]
        else:
            sizes = _fold_sizes_c(_c(count), P, nr, T, cp_max)
            z = {"count": _c(count), "total": "fd_total", "panels": "fd_panels", "cp": "fd_cp",
                 "chunks": "fd_chunks", "bp": f"fd_cp * {K * nr}", "ct": f"fd_cp * {M * nr}",
                 "bp_all": f"fd_panels * {K * nr}", "ct_all": f"fd_panels * {M * nr}"}
            forms = ["whole"] if deep else ["chunks"] if T == 1 else ["whole", "chunks"]
        out_stride = p.c.coeff(r.batch[0].key)
        etext, fn, setup, ctx0, ctx_size = self._image_epilogues(count)
        fctx = f"const tf_fold_ctx fctx = {{ out0, {out_stride}, {P}, {p.ldc}, col0, {fn}, {ctx0}, {ctx_size} }};"
        texts, bodies = [], {}
        for form in forms:
            whole = form == "whole"
            params = self.tuned(GemmParams.for_target(self.target, threads=T if whole else 1, mr=mr, nr=nr,
                                                      pack_a=False))
            gname, gtext = _gemm_source(params, self.target, False, False, a_packed)
            texts.append(gtext)
            ld = z["ld"] if "ld" in z else f"{'fd_panels' if whole else 'fd_cp'} * {nr}"
            call = f"{gname}_prepacked({M}, ncols, {K}, in{p.w.arg}, {K}, bp, ct, {ld}, 0, tf_fold_scatter, &fctx);"
            bodies[form] = (self._fold_whole if whole else self._fold_chunks)(z, nr, fctx, call)
        if len(forms) == 1:
            body = f"{setup}{sizes}{bodies[forms[0]]}"
        else:
            body = (f"{setup}{sizes}  if (fd_chunks < {4 * T}) {{\n{bodies['whole']}\n  }} else {{\n"
                    f"{bodies['chunks']}\n  }}")
        return (f"{_prelude(self.target)}{IM2COL_C}{FOLD_SCATTER_C}{''.join(texts)}{etext}\n"
                f"{_signature(kernel, self.packed_args)} {{\n"
                f"  static const tf_conv_shape shape = {shape.c_init()};\n{body}\n}}\n")

    def _fold_whole(self, z: dict, nr: int, fctx: str, call: str) -> str:
        """All panels packed first (threads split the panels), then one threaded GEMM."""
        p: ConvPlan = self.plan
        x_stride = p.x_batch_stride[self.roles.batch[0].key]
        pack = (f"tf_im2col(&shape, {nr}, in{p.x.arg}, bp + q * {self.roles.K * nr}L, q, q + 1, {z['count']}, "
                f"{x_stride});")
        return f"""  float *bp = tf_alloc({z["bp_all"]}), *ct = tf_alloc({z["ct_all"]});
  #pragma omp parallel for schedule(static)
  for (long q = 0; q < {z["panels"]}; q++) {pack}
  const long col0 = 0, ncols = {z["total"]};
  {fctx}
  {call}
  free(bp);
  free(ct);"""

    def _fold_chunks(self, z: dict, nr: int, fctx: str, call: str) -> str:
        """Chunks of panels handed out dynamically, each packed and multiplied on one thread."""
        p: ConvPlan = self.plan
        x_stride = p.x_batch_stride[self.roles.batch[0].key]
        return f"""  #pragma omp parallel{'' if self.threads > 1 else ' num_threads(1)'}
  {{
    float *bp = tf_alloc({z["bp"]});
    float *ct = tf_alloc({z["ct"]});
    #pragma omp for schedule(dynamic, 1)
    for (long ch = 0; ch < {z["chunks"]}; ch++) {{
      const long q0 = ch * {z["cp"]}, q1 = tf_min(q0 + {z["cp"]}, {z["panels"]});
      const long col0 = q0 * {nr}, ncols = tf_min(q1 * {nr}, {z["total"]}) - col0;
      {fctx}
      tf_im2col(&shape, {nr}, in{p.x.arg}, bp, q0, q1, {z["count"]}, {x_stride});
      {call}
    }}
    free(bp);
    free(ct);
  }}"""

    def _image_epilogues(self, count: int) -> tuple[str, str, str, str, str]:
        """The fused epilogue for code that finishes several images at once: (helper text, callback
        name or "0", C statements filling ``ctxs[count]`` (one context per image), the contexts'
        address, their size)."""
        decl, names = _batch_index(self.roles.batch, "bt")
        etext, edecl, epi = _epi_callback(self.chain, names)
        if not edecl:
            return etext, "0", "", "0", "0"
        ctx_type = self.chain.ctx_type()
        contexts = "\n    ".join([*decl, *edecl, "ctxs[bt] = ectx;"])
        n = _c(count)
        setup = f"  {ctx_type} ctxs[{n}];\n  for (long bt = 0; bt < {n}; bt++) {{\n    {contexts}\n  }}\n"
        return etext, epi.split(",")[0], setup, "ctxs", f"sizeof({ctx_type})"

    # -- Winograd F(2x2, 3x3) (winograd.py) -----------------------------------------------------

    def _winograd(self, kernel: Operation) -> str:
        p: ConvPlan = self.plan
        r = self.roles
        shape = _winograd_shape(p, WINOGRAD_TILES[self.kind])
        count = r.batch_count
        own = isinstance(count, int) and self._parallel_batch()      # each thread its own images
        cap = shape.rows_per_chunk(1 if own else self.hint(count)) * shape.tiles_w
        if self.params is not None:
            params = dataclasses.replace(self.params, threads=1)
        else:
            mr, nr = _tile(self.target, cap, m=r.M)
            params = GemmParams.for_target(self.target, threads=1, mr=mr, nr=nr, pack_a=False)
        gname, gtext = _gemm_source(params, self.target, False, False)
        x_image = p.x_batch_stride[r.batch[0].key] if r.batch else 0
        out_image = p.c.coeff(r.batch[0].key) if r.batch else 0
        etext, fn, setup, ctx0, ctx_size = self._image_epilogues(count)
        images = count if isinstance(count, int) else _c(count)
        body = winograd.kernel_body(shape, images, params.nr, gname, f"in{p.x.arg}", f"in{p.w.arg}", "out0",
                                    x_image, out_image, p.ldc, fn, ctx0, ctx_size, own)
        return (f"{_prelude(self.target)}{gtext}{etext}\n{_signature(kernel, self.packed_args)} {{\n"
                f"{setup}{body}\n}}\n")

    # -- depthwise convolution (depthwise.py) ---------------------------------------------------

    @property
    def dw_params(self) -> depthwise.DepthwiseParams:
        """A depthwise layer's tuned knobs (the defaults when untuned)."""
        return self.params if isinstance(self.params, depthwise.DepthwiseParams) else depthwise.DepthwiseParams()

    @property
    def dw_lanes(self) -> bool:
        """A depthwise layer of narrow planes runs with the channels in the vector lanes
        (``depthwise.lanes_source``), unless a tuning record asks for the row-vector kernel."""
        mode = self.dw_params.mode
        return (self.kind == "depthwise" and (depthwise.lanes_enabled() or mode == "lanes") and mode != "rows"
                and depthwise.lanes_shape(self.plan.shape, self.target.vector_width) is not None)

    def _depthwise_threads(self) -> int:
        if self.dw_lanes:
            moved = self.hint(self.roles.batch_count) * depthwise.lanes_elements(self.plan)
            return self.target.cores if moved >= depthwise.LANES_PARALLEL_MIN_ELEMENTS else 1
        return self.target.cores if self.macs >= depthwise.PARALLEL_MIN_MACS else 1

    def _depthwise(self, kernel: Operation) -> str:
        """Work units (image, channel, chunk of output rows) over the threads (``_unit_loop``); each stages its
        input rows, computes its rows of the plane (``depthwise.source``) and runs the fused
        epilogue on them.  The unit count follows the runtime batch; whether the units are shared
        by threads is decided in C from the layer's multiply-adds (``depthwise.PARALLEL_MIN_MACS``)."""
        if self.dw_lanes:
            return self._depthwise_lanes(kernel)
        p: depthwise.DepthwisePlan = self.plan
        r = self.roles
        s, vw = p.shape, self.target.vector_width
        name = depthwise.routine_name(p.kernel, p.strides, p.dilations, vw)
        helpers = depthwise.SHAPE_TYPEDEF + _guarded(name, depthwise.source(p.kernel, p.strides, p.dilations, vw, name))
        knobs = self.dw_params
        rows = s.chunk_rows(vw, knobs.chunk_outputs)
        chunks = -(-s.oh // rows)
        C, taps = p.channels, s.kh * s.kw
        count = r.batch_count
        units = _c(dim_mul(count, C * chunks))
        group = max(1, knobs.group_outputs // (rows * s.ow)) if knobs.group_outputs else None
        decl, names = _batch_index(r.batch, "bt")
        x_ptr = _strided(f"in{p.x.arg}", p.x_batch_stride, names)
        c_ptr = f"out0 + ({_offset(p.c, names)})"
        etext, edecl, epi = _epi_callback(self.chain, names)
        call_epi = (f"{epi.split(',')[0]}(&ectx, y + oh0 * {s.ow}L, {p.ldc}, c, oh0 * {s.ow}L, 1, "
                    f"(oh1 - oh0) * {s.ow}L);" if edecl else "")
        lines = [f"const long pl = u / {chunks}, ch = u - pl * {chunks};",
                 f"const long bt = pl / {C}, c = pl - bt * {C};", *decl,
                 f"const long oh0 = ch * {rows}, oh1 = tf_min(oh0 + {rows}, {s.oh});",
                 f"float *y = {c_ptr} + c * {p.ldc}L;",
                 f"{name}_chunk(&shape, {x_ptr} + c * {p.x_channel_stride}L, in{p.w.arg} + c * {taps}L, y, oh0, oh1, "
                 f"st, st + {s.stage_floats(vw, knobs.chunk_outputs)}L);",
                 *edecl, call_epi]
        body = self._unit_loop(lines, units, group, s.scratch_floats(vw, knobs.chunk_outputs),
                               dim_mul(count, C * s.oh * s.ow * taps), depthwise.PARALLEL_MIN_MACS)
        return (f"{_prelude(self.target)}{helpers}{etext}\n{_signature(kernel, self.packed_args)} {{\n"
                f"  /* depthwise direct kernel (depthwise.py) */\n"
                f"  static const {depthwise.SHAPE_TYPE} shape = {s.c_init(vw)};\n{body}\n}}\n")

    def _unit_loop(self, lines: list[str], units: str, group: int | None, scratch: int, work: Dim, parallel_min: int,
                   zeroed: bool = False) -> str:
        """Work units ``u`` < ``units`` over the threads (``_units_schedule``), each running
        ``lines`` with ``st``: a per-thread scratch of ``scratch`` floats (``zeroed``: cleared once);
        the threads share them when ``work`` (a C expression of the batch) reaches ``parallel_min``."""
        inner = "\n      ".join(x for x in lines if x)
        parallel = (f"#pragma omp parallel if ({_cl(work)} >= {parallel_min}L)"
                    if self.target.cores > 1 else "#pragma omp parallel num_threads(1)")
        clear = f"\n    memset(st, 0, sizeof(float) * {scratch});" if zeroed else ""
        return f"""  {parallel}
  {{
    float *st = tf_alloc({scratch});{clear}
    #pragma omp for schedule({self._units_schedule(group)})
    for (long u = 0; u < {units}; u++) {{
      {inner}
    }}
    free(st);
  }}"""

    def _depthwise_lanes(self, kernel: Operation) -> str:
        """Work units (image, group of vector-width channels) over the threads (``_unit_loop``); each stages its
        planes with the channels in the lanes, computes all their outputs
        (``depthwise.lanes_source``) and runs the fused epilogue on the group's planes."""
        p: depthwise.DepthwisePlan = self.plan
        r = self.roles
        s, vw = p.shape, self.target.vector_width
        name = depthwise.lanes_routine_name(s, vw)
        helpers = _guarded(name, depthwise.lanes_source(s, vw, name))
        C, taps = p.channels, s.kh * s.kw
        groups = -(-C // vw)
        count = r.batch_count
        decl, names = _batch_index(r.batch, "bt")
        x_ptr = _strided(f"in{p.x.arg}", p.x_batch_stride, names)
        c_ptr = f"out0 + ({_offset(p.c, names)})"
        etext, edecl, epi = _epi_callback(self.chain, names)
        call_epi = (f"{epi.split(',')[0]}(&ectx, y, {p.ldc}, c0, 0, nch, {s.oh * s.ow}L);" if edecl else "")
        lines = [f"const long bt = u / {groups}, g = u - bt * {groups}, c0 = g * {vw}, nch = tf_min({vw}, {C} - c0);",
                 *decl, f"float *y = {c_ptr} + c0 * {p.ldc}L;",
                 f"{name}_group({x_ptr} + c0 * {p.x_channel_stride}L, {p.x_channel_stride}L, in{p.w.arg} + g * {taps * vw}L, "
                 f"y, {p.ldc}L, nch, st);", *edecl, call_epi]
        body = self._unit_loop(lines, _c(dim_mul(count, groups)), None, depthwise.lanes_scratch_floats(s, vw),
                               dim_mul(count, depthwise.lanes_elements(p)), depthwise.LANES_PARALLEL_MIN_ELEMENTS,
                               zeroed=True)
        return (f"{_prelude(self.target)}{helpers}{etext}\n{_signature(kernel, self.packed_args)} {{\n"
                f"  /* depthwise direct kernel (depthwise.py), channels in the vector lanes */\n{body}\n}}\n")

    # -- direct convolution (direct_conv.py) ------------------------------------------

    @property
    def direct_shape(self) -> direct_conv.DirectShape:
        return _direct_shape(self.plan)

    @property
    def direct_params(self) -> GemmParams:
        """Register tile and unroll: the tuned ones, else the tile wasting fewest grid columns (or,
        transposed, fewest positions of an output row and output channels)."""
        if self.params is not None:
            return self.params
        if self.transposed:
            mr, nr = _transposed_tile(self.target, self.direct_shape.out_w, self.roles.M)
        else:
            mr, nr = _tile(self.target, self.direct_shape.grid_columns, m=self.roles.M)
        return GemmParams.for_target(self.target, threads=1, mr=mr, nr=nr)

    def _direct(self, kernel: Operation) -> str:
        """Padding pass (phase planes, ``direct_conv.py``), then work units (``_units_schedule``):
        images x column panels x row chunks, or, transposed, images x channel panels x output rows."""
        p: ConvPlan = self.plan
        r = self.roles
        shape = self.direct_shape
        params = self.direct_params
        mr, nr = params.mr, params.nr
        T = self.threads
        count, C = r.batch_count, shape.channels
        decl, names = _batch_index(r.batch, "bt")
        c_ptr = f"out0 + ({_offset(p.c, names)})"
        etext, edecl, epi = _epi_callback(self.chain, names, registers=True, whole_tile=not self.transposed)
        fn, ctx = _epi_pair(epi)
        # images for every thread: each pads one image at a time into its own buffer and runs that
        # image's units while the buffer is in L2 (padded all at once, MobileNetV2's stem at batch 8
        # wrote and then read back 4.9 MB)
        per_thread = isinstance(count, int) and self._parallel_batch()
        xp_image = "xp" if per_thread else f"xp + bt * {C * shape.plane}L"
        sizes = ""
        if self.transposed:
            name = direct_conv.transposed_routine_name(params, self.target, shape.taps)
            helpers = (GUARDED_SHAPE_TYPEDEF + _guarded(name, direct_conv.transposed_prototypes(name))
                       + unit(direct_conv.transposed_source(params, self.target, shape.taps, name)))
            # work units: a channel panel's rows in chunks, as few as keep 4 units per thread (a
            # panel's weights are read once per row, from L2 after the first)
            panels, oh = -(-r.M // nr), shape.out_h
            want = 4 * T // self.hint(count) if T > 1 else 1
            rows = -(-oh // max(1, min(oh, -(-want // panels))))
            chunks = -(-oh // rows)
            per_image = panels * chunks
            units = _c(dim_mul(count, per_image))
            unit_lines = [f"const long bt = u / {per_image}, rest = u - bt * {per_image};",
                          f"const long j = rest / {chunks}, oh0 = (rest - j * {chunks}) * {rows}, o0 = j * {nr};",
                          *decl, *edecl,
                          f"{name}_rows(&shape, toff, {shape.plane}L, in{p.w.arg} + j * {r.K * nr}L, {xp_image}, "
                          f"{c_ptr} + o0 * {p.ldc}L, tf_min({nr}, {r.M} - o0), {p.ldc}, oh0, tf_min(oh0 + {rows}, {oh}), "
                          f"o0, {fn}, {ctx});"]
        else:
            name = direct_conv.routine_name(params, self.target, shape.taps)
            helpers = (GUARDED_SHAPE_TYPEDEF + _guarded(name, direct_conv.prototypes(name))
                       + unit(direct_conv.source(params, self.target, shape.taps, name)))
            panels = shape.panels(nr)
            m_tiles = -(-r.M // mr)
            if isinstance(count, int) or T == 1:
                # several work units per thread (a static share stays even when panels do not split), rows split last
                chunks = 1 if T == 1 else max(1, min(m_tiles, -(-4 * T // (count * panels))))
                m_step = -(-m_tiles // chunks) * mr
                chunks = -(-r.M // m_step)
                units, per_image = _c(dim_mul(count, panels * chunks)), panels * chunks
            else:       # the same choice for the runtime image count
                sizes = _direct_chunks_c(_c(count), T, m_tiles, panels, mr, r.M)
                chunks, m_step = "chunks", "m_step"
                per_image, units = f"({panels} * chunks)", f"{_c(count)} * {panels} * chunks"
            unit_lines = [f"const long bt = u / {per_image}, rest = u - bt * {per_image};",
                          f"const long q = rest / {chunks}, m0 = (rest - q * {chunks}) * {m_step};",
                          *decl, *edecl,
                          f"{name}_unit(&shape, toff, {shape.plane}L, in{p.w.arg}, {xp_image}, "
                          f"{c_ptr}, {r.M}, {p.ldc}, q, m0, tf_min(m0 + {m_step}, {r.M}), {fn}, {ctx});"]
        x_ptr = _strided(f"in{p.x.arg}", p.x_batch_stride, names)
        pads = [f"{name}_pad(&shape, {ph}, {pq}, {x_ptr} + c * {shape.in_h * shape.in_w}L, xp + t * {shape.plane}L"
                f"{f' + {i * shape.phase_plane}L' if i else ''});"
                for i, (ph, pq) in enumerate(shape.phases)]
        pad_body = "\n      ".join([f"const long bt = t / {C}, c = t - bt * {C};", *decl, *pads])
        unit_body = "\n      ".join(unit_lines)
        par = "#pragma omp parallel" + ("" if T > 1 else " num_threads(1)")
        images = dim_mul(count, C * shape.plane)
        slack = max(mr, nr)         # a last tile's reads past the final plane
        padded = _c(shape.padded_floats(count, slack)) if isinstance(count, int) else f"{_c(images)} + {slack}"
        if per_thread:
            pads_image = "\n        ".join(line.replace("xp + t * ", "xp + c * ") for line in pads)
            unit_body_image = "\n        ".join(unit_lines)
            return (f"{_prelude(self.target)}{helpers}{etext}\n{_signature(kernel, self.packed_args)} {{\n"
                    f"  static const tf_conv_shape shape = {shape.c_init()};\n"
                    f"  static const long toff[{shape.taps}] = {{ {', '.join(map(str, shape.tap_offsets()))} }};\n"
                    f"""  {par}
  {{
    float *xp = tf_alloc({shape.padded_floats(1, slack)});
    memset(xp + {C * shape.plane}L, 0, sizeof(float) * {slack});
    #pragma omp for schedule(static)
    for (long im = 0; im < {count}; im++) {{
      for (long c = 0; c < {C}; c++) {{
        const long bt = im;
        {" ".join(decl)}
        {pads_image}
      }}
      for (long u = im * {per_image}; u < (im + 1) * {per_image}; u++) {{
        {unit_body_image}
      }}
    }}
    free(xp);
  }}
}}
""")
        body = f"""{sizes}  float *xp = tf_alloc({padded});
  memset(xp + {_cl(images)}, 0, sizeof(float) * {slack});
  {par}
  {{
    #pragma omp for schedule(static)
    for (long t = 0; t < {_c(dim_mul(count, C))}; t++) {{
      {pad_body}
    }}
    #pragma omp for schedule({self._units_schedule()})
    for (long u = 0; u < {units}; u++) {{
      {unit_body}
    }}
  }}
  free(xp);"""
        return (f"{_prelude(self.target)}{helpers}{etext}\n{_signature(kernel, self.packed_args)} {{\n"
                f"  static const tf_conv_shape shape = {shape.c_init()};\n"
                f"  static const long toff[{shape.taps}] = {{ {', '.join(map(str, shape.tap_offsets()))} }};\n"
                f"{body}\n}}\n")


def _fold_sizes_c(count: str, positions: int, nr: int, threads: int, cp_max: int) -> str:
    """C declarations of the folded GEMM's columns, panels, panels per chunk and chunks for
    ``count`` images known at run time: ``_fold``'s static formulas, evaluated in C."""
    return (f"  const long fd_total = {count} * {positions}L, fd_panels = (fd_total + {nr - 1}) / {nr};\n"
            f"  const long fd_cp0 = (fd_panels + {2 * threads - 1}) / {2 * threads}, "
            f"fd_cpm = fd_cp0 < {cp_max} ? fd_cp0 : {cp_max}, fd_cp = fd_cpm < 1 ? 1 : fd_cpm;\n"
            f"  const long fd_chunks = (fd_panels + fd_cp - 1) / fd_cp;\n")


def _direct_chunks_c(count: str, threads: int, m_tiles: int, panels: int, mr: int, rows: int) -> str:
    """C declarations of ``chunks`` and ``m_step`` (row chunks per image x panel and their height)
    for ``count`` images known at run time: ``_direct``'s static formula, evaluated in C."""
    return (f"  const long want = ({4 * threads} + {count} * {panels} - 1) / ({count} * {panels});\n"
            f"  const long chunks0 = want < 1 ? 1 : want > {m_tiles} ? {m_tiles} : want;\n"
            f"  const long m_step = (({m_tiles} + chunks0 - 1) / chunks0) * {mr};\n"
            f"  const long chunks = ({rows} + m_step - 1) / m_step;\n")


def _spatial(p: ConvPlan) -> tuple[tuple[int, int], ...]:
    """(input, output, kernel, strides, dilations, leading pads) as 2-d pairs (a 1-d convolution
    is a 2-d one of height 1)."""
    if len(p.in_spatial) == 2:
        return p.in_spatial, p.out_spatial, p.kernel, p.strides, p.dilations, p.pads
    return ((1, p.in_spatial[0]), (1, p.out_spatial[0]), (1, p.kernel[0]), (1, p.strides[0]),
            (1, p.dilations[0]), (0, p.pads[0]))


def _winograd_shape(p: ConvPlan, m: int = 2) -> winograd.WinogradShape:
    (ih, iw), (oh, ow), _, _, _, (ph, pw) = _spatial(p)
    return winograd.WinogradShape(p.channels, p.roles.M, ih, iw, oh, ow, ph, pw, m)


def _direct_shape(p: ConvPlan) -> direct_conv.DirectShape:
    (ih, iw), (oh, ow), (kh, kw), (sh, sw), (dh, dw), (ph, pw) = _spatial(p)
    return direct_conv.DirectShape(p.channels, ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw)


def _column_waste(target: Target, rows: int, columns: int) -> float:
    """Share of the computed columns the default register tile pads for a rows x columns output."""
    if columns <= 0:
        return 0.0                      # an empty output computes no columns, wastes none
    nr = _tile(target, columns, m=rows)[1]
    return 1.0 - columns / (-(-columns // nr) * nr)


def _group_offsets(aff: Affine, group: list[VAxis]) -> np.ndarray:
    """Element offsets of every point of ``group`` (row-major) under ``aff``."""
    idx = np.zeros(1, dtype=np.int64)
    for ax in group:
        idx = (idx[:, None] + aff.coeff(ax.key) * np.arange(ax.extent, dtype=np.int64)[None, :]).reshape(-1)
    return idx


def _matrix_view(flat: np.ndarray, off: int, ko: np.ndarray, no: np.ndarray) -> np.ndarray:
    """``flat[off + ko[:, None] + no[None, :]]``: a strided view when both offset lists are
    arithmetic progressions (the usual weight layouts), which is ~10x faster than the gather on
    the 100-MB weights of a large linear layer."""
    def step(o: np.ndarray) -> int | None:
        if len(o) < 2:
            return 0
        d = int(o[1] - o[0])
        return d if d >= 0 and np.array_equal(o, o[0] + d * np.arange(len(o))) else None

    dk, dn = step(ko), step(no)
    if dk is None or dn is None or not len(ko) or not len(no):
        return flat[off + ko[:, None] + no[None, :]]
    start = off + int(ko[0]) + int(no[0])
    return np.lib.stride_tricks.as_strided(flat[start:], (len(ko), len(no)), (dk * 4, dn * 4), writeable=False)


def _constant_args(kernel: Operation) -> set[int]:
    return {i for i, v in enumerate(kernel.operands) if v.op is not None and v.op.name == "graph.constant"}


class Tensorizer:
    """Decides which kernels run on GEMM micro-kernels for ``target`` and writes their C."""

    def __init__(self, target: Target | None = None,
                 params_for: Callable[[Operation], GemmParams | None] | None = None,
                 fusion_for: Callable[[Operation, Operation], int | None] | None = None):
        self.target = target or Target.host()
        self.params_for = params_for    # per-kernel tuned GemmParams (the auto-tuner's hook), or None
        self.fusion_for = fusion_for    # a fused pair's tuned band rows (dw_pw, pw_dw), or None

    def plan(self, kernel: Operation, constant_args: set[int] = frozenset(),
             table: SymbolTable | None = None) -> KernelPlan | None:
        """The tensorized form of ``kernel``, or None when it stays on the loop path.  ``table``
        gives the hints of symbolic sizes (default: the current table, ``symbolic.hints_from``)."""
        if table is None:
            return self._plan(kernel, constant_args, None)
        with hints_from(table):         # the analysis orders symbolic strides by these hints too
            return self._plan(kernel, constant_args, table)

    def _plan(self, kernel: Operation, constant_args: set[int], table: SymbolTable | None) -> KernelPlan | None:
        hint = (lambda d: hint_of(d, table)) if table is not None else current_hint
        body = kernel.regions[0].blocks[0]
        computes = [o for o in body if o.name == "structured.compute"]
        if not computes or len(kernel.results) != 1:
            return None
        c = match_contraction(computes[0], body.args)
        if c is None:
            return None
        chain = match_chain(computes[0], kernel, c.space)
        if chain is None:
            return None
        if depthwise.enabled():
            dw = depthwise.plan_depthwise(c, constant_args)
            if dw is not None and self._worth_depthwise(dw.roles, hint) and chain.bind(dw.roles):
                tuned = self._tuned(kernel)
                knobs = tuned if isinstance(tuned, depthwise.DepthwiseParams) else None
                return KernelPlan("depthwise", dw, chain, self.target, {dw.w.arg}, knobs, table)
        gemm = plan_gemm(c, constant_args)
        if gemm is not None and self._worth(gemm.roles, hint) and self._layouts_ok(gemm, constant_args):
            if chain.bind(gemm.roles):
                packed = {gemm.b.arg} if gemm.b.arg in constant_args and gemm.b.arg != gemm.a.arg else set()
                if not packed and self._a_packable(gemm, constant_args):
                    packed = {gemm.a.arg}
                tuned = self._tuned_gemm(kernel)
                transposed = (tuned is None and packed == {gemm.a.arg} and self._transposable(gemm.roles, hint)
                              and matrix_layout(gemm.b, gemm.roles.K, gemm.roles.N) is not None)
                return KernelPlan("gemm", gemm, chain, self.target, packed, tuned, table, transposed)
        conv = plan_conv(c)
        if (conv is not None and _static_but_batch(conv) and self._worth_conv(conv, hint)
                and chain.bind(conv.roles)):
            tuned = self._tuned_gemm(kernel)
            if tuned is None and self._narrow_ok(conv, constant_args):
                return KernelPlan("narrow", conv, chain, self.target, {conv.w.arg}, None, table)
            kind = self._conv_algorithm(conv, constant_args, tuned.conv_algorithm if tuned else "", hint)
            # every algorithm reads constant weights from a compile-time packing (direct and
            # Winograd apply only to such weights)
            packed = {conv.w.arg} if self._weights_packable(conv, constant_args) else set()
            if kind == DIRECT_TRANSPOSED:
                return KernelPlan("direct", conv, chain, self.target, packed, tuned, table, True)
            # im2col into the columns of a transposed GEMM, where that pads less than the usual one
            # (the direct kernel stays: ResNet-18's 3x3 layers at 7x7 measured 1.15x slower transposed)
            transposed = (tuned is None and kind == "conv" and bool(packed)
                          and self._transposable(conv.roles, hint) and conv.roles.N <= TRANSPOSED_MAX_POSITIONS)
            return KernelPlan(kind, conv, chain, self.target, packed, tuned, table, transposed)
        return None

    def conv_algorithms(self, p: ConvPlan, constant_args: set[int]) -> list[str]:
        """The ``GemmParams.conv_algorithm`` values that apply to convolution ``p`` (what a tuner may try)."""
        return (["im2col"] + (["fold"] if self._fold_ok(p, current_hint) else [])
                + (["direct", DIRECT_TRANSPOSED] if self._direct_ok(p, constant_args) else [])
                + (list(WINOGRAD_TILES) if self._winograd_ok(p, constant_args) else []))

    def _conv_algorithm(self, p: ConvPlan, constant_args: set[int], asked: str = "",
                        hint: Callable[[Dim], int] = current_hint) -> str:
        """"winograd4", "winograd", "direct", "direct_t", "fold" or "conv" (im2col per image):
        ``asked`` (a tuned choice) when it applies; else Winograd for 3x3 stride-1 layers with enough
        output tiles to feed its GEMMs, F(4x4) before F(2x2) (4x and 2.25x fewer multiply-adds;
        slower at 7x7 with one image: 16 tiles cannot hide the transformed weights' traffic); else
        the one whose register tiles waste fewest columns, direct preferred (it copies 1x the input
        where im2col copies kh*kw x) unless it wastes 5 points more; one image takes the direct
        kernel transposed where the usual one wastes ``DIRECT_TRANSPOSED_MARGIN`` more, or where a
        strided window is deep (``STRIDED_TRANSPOSED_MIN_DEPTH``) and it wastes no less.

        One image used to keep F(2x2) where F(4x4)'s transforms of one image exceed L2, and the
        transposed direct kernel where the weights fill a quarter of L2 (Winograd's transformed
        weights come from memory inside a model).  Both rules were measured against the Winograd
        kernels as they are now, whole models in one process, paired (2026-12-06): dropping them ran
        ResNet-18 at batch 1 1.22x (2 threads) and 1.24x (1 thread), ResNet-50 1.065x and 1.09x;
        the tuner's records had F(4x4) 1.85-2.1x on those layers alone."""
        direct, fold = self._direct_ok(p, constant_args), self._fold_ok(p, hint)
        wino = self._winograd_ok(p, constant_args)
        if asked in ("direct", DIRECT_TRANSPOSED) and direct or asked == "fold" and fold or asked in WINOGRAD_TILES and wino:
            return asked
        if asked == "im2col":
            return "conv"
        r = p.roles
        count = hint(r.batch_count)
        if wino:
            large = _winograd_shape(p, 4)
            if large.tiles_h * large.tiles_w * count >= WINOGRAD4_MIN_TILES and large.computed_share() <= WINOGRAD4_MAX_SHARE:
                return "winograd4"
            shape = _winograd_shape(p)
            if shape.tiles_h * shape.tiles_w * count >= WINOGRAD_MIN_TILES:
                return "winograd"
        per_image = _column_waste(self.target, r.M, r.N)
        folded = _column_waste(self.target, r.M, r.N * count) if fold else per_image
        if direct and not self._strided_direct_ok(p, hint):
            if (count == 1 and any(k > 1 for k in p.kernel) and self._strided_transposed(p, hint)
                    and self._direct_transposed_ok(p)):
                return DIRECT_TRANSPOSED     # a strided window over few outputs (see STRIDED_DIRECT_MIN_DEPTH)
            direct = False
        if direct:
            shape = _direct_shape(p)
            waste = shape.waste(_tile(self.target, shape.grid_columns, m=r.M)[1])
            t_waste = self._direct_transposed_waste(p)
            if count == 1 and (waste - t_waste >= DIRECT_TRANSPOSED_MARGIN
                               or self._deep_strided_window(p, hint) and t_waste <= waste):
                return DIRECT_TRANSPOSED
            if waste <= folded + 0.05:
                return "direct"
        return "fold" if folded < per_image else ("direct" if direct else "conv")

    def _direct_transposed_tile(self, p: ConvPlan) -> tuple[int, int]:
        """(mr, nr) of the transposed direct kernel of ``p`` untuned."""
        return _transposed_tile(self.target, p.out_spatial[-1], p.roles.M)

    def _direct_transposed_ok(self, p: ConvPlan) -> bool:
        """Whether the transposed direct kernel may be chosen untuned: as for the transposed GEMM
        (``_transposable``), its tile must hold more than one vector of output channels (with one,
        each k's FMAs wait on mr broadcasts: 14 x 8, the only transposed tile 16 registers hold,
        ran 3x3 and 3x3/2 layers with 7x7 to 28x28 outputs 1.1-2x slower than the direct kernel's
        6 x 16 on Zen 3, one thread, a 5x5 layer at 14x14 level)."""
        return self._direct_transposed_tile(p)[1] > self.target.vector_width

    def _direct_transposed_waste(self, p: ConvPlan) -> float:
        """Share of the transposed direct kernel's tile work that is padding (positions of an
        output row past a multiple of mr, channels past a multiple of nr); 1 where it is not used
        by default (``_direct_transposed_ok``) or off (``TENSORFORGE_DIRECT_T=0``, comparisons)."""
        if not (_direct_t_on() and self._direct_transposed_ok(p)):
            return 1.0
        ow, rows = p.out_spatial[-1], p.roles.M
        mr, nr = self._direct_transposed_tile(p)
        return 1.0 - ow * rows / (-(-ow // mr) * mr * -(-rows // nr) * nr)

    @staticmethod
    def _deep_strided_window(p: ConvPlan, hint: Callable[[Dim], int]) -> bool:
        """A strided window wider than 1x1 over at least ``STRIDED_TRANSPOSED_MIN_DEPTH`` of K."""
        return (any(s > 1 for s in p.strides) and any(k > 1 for k in p.kernel)
                and hint(p.roles.K) >= STRIDED_TRANSPOSED_MIN_DEPTH)

    def _strided_direct_ok(self, p: ConvPlan, hint: Callable[[Dim], int]) -> bool:
        """A strided layer's default use of the direct kernel (the tuner may try it anywhere):
        deep enough K (``STRIDED_DIRECT_MIN_DEPTH``), and not a layer whose im2col GEMM runs
        transposed (14x14 and 7x7 outputs: the transposed GEMM measured 1.2-1.45x faster there;
        its windows wider than 1x1 take the transposed direct kernel instead, for one image)."""
        if all(s == 1 for s in p.strides):
            return True
        return hint(p.roles.K) >= STRIDED_DIRECT_MIN_DEPTH and not self._strided_transposed(p, hint)

    def _strided_transposed(self, p: ConvPlan, hint: Callable[[Dim], int]) -> bool:
        """A strided layer whose im2col GEMM would run transposed (few output positions)."""
        r = p.roles
        return self._transposable(r, hint) and r.N <= TRANSPOSED_MAX_POSITIONS and not self._fold_ok(p, hint)

    @classmethod
    def _winograd_ok(cls, p: ConvPlan, constant_args: set[int]) -> bool:
        """F(2x2, 3x3): where the direct kernel applies (stride 1, constant weights, no groups), for
        2-d 3x3 undilated convolutions with at most the image axis as batch."""
        return (cls._direct_ok(p, constant_args) and len(p.in_spatial) == 2 and len(p.roles.batch) <= 1
                and winograd.eligible(p.kernel, p.strides, p.dilations))

    @staticmethod
    def _fold_ok(p: ConvPlan, hint: Callable[[Dim], int] = current_hint) -> bool:
        """Folding needs one batch axis (the images) that the weights do not depend on."""
        r = p.roles
        return len(r.batch) == 1 and hint(r.batch_count) > 1 and not any(p.w_batch_stride.values())

    def _tuned(self, kernel: Operation) -> "GemmParams | depthwise.DepthwiseParams | None":
        return self.params_for(kernel) if self.params_for is not None else None

    def _tuned_gemm(self, kernel: Operation) -> GemmParams | None:
        tuned = self._tuned(kernel)
        return tuned if isinstance(tuned, GemmParams) else None

    @staticmethod
    def _direct_ok(p: ConvPlan, constant_args: set[int]) -> bool:
        """Direct convolution for layers with constant weights shared by every batch point (no
        groups); the weights are then packed at compile time.  Strided layers go through the
        polyphase split (``direct_conv.py``); ``TENSORFORGE_STRIDED_DIRECT=0`` keeps them on im2col
        (comparisons)."""
        strided = any(s != 1 for s in p.strides)
        if strided and os.environ.get("TENSORFORGE_STRIDED_DIRECT", "1") == "0":
            return False
        return Tensorizer._weights_packable(p, constant_args) and direct_conv.eligible(p.strides, p.pads)

    @classmethod
    def _narrow_ok(cls, p: ConvPlan, constant_args: set[int]) -> bool:
        """``narrow_conv.py`` takes 2-d convolutions over at most ``narrow_conv.MAX_CHANNELS`` input
        channels and ``narrow_conv.MAX_OUT_WIDTH`` output columns (no groups, constant weights)
        whose images are plain NCHW blocks in and out."""
        r = p.roles
        if (len(p.in_spatial) != 2 or p.channels > narrow_conv.MAX_CHANNELS or len(r.batch) != 1
                or not cls._weights_packable(p, constant_args) or os.environ.get("TENSORFORGE_NARROW_CONV", "1") == "0"):
            return False
        (ih, iw), (oh, ow) = p.in_spatial, p.out_spatial
        if ow > narrow_conv.MAX_OUT_WIDTH:
            return False
        key = r.batch[0].key
        return (p.x_batch_stride.get(key) == p.channels * ih * iw
                and p.c.const == 0 and p.c.coeff(key) == r.M * oh * ow and p.ldc == oh * ow)

    @staticmethod
    def _weights_packable(p: ConvPlan, constant_args: set[int]) -> bool:
        """Constant weights shared by every batch point (no groups) are packed at compile time: row
        panels (``pack_a``) for im2col and folded convolutions, the direct kernel's panels, or
        Winograd's transformed filters."""
        return (p.w.arg in constant_args and p.w.arg != p.x.arg and p.w.flat().const == 0
                and not any(p.w_batch_stride.values()))

    @staticmethod
    def _worth_depthwise(r: Roles, hint: Callable[[Dim], int] = current_hint) -> bool:
        """Tiny depthwise layers stay on the loop path (it is as fast and compiles faster)."""
        return hint(r.M) * hint(r.N) * hint(r.K) * hint(r.batch_count) >= MIN_FLOPS

    @classmethod
    def _worth_conv(cls, p: ConvPlan, hint: Callable[[Dim], int] = current_hint) -> bool:
        """A convolution whose images can be folded into N counts the columns of all of them: a
        batch of tiny late-stage maps (2x2 positions each) fills a register tile together."""
        return cls._worth(p.roles, hint, folded=cls._fold_ok(p, hint))

    @staticmethod
    def _worth(r: Roles, hint: Callable[[Dim], int] = current_hint, folded: bool = False) -> bool:
        """Big enough to pay for the packing (symbolic sizes at their hints: any size runs correctly
        either way, this only picks the faster path for the sizes the model expects); ``folded``:
        the batch points' columns count together."""
        M, N, K, count = hint(r.M), hint(r.N), hint(r.K), hint(r.batch_count)
        columns = N * count if folded else N
        return columns >= MIN_N and M >= MIN_M and K >= MIN_K and M * N * K * count >= MIN_FLOPS

    @staticmethod
    def _a_packable(p: GemmPlan, constant_args: set[int]) -> bool:
        """A constant A shared by every batch point (a 1x1 convolution's weights, M = output
        channels) is packed into row panels at compile time, so no call copies it again; an A
        that varies over the batch axes stays on the per-block copy."""
        r = p.roles
        return (p.a.arg in constant_args and p.a.arg != p.b.arg and not any(p.a.flat.coeff(x.key) for x in r.batch)
                and all(isinstance(d, int) for d in (r.M, r.K)))

    def _transposable(self, r: Roles, hint: Callable[[Dim], int] = current_hint) -> bool:
        """A contraction with compile-time packed weights as A (a convolution: M output channels, N
        positions) is computed transposed when its static N has at least ``TRANSPOSED_MIN_COLUMNS``
        columns and the transposed register tile pads the M rows ``TRANSPOSED_MARGIN`` less than the
        usual one pads its rows and columns (benchmarks/pointwise_layers.py: 1.2-2.4x on MobileNetV2's 7x7 and 14x14 1x1
        layers, whose 49 and 196 positions pad 64-wide tiles; 0.75-0.8x at 56x56 with 24 output
        channels, which pad it).  Where neither pads (28x28 and 56x56 positions), ResNet-50's 1x1
        layers measured 0.84-1.5x transposed, run to run, so they stay as they are.  Convolutions
        that fold a batch's images into one GEMM stay folded (at batch 8 transposed measured 0.9x on
        a 3x3 stride-2 layer at 28x28, 0.7x on a 5x5 at 7x7).  ``TENSORFORGE_TRANSPOSED_GEMM=0``
        turns it off (comparisons)."""
        if (os.environ.get("TENSORFORGE_TRANSPOSED_GEMM", "1") == "0" or not isinstance(r.N, int)
                or r.N < TRANSPOSED_MIN_COLUMNS):
            return False
        M = hint(r.M)
        nr = _transposed_tile(self.target, r.N, M, gemm=True)[1]
        if nr <= self.target.vector_width:
            # one vector of output channels (M = 16): each k's FMA waits on mr broadcasts, and C
            # is written in runs of mr floats (32->16 at 112x112, batch 8: 0.74x; batch 1: level)
            return False
        # fewer positions than one register tile: every tile of the usual GEMM is an edge tile
        # (computed into a buffer, stored masked, its epilogue applied in memory), so any saving
        # of padding pays (MobileNetV2's 960->160 at 7x7: the whole model 1.03x at batch 8)
        margin = 0.0 if r.N < _tile(self.target, r.N, m=M)[1] else TRANSPOSED_MARGIN
        return _column_waste(self.target, M, r.N) - (1.0 - M / (-(-M // nr) * nr)) >= margin

    @staticmethod
    def _layouts_ok(p: GemmPlan, constant_args: set[int]) -> bool:
        r = p.roles
        if matrix_layout(p.a, r.M, r.K) is None:
            return False
        return p.b.arg in constant_args or matrix_layout(p.b, r.K, r.N) is not None

    def prepare(self, func: FuncOp) -> "Prepared":
        """The decisions for every kernel of ``func``; symbolic sizes use the hints of the
        function's symbol table (``symbolic.symbol_table_of``)."""
        return Prepared(self, func)


def _static_but_batch(p: ConvPlan) -> bool:
    """Convolutions over symbolic sizes are tensorized when only the batch axes are symbolic (the
    images of a dynamic batch): the per-image geometry, the weights and the strides stay numbers."""
    r = p.roles
    dims = [r.M, r.N, r.K, p.channels, p.ldc, *p.in_spatial, *p.out_spatial, p.c.const,
            *p.x_batch_stride.values(), *p.w_batch_stride.values(), *p.c.terms.values()]
    return all(isinstance(d, int) for d in dims) and all(isinstance(a.extent, int) for a in r.batch[1:])


class Prepared:
    """The tensorization decisions for one function, and its packed weights."""

    def __init__(self, tensorizer: Tensorizer, func: FuncOp):
        self.params_for = tensorizer.params_for
        self.fusion_for = tensorizer.fusion_for
        table = symbol_table_of(func)
        self.table = table if table.ranges else None
        self.plans: dict[int, KernelPlan] = {}
        self.weights: list[np.ndarray] = []
        self._operand: dict[tuple[int, int], np.ndarray] = {}
        memo: dict[tuple, KernelPlan | None] = {}
        packs: dict[tuple, np.ndarray] = {}
        packed_uses: dict[int, int] = {}
        for op in func.body:
            if op.name != "structured.kernel":
                continue
            consts = _constant_args(op)
            if is_library_kernel(op):
                self._arrange_library_weights(op, packs, packed_uses)
                continue
            key = (structural_hash(op), frozenset(consts))
            if key not in memo:
                memo[key] = tensorizer.plan(op, consts, self.table)
            plan = memo[key]
            if plan is None:
                continue
            self.plans[id(op)] = plan
            for arg in plan.packed_args:
                v = op.operands[arg]
                pk = (id(v), plan.pack_key(arg))
                if pk not in packs:
                    packs[pk] = plan.pack(arg, v.op.attributes["value"].array)
                    self.weights.append(packs[pk])
                self._operand[(id(op), arg)] = packs[pk]
                packed_uses[id(v)] = packed_uses.get(id(v), 0) + 1
        # constants whose every use reads a packed copy instead
        self.replaced: set[int] = set()
        for op in func.body:
            if op.name == "graph.constant":
                v = op.results[0]
                if v.uses and packed_uses.get(id(v), 0) == len(v.uses):
                    self.replaced.add(id(v))

    def _arrange_library_weights(self, kernel: Operation, packs: dict, packed_uses: dict) -> None:
        """An int8 conv on the direct kernel reads its weights arranged at compile time
        (``library_kernels.qconv_arranged``), one computed transposed reads them packed as the
        GEMM's vector operand (``library_kernels.qconv_transposed``), a bf16 or blocked float32
        one by Winograd reads them transformed (``library_kernels.bf16_winograd``,
        ``nchwc_winograd``): operand 1 becomes that array."""
        from .library_kernels import (bf16_winograd, bf16_winograd_weights, nchwc_winograd, nchwc_winograd_weights,
                                      qconv_arranged, qconv_arranged_weights, qconv_transposed,
                                      qconv_transposed_weights)
        params = self.library_params(kernel)
        m = nchwc_winograd(kernel, params)
        if m:
            # keyed by the tile size too: one weight may serve F(4x4) and F(2x2) layers (shared weights)
            kind, arrange = f"nchwc-winograd{m}", lambda w: nchwc_winograd_weights(kernel, w, params)
        elif qconv_arranged(kernel):
            kind, arrange = "qconv-arranged", lambda w: qconv_arranged_weights(kernel, w)
        elif qconv_transposed(kernel):
            kind, arrange = "qconv-transposed", lambda w: qconv_transposed_weights(kernel, w)
        elif bf16_winograd(kernel):
            kind, arrange = "bf16-winograd", lambda w: bf16_winograd_weights(kernel, w)
        else:
            return
        v = kernel.operands[1]
        pk = (id(v), kind)
        if pk not in packs:
            packs[pk] = arrange(v.op.attributes["value"].array)
            self.weights.append(packs[pk])
        self._operand[(id(kernel), 1)] = packs[pk]
        packed_uses[id(v)] = packed_uses.get(id(v), 0) + 1

    def library_params(self, kernel: Operation):
        """The tuned ``qgemm.Tiling`` of an int8 library kernel, or ``nchwc.BlockedParams`` of a
        blocked conv (the tuning hook's answer), or None."""
        from .library_kernels import blocked_tunable, int8_tunable
        from .nchwc import BlockedParams
        from .qgemm import Tiling
        if self.params_for is None:
            return None
        if int8_tunable(kernel):
            wanted = Tiling
        elif blocked_tunable(kernel):
            wanted = BlockedParams
        else:
            return None
        params = self.params_for(kernel)
        return params if isinstance(params, wanted) else None

    def emit(self, kernel: Operation, symbols: list[str] | None = None) -> str | None:
        """The kernel's C, or None (the loop path).  ``symbols``: the model's symbol order, given
        for a model with symbols (every kernel then takes ``tf_dims`` last, docs/dynamic_shapes.md)."""
        plan = self.plans.get(id(kernel))
        return plan.emit(kernel, symbols) if plan is not None else None

    def key(self, kernel: Operation) -> str:
        """Added to the kernel's structural key: which operands arrive packed."""
        plan = self.plans.get(id(kernel))
        return "" if plan is None else f"|tensorized:{sorted(plan.packed_args)}"

    def operand_weight(self, kernel: Operation, index: int) -> np.ndarray | None:
        """The packed array to pass as operand ``index`` of ``kernel`` instead of the constant."""
        return self._operand.get((id(kernel), index))
