"""Differential fuzzer: random ONNX graphs, native code == interpreter == onnxruntime.

    python -m tensorforge.testing.fuzz --cases 2000 --seed 1 --jobs 2 --out fuzz-out

Each batch of ``--batch`` random cases (``fuzz_graphs``), every one valid for onnx.checker and
onnxruntime, is compiled as one model per target (``fuzz_check.run_tensorforge``; a failure is
bisected down to its case) and every case's outputs are compared with onnxruntime's.  Batches run
in ``--jobs`` worker processes (a worker that dies, e.g. on a segfault in native code, has its
batch re-run case by case so the crash lands on one case).  Afterwards up to ``--minimize``
mismatches, the most distinct first, are shrunk (``fuzz_minimize``) and written as regression
tests under ``--out``/regressions (or ``--write-tests DIR``).  The summary counts graphs,
graphs per minute, onnxruntime rejections, op kinds covered, and mismatches by target, kind
(NaN-position / Inf / finite value / error / unsupported) and op.

A batch is reproducible from ``(seed, batch index)``: ``--seed S --first-batch B --cases K`` with
``--batch K`` re-runs batch B alone.
"""
from __future__ import annotations

import argparse
import collections
import faulthandler
import hashlib
import json
import os
import signal
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from .fuzz_graphs import Case, build_case, select_generators
from .fuzz_known import DEVIATION_KINDS
from .fuzz_values import DEFAULT_SPECIALS, parse_specials, specials_in


@dataclass
class Config:
    seed: int = 0
    batch: int = 16
    opsets: tuple[int, ...] = (18, 23)
    generators: tuple[str, ...] | None = None
    fraction: float | None = None          # None: random per case (0, 0.02, 0.1, 0.3)
    specials: tuple[str, ...] = DEFAULT_SPECIALS
    targets: tuple[str, ...] = ("cpu", "interpreter")
    max_ops: int = 6
    batch_timeout: int = 300
    inflight: str | None = None         # folder where each worker notes what it is doing (see _note)
    reference_hangs: frozenset = frozenset()   # (batch, attempt) whose onnxruntime reference never finished


@dataclass
class BatchResult:
    index: int
    cases: int = 0
    rejects: dict = field(default_factory=dict)
    mismatches: list = field(default_factory=list)       # Mismatch objects
    failing: dict = field(default_factory=dict)          # case name -> Case (for minimising)
    op_counts: dict = field(default_factory=dict)
    seconds: float = 0.0
    crashed: list = field(default_factory=list)          # case indices whose run killed the worker


class _Timeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _Timeout


def generate_batch(cfg: Config, index: int, only: int | None = None) -> tuple[list[Case], dict, collections.Counter]:
    """The valid cases of batch ``index`` and their onnxruntime references (deterministic;
    ``only`` just labels the progress notes)."""
    from .fuzz_check import InvalidCase, reference
    gens = select_generators(cfg.generators)
    cases, refs, rejects = [], {}, collections.Counter()
    attempt = 0
    while len(cases) < cfg.batch and attempt < cfg.batch * 10:
        rng = np.random.default_rng([cfg.seed, index, len(cases), attempt])
        attempt += 1
        opset = int(rng.choice(cfg.opsets))
        name = f"s{cfg.seed}b{index}c{len(cases)}"
        case = build_case(rng, name, opset, gens, cfg.fraction, cfg.specials, cfg.max_ops,
                          seed=cfg.seed)
        if not case.nodes or not case.outputs:
            rejects["empty graph"] += 1
            continue
        if (index, attempt) in cfg.reference_hangs:
            rejects["onnxruntime did not finish the reference (the worker was stopped)"] += 1
            continue
        _note(cfg, (index, only), "reference", attempt)
        try:
            refs[name] = reference(case)
        except InvalidCase as exc:
            rejects[_reason(str(exc))] += 1
            continue
        cases.append(case)
    return cases, refs, rejects


def _note(cfg: Config, key: tuple, phase: str, attempt: int = -1) -> None:
    """Records in ``cfg.inflight`` what this worker is doing (batch, phase, generator attempt,
    time), so that when a worker dies or hangs the parent knows which batch, and whether the
    hang was onnxruntime computing a reference (then the case is rejected, not a finding)."""
    if cfg.inflight:
        with open(os.path.join(cfg.inflight, str(os.getpid())), "w") as f:
            f.write(json.dumps([list(key), phase, attempt, time.time()]))


