"""Fixed-length feature vectors of tuning candidates, the input of the learned cost model.

Two kinds of candidates share one layout (``FEATURE_NAMES``) so that one model ranks both and
learns across tasks: a *scheduled loop nest* (``loop_features``: a ``loop.func`` after schedule
primitives) and a *tensorized contraction* (``gemm_features``: the ``GemmParams`` knobs of a packed
GEMM micro-kernel, analysed from the blocking because its C is not a loop nest).  A few slots
only one kind fills stay zero for the other; the trees split on ``is_gemm``.

The loop analysis is a cache model in the spirit of TVM Ansor's features, kept to what tells
schedules of the *same* kernel apart: for every load and store it derives the element stride per
enclosing loop (``rules.Access``), the cache lines one run of each loop level touches, and, per
cache capacity (L1/L2/L3 of the target), the traffic that results when the outermost loop whose
whole footprint fits stays resident.  Reuse distance is the footprint of one iteration of the
innermost loop the access is invariant in.  Annotations (vector lanes used, unroll depth,
parallel extent and balance, fork/join count) and a roofline estimate complete the picture; the
estimate (``estimate_seconds``) is also the model's prior before it has any sample.

Magnitudes that span decades (flops, bytes, iterations) are ``log2(1 + x)``.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np

from ..codegen.c.microkernels import splits_n
from ..ir.core import Operation, Value
from ..ir.types import BufferType, IndexType
from ..schedule.analysis import ALLOC, FOR, IF, LOAD, STORE, body, buffer_of, extent, iv
from ..schedule.rules import Access

LINE = 64                          # bytes per cache line
BUFFER_SLOTS = 3                   # buffers described one by one (the ones with most L1 traffic)
_BUFFER_FIELDS = ("footprint", "l1_traffic", "l2_traffic", "dram_traffic", "stride1_frac", "reuse_dist", "written")

# Float operations by kind; an add/sub fed by a mul counts as one fma (gcc contracts them).
_OP_KIND = {"scalar.add": "add", "scalar.sub": "add", "scalar.neg": "add", "scalar.mul": "mul",
            "scalar.div": "div", "scalar.reciprocal": "div", "scalar.sqrt": "div", "scalar.rsqrt": "div",
            "scalar.max": "cmp", "scalar.min": "cmp", "scalar.relu": "cmp", "scalar.abs": "cmp",
            "scalar.clip": "cmp", "scalar.select": "cmp", "scalar.gt": "cmp", "scalar.ge": "cmp",
            "scalar.lt": "cmp", "scalar.le": "cmp", "scalar.eq": "cmp", "scalar.ne": "cmp"}
_TRANSCENDENTAL = {"exp", "log", "tanh", "erf", "pow", "sin", "cos", "sigmoid", "silu", "gelu", "softplus", "elu",
                   "fmod"}
# Rough cost of one element of each kind, in fma-slot units: what the roofline prior charges.
_KIND_COST = {"add": 1.0, "mul": 1.0, "fma": 1.0, "div": 4.0, "exp": 10.0, "cmp": 1.0, "other": 2.0}
OP_KINDS = tuple(_KIND_COST)

# Machine rates the roofline prior assumes (per core; the target gives lanes, cores and caches).
FREQ_HZ = 2.3e9
FMA_UNITS = 2
# Bytes/s per core at which each cache is filled from the level below it (L2 -> L1, L3 -> L2, DRAM -> L3).
FILL_BANDWIDTH = {"l1": 96e9, "l2": 32e9, "l3": 11e9}
FORK_JOIN_S = 3e-6
LOAD_PORTS = 2
FMA_LATENCY = 4                    # cycles

FEATURE_NAMES: tuple[str, ...] = (
    "is_gemm",
    *(f"ops_{k}" for k in OP_KINDS),
    "flops", "loads", "stores", "register_accesses",
    "footprint", "traffic_l1", "traffic_l2", "traffic_l3",
    "intensity_dram", "intensity_l1",
    "stride1_frac", "invariant_frac", "strided_frac", "irregular_frac",
    "reuse_dist", "reuse_in_l1_frac", "reuse_in_l2_frac",
    *(f"buf{i}_{f}" for i in range(BUFFER_SLOTS) for f in _BUFFER_FIELDS),
    "vec_frac", "vec_lanes", "vec_waste", "vec_contiguous_frac", "vec_reduction_frac",
    "unroll", "unroll_frac",
    "par_extent", "par_frac", "par_balance", "par_threads_used", "par_forks",
    "iterations", "innermost_extent", "loops", "depth", "guard_frac",
    "local_bytes", "accumulators", "reg_tile_vectors", "reg_occupancy",
    "gemm_a_panel_l1", "gemm_b_panel_l1", "gemm_a_block_l2", "gemm_b_block_l2", "gemm_b_block_l3",
    "gemm_pack_a", "gemm_pack_traffic", "gemm_edge_waste", "gemm_loop_order", "gemm_dynamic",
    "gemm_tiles_per_thread", "gemm_unroll_k", "gemm_conv", "gemm_conv_fold", "gemm_conv_direct",
    "gemm_conv_winograd", "gemm_loads_per_fma", "gemm_kernel_efficiency",
    "est_compute_s", "est_memory_s", "est_seconds",
)
INDEX = {n: i for i, n in enumerate(FEATURE_NAMES)}
# Names the layout of a feature row (stored with each record's features in the database): rows of
# another layout (an older or newer tensorforge) are not mixed into a model.
FEATURE_LAYOUT = "v1-" + hashlib.sha256(",".join(FEATURE_NAMES).encode()).hexdigest()[:12]
LOG_FEATURES = frozenset({
    *(f"ops_{k}" for k in OP_KINDS), "flops", "loads", "stores", "register_accesses", "footprint", "traffic_l1",
    "traffic_l2", "traffic_l3", "reuse_dist", "vec_lanes", "unroll", "par_extent", "par_forks", "iterations",
    "innermost_extent", "local_bytes", "accumulators", "reg_tile_vectors", "gemm_pack_traffic",
    "gemm_tiles_per_thread", "gemm_unroll_k",
    *(f"buf{i}_{f}" for i in range(BUFFER_SLOTS) for f in ("footprint", "l1_traffic", "l2_traffic",
                                                            "dram_traffic", "reuse_dist")),
})


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


@dataclass(frozen=True)
class Machine:
    """What the features read of a ``codegen.target.Target``."""

    lanes: int
    registers: int
    cores: int
    caches: dict

    def peak_flops(self, vector: bool) -> float:
        """fp32 flop/s of one core (2 per fma), vectorized or scalar."""
        return FREQ_HZ * FMA_UNITS * 2 * (self.lanes if vector else 1)


def _machine(target) -> "Machine":
    if target is None:
        from ..codegen.target import Target
        target = Target.host()
    return Machine(lanes=max(1, target.vector_width), registers=max(1, target.vector_registers),
                   cores=max(1, target.cores), caches={"l1": target.l1d, "l2": target.l2, "l3": target.l3})


def _finish(raw: dict[str, float]) -> np.ndarray:
    """Adds the roofline estimate and intensities, log-scales, orders as ``FEATURE_NAMES``."""
    compute, memory = raw["est_compute_s"], raw["est_memory_s"]
    raw["est_seconds"] = max(compute, memory) + raw.get("_overhead_s", 0.0)
    dram = max(raw["traffic_l3"], 1.0)
    raw["intensity_dram"] = math.log2((raw["flops"] + 1.0) / dram)
    raw["intensity_l1"] = math.log2((raw["flops"] + 1.0) / max(raw["traffic_l1"], 1.0))
    out = np.zeros(len(FEATURE_NAMES), dtype=np.float64)
    for name, value in raw.items():
        i = INDEX.get(name)
        if i is None:
            continue
        if name.startswith("est_"):
            out[i] = math.log2(max(float(value), 1e-9))     # log seconds: negative is fine
        else:
            out[i] = _log(value) if name in LOG_FEATURES else float(value)
    return out


def estimate_seconds(features: np.ndarray) -> np.ndarray:
    """The roofline estimate stored in feature rows (one per row): the cost model's prior."""
    f = np.atleast_2d(features)
    return np.exp2(f[:, INDEX["est_seconds"]])


