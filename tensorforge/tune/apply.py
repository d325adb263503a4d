"""Tuned configs -> the code generator's per-kernel overrides.

``Tuning`` answers the questions the C code generator asks for every kernel it emits:
``params_for(kernel)`` (GemmParams for a tensorized contraction, DepthwiseParams for a depthwise
convolution, a ``qgemm.Tiling`` for an int8 GEMM or convolution, ``nchwc.BlockedParams`` for a
blocked convolution, via ``Tensorizer(params_for=...)``),
``schedule_for(kernel)`` (a schedule that replays a tuned trace, via
``generate_model_c(schedule_for=...)``) and, for two kernels it fuses, ``fusion_for(first,
second)`` (the band rows, via ``Tensorizer(fusion_for=...)``); None means "do what you do
untuned".  Configs come from a fixed map (the measurer: one candidate) or from the tuning
database (compile: the best record of each kernel's workload for this target, by
``TuningDatabase.best``: the confirmed winner over the default when the tuner confirmed the
kernel, else the Pareto rule).

A record that no longer applies (a trace recorded by an older schedule library, params an older
GemmParams had) is skipped with a warning, never an error: compile then takes the default.

Kernels over symbolic shapes are looked up by the same key (``tasks.workload_key``: the structural
hash with the symbolic types), so one record, tuned at the symbols' hints, serves every size of
the range.  Its trace replays on the symbolic loop nest (primitives guard what they cannot prove
for every size); a replay the primitives reject falls back to the default schedule with a warning.
"""
from __future__ import annotations

import dataclasses
import json
import os
import warnings
from typing import Any, Callable

from ..errors import ScheduleError, TensorforgeError
from ..ir.core import Operation
from .tasks import pair_key, workload_key

AUTO = "auto"           # compile's default: the default database when the file exists
CPU_KINDS = ("gemm", "depthwise", "int8", "blocked", "loop", "fusion")   # the config kinds the C code generator applies


class Tuning:
    """Per-kernel configs, looked up by workload key (memoised: one lookup per distinct kernel)."""

    def __init__(self, lookup: Callable[[str], dict | None], target=None):
        self._lookup = lookup
        self._memo: dict[str, dict | None] = {}
        self.target = target
        self.applied: dict[str, dict] = {}        # workload key -> config actually used

    @classmethod
    def fixed(cls, configs: dict[str, dict], target=None) -> "Tuning":
        return cls(configs.get, target)

    def stored_config(self, key: str) -> dict | None:
        """The database's chosen config for workload ``key`` as stored, of any kind (the GPU
        tuner's configs included; ``config_for`` keeps the CPU kinds only)."""
        return self._lookup(key)

    def config_for(self, kernel: Operation) -> dict | None:
        return self._config(workload_key(kernel))

    def _config(self, key: str) -> dict | None:
        """The stored config of ``key`` when it is of a kind the C code generator applies."""
        if key not in self._memo:
            cfg = self._lookup(key)
            self._memo[key] = cfg if cfg and cfg.get("kind") in CPU_KINDS else None
        return self._memo[key]

    def params_for(self, kernel: Operation):
        """Tuned GemmParams for a tensorized kernel (DepthwiseParams for a depthwise one, a
        qgemm.Tiling for an int8 GEMM or convolution, BlockedParams for a blocked one), or None."""
        cfg = self.config_for(kernel)
        if cfg is None or cfg["kind"] not in ("gemm", "depthwise", "int8", "blocked"):
            return None
        from ..codegen.c.depthwise import DepthwiseParams
        from ..codegen.c.microkernels import GemmParams
        from ..codegen.c.nchwc import BlockedParams
        from ..codegen.c.qgemm import Tiling
        kind = {"gemm": GemmParams, "depthwise": DepthwiseParams, "int8": Tiling, "blocked": BlockedParams}[cfg["kind"]]
        try:
            params = kind(**cfg["params"])
            if kind is DepthwiseParams:
                params.validate()
            elif kind is BlockedParams:
                _validate_blocked(params, kernel, self.target or _host())
            elif kind is Tiling:
                params.validate(self.target or _host())
            elif self.target is not None:
                params.validate(self.target.vector_width)
        except (TypeError, ValueError) as exc:
            warnings.warn(f"tuned {kind.__name__} of kernel {_name(kernel)} no longer apply ({exc}); using the default")
            return None
        self.applied[workload_key(kernel)] = cfg
        return params

    def fusion_for(self, first: Operation, second: Operation) -> int | None:
        """Tuned band rows of a fused pair (``dw_pw``, ``pw_dw``: ``first`` runs fused with
        ``second`` right after it), looked up by ``tasks.pair_key``; None: the untuned band."""
        key = pair_key(first, second)
        cfg = self._config(key)
        if cfg is None or cfg["kind"] != "fusion":
            return None
        rows = (cfg.get("params") or {}).get("band_rows")
        if not isinstance(rows, int) or isinstance(rows, bool) or rows < 1:
            warnings.warn(f"tuned fusion of kernels {_name(first)} and {_name(second)} no longer applies "
                          f"(band_rows {rows!r}); using the default band")
            return None
        self.applied[key] = cfg
        return rows

    def hooks(self) -> tuple[Callable, Callable]:
        """The Tensorizer's hooks (``params_for``, ``fusion_for``)."""
        return self.params_for, self.fusion_for

    def schedule_for(self, kernel: Operation) -> Callable[[Operation], None] | None:
        """A schedule replaying the tuned trace of a loop kernel, or None."""
        cfg = self.config_for(kernel)
        if cfg is None or cfg["kind"] != "loop":
            return None
        from ..schedule.trace import Trace, replay
        trace = Trace.from_json(json.dumps(cfg["trace"]))
        key = workload_key(kernel)

        def schedule(fn: Operation):
            """Returns the Schedule (its trace is what ``explain`` shows)."""
            try:
                replay(fn.clone(), trace, check=False)      # all or nothing: a trial run first
            except (ScheduleError, TensorforgeError) as exc:    # also a symbolic extent a step cannot take
                from ..schedule.default import default_schedule
                warnings.warn(f"tuned schedule of kernel {_name(kernel)} no longer applies ({exc}); "
                              f"using the default")
                return default_schedule(fn, self.target.cores if self.target is not None else None)
            self.applied[key] = cfg
            return replay(fn, trace, check=False)

        return schedule


