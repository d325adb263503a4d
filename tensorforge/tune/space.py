"""The schedule space of a task: candidate configs, sampled, mutated and checked before any build.

A candidate is a JSON-able *config*, stored as is in the tuning database and applied by
``apply.py`` on every later compile:

* ``{"kind": "default"}``: what the compiler does untuned (measured once per task as the baseline).
* ``{"kind": "gemm", "params": {...}}``: the GemmParams of a tensorized contraction (matmul, batch
  matmul, convolution): register tile mr x nr, cache blocks kc/mc/nc, unroll, A packing, micro-tile
  loop order, static or dynamic thread split, thread count; for a convolution also how it feeds the
  GEMM (``conv_algorithm``: im2col per image, batch folded into N, or the direct kernel, strided
  layers through its polyphase split).
* ``{"kind": "depthwise", "params": {...}}``: the DepthwiseParams of a depthwise convolution:
  row-vector or channels-in-lanes kernel, outputs per work unit, outputs per handed-out group.
* ``{"kind": "int8", "params": {...}}``: the ``qgemm.Tiling`` of an int8 GEMM or convolution (the
  VNNI kernel): register tile mr rows x nrv vectors, k unroll, K block, L2 block of A.
* ``{"kind": "blocked", "params": {...}}``: the ``nchwc.BlockedParams`` of a convolution in the
  blocked NCHW[16]c layout: the algorithm (direct, Winograd F(2x2) or F(4x4) for 3x3 stride-1
  layers), the register tile (output blocks x positions; a depthwise conv's positions), the input
  blocks a chunk of weights and the output rows a work unit (Winograd: tile rows a chunk).  A
  depthwise conv fused with the 1x1 convs around it (``graph.mbconv_nchwc``, algorithm ``mbconv``)
  takes its project conv's tile and chunk (its expand conv's without one), and its band is the
  fused unit's output rows.
* ``{"kind": "fusion", "params": {"band_rows": R}}``: the band of two kernels run as one (a
  depthwise convolution and the 1x1 after it, ``dw_pw``, or a 1x1 and the depthwise after it,
  ``pw_dw``): output rows per band, among the even splits of the output's rows.
* ``{"kind": "loop", "trace": {...}}``: a schedule trace (``schedule/trace.py``) for a loop kernel,
  derived from the default schedule's trace by changing split/tile/unroll factors, dropping steps
  (a vectorize, a parallel, a compute_at...) and adding steps (split, vectorize, unroll, parallel).

``check`` is the gate: GemmParams.validate plus a register budget for gemm configs, a full replay with
the primitives' legality checks for traces. An illegal candidate never reaches the compiler.
"""
from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

import numpy as np

from ..errors import ScheduleError
from .tasks import Task

DEFAULT = {"kind": "default"}


def canonical(config: dict) -> str:
    """The dedup key of a config (the database's canonical form when it is there)."""
    try:
        from .database import canonical_config
    except ImportError:        # pragma: no cover - the database module lands separately
        return json.dumps(config, sort_keys=True, separators=(",", ":"))
    return canonical_config(config)


class InvalidCandidate(ValueError):
    """A config the space rejects before building (the message says which rule it broke)."""


class Space:
    """Common interface: ``seeds`` (good starting points), ``sample``, ``mutate``, ``check``, ``features``;
    ``costly``: checking a candidate is expensive (the search then keeps its populations small)."""

    costly = False

    def __init__(self, task: Task, target):
        self.task, self.target = task, target

    def seeds(self) -> list[dict]:
        return [DEFAULT]

    def sample(self, rng: random.Random) -> dict:
        raise NotImplementedError

    def mutate(self, config: dict, rng: random.Random) -> dict:
        raise NotImplementedError

    def check(self, config: dict) -> Any:
        """Raises InvalidCandidate; returns what ``features`` needs (params or a scheduled loop.func)."""
        raise NotImplementedError

    def features(self, config: dict, checked: Any) -> np.ndarray | None:
        return None

    @staticmethod
    def _checked(config: dict, kind: str, make) -> Any:
        """None for the default config, else ``make(params)`` of a config of ``kind`` (``make``
        builds and validates the params object); InvalidCandidate for any other kind or a
        rejected params."""
        if config.get("kind") == "default":
            return None
        if config.get("kind") != kind:
            raise InvalidCandidate(f"a {kind} task takes {kind} configs, not {config.get('kind')!r}")
        try:
            return make(config.get("params") or {})
        except (TypeError, ValueError) as exc:
            raise InvalidCandidate(str(exc)) from None