# ---- loop nests ------------------------------------------------------------------------------------
@dataclass
class _Mem:
    """One load or store of a buffer in memory, with the loops around it (outermost first)."""

    op: Operation
    buf: Value
    loops: list[Operation]
    strides: list[int]             # element stride of the flat address per loop (0: invariant)
    irregular: list[bool]          # the index depends on the loop through floordiv/mod/loads
    esize: int
    written: bool
    execs: float = 0.0
    lines: list[float] = field(default_factory=list)    # lines[k]: lines one run of loops k.. touches
    elems: list[float] = field(default_factory=list)


def _unique(m: _Mem, k: int) -> tuple[float, float]:
    """(elements, cache lines) that one run of ``m``'s loops ``k..`` touches."""
    esize = m.esize
    exts = [extent(l) for l in m.loops[k:]]
    strides, irr = m.strides[k:], m.irregular[k:]
    scatter = 1.0                   # loops whose iterations land anywhere (irregular)
    regular = []
    for e, s, bad in zip(exts, strides, irr):
        if bad:
            scatter *= e
        elif s and e > 1:
            regular.append((abs(s), e))
    regular.sort()
    span = 1 + sum(s * (e - 1) for s, e in regular)
    elems = min(float(math.prod(e for _, e in regular)), float(span))
    run, blocks, i = 1, 1.0, 0
    while i < len(regular) and regular[i][0] <= run:      # loops that extend one contiguous run
        s, e = regular[i]
        run = s * (e - 1) + run
        i += 1
    for s, e in regular[i:]:
        blocks *= e
    lines = blocks * math.ceil(run * esize / LINE)
    lines = min(lines, math.ceil(span * esize / LINE) + blocks)       # runs closer than a line share it
    cap = math.ceil(m.buf.type.num_elements * esize / LINE) if _static(m.buf) else lines
    elems *= scatter
    lines = min(lines * scatter, max(cap, 1))
    return elems, max(lines, 1.0)