def _read_notes(folder: str) -> dict[tuple, tuple[str, int, float]]:
    """The last note of every worker: (batch, only) -> (phase, attempt, time)."""
    notes = {}
    for name in os.listdir(folder):
        try:
            with open(os.path.join(folder, name)) as f:
                key, phase, attempt, when = json.loads(f.read())
            os.unlink(os.path.join(folder, name))
        except (OSError, ValueError):
            continue
        if phase != "done":
            notes[tuple(key)] = (phase, attempt, when)
    return notes


def _reason(msg: str) -> str:
    for key in ("Status Message:", "Error:", ":"):
        if key in msg:
            msg = msg.split(key, 1)[1]
            break
    return msg.strip()[:80]


def run_batch(cfg: Config, index: int, only: int | None = None) -> BatchResult:
    """Generate, compile and check batch ``index`` (or only its case ``only``, on its own)."""
    from .fuzz_check import check_cases
    start = time.monotonic()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(cfg.batch_timeout)
    # SIGALRM only interrupts Python code; a hang inside native code (a generated kernel,
    # onnxruntime) would block the worker forever.  faulthandler's watchdog is a C thread: it
    # prints the stack and ends the process, which the parent sees as a dead worker and re-runs
    # case by case (a case that kills its worker twice is reported as "crash").
    faulthandler.dump_traceback_later(cfg.batch_timeout + 60, exit=True)
    res = BatchResult(index)
    try:
        cases, refs, rejects = generate_batch(cfg, index, only)
        if only is not None:
            cases = cases[only:only + 1]
        res.cases, res.rejects = len(cases), dict(rejects)
        counts = collections.Counter(op for c in cases for n in c.nodes for op in [n.op])
        res.op_counts = dict(counts)
        _note(cfg, (index, only), "tensorforge")
        res.mismatches = check_cases(cases, refs, cfg.targets)
        bad = {m.case for m in res.mismatches}
        res.failing = {c.name: c for c in cases if c.name in bad}
    except Exception as exc:  # noqa: BLE001 - a bug of the fuzzer itself: report it, keep going
        import traceback
        from .fuzz_check import Mismatch
        res.mismatches = [Mismatch(f"s{cfg.seed}b{index}", "harness", "", "harness-error",
                                   "".join(traceback.format_exception(exc))[-600:])]
    except _Timeout:
        from .fuzz_check import Mismatch
        res.mismatches = [Mismatch(f"s{cfg.seed}b{index}" + (f"c{only}" if only is not None else ""), "cpu", "",
                                   "timeout", f"batch did not finish in {cfg.batch_timeout} s")]
    finally:
        faulthandler.cancel_dump_traceback_later()
        _note(cfg, (index, only), "done")
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    res.seconds = time.monotonic() - start
    return res


# ---- minimising and writing regression tests -------------------------------------------------
def failure_predicate(target: str, kind: str, detail: str = ""):
    """``fails(case)``: the case still shows a mismatch of ``kind`` on ``target``."""
    from .fuzz_check import check_cases
    exc_type = detail.split(":", 1)[0] if kind in ("error", "unsupported", "unsupported-attr") else ""

    def fails(case: Case) -> bool:
        try:
            found = check_cases([case], targets=(target,))
        except Exception:  # noqa: BLE001 - the reference refused the variant
            return False
        return any(m.kind == kind and (not exc_type or m.detail.startswith(exc_type)) for m in found)
    return fails


def minimize_mismatch(case: Case, mismatch, max_calls: int = 80, max_seconds: float = 240.0) -> tuple[Case, list]:
    """(minimised case, its mismatches on the mismatch's target)."""
    from .fuzz_check import check_cases
    from .fuzz_minimize import minimize
    fails = failure_predicate(mismatch.target, mismatch.kind, mismatch.detail)
    small = minimize(case, fails, max_calls=max_calls, max_seconds=max_seconds)
    return small, check_cases([small], targets=(mismatch.target,))


def _short(case: Case) -> dict[str, str]:
    """Readable tensor names for a regression test (the case prefix dropped)."""
    prefix = case.name + "_"
    names = set(case.inputs) | set(case.inits) | {o for n in case.nodes for o in n.outputs} | \
        {i for n in case.nodes for i in n.inputs if i}
    return {n: (n[len(prefix):] if n.startswith(prefix) else n) or n for n in names}


def _array_code(a: np.ndarray) -> str:
    a = np.asarray(a)
    dt = a.dtype.name
    flat = a.reshape(-1).tolist()
    if a.dtype.kind == "f":
        items = []
        for v in flat:
            if v != v:
                items.append("nan")
            elif v in (float("inf"), float("-inf")):
                items.append("inf" if v > 0 else "-inf")
            else:
                items.append(repr(float(v)))
        body = ", ".join(items)
    else:
        body = ", ".join(repr(v) for v in flat)
    return f"np.array([{body}], dtype=np.{dt}).reshape({tuple(a.shape)!r})"