def _validate_blocked(params, kernel: Operation, target) -> None:
    """ValueError unless ``params`` apply to the blocked conv ``kernel`` (its geometry, groups and
    algorithms)."""
    from ..codegen.c.library_kernels import blocked_algorithms, blocked_geometry, blocked_tunable
    if not blocked_tunable(kernel):
        raise ValueError("the kernel is not a blocked convolution")
    g, groups = blocked_geometry(kernel)
    params.validate(g, groups, blocked_algorithms(kernel), target)


def _host():
    from ..codegen.target import Target
    return Target.host()


def _name(kernel: Operation) -> str:
    return str(kernel.attributes.get("sym_name", "kernel"))


def tuning_from_db(db: Any = AUTO, target=None, latency_slack: float = 0.0,
                   margin: float | None = None) -> Tuning | None:
    """The best records of ``db`` for ``target`` as a Tuning; None when there is no database.
    A confirmed kernel gets its tuned config only when it beat the default by more than
    ``margin`` (default ``database.CONFIRM_MARGIN``) in the confirmation, else the default.

    ``db``: a path, an open ``TuningDatabase``, None (no tuning) or ``"auto"`` (the default
    database if the file exists: compiling never creates one)."""
    if db is None or db is False:
        return None
    from ..codegen.target import Target
    target = target or Target.host()
    try:
        from .database import TuningDatabase, default_path
    except ImportError:                         # pragma: no cover - database module not installed
        return None
    auto = isinstance(db, str) and db == AUTO
    if auto:
        db = default_path()
        if not os.path.exists(db):
            return None
    try:
        opened = db if isinstance(db, TuningDatabase) else TuningDatabase(db, readonly=True)
    except TensorforgeError as exc:
        if not auto:
            raise
        warnings.warn(f"the default tuning database is not usable, compiling untuned: {exc}")
        return None
    target_key = target.key()

    def lookup(key: str) -> dict | None:
        rec = opened.best(key, target_key, latency_slack=latency_slack,
                          **({} if margin is None else {"margin": margin}))
        return rec.config if rec is not None else None

    return Tuning(lookup, target)


def gemm_config(params) -> dict:
    """The config of a GemmParams (what the database stores)."""
    return {"kind": "gemm", "params": dataclasses.asdict(params)}