def space_for(task: Task, target) -> Space:
    if task.kind in ("gemm", "conv"):
        return GemmSpace(task, target)
    if task.kind == "int8":
        return Int8Space(task, target)
    if task.kind == "fusion":
        return FusionSpace(task, target)
    if task.kind == "blocked":
        return BlockedSpace(task, target)
    return DepthwiseSpace(task, target) if task.kind == "depthwise" else LoopSpace(task, target)


# ---- int8 GEMM and convolution (qgemm.Tiling) --------------------------------------------------
I8_MR = (2, 4, 6, 8, 10, 12, 16)
I8_NRV = (1, 2, 3, 4)
I8_UNROLL = (1, 2, 4, 8)
I8_KC = (256, 512, 1024, 2048, 4096)
I8_A_BLOCK = (64 << 10, 128 << 10, 256 << 10, 512 << 10)


class Int8Space(Space):
    """qgemm.Tiling knobs of an int8 VNNI kernel.  Seeds: the default, and the tiles its docstring
    measured level on one square GEMM (6x3, 4x4, 16x1) which may not be level on a model's
    shapes (a convolution's short K, a batch-1 GEMM's few rows)."""

    @staticmethod
    def _config(mr: int, nrv: int, unroll: int, kc: int, a_block: int) -> dict:
        return {"kind": "int8", "params": {"mr": mr, "nrv": nrv, "unroll": unroll, "kc": kc, "a_block": a_block}}

    def _default(self):
        from ..codegen.c.qgemm import Tiling
        return Tiling.for_target(self.target)

    def seeds(self) -> list[dict]:
        d = self._default()
        return [DEFAULT] + [self._config(mr, nrv, d.unroll, d.kc, d.a_block) for mr, nrv in ((6, 3), (4, 4), (16, 1))]

    def sample(self, rng: random.Random) -> dict:
        return self._config(rng.choice(I8_MR), rng.choice(I8_NRV), rng.choice(I8_UNROLL), rng.choice(I8_KC),
                            rng.choice(I8_A_BLOCK))

    def mutate(self, config: dict, rng: random.Random) -> dict:
        d = dataclasses.asdict(self._default())
        p = {**d, **(config.get("params") or {})}
        name, choices = rng.choice((("mr", I8_MR), ("nrv", I8_NRV), ("unroll", I8_UNROLL), ("kc", I8_KC),
                                    ("a_block", I8_A_BLOCK)))
        p[name] = _neighbour(choices, p[name], rng)
        return self._config(p["mr"], p["nrv"], p["unroll"], p["kc"], p["a_block"])

    def check(self, config: dict):
        from ..codegen.c.qgemm import Tiling

        def make(params: dict) -> Tiling:
            tiling = Tiling(**params)
            tiling.validate(self.target)
            return tiling
        return self._checked(config, "int8", make)


# ---- depthwise convolutions ----------------------------------------------------------------------
DW_CHUNK_OUTPUTS = (512, 1024, 2048, 4096, 8192, 16384)
DW_GROUP_OUTPUTS = (0, 256, 1024, 2048, 4096, 8192)    # 0: static shares