def _static(buf: Value) -> bool:
    return all(isinstance(d, int) for d in buf.type.shape)


class _LoopAnalysis:
    """One pass over a loop.func collecting what the features aggregate."""

    def __init__(self, fn: Operation, machine: Machine):
        self.m = machine
        self.mems: list[_Mem] = []
        self.ops: dict[str, float] = {k: 0.0 for k in OP_KINDS}
        self.vec_ops = 0.0
        self.vec_lane_sum = 0.0
        self.vec_waste_sum = 0.0
        self.vec_red = 0.0
        self.unroll_max = 1
        self.unroll_ops = 0.0
        self.par_ops = 0.0
        self.par_weighted: list[tuple[float, int]] = []   # (work under it, extent)
        self.forks = 0.0
        self.guarded = 0.0
        self.total_ops = 0.0
        self.reg_access = 0.0
        self.local_accesses = 0.0                         # executions of loads/stores of loop.alloc buffers
        self.innermost: list[tuple[float, int]] = []      # (executions, extent) of innermost loops
        self.loops = 0
        self.depth = 0
        self.local_bytes = 0.0
        self.accumulators = 0
        self.reg_tile = 0.0
        self.work_under: dict[int, float] = {}           # id(loop) -> float ops inside
        self._walk(body(fn), [], 0, 1.0)

    # every op once, with the loops around it and how often it runs
    def _walk(self, block, loops: list[Operation], guards: int, execs: float) -> None:
        for op in block:
            name = op.name
            if name == FOR:
                e = extent(op)
                self.loops += 1
                self.depth = max(self.depth, len(loops) + 1)
                if op.attributes["kind"] == "parallel":
                    self.forks += execs
                inner = loops + [op]
                if not any(o.name == FOR for o in body(op)):
                    self.innermost.append((execs * e, e))
                self._walk(body(op), inner, guards, execs * e)
            elif name == IF:
                self._walk(body(op), loops, guards + 1, execs)
            elif name in (LOAD, STORE):
                self._memory(op, loops, execs)
            elif name == ALLOC:
                t = op.attributes["type"]
                if t.rank == 0:
                    self.accumulators += 1
                elif _static(op.results[0]):
                    self.local_bytes += t.num_elements * t.dtype.itemsize
            elif name.startswith("scalar.") and op.results and not isinstance(op.results[0].type, IndexType) \
                    and name not in ("scalar.const", "scalar.cast", "scalar.index_cast", "scalar.identity"):
                self._arith(op, loops, guards, execs)

    def _kind(self, op: Operation) -> str:
        name = op.name
        kind = _OP_KIND.get(name)
        if kind == "add" and name != "scalar.neg":
            for v in op.operands:
                d = v.op
                if d is not None and d.name == "scalar.mul" and len(v.uses) == 1:
                    return "fma"
        if kind is not None:
            return kind
        return "exp" if name.split(".", 1)[1] in _TRANSCENDENTAL else "other"

    def _arith(self, op: Operation, loops: list[Operation], guards: int, execs: float) -> None:
        kind = self._kind(op)
        self.ops[kind] += execs
        if kind == "fma":       # the mul it absorbed was counted before it (pre-order, defs first)
            self.ops["mul"] -= execs
        self.total_ops += execs
        if guards:
            self.guarded += execs
        vec = next((l for l in reversed(loops) if l.attributes["kind"] == "vectorize"), None)
        if vec is not None:
            e = extent(vec)
            lanes = min(e, self.m.lanes)
            self.vec_ops += execs
            self.vec_lane_sum += execs * lanes
            padded = math.ceil(e / self.m.lanes) * self.m.lanes
            self.vec_waste_sum += execs * (padded - e) / padded
            if vec.attributes.get("reduction"):
                self.vec_red += execs
        unroll = math.prod(max(1, l.attributes.get("unroll") or 1) for l in loops if l.attributes["kind"] == "unroll")
        if unroll > 1:
            self.unroll_ops += execs
            self.unroll_max = max(self.unroll_max, unroll)
        par = next((l for l in loops if l.attributes["kind"] == "parallel"), None)
        if par is not None:
            self.par_ops += execs
            self.par_weighted.append((execs, extent(par)))
        for l in loops:
            self.work_under[id(l)] = self.work_under.get(id(l), 0.0) + execs

    def _memory(self, op: Operation, loops: list[Operation], execs: float) -> None:
        buf = buffer_of(op)
        if not isinstance(buf.type, BufferType) or buf.type.rank == 0:
            self.reg_access += execs
            return
        acc = Access.of(op)
        strides = [acc.strides.get(id(iv(l)), 0) for l in loops]
        irregular = [id(iv(l)) in acc.irregular for l in loops]
        m = _Mem(op, buf, list(loops), strides, irregular, buf.type.dtype.itemsize, op.name == STORE, execs)
        for k in range(len(loops) + 1):
            e, l = _unique(m, k)
            m.elems.append(e)
            m.lines.append(l)
        self.mems.append(m)
        if buf.op is not None and buf.op.name == ALLOC:
            self.local_accesses += execs

    # ---- the cache model -----------------------------------------------------------------------
    def scope_lines(self, inner: int = 0) -> dict[int, float]:
        """id(loop) -> lines that all iterations (``inner=0``) or one iteration (``inner=1``) of the loop
        touch; a buffer counts once, with its widest access."""
        per: dict[int, dict[int, float]] = {}
        for m in self.mems:
            for k, l in enumerate(m.loops):
                d = per.setdefault(id(l), {})
                d[id(m.buf)] = max(d.get(id(m.buf), 0.0), m.lines[k + inner])
        return {k: sum(d.values()) for k, d in per.items()}

    def traffic(self, capacity: float, body_lines: dict[int, float]) -> dict[int, float]:
        """Lines each buffer brings into a cache of ``capacity`` bytes.  Walking out from the access, a
        loop whose one iteration fits the cache reuses what its iterations share (LRU: the reuse
        distance is one iteration), so one run costs the access's unique lines; a loop whose iteration
        does not fit refetches the inner run every iteration.  Accesses of a buffer resident in the
        same loop share their lines."""
        groups: dict[tuple[int, int], float] = {}
        for m in self.mems:
            n = len(m.loops)
            cost, resident = 1.0, n
            for j in range(n - 1, -1, -1):
                l = m.loops[j]
                if resident == j + 1 and body_lines[id(l)] * LINE <= capacity:
                    cost, resident = m.lines[j], j
                else:
                    cost *= extent(l)
            key = (id(m.buf), id(m.loops[resident]) if resident < n else id(m.op))
            groups[key] = max(groups.get(key, 0.0), cost)
        out: dict[int, float] = {}
        for (b, _), lines in groups.items():
            out[b] = out.get(b, 0.0) + lines
        return out

    def reuse_distance(self, m: _Mem, body_lines: dict[int, float]) -> float:
        """Bytes touched between two uses of the same element: one iteration of the innermost loop
        the access is invariant in (inf when no enclosing loop reuses it)."""
        for l, s, bad in reversed(list(zip(m.loops, m.strides, m.irregular))):
            if s == 0 and not bad and extent(l) > 1:
                return body_lines[id(l)] * LINE
        return math.inf