def _attr_code(v) -> str:
    if isinstance(v, bytes):
        v = v.decode()
    if isinstance(v, np.ndarray):
        return f"numpy_helper.from_array({_array_code(v)})"
    if isinstance(v, (list, tuple)):
        return repr([x.decode() if isinstance(x, bytes) else x for x in v])
    return repr(v)


def case_code(case: Case) -> str:
    """Python source of ``build()`` (the ONNX model) and ``FEEDS`` (its inputs) for ``case``."""
    from onnx import helper
    rn = _short(case)
    lines = ["def build():", "    nodes = ["]
    for n in case.nodes:
        attrs = "".join(f", {k}={_attr_code(v)}" for k, v in n.attrs.items())
        lines.append(f"        helper.make_node({n.op!r}, {[rn.get(i, i) if i else '' for i in n.inputs]!r}, "
                     f"{[rn[o] for o in n.outputs]!r}{attrs}),")
    lines.append("    ]")

    def vi(name):
        dt, shape = case.types[name]
        return f"helper.make_tensor_value_info({rn.get(name, name)!r}, {helper.np_dtype_to_tensor_dtype(np.dtype(dt))}, {list(shape)!r})"
    lines.append("    inputs = [" + ", ".join(vi(k) for k in case.inputs) + "]")
    lines.append("    outputs = [" + ", ".join(vi(k) for k in case.outputs) + "]")
    lines.append("    inits = [")
    for k, v in case.inits.items():
        lines.append(f"        numpy_helper.from_array({_array_code(v)}, {rn.get(k, k)!r}),")
    lines.append("    ]")
    lines.append('    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)')
    lines.append(f'    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", {case.opset})], ir_version=10)')
    lines.append("")
    lines.append("")
    lines.append("FEEDS = [")
    for v in case.inputs.values():
        lines.append(f"    {_array_code(v)},")
    lines.append("]")
    return "\n".join(lines)


def case_digest(case: Case) -> str:
    return hashlib.sha256(case_code(case).encode()).hexdigest()[:10]


def write_regression(case: Case, mismatches: Sequence, directory: str | os.PathLike, command: str = "",
                     xfail_reason: str | None = None) -> Path:
    """A pytest file that rebuilds ``case`` and asserts every target agrees with onnxruntime."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    digest = case_digest(case)
    targets = sorted({m.target for m in mismatches}) or ["cpu", "interpreter"]
    summary = "; ".join(sorted({f"{m.target} {m.kind} ({','.join(m.ops)})" for m in mismatches}))[:300]
    detail = "\n".join(f"    {m.line()}"[:400] for m in mismatches[:4])
    mark = f"@pytest.mark.xfail(strict=True, reason={xfail_reason!r})\n" if xfail_reason else ""
    text = f'''"""Differential-fuzzer regression {digest}: {summary}.