class DepthwiseSpace(Space):
    """DepthwiseParams knobs: the kernel (channels in the lanes only where the layer's planes are
    narrow enough, ``depthwise.lanes_shape``), the outputs of a work unit, and static shares of the
    units or groups of them handed out on demand."""

    def __init__(self, task: Task, target):
        super().__init__(task, target)
        self.modes = ["rows"] + (["lanes"] if (task.problem.get("conv") or {}).get("lanes") else [])

    @staticmethod
    def _config(mode: str, chunk: int, group: int) -> dict:
        if mode == "lanes":        # one unit per channel group: the row kernel's unit sizes do not apply
            chunk = group = 0
        return {"kind": "depthwise", "params": {"mode": mode, "chunk_outputs": chunk, "group_outputs": group}}

    def seeds(self) -> list[dict]:
        out = [DEFAULT]
        if len(self.modes) > 1:                 # narrow planes run channels in the lanes by default
            out.append(self._config("rows", 0, 0))
        out += [self._config("rows", chunk, 0) for chunk in (1024, 16384)]
        return out

    def sample(self, rng: random.Random) -> dict:
        return self._config(rng.choice(self.modes), rng.choice(DW_CHUNK_OUTPUTS), rng.choice(DW_GROUP_OUTPUTS))

    def mutate(self, config: dict, rng: random.Random) -> dict:
        p = dict(config.get("params") or {})
        mode, chunk, group = p.get("mode") or "rows", p.get("chunk_outputs") or 4096, p.get("group_outputs") or 0
        which = rng.randrange(3)
        if which == 0:
            mode = rng.choice(self.modes)
        elif which == 1:
            chunk = _neighbour(DW_CHUNK_OUTPUTS, chunk, rng)
        else:
            group = _neighbour(DW_GROUP_OUTPUTS, group, rng)
        return self._config(mode, chunk, group)

    def check(self, config: dict):
        from ..codegen.c.depthwise import DepthwiseParams

        def make(p: dict) -> DepthwiseParams:
            params = DepthwiseParams(**p)
            params.validate()
            return params
        params = self._checked(config, "depthwise", make)
        if params is not None and params.mode == "lanes" and "lanes" not in self.modes:
            raise InvalidCandidate("mode 'lanes' does not apply: this layer's planes are too wide for channels in the lanes")
        return params


# ---- blocked (NCHW[16]c) convolutions ------------------------------------------------------------
BLOCKED_BANDS = (1, 2, 3, 4, 7, 8, 14, 16, 28, 56)        # output rows a work unit (the direct kernel)
WINOGRAD_CHUNK_ROWS = (1, 2, 4, 8, 16, 32, 64)            # tile rows a Winograd chunk
DW_TILE_ROWS = (4, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28)   # positions a depthwise register tile