def loop_features(fn: Operation, target=None) -> np.ndarray:
    """Features of a scheduled ``loop.func`` for ``target`` (a ``codegen.target.Target``; None: host)."""
    if fn.name != "loop.func":
        raise TypeError(f"loop_features takes a loop.func, got {fn.name}")
    mach = _machine(target)
    a = _LoopAnalysis(fn, mach)
    raw: dict[str, float] = {f"ops_{k}": max(0.0, v) for k, v in a.ops.items()}
    flops = sum(v * (2.0 if k == "fma" else 1.0) for k, v in a.ops.items())
    raw["flops"] = flops
    raw["loads"] = sum(m.execs for m in a.mems if not m.written)
    raw["stores"] = sum(m.execs for m in a.mems if m.written)
    raw["register_accesses"] = a.reg_access
    bufs: dict[int, Value] = {id(m.buf): m.buf for m in a.mems}
    footprint: dict[int, float] = {}
    for m in a.mems:
        footprint[id(m.buf)] = max(footprint.get(id(m.buf), 0.0), m.lines[0])
    raw["footprint"] = sum(footprint.values()) * LINE
    body_lines = a.scope_lines(inner=1)
    levels = {name: a.traffic(mach.caches[name], body_lines) for name in ("l1", "l2", "l3")}
    for name in ("l1", "l2", "l3"):
        raw[f"traffic_{name}"] = sum(levels[name].values()) * LINE

    accesses = sum(m.execs for m in a.mems) or 1.0
    kinds = {"stride1": 0.0, "invariant": 0.0, "strided": 0.0, "irregular": 0.0}
    per_buf_stride1: dict[int, list[float]] = {}
    reuse: dict[int, float] = {}
    dist_sum, in_l1, in_l2 = 0.0, 0.0, 0.0
    for m in a.mems:
        if not m.loops:
            kind = "invariant"
        elif m.irregular[-1]:
            kind = "irregular"
        else:
            s = abs(m.strides[-1])
            kind = "invariant" if s == 0 else "stride1" if s == 1 else "strided"
        kinds[kind] += m.execs
        d = per_buf_stride1.setdefault(id(m.buf), [0.0, 0.0])
        d[0] += m.execs * (kind in ("stride1", "invariant"))
        d[1] += m.execs
        dist = a.reuse_distance(m, body_lines)
        reuse[id(m.buf)] = min(reuse.get(id(m.buf), math.inf), dist)
        finite = dist if math.isfinite(dist) else raw["footprint"] * 4 + LINE
        dist_sum += m.execs * _log(finite)
        in_l1 += m.execs * (dist <= mach.caches["l1"])
        in_l2 += m.execs * (dist <= mach.caches["l2"])
    for k, v in kinds.items():
        raw[f"{k}_frac"] = v / accesses
    raw["reuse_dist"] = 2.0 ** (dist_sum / accesses) - 1.0
    raw["reuse_in_l1_frac"] = in_l1 / accesses
    raw["reuse_in_l2_frac"] = in_l2 / accesses

    order = sorted(bufs, key=lambda b: (-levels["l1"].get(b, 0.0), -footprint[b]))
    for slot, b in enumerate(order[:BUFFER_SLOTS]):
        p = f"buf{slot}_"
        raw[p + "footprint"] = footprint[b] * LINE
        raw[p + "l1_traffic"] = levels["l1"].get(b, 0.0) * LINE
        raw[p + "l2_traffic"] = levels["l2"].get(b, 0.0) * LINE
        raw[p + "dram_traffic"] = levels["l3"].get(b, 0.0) * LINE
        s1 = per_buf_stride1[b]
        raw[p + "stride1_frac"] = s1[0] / max(s1[1], 1.0)
        raw[p + "reuse_dist"] = reuse[b] if math.isfinite(reuse[b]) else raw["footprint"] * 4 + LINE
        raw[p + "written"] = float(any(m.written for m in a.mems if id(m.buf) == b))

    ops = a.total_ops or 1.0
    raw["vec_frac"] = a.vec_ops / ops
    raw["vec_lanes"] = a.vec_lane_sum / a.vec_ops if a.vec_ops else 1.0
    raw["vec_waste"] = a.vec_waste_sum / a.vec_ops if a.vec_ops else 0.0
    vec_mem = [m for m in a.mems if any(l.attributes["kind"] == "vectorize" for l in m.loops)]
    vec_total = sum(m.execs for m in vec_mem)
    raw["vec_contiguous_frac"] = sum(m.execs for m in vec_mem if _contiguous_in_vector(m)) / vec_total \
        if vec_total else 0.0
    raw["vec_reduction_frac"] = a.vec_red / a.vec_ops if a.vec_ops else 0.0
    raw["unroll"] = a.unroll_max
    raw["unroll_frac"] = a.unroll_ops / ops
    par_ops = sum(w for w, _ in a.par_weighted) or 0.0
    par_extent = sum(w * e for w, e in a.par_weighted) / par_ops if par_ops else 1.0
    balance = sum(w * e / (math.ceil(e / mach.cores) * mach.cores) for w, e in a.par_weighted) / par_ops \
        if par_ops else 1.0 / mach.cores
    raw["par_extent"] = par_extent
    raw["par_frac"] = a.par_ops / ops
    raw["par_balance"] = balance
    raw["par_threads_used"] = min(par_extent, mach.cores) / mach.cores if par_ops else 1.0 / mach.cores
    raw["par_forks"] = a.forks
    raw["iterations"] = sum(x for x, _ in a.innermost)
    raw["innermost_extent"] = sum(x * e for x, e in a.innermost) / raw["iterations"] if raw["iterations"] else 1.0
    raw["loops"] = a.loops
    raw["depth"] = a.depth
    raw["guard_frac"] = a.guarded / ops
    raw["local_bytes"] = a.local_bytes
    raw["accumulators"] = a.accumulators
    tile = _register_tile_vectors(a, mach)
    raw["reg_tile_vectors"] = tile
    raw["reg_occupancy"] = tile / mach.registers

    # roofline prior: arithmetic at the vector width it runs at, split over the threads that share it
    weighted = sum(v * _KIND_COST[k] for k, v in a.ops.items())
    vec_share = raw["vec_frac"]
    lanes = raw["vec_lanes"]
    fma_rate = FREQ_HZ * FMA_UNITS
    per_core = weighted * (vec_share / lanes + (1.0 - vec_share)) / fma_rate
    # Amdahl over the work under parallel loops; an even static split of e iterations over c threads
    # runs ceil(e / c) rounds, a speedup of balance * c
    speedup = max(1.0, balance * mach.cores) if par_ops else 1.0
    share = (1.0 - raw["par_frac"]) + raw["par_frac"] / speedup
    raw["est_compute_s"] = max(per_core * share, 1e-9)
    mem_s = sum(raw[f"traffic_{n}"] / FILL_BANDWIDTH[n] for n in ("l1", "l2", "l3"))
    # load/store ports (2 per cycle); a local tile that fits the registers costs nothing there
    ports = raw["loads"] + raw["stores"] - (a.local_accesses if raw["reg_occupancy"] <= 1.0 else 0.0)
    mem_s += ports * (vec_share / lanes + 1.0 - vec_share) / (2 * FREQ_HZ)
    raw["est_memory_s"] = max(mem_s * share, 1e-9)
    raw["_overhead_s"] = a.forks * FORK_JOIN_S
    return _finish(raw)