Found by {command or "python -m tensorforge.testing.fuzz"} and minimised; when found:
{detail}
"""
import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402,F401

from tensorforge.testing.fuzz_check import check_model  # noqa: E402

nan, inf = np.nan, np.inf


{case_code(case)}


{mark}def test_fuzz_{digest}():
    assert check_model(build(), FEEDS, targets={tuple(targets)!r}) == []
'''
    path = directory / f"test_fuzz_{digest}.py"
    path.write_text(text)
    return path


# ---- the driver ------------------------------------------------------------------------------
def _pick_for_minimizing(mismatches: list, failing: dict, limit: int) -> list:
    """Up to ``limit`` mismatches with distinct (target, kind, op set), non-NaN kinds first."""
    order = {"error": 0, "value": 1, "shape": 1, "dtype": 1, "timeout": 2, "inf": 3, "nan": 4}
    seen, picked = set(), []
    for m in sorted(mismatches, key=lambda m: (order.get(m.kind, 5), len(failing[m.case].nodes) if m.case in failing else 99)):
        if m.case not in failing or m.kind in DEVIATION_KINDS + ("unsupported",):
            continue
        key = (m.target, m.kind, m.detail.split(":", 1)[0] if m.kind == "error" else tuple(m.ops))
        if key in seen:
            continue
        seen.add(key)
        picked.append(m)
        if len(picked) >= limit:
            break
    return picked


def _minimize_task(case: Case, mismatch) -> tuple:
    small, found = minimize_mismatch(case, mismatch)
    return mismatch, small, found


def _after_broken_pool(cfg: Config, futs: dict, completed: set, results: list, pending: list, retried: set) -> None:
    """A worker died (segfault, abort) or its watchdog ended a native hang, and the pool with it.
    Batches that never started, or finished, are kept or queued again whole.  Of those running
    (the workers' notes say which): a hang in onnxruntime computing a reference rejects that case
    (it cannot be checked; counted among the rejects) and the batch runs again without it;
    otherwise the batch runs again case by case, and a case that kills its worker twice on its
    own is a "crash" finding."""
    from .fuzz_check import Mismatch
    notes = _read_notes(cfg.inflight) if cfg.inflight else {}
    hung_for = cfg.batch_timeout + 30
    for f, key in futs.items():
        if key in completed:
            continue
        if f.done() and not f.cancelled() and f.exception() is None:
            results.append(f.result())
            continue
        note = notes.get(key)
        if note is None:                       # never started: queue it again as it was
            pending.append(key)
        elif note[0] == "reference" and time.time() - note[2] >= hung_for:
            cfg.reference_hangs = cfg.reference_hangs | {(key[0], note[1])}
            pending.append(key)
        elif key[1] is None:
            pending.extend((key[0], j) for j in range(cfg.batch))
        elif key not in retried:
            retried.add(key)
            pending.append(key)
        else:
            r = BatchResult(key[0], cases=1)
            r.mismatches = [Mismatch(f"s{cfg.seed}b{key[0]}c{key[1]}", "cpu", "", "crash",
                                     "the worker process died (segfault, abort, or a native hang past the "
                                     "watchdog) running this case")]
            results.append(r)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tensorforge.testing.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=200, help="random graphs to check")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--batch", type=int, default=16, help="graphs compiled together as one model")
    p.add_argument("--first-batch", type=int, default=0, help="index of the first batch (to re-run one)")
    p.add_argument("--ops", nargs="*", help="only generators / ONNX op kinds named")
    p.add_argument("--opsets", default="18,23")
    p.add_argument("--fraction", type=float, default=None, help="share of special values (default: random per graph)")
    p.add_argument("--specials", default=None, help="comma list of " + ",".join(DEFAULT_SPECIALS) + " (or none)")
    p.add_argument("--targets", default="cpu,interpreter")
    p.add_argument("--max-ops", type=int, default=6)
    p.add_argument("--minimize", type=int, default=10, help="how many distinct mismatches to minimise")
    p.add_argument("--out", default=None, help="folder for report.json and regressions/")
    p.add_argument("--write-tests", default=None, help="folder for regression tests (default OUT/regressions)")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    cfg = Config(seed=a.seed, batch=a.batch, opsets=tuple(int(x) for x in a.opsets.split(",")),
                 generators=tuple(a.ops) if a.ops else None, fraction=a.fraction,
                 specials=parse_specials(a.specials), targets=tuple(a.targets.split(",")), max_ops=a.max_ops)
    select_generators(cfg.generators)          # fail fast on a bad --ops
    n_batches = max(1, -(-a.cases // a.batch))
    indices = list(range(a.first_batch, a.first_batch + n_batches))
    log = (lambda s: None) if a.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    start = time.monotonic()
    results: list[BatchResult] = []
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    pending = [(i, None) for i in indices]
    retried: set = set()
    import tempfile
    notes_dir = tempfile.TemporaryDirectory(prefix="tf-fuzz-")
    cfg.inflight = notes_dir.name
    while pending:
        with ProcessPoolExecutor(max_workers=max(1, a.jobs), mp_context=ctx) as ex:
            futs = {ex.submit(run_batch, cfg, i, only): (i, only) for i, only in pending}
            pending, completed = [], set()
            try:
                for f in as_completed(futs):
                    try:
                        results.append(f.result())
                    except BrokenProcessPool:
                        raise
                    except Exception as exc:  # noqa: BLE001 - e.g. a result that does not unpickle
                        from .fuzz_check import Mismatch
                        r = BatchResult(futs[f][0])
                        r.mismatches = [Mismatch(f"s{cfg.seed}b{futs[f][0]}", "harness", "", "harness-error", repr(exc))]
                        results.append(r)
                    completed.add(futs[f])
                    done = sum(x.cases for x in results)
                    if len(results) % max(1, min(10, len(indices) // 20)) == 0:
                        rate = done / max(1e-9, time.monotonic() - start) * 60
                        log(f"{done} graphs, {sum(len(x.mismatches) for x in results)} mismatches, {rate:.0f} graphs/min")
            except BrokenProcessPool:
                _after_broken_pool(cfg, futs, completed, results, pending, retried)
    notes_dir.cleanup()
    elapsed = time.monotonic() - start
    mismatches = [m for r in results for m in r.mismatches]
    failing = {k: v for r in results for k, v in r.failing.items()}
    total = sum(r.cases for r in results)
    rejects = collections.Counter()
    ops = collections.Counter()
    for r in results:
        rejects.update(r.rejects)
        ops.update(r.op_counts)
    from .fuzz_known import known
    all_open = [m for m in mismatches if m.kind not in DEVIATION_KINDS + ("unsupported",)]
    known_mm = [m for m in all_open if known(m)]
    open_mm = [m for m in all_open if not known(m)]
    by_kind = collections.Counter((m.target, m.kind) for m in open_mm)
    by_op = collections.Counter()
    for m in open_mm:
        for op in m.ops:
            by_op[(m.kind, op)] += 1
    summary = {
        "graphs": total, "seconds": round(elapsed, 1), "graphs_per_minute": round(total / max(elapsed, 1e-9) * 60, 1),
        "seed": a.seed, "batch": a.batch, "jobs": a.jobs, "op_kinds_covered": len(ops),
        "open_mismatches": len(open_mm), "cases_with_open_mismatches": len({m.case for m in open_mm}),
        "known_mismatches": len(known_mm),
        "known_by_issue": dict(collections.Counter(known(m).test for m in known_mm)),
        "nan_inf_related": sum(1 for m in open_mm if m.kind in ("nan", "inf")),
        "finite_value": sum(1 for m in open_mm if m.kind == "value" and not m.specials),
        "value_with_specials_in_inputs": sum(1 for m in open_mm if m.kind == "value" and m.specials),
        "errors": sum(1 for m in open_mm if m.kind in ("error", "crash", "timeout", "shape", "dtype", "unsupported-attr",
                                                        "harness-error")),
        "unsupported": sum(1 for m in mismatches if m.kind == "unsupported"),
        "ort_deviations": sum(1 for m in mismatches if m.kind == "ort-deviation"),
        "order_dependent": sum(1 for m in mismatches if m.kind == "order-dependent"),
        "documented_deviations": sum(1 for m in mismatches if m.kind == "documented-deviation"),
        "ill_conditioned": sum(1 for m in mismatches if m.kind == "ill-conditioned"),
        "by_target_kind": {f"{t}/{k}": v for (t, k), v in by_kind.most_common()},
        "by_kind_op": {f"{k}/{o}": v for (k, o), v in by_op.most_common(40)},
        "rejected_by_onnxruntime": dict(rejects.most_common(15)),
        "reference_hangs": [f"s{cfg.seed}b{b} attempt {t}" for b, t in sorted(cfg.reference_hangs)],
        "op_counts": dict(ops.most_common()),
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "op_counts"}, indent=1))
    for m in open_mm[:40]:
        print(m.line()[:300])
    minimised = []
    if a.minimize and open_mm:
        picked = _pick_for_minimizing(open_mm, failing, a.minimize)
        log(f"minimising {len(picked)} mismatches")
        with ProcessPoolExecutor(max_workers=max(1, a.jobs), mp_context=ctx) as ex:
            futs = [ex.submit(_minimize_task, failing[m.case], m) for m in picked]
            for f in as_completed(futs):
                try:
                    minimised.append(f.result())
                except Exception as exc:  # noqa: BLE001
                    log(f"minimising failed: {exc}")
    reg_dir = a.write_tests or (os.path.join(a.out, "regressions") if a.out else None)
    written = []
    command = f"python -m tensorforge.testing.fuzz --seed {a.seed} --cases {a.cases} --batch {a.batch}"
    for m, small, found in minimised:
        kinds = [x for x in found if x.kind not in DEVIATION_KINDS] or [m]
        entry = {"original": m.line(), "minimised_ops": small.ops, "nodes": len(small.nodes),
                 "mismatches": [x.line() for x in kinds],
                 "specials_left": sorted(set().union(*[specials_in(v) for v in small.inputs.values()]))
                 if small.inputs else []}
        if reg_dir:
            entry["test"] = str(write_regression(small, kinds, reg_dir, command))
        written.append(entry)
        print(f"minimised: {m.target} {m.kind} -> {len(small.nodes)} nodes {small.ops} "
              f"specials {entry['specials_left']}: {kinds[0].detail[:160]}")
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        report = dict(summary, mismatches=[asdict(m) for m in mismatches], minimised=written)
        Path(a.out, "report.json").write_text(json.dumps(report, indent=1, default=str))
    return 1 if open_mm else 0


if __name__ == "__main__":
    sys.exit(main())