class BlockedSpace(Space):
    """``nchwc.BlockedParams`` of a blocked convolution.  Every candidate names its algorithm
    (among the layer's: direct, F(2x2), F(4x4); depthwise; mbconv for a fused chain), then each knob is the untuned rule (0)
    or a value from its choices: output blocks a tile (1-4, as many as the registers hold with
    their positions: 1-3 on AVX2), positions a tile (up to what the registers hold for those blocks), a divisor of the input blocks as the chunk, the band.
    Seeds: the default, each other algorithm with untuned knobs, and the tiles next to the
    untuned one."""

    def __init__(self, task: Task, target):
        from ..codegen.c import nchwc
        super().__init__(task, target)
        conv = task.problem["conv"]
        self.g = nchwc.ConvGeometry(**conv["geometry"])
        self.groups = int(conv.get("groups", 1))
        self.algorithms = tuple(conv["algorithms"])
        self.untuned = conv["algorithm"]

    def _choices(self, algorithm: str, blocks: int) -> dict[str, tuple[int, ...]]:
        """Each knob's values for ``algorithm`` (0: the untuned rule), rows for a tile of ``blocks``
        output blocks (0: the untuned count)."""
        from ..codegen.c import nchwc
        g = self.g
        if algorithm == "depthwise":
            most = nchwc.tile_rows(1, self.target)
            return {"rows": (0,) + tuple(r for r in DW_TILE_ROWS if r <= most)}
        most = nchwc.tile_rows(blocks or nchwc.MAX_BLOCKS, self.target)
        # tiles whose accumulators, weight vectors and broadcast fit the registers: AVX2's 4-block
        # tile needs 17 of its 16 and spills (``nchwc.untuned_blocks``)
        out = {"blocks": (0,) + tuple(range(1, min(nchwc.untuned_blocks(self.target), g.ob) + 1)),
               "rows": (0,) + tuple(range(2, most + 1)),
               "chunk": (0,) + tuple(d for d in range(1, g.cb + 1) if g.cb % d == 0)}
        if algorithm.startswith("winograd"):
            m = int(algorithm[len("winograd"):])
            tile_rows = g.n * -(-g.oh // m)
            out["band"] = (0,) + tuple(r for r in WINOGRAD_CHUNK_ROWS if r <= tile_rows)
        elif algorithm == "mbconv":
            from ..codegen.c.dw_pw import band_choices
            out["band"] = (0,) + tuple(band_choices(g.oh))
        elif not nchwc.small_map(g):
            out["band"] = (0,) + tuple(b for b in BLOCKED_BANDS if b <= g.oh)
        return out

    @staticmethod
    def _config(algorithm: str, **knobs: int) -> dict:
        return {"kind": "blocked", "params": {"algorithm": algorithm, **{k: v for k, v in knobs.items() if v}}}

    def seeds(self) -> list[dict]:
        out = [DEFAULT] + [self._config(a) for a in self.algorithms if a != self.untuned]
        if self.untuned == "depthwise":
            out += [self._config("depthwise", rows=r) for r in (7, 21) if r in self._choices("depthwise", 0)["rows"]]
        elif self.untuned in ("direct", "mbconv"):
            out += [self._config(self.untuned, blocks=b) for b in (1, 2) if b in self._choices("direct", 0)["blocks"]]
        return out

    def sample(self, rng: random.Random) -> dict:
        algorithm = rng.choice(self.algorithms)
        knobs: dict[str, int] = {}
        blocks = 0
        for name in ("blocks", "rows", "chunk", "band"):
            values = self._choices(algorithm, blocks).get(name)
            if values and rng.random() < 0.7:
                knobs[name] = rng.choice(values)
                blocks = knobs.get("blocks", 0)
        return self._config(algorithm, **knobs)

    def mutate(self, config: dict, rng: random.Random) -> dict:
        p = dict(config.get("params") or {}) if config.get("kind") == "blocked" else {}
        algorithm = p.pop("algorithm", "") or self.untuned
        choices = self._choices(algorithm, p.get("blocks", 0))
        names = list(choices) + (["algorithm"] if len(self.algorithms) > 1 else [])
        name = rng.choice(names)
        if name == "algorithm":
            algorithm = rng.choice([a for a in self.algorithms if a != algorithm])
            valid = self._choices(algorithm, p.get("blocks", 0))
            p = {k: v for k, v in p.items() if v in valid.get(k, ())}
        else:
            p[name] = _neighbour(choices[name], p.get(name, 0), rng)
            if name == "blocks" and p.get("rows", 0) not in self._choices(algorithm, p[name])["rows"]:
                p.pop("rows", None)
        return self._config(algorithm, **p)

    def check(self, config: dict):
        from ..codegen.c.nchwc import BlockedParams

        def make(params: dict) -> BlockedParams:
            out = BlockedParams(**params)
            out.validate(self.g, self.groups, self.algorithms, self.target)
            return out
        return self._checked(config, "blocked", make)


# ---- fused pairs of kernels ---------------------------------------------------------------------
class FusionSpace(Space):
    """The band of a fused pair (``dw_pw``, ``pw_dw``): output rows per band, one of the even splits
    of the output's rows (``dw_pw.band_choices``).  The untuned band keeps the band's buffer in
    L2 by a fixed byte budget; the best band also depends on the halo the bands recompute, the
    GEMM's width on a band's columns and how the bands share out among the threads."""

    def __init__(self, task: Task, target):
        super().__init__(task, target)
        self.choices = list(task.problem.get("choices") or [])
        self.default = task.problem.get("band_rows") or (self.choices[0] if self.choices else 1)

    @staticmethod
    def _config(rows: int) -> dict:
        return {"kind": "fusion", "params": {"band_rows": rows}}

    def _near(self, rows: int, step: int) -> int:
        i = self.choices.index(rows) if rows in self.choices else 0
        return self.choices[min(max(i + step, 0), len(self.choices) - 1)]

    def seeds(self) -> list[dict]:
        """The default, and the bands next to it (half and twice as many rows, where they exist)."""
        out = [DEFAULT]
        for rows in sorted({min(self.choices, key=lambda c: abs(c - self.default * f)) for f in (0.5, 2.0)}
                           if self.choices else ()):
            if rows != self.default:
                out.append(self._config(rows))
        return out

    def sample(self, rng: random.Random) -> dict:
        return self._config(rng.choice(self.choices))

    def mutate(self, config: dict, rng: random.Random) -> dict:
        rows = (config.get("params") or {}).get("band_rows", self.default)
        return self._config(self._near(rows, rng.choice((-2, -1, 1, 2))))

    def check(self, config: dict):
        def make(params: dict) -> int:
            if set(params) != {"band_rows"}:
                raise ValueError(f"fusion params are {{'band_rows': R}}, got {sorted(params)}")
            rows = params["band_rows"]
            if rows not in self.choices:
                raise ValueError(f"band_rows {rows!r} is not an even split of this pair's "
                                 f"{self.task.problem.get('out', ['?'])[0]} output rows (choices: {self.choices})")
            return rows
        return self._checked(config, "fusion", make)


# ---- contractions -------------------------------------------------------------------------------
KC_CHOICES = (64, 96, 128, 192, 256, 320, 384, 512, 768, 1024)
MC_BLOCKS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96)       # mc = mr * this
NC_PANELS = (1, 2, 4, 8, 16, 32, 64, 128)                   # nc = nr * this
UNROLLS = (1, 2, 4, 8)
MR_CHOICES = (2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28)