def _contiguous_in_vector(m: _Mem) -> bool:
    for l, s, bad in zip(reversed(m.loops), reversed(m.strides), reversed(m.irregular)):
        if l.attributes["kind"] == "vectorize":
            return not bad and abs(s) <= 1
    return False


def _register_tile_vectors(a: _LoopAnalysis, mach: Machine) -> float:
    """Vector registers a register tile needs: the elements of local buffers (``cache_write``) one run of
    the unrolled and vectorized loops touches, in vectors."""
    best = 0.0
    for m in a.mems:
        if m.buf.op is None or m.buf.op.name != ALLOC:
            continue
        k = len(m.loops)
        while k > 0 and m.loops[k - 1].attributes["kind"] in ("vectorize", "unroll"):
            k -= 1
        if k == len(m.loops):
            continue
        best = max(best, m.elems[k] / mach.lanes)
    return best


# ---- tensorized contractions ---------------------------------------------------------------------
def gemm_features(params: dict, problem: dict, target=None) -> np.ndarray:
    """Features of a packed-GEMM candidate: ``params`` are ``microkernels.GemmParams`` fields, ``problem``
    ``{"M", "N", "K", "batch", "conv"}`` (``conv`` a dict or None: then B is gathered from the image
    while it is packed, which adds to packing traffic).  Analytic, from the Goto blocking: which panel
    stays in which cache, what each level streams, how the tiles split over threads."""
    mach = _machine(target)
    p = {"mr": 6, "nr": 64, "kc": 256, "mc": 252, "nc": 512, "unroll": 1, "threads": 1, "pack_a": True,
         "loop_order": "ir_jr", "schedule": "static", **params}
    M, N, K = int(problem["M"]), int(problem["N"]), int(problem["K"])
    batch = int(problem.get("batch") or 1)
    conv = problem.get("conv")
    algorithm = (p.get("conv_algorithm") or conv.get("algorithm") or "im2col") if conv else ""
    taps = math.prod(conv.get("kernel") or [1]) if conv else 1
    if algorithm in ("winograd", "winograd4"):   # what runs: a*a GEMMs of O x C x (m x m output tiles) per image
        m = 4 if algorithm == "winograd4" else 2
        K, N, batch = max(1, K // max(taps, 1)), max(1, math.ceil(N / (m * m))), batch * (m + 2) ** 2
    if algorithm == "direct_t":       # the tile's rows are positions, its vector columns output channels
        M, N = N, M
    mr, nr, kc, mc, nc = (int(p[k]) for k in ("mr", "nr", "kc", "mc", "nc"))
    kc, mc, nc = min(kc, K), min(mc, math.ceil(M / mr) * mr), min(nc, math.ceil(N / nr) * nr)
    threads = max(1, min(int(p["threads"]), mach.cores))
    lanes, es = mach.lanes, 4
    l1, l2, l3 = mach.caches["l1"], mach.caches["l2"], mach.caches["l3"]

    mt, nt, kt = math.ceil(M / mr), math.ceil(N / nr), math.ceil(K / kc)
    flops = 2.0 * M * N * K * batch
    padded = mt * mr * nt * nr
    edge = (padded - M * N) / padded
    calls = mt * nt * kt * batch                       # micro-kernel calls
    accumulators = mr * nr / lanes
    b_vecs = nr / lanes
    needed = accumulators + b_vecs + 1
    spill = max(0.0, needed - mach.registers)

    a_panel, b_panel = mr * kc * es, kc * nr * es
    a_block, b_block = mc * kc * es, kc * nc * es
    inner_rows = p["loop_order"] == "jr_ir"            # rows inner: the B micro-panel is reused from L1
    # L1: per micro-kernel call the panel that is not reused is streamed in (from L2 when its block fits)
    streamed = a_panel if inner_rows else b_panel
    resident = b_panel if inner_rows else a_panel
    l1_traffic = calls * (streamed + (resident if resident > l1 // 2 else 0.0)) + M * N * es * kt * batch * 2
    # L2: the B block (ir_jr) or A block (jr_ir) is re-read per outer block; it comes from L3 when too big
    re_read = b_block if not inner_rows else a_block
    outer_runs = math.ceil(M / mc) if not inner_rows else math.ceil(N / nc)
    l2_traffic = (M * K + K * N) * es * batch + (re_read * outer_runs * math.ceil(N / nc) * kt * batch
                                                  if re_read > l2 // 2 else 0.0)
    dram = (M * K + K * N + 2 * M * N) * es * batch
    if b_block > l3 // 2:
        dram += b_block * math.ceil(M / mc) * math.ceil(N / nc) * kt * batch
    pack_traffic = K * N * es * batch * 2.0 * (2.0 if conv else 1.0)
    if algorithm.startswith("direct"):   # the input is padded once and read in place: no kh*kw copy
        pack_traffic /= max(taps, 1)
    if p["pack_a"]:
        pack_traffic += M * K * es * batch * 2.0 * math.ceil(N / nc)

    # threads: static split of the M tiles or the N panels (microkernels.splits_n)
    tiles = nt if p["schedule"] != "dynamic" and splits_n(p["schedule"], M, N, mr, nr, threads) else mt
    per_thread = tiles / threads
    balance = per_thread / math.ceil(per_thread) if p["schedule"] != "dynamic" else \
        min(1.0, (math.ceil(M / mc) * math.ceil(N / nc) / threads) / math.ceil(math.ceil(M / mc) * math.ceil(N / nc) / threads))

    raw: dict[str, float] = {k: 0.0 for k in FEATURE_NAMES}
    raw["is_gemm"] = 1.0
    raw["ops_fma"] = M * N * K * batch
    raw["flops"] = flops
    raw["loads"] = calls * kc * (mr + b_vecs * lanes)
    raw["stores"] = M * N * batch * kt
    raw["register_accesses"] = calls * kc * accumulators * lanes
    raw["footprint"] = dram
    raw["traffic_l1"], raw["traffic_l2"], raw["traffic_l3"] = l1_traffic, l2_traffic, dram
    raw["stride1_frac"] = 1.0 if p["pack_a"] else 0.5
    raw["invariant_frac"] = 0.0
    raw["reuse_dist"] = resident + streamed
    raw["reuse_in_l1_frac"] = float(resident + streamed <= l1)
    raw["reuse_in_l2_frac"] = float(re_read <= l2 // 2)
    for slot, (fp, t1, t2, t3, s1, rd, w) in enumerate((
            (K * N * es, calls * b_panel, K * N * es * (outer_runs if b_block > l2 // 2 else 1), K * N * es, 1.0,
             b_block, 0.0),
            (M * K * es, calls * a_panel, M * K * es * math.ceil(N / nc), M * K * es, float(p["pack_a"]), a_block,
             0.0),
            (M * N * es, M * N * es * kt * 2, M * N * es * kt * 2, 2 * M * N * es, 1.0, N * es, 1.0))):
        raw.update({f"buf{slot}_footprint": fp * batch, f"buf{slot}_l1_traffic": t1 * batch,
                    f"buf{slot}_l2_traffic": t2 * batch, f"buf{slot}_dram_traffic": t3 * batch,
                    f"buf{slot}_stride1_frac": s1, f"buf{slot}_reuse_dist": rd, f"buf{slot}_written": w})
    raw["vec_frac"] = 1.0
    raw["vec_lanes"] = lanes
    raw["vec_waste"] = (nt * nr - N) / (nt * nr)
    raw["vec_contiguous_frac"] = 1.0
    raw["unroll"] = max(1, int(p["unroll"]))
    raw["unroll_frac"] = float(int(p["unroll"]) > 1)
    raw["par_extent"] = tiles
    raw["par_frac"] = 1.0 if threads > 1 else 0.0
    raw["par_balance"] = balance
    raw["par_threads_used"] = min(tiles, threads) / mach.cores
    raw["par_forks"] = batch if threads > 1 else 0.0
    raw["iterations"] = calls * kc
    raw["innermost_extent"] = kc
    raw["loops"] = 5
    raw["depth"] = 6
    raw["local_bytes"] = a_block if p["pack_a"] else 0.0
    raw["accumulators"] = accumulators
    raw["reg_tile_vectors"] = accumulators
    raw["reg_occupancy"] = needed / mach.registers
    raw["gemm_a_panel_l1"] = a_panel / l1
    raw["gemm_b_panel_l1"] = b_panel / l1
    raw["gemm_a_block_l2"] = a_block / l2
    raw["gemm_b_block_l2"] = b_block / l2
    raw["gemm_b_block_l3"] = b_block / l3
    raw["gemm_pack_a"] = float(bool(p["pack_a"]))
    raw["gemm_pack_traffic"] = pack_traffic
    raw["gemm_edge_waste"] = edge
    raw["gemm_loop_order"] = float(inner_rows)
    raw["gemm_dynamic"] = float(p["schedule"] == "dynamic")
    raw["gemm_tiles_per_thread"] = per_thread
    raw["gemm_unroll_k"] = max(1, int(p["unroll"]))
    raw["gemm_conv"] = float(bool(conv))
    # how a convolution feeds the GEMM (tensorize.py): the tuned choice, else the compiler's own
    for name in ("fold", "direct", "winograd"):
        raw[f"gemm_conv_{name}"] = float(algorithm.startswith(name))
    # the micro-kernel's k step: mr x nv fmas against nv vector loads of B and mr broadcasts of A (load
    # ports), and every accumulator's fma chain (latency) -- whichever needs most cycles sets the pace
    fma_cycles = accumulators / FMA_UNITS
    step = max(fma_cycles, (mr + b_vecs) / LOAD_PORTS, FMA_LATENCY)
    raw["gemm_loads_per_fma"] = (mr + b_vecs) / accumulators
    raw["gemm_kernel_efficiency"] = fma_cycles / step

    # roofline prior: the micro-kernel's pace; spills and edge tiles waste the rest
    eff = raw["gemm_kernel_efficiency"] / (1.0 + 0.5 * spill) * (1.0 - edge)
    eff *= min(1.0, kc / 64.0) ** 0.25              # short K blocks pay the C tile load/store per block
    compute = flops / (mach.peak_flops(True) * eff * threads * balance)
    memory = (l1_traffic / FILL_BANDWIDTH["l1"] + l2_traffic / FILL_BANDWIDTH["l2"] + dram / FILL_BANDWIDTH["l3"]
              + pack_traffic / FILL_BANDWIDTH["l2"]) / (threads * balance)
    raw["est_compute_s"] = compute
    raw["est_memory_s"] = memory
    raw["_overhead_s"] = FORK_JOIN_S * batch if threads > 1 else 0.0
    return _finish(raw)
