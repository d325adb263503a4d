"""The measuring process: ``python -m tensorforge.tune.runner`` times candidate libraries.

It reads one JSON request per line on stdin and answers one JSON line each, on the stdout it was
started with (fd 1 is pointed at stderr, so whatever a candidate prints cannot corrupt the replies).
It runs apart from the tuner so that a candidate that crashes takes only this process down, and
one that hangs is killed on a deadline (``measure.py`` restarts it for the next candidate).

A request names a built library (a one-kernel model: ``tf_run(inputs, outputs, arena, weights)``,
or for a kernel over symbolic shapes ``tf_run_dyn(inputs, outputs, arena, weights, dims, offsets)``
with the request's ``dims`` and ``offsets``), its weight blob, inputs, output shapes, the reference outputs (or where to save them) and the
timing plan.  The output is checked against the reference after one warm-up call and before any
timing: a wrong candidate gets an error, never a latency.  A symbolic kernel's request may add
``checks``: other dims (with their inputs, outputs, reference, arena offsets) at which the same
library is called once and checked too.  An ``interleave`` request times several
already checked candidates round-robin (``measure.py`` sends one per batch, and one per task for the
confirmation against the default); its reply has the wall-clock times (``latencies``) and, per
round, the process CPU time divided by the kernels' thread count (``cpu``).  A request with
``rotate_bytes`` has its calls rotate through copies of the weight blob that together hold at
least that many bytes (weights out of L2, inputs warm: as in a model's run).
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import sys
import time
from typing import Any

import numpy as np

ALIGN = 64
# Most copies of a weight blob a cold-weight request rotates through (a tiny blob needs no more to
# push the others out of L2 between its uses).
MAX_WEIGHT_COPIES = 256


def _aligned_copy(arr: np.ndarray) -> np.ndarray:
    raw = np.empty(arr.nbytes + ALIGN, dtype=np.uint8)
    off = (-raw.ctypes.data) % ALIGN
    out = raw[off:off + arr.nbytes].view(arr.dtype).reshape(arr.shape)
    np.copyto(out, arr)
    return out


class _Arrays:
    """.npy files loaded once, 64-byte aligned (the runner sees the same inputs for many candidates)."""

    def __init__(self):
        self.cache: dict[str, np.ndarray] = {}

    def get(self, path: str) -> np.ndarray:
        arr = self.cache.get(path)
        if arr is None:
            if len(self.cache) > 64:
                self.cache.clear()
            arr = self.cache[path] = _aligned_copy(np.load(path))
        return arr


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """max |out - ref| / max |ref| (exact comparison for integer and bool outputs)."""
    if out.shape != ref.shape:
        return math.inf
    if out.dtype.kind in "biu":
        return 0.0 if np.array_equal(out, ref) else math.inf
    o, r = out.astype(np.float64), ref.astype(np.float64)
    if not np.all(np.isfinite(o) == np.isfinite(r)):
        return math.inf
    fin = np.isfinite(r)
    scale = max(float(np.max(np.abs(r[fin]))) if fin.any() else 0.0, 1e-6)
    return float(np.max(np.abs(o[fin] - r[fin]))) / scale if fin.any() else 0.0


class _Loaded:
    """A candidate library bound to its buffers; ``time(n)`` is the wall time of n runs."""

    def __init__(self, req: dict[str, Any], arrays: _Arrays):
        self.lib = lib = ctypes.CDLL(req["lib"])
        dynamic = req.get("dims") is not None
        self.run = lib.tf_run_dyn if dynamic else lib.tf_run
        self.run.argtypes = [ctypes.c_void_p] * (6 if dynamic else 4)
        self.run.restype = None
        lib.tf_set_num_threads.argtypes = [ctypes.c_int]
        self.threads = int(req.get("threads", 0))
        self.inputs = [arrays.get(p) for p in req["inputs"]]
        self.outputs = [_aligned_copy(np.zeros(tuple(o["shape"]), dtype=o["dtype"])) for o in req["outputs"]]
        self.weights = arrays.get(req["weights"]) if req.get("weights") else _aligned_copy(np.zeros(ALIGN, np.uint8))
        self.arena = _aligned_copy(np.zeros(max(int(req.get("arena", 0)), ALIGN), np.uint8))
        self.in_ptrs = (ctypes.c_void_p * max(len(self.inputs), 1))(*[a.ctypes.data for a in self.inputs])
        self.out_ptrs = (ctypes.c_void_p * max(len(self.outputs), 1))(*[o.ctypes.data for o in self.outputs])
        copies = max(1, min(MAX_WEIGHT_COPIES, -(-int(req.get("rotate_bytes", 0)) // max(1, self.weights.nbytes))))
        self.copies = [self.weights] + [_aligned_copy(self.weights) for _ in range(copies - 1)]
        head = (ctypes.addressof(self.in_ptrs), ctypes.addressof(self.out_ptrs), self.arena.ctypes.data)
        tail: tuple = ()
        if dynamic:       # the symbols' values and the arena buffers' offsets, kept alive with the candidate
            dims, offsets = [int(d) for d in req["dims"]], [int(o) for o in req.get("offsets") or ()]
            self.dims = (ctypes.c_int64 * max(len(dims), 1))(*dims)
            self.offsets = (ctypes.c_int64 * max(len(offsets), 1))(*offsets)
            tail = (ctypes.addressof(self.dims), ctypes.addressof(self.offsets))
        self.arg_sets = [head + (w.ctypes.data,) + tail for w in self.copies]
        self.args = self.arg_sets[0]
        self.turn = 0

    def time(self, n: int) -> float:
        return self.clocks(n)[0]

    def clocks(self, n: int) -> tuple[float, float]:
        """(wall seconds, process CPU seconds / threads) of n runs.  The CPU clock leaves out time
        the kernel's threads spent descheduled by other processes (it still counts their spinning
        at barriers)."""
        self.lib.tf_set_num_threads(self.threads)
        run, args = self.run, self.args
        c, t = time.process_time(), time.perf_counter()
        if len(self.arg_sets) == 1:
            for _ in range(n):
                run(*args)
        else:               # the next weight copy each call (see the module docstring)
            sets, k = self.arg_sets, self.turn
            for _ in range(n):
                k = k + 1 if k + 1 < len(sets) else 0
                run(*sets[k])
            self.turn = k
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        return wall, cpu / max(1, self.threads or os.cpu_count() or 1)


def _number(req: dict[str, Any], est: float) -> int:
    """Calls per repeat so that a repeat lasts about min_repeat_s (timer and call overhead amortised)."""
    return max(1, min(int(req.get("max_number", 1000)), math.ceil(float(req.get("min_repeat_s", 0.01)) / max(est, 1e-7))))


def run_request(req: dict[str, Any], arrays: _Arrays) -> dict[str, Any]:
    """One candidate: a warm-up call, the output check, then ``repeats`` timed repeats."""
    cand = _Loaded(req, arrays)
    first = cand.time(1)
    if req.get("save"):
        for path, o in zip(req["save"], cand.outputs):
            np.save(path, o)
    worst = 0.0
    for path, o in zip(req.get("reference") or [], cand.outputs):
        worst = max(worst, relative_error(o, arrays.get(path)))
    if worst > float(req.get("rtol", 1e-3)):
        return {"latencies": [], "error": f"wrong output: max relative error {worst:.3g}", "max_err": worst}
    for check in req.get("checks") or ():      # a symbolic kernel at other sizes: one call each, checked
        other = _Loaded(dict(req, **check), arrays)
        other.time(1)
        err = max((relative_error(o, arrays.get(p)) for p, o in zip(check["reference"], other.outputs)), default=0.0)
        if err > float(req.get("rtol", 1e-3)):
            return {"latencies": [], "max_err": err,
                    "error": f"wrong output at dims {check['dims']}: max relative error {err:.3g}"}
    number = _number(req, min(first, cand.time(1)))
    lat = [cand.time(number) / number for _ in range(int(req.get("repeats", 5)))]
    return {"latencies": lat, "error": None, "max_err": worst, "number": number}


def run_interleaved(reqs: list[dict[str, Any]], rounds: int, arrays: _Arrays) -> dict[str, Any]:
    """Candidates already checked, timed round-robin, the order reversed every other round
    (A B C, C B A, ...): a slow spell of a shared machine then hits every candidate of the batch
    alike instead of whichever ran during it, and no candidate always runs right after the same
    one (whose thread pool may still be spinning)."""
    loaded = []
    for req in reqs:
        cand = _Loaded(req, arrays)
        loaded.append((cand, _number(req, min(cand.time(1), cand.time(1)))))
    lat: list[list[float]] = [[] for _ in reqs]
    cpu: list[list[float]] = [[] for _ in reqs]
    order = list(range(len(loaded)))
    for r in range(rounds):
        for k in (order if r % 2 == 0 else order[::-1]):
            cand, n = loaded[k]
            wall, busy = cand.clocks(n)
            lat[k].append(wall / n)
            cpu[k].append(busy / n)
    return {"latencies": lat, "cpu": cpu, "error": None}


def main() -> None:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)                       # candidates' prints go to stderr, not into the protocol
    arrays = _Arrays()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            reply = (run_interleaved(req["interleave"], int(req["rounds"]), arrays) if "interleave" in req
                     else run_request(req, arrays))
        except Exception as exc:        # noqa: BLE001 - any failure is this candidate's, reported
            reply = {"latencies": [], "error": f"{type(exc).__name__}: {exc}"}
        proto.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