class GemmSpace(Space):
    """GemmParams knobs for one contraction, with blocks limited to what the problem can use."""

    def __init__(self, task: Task, target):
        super().__init__(task, target)
        from ..codegen.c import microkernels
        self.mk = microkernels
        self.fields = {f.name for f in dataclasses.fields(microkernels.GemmParams)}
        self.vw, self.regs = target.vector_width, target.vector_registers
        p = task.problem
        self.M, self.N, self.K = max(1, p.get("M", 1)), max(1, p.get("N", 1)), max(1, p.get("K", 1))
        self.tiles = [(mr, nv * self.vw) for mr in MR_CHOICES for nv in (1, 2, 3, 4)
                      if self._fits(mr, nv) and mr * nv >= 6 and mr <= max(2, self.M) * 2]
        self.threads = sorted({1, target.cores})
        # a convolution also chooses how it feeds the GEMM (im2col, batch folded, direct)
        self.algorithms = list((p.get("conv") or {}).get("algorithms") or [])

    def _fits(self, mr: int, nv: int) -> bool:
        """Accumulators + B vectors + one broadcast must stay in the vector registers."""
        return mr * nv + nv + 1 <= self.regs

    def _params(self, **kv):
        return self.mk.GemmParams.for_target(self.target, **kv)

    def _seed_tiles(self) -> list[tuple[int, int]]:
        """The register tiles the seeds use: the usual ones for 32 vector registers (AVX-512),
        else, when none of those fits (16 registers: AVX2), the ones that do (6 x 2 vectors, ...)."""
        vw = self.vw
        usual = [(mr, nr) for mr, nr in ((6, 4 * vw), (12, 2 * vw), (14, 2 * vw), (8, 3 * vw), (4, 4 * vw), (28, vw))
                 if self._fits(mr, nr // vw)]
        return usual or [(mr, nr) for mr, nr in ((6, 2 * vw), (4, 3 * vw), (12, vw), (14, vw))
                         if self._fits(mr, nr // vw)]

    def seeds(self) -> list[dict]:
        out = [DEFAULT]
        tiles = self._seed_tiles()
        for mr, nr in tiles:
            try:
                out.append(self._config(self._params(threads=self.target.cores, mr=mr, nr=nr)))
            except ValueError:
                pass
        # every convolution algorithm with the two usual tiles, so the first batch measures each
        for algorithm in self.algorithms:
            for mr, nr in tiles[:2]:
                out.append(self._config(self._params(threads=self.target.cores, mr=mr, nr=nr, pack_a=False,
                                                     conv_algorithm=algorithm)))
        return out

    @staticmethod
    def _config(params) -> dict:
        return {"kind": "gemm", "params": dataclasses.asdict(params)}

    def _round(self, x: int, m: int, cap: int) -> int:
        return max(m, min(x // m * m, -(-cap // m) * m))

    def sample(self, rng: random.Random) -> dict:
        mr, nr = rng.choice(self.tiles)
        kc = rng.choice([k for k in KC_CHOICES if k <= max(64, self.K)] or [64])
        params = dict(mr=mr, nr=nr, kc=kc, mc=self._round(mr * rng.choice(MC_BLOCKS), mr, self.M),
                      nc=self._round(nr * rng.choice(NC_PANELS), nr, self.N), unroll=rng.choice(UNROLLS),
                      threads=rng.choice(self.threads), pack_a=rng.random() < 0.6,
                      loop_order=rng.choice(self.mk.LOOP_ORDERS), schedule=rng.choice(self.mk.SCHEDULES))
        if self.algorithms:
            params["conv_algorithm"] = rng.choice(self.algorithms)
        return {"kind": "gemm", "params": {k: v for k, v in params.items() if k in self.fields}}

    def mutate(self, config: dict, rng: random.Random) -> dict:
        """One or two knobs changed: tile, a block size (a neighbour in its list), unroll, a flag."""
        if config.get("kind") != "gemm":
            return self.sample(rng)
        p = dict(config["params"])
        for _ in range(rng.choice((1, 1, 2))):
            knob = rng.choice(("tile", "kc", "mc", "nc", "unroll", "pack_a", "loop_order", "schedule", "threads")
                              + (("algorithm",) if len(self.algorithms) > 1 else ()))
            if knob == "tile":
                mr, nr = rng.choice(self.tiles)
                p["mc"] = self._round(p.get("mc", mr) // max(p.get("mr", mr), 1) * mr, mr, self.M)
                p["nc"] = self._round(p.get("nc", nr) // max(p.get("nr", nr), 1) * nr, nr, self.N)
                p["mr"], p["nr"] = mr, nr
            elif knob == "kc":
                p["kc"] = _neighbour(KC_CHOICES, p.get("kc", 256), rng)
            elif knob == "mc":
                mr = p.get("mr", 6)
                p["mc"] = self._round(mr * _neighbour(MC_BLOCKS, max(1, p.get("mc", mr) // mr), rng), mr, self.M)
            elif knob == "nc":
                nr = p.get("nr", self.vw)
                p["nc"] = self._round(nr * _neighbour(NC_PANELS, max(1, p.get("nc", nr) // nr), rng), nr, self.N)
            elif knob == "unroll":
                p["unroll"] = _neighbour(UNROLLS, p.get("unroll", 1), rng)
            elif knob == "pack_a":
                p["pack_a"] = not p.get("pack_a", True)
            elif knob == "loop_order":
                p["loop_order"] = rng.choice(self.mk.LOOP_ORDERS)
            elif knob == "schedule":
                p["schedule"] = rng.choice(self.mk.SCHEDULES)
            elif knob == "algorithm":
                p["conv_algorithm"] = rng.choice(self.algorithms)
            else:
                p["threads"] = rng.choice(self.threads)
        return {"kind": "gemm", "params": {k: v for k, v in p.items() if k in self.fields}}

    def check(self, config: dict):
        if config.get("kind") == "default":
            return None
        if config.get("kind") != "gemm":
            raise InvalidCandidate(f"task {self.task.name} is a contraction: config kind must be 'gemm'")
        try:
            params = self.mk.GemmParams(**config["params"])
            params.validate(self.vw)
        except (TypeError, ValueError, KeyError) as exc:
            raise InvalidCandidate(f"{self.task.name}: {exc}") from exc
        if not self._fits(params.mr, params.nr // self.vw):
            raise InvalidCandidate(f"{self.task.name}: register tile {params.mr}x{params.nr} needs more than "
                                   f"{self.regs} vector registers")
        if params.threads > self.target.cores:
            raise InvalidCandidate(f"{self.task.name}: {params.threads} threads on {self.target.cores} cores")
        if params.conv_algorithm and params.conv_algorithm not in self.algorithms:
            raise InvalidCandidate(f"{self.task.name}: convolution algorithm {params.conv_algorithm!r} does not "
                                   f"apply (possible: {self.algorithms or 'none, not a convolution'})")
        return params

    def features(self, config: dict, checked) -> np.ndarray | None:
        params = checked if checked is not None else self._params(threads=self.target.cores)
        try:
            from .features import gemm_features
        except ImportError:
            return None
        return np.asarray(gemm_features(dataclasses.asdict(params), self.task.problem, self.target), dtype=np.float64)


def _neighbour(choices, value, rng: random.Random):
    """A value next to ``value`` in ``choices`` (or a random one when ``value`` is not in it)."""
    if value not in choices:
        return rng.choice(choices)
    i = choices.index(value) + rng.choice((-2, -1, 1, 2))
    return choices[min(max(i, 0), len(choices) - 1)]


# ---- loop kernels -------------------------------------------------------------------------------
SPLIT_FACTORS = (2, 4, 8, 16, 32, 64, 128)
UNROLL_FACTORS = (2, 4, 8, 16)
_ADDABLE = ("split", "vectorize", "unroll", "parallel", "reorder", "compute_at", "cache_write")


class LoopSpace(Space):
    """Schedule traces of one loop kernel, grown from the default schedule's trace."""

    costly = True

    # Replays are memoised (a parent is replayed for every child drawn from it); the bound keeps memory flat.
    MEMO = 256

    def __init__(self, task: Task, target):
        super().__init__(task, target)
        self._default: list | None = None
        self._lowered = None
        self._memo: dict[str, Any] = {}

    def lowered(self):
        """A fresh copy of the kernel's unscheduled loop nest."""
        if self._lowered is None:
            from ..passes.lower.structured_to_loop import lower_kernel
            self._lowered = lower_kernel(self.task.kernel)
        return self._lowered.clone()

    def default_trace(self) -> list:
        """The steps of the schedule the compiler gives this kernel untuned."""
        if self._default is None:
            from ..schedule.default import default_schedule
            s = default_schedule(self.lowered(), self.target.cores)
            self._default = json.loads(s.trace.to_json())["steps"]
        return self._default

    def seeds(self) -> list[dict]:
        return [DEFAULT, _loop_config(self.default_trace())]

    def sample(self, rng: random.Random) -> dict:
        config = _loop_config(self.default_trace())
        for _ in range(rng.randint(1, 3)):
            config = self.mutate(config, rng)
        return config

    def mutate(self, config: dict, rng: random.Random) -> dict:
        steps = [list(s) for s in (config.get("trace", {}).get("steps") if config.get("kind") == "loop"
                                   else self.default_trace())]
        move = rng.choice(("factor", "factor", "drop", "add", "add"))
        tunable = [i for i, s in enumerate(steps) if s[0] in ("split", "tile", "unroll")]
        if move == "factor" and tunable:
            i = rng.choice(tunable)
            name, refs, dec = steps[i][0], steps[i][1], list(steps[i][2])
            k = rng.randrange(len(dec))
            dec[k] = rng.choice(UNROLL_FACTORS if name == "unroll" else SPLIT_FACTORS)
            steps[i] = [name, refs, dec]
        elif move == "drop" and steps:
            del steps[rng.randrange(len(steps))]
        else:
            step = self._random_step(steps, rng)
            if step is not None:
                steps.append(step)
        return _loop_config(steps)

    def _random_step(self, steps: list, rng: random.Random) -> list | None:
        """A step on a loop of the nest as ``steps`` leave it (often, not always, legal)."""
        from ..schedule.analysis import perfect_chain
        try:
            s = self._replay(steps)
        except InvalidCandidate:
            return None
        tags = [t for t in s.loop_tags() if t]
        if not tags:
            return None
        t = rng.choice(tags)
        loop = s.loop(t)
        chain = [l.attributes["tag"] for l in perfect_chain(loop)]
        prim = rng.choice(_ADDABLE)
        if prim == "split":
            return ["split", [t], [rng.choice(SPLIT_FACTORS)]]
        if prim == "unroll":
            return ["unroll", [t], [rng.choice(UNROLL_FACTORS)]]
        if prim == "reorder" and len(chain) > 1:
            return ["reorder", rng.sample(chain, 2), []]
        if prim == "parallel":
            return ["parallel", [chain[0]], []]
        if prim in ("compute_at", "cache_write"):       # a producer's (or accumulator's) new location
            from ..schedule.analysis import ALLOC, walk_ops
            computes = sorted({a.attributes["tag"][:-4] for a in walk_ops(s.fn, ALLOC)
                               if str(a.attributes.get("tag", "")).endswith(".buf")}) if prim == "compute_at" \
                else sorted({x.split(".")[0] for x in tags if x[:1].isdigit()})
            if computes:
                return [prim, [rng.choice(computes), t], []]
        return ["vectorize", [chain[-1]], []]

    def _replay(self, steps: list):
        """The schedule ``steps`` give (every primitive checks its legality; the IR verifier is left
        to the tests, it would cost more than the replay).  Raises InvalidCandidate."""
        from ..schedule.trace import Trace, replay
        text = json.dumps({"version": 1, "steps": steps})
        hit = self._memo.get(text)
        if isinstance(hit, InvalidCandidate):
            raise hit
        if hit is not None:
            return hit
        try:
            result = replay(self.lowered(), Trace.from_json(text), check=False)
        except ScheduleError as exc:
            result = InvalidCandidate(f"{self.task.name}: {exc}")
        if len(self._memo) >= self.MEMO:
            self._memo.pop(next(iter(self._memo)))
        self._memo[text] = result
        if isinstance(result, InvalidCandidate):
            raise result
        return result

    def check(self, config: dict):
        if config.get("kind") == "default":
            return None
        if config.get("kind") != "loop" or "trace" not in config:
            raise InvalidCandidate(f"task {self.task.name} is a loop kernel: config kind must be 'loop'")
        return self._replay(config["trace"].get("steps", [])).fn

    def features(self, config: dict, checked) -> np.ndarray | None:
        try:
            from .features import loop_features
        except ImportError:
            return None
        fn = checked if checked is not None else self._replay(self.default_trace()).fn
        return np.asarray(loop_features(fn, self.target), dtype=np.float64)


def _loop_config(steps: list) -> dict:
    return {"kind": "loop", "trace": {"version": 1, "steps": [list(s) for s in steps]}}

