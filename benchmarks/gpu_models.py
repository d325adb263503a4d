"""tensorforge CUDA against torch eager and torch.compile on the model zoo, on one NVIDIA GPU (H200).

    .venv/bin/python benchmarks/gpu_models.py                               # every zoo model
    .venv/bin/python benchmarks/gpu_models.py --models mlp,resnet18 --out results.json
    .venv/bin/python benchmarks/gpu_models.py --dry-run                     # no GPU needed

For each model (``tensorforge.models.names()``, each at the zoo's default batch) a run records:

- ``compile_s``: ``tensorforge.compile(module, inputs, target="cuda")`` (lowering, CUDA C, NVRTC);
- ``kernels``: per-kernel resources from ptxas (registers, spills, static shared memory) and the
  problems ``check_resources`` finds against the H200's limits;
- ``max_abs_err`` / ``max_rel_err``: tensorforge's outputs against torch eager's (on CUDA when
  torch has CUDA, else torch on the CPU, with a ``note`` saying so); the relative error is
  max |tf - torch| / max |torch| over every output;
- ``tensorforge_ms``, ``torch_eager_ms``, ``torch_compile_ms``: medians over ``--repeats`` calls
  after ``--warmup``, interleaved (``tensorforge.benchmark.time_interleaved``).  Every call is
  followed by a device synchronisation and timed by the host clock: tensorforge runs on a stream
  of its own and torch on torch's, so one clock around call + synchronise measures all three alike.
  tensorforge gets the same torch CUDA tensors as torch (no copies).  A contender that cannot run
  (no NVIDIA driver for tensorforge, no CUDA torch, torch.compile failing or out of budget) has
  ``<name>_skipped`` with the reason instead.

The whole run is bounded by ``--budget-s`` (default 270 s, under five minutes with start-up): the
models left when it is spent are recorded as skipped, the timing of a model stops early when the
budget runs low, torch.compile (tens of seconds per model) is skipped when too little is left, and
an alarm cuts a model that overruns.  The JSON is rewritten after every model, so an interrupted
run keeps what it measured.

``--dry-run`` runs nothing on a GPU: it checks the imports, then for each model compiles it with
``target="cuda"`` and reads the CUDA source the compiled model exposes, compiles that with NVRTC
(cached) and records the kernels' resources and problems.  Where ``target="cuda"`` or the source
is not there, the model is recorded as skipped with the reason.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

DEFAULT_OUT = "build/gpu_models.json"
COMPILE_RESERVE_S = 90.0      # torch.compile of a zoo model takes tens of seconds; skip it with less left
MODEL_RESERVE_S = 10.0        # don't start a model with less than this left
ALARM_GRACE_S = 15            # how far past the budget a model may run before the alarm cuts it


class BudgetExceeded(Exception):
    """Raised by the alarm when a model runs past the budget."""


class Budget:
    """The run's deadline on the monotonic clock."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def arm(self) -> None:
        """An alarm a little after the deadline: a model that overruns is cut (recorded as such)."""
        if hasattr(signal, "SIGALRM"):
            def cut(signum, frame):
                raise BudgetExceeded(f"the run's budget of {self.seconds:.0f} s ran out during this model")
            signal.signal(signal.SIGALRM, cut)
            signal.alarm(max(1, int(self.left()) + ALARM_GRACE_S))

    @staticmethod
    def disarm() -> None:
        if hasattr(signal, "SIGALRM"):
            signal.alarm(0)


# ---- helpers --------------------------------------------------------------------------------

def one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0][:400] if text else type(exc).__name__


def as_numpy_list(x: Any) -> list:
    """Every tensor or array in ``x`` (nested tuples, lists, dicts), as NumPy arrays in order."""
    import numpy as np
    if isinstance(x, dict):
        return [a for v in x.values() for a in as_numpy_list(v)]
    if isinstance(x, (tuple, list)):
        return [a for v in x for a in as_numpy_list(v)]
    if hasattr(x, "detach"):
        return [x.detach().float().cpu().numpy() if str(x.dtype) == "torch.bfloat16" else x.detach().cpu().numpy()]
    return [np.asarray(x)]


def errors(outs: list, refs: list) -> dict:
    from tensorforge.benchmark.stats import max_abs_diff_all, max_rel_err_all
    return {"outputs": len(refs), "max_abs_err": max_abs_diff_all(outs, refs),
            "max_rel_err": max_rel_err_all(outs, refs)}


def cuda_source(cm: Any) -> str | None:
    """The CUDA C of a model compiled with ``target="cuda"``: ``cm.source``, else its runtime's."""
    for holder in (cm, getattr(cm, "native", None), getattr(getattr(cm, "native", None), "program", None)):
        source = getattr(holder, "source", None)
        if isinstance(source, str) and source:
            return source
    return None


def kernel_report(cm: Any, source: str, arch: str) -> dict:
    """Per-kernel resources of ``source`` (NVRTC, cached; the compiled model's own binary when it
    carries one) and the problems against the H200's limits."""
    from tensorforge.codegen.cuda.nvrtc import CudaBinary, check_resources, compile_cuda
    from tensorforge.codegen.target import GpuTarget

    native = getattr(cm, "native", None)
    binary = getattr(native, "binary", None)
    report: dict = {"nvrtc_by": "tensorforge.compile"}
    if not isinstance(binary, CudaBinary):
        t0 = time.perf_counter()
        binary = compile_cuda(source, arch)
        report = {"nvrtc_by": "this script", "nvrtc_s": time.perf_counter() - t0}
    program = getattr(native, "program", None)
    threads = {name: info.threads for name, info in getattr(program, "kernels", {}).items()}
    resources = binary.resources
    return {
        **report, "nvrtc_cache_hit": binary.cache_hit, "cubin_bytes": len(binary.cubin),
        "source_chars": len(source), "kernels": len(resources),
        "launches": len(getattr(program, "launches", [])) or None,
        "max_registers": max((r.registers for r in resources.values()), default=0),
        "max_shared_bytes": max((r.shared_bytes for r in resources.values()), default=0),
        "spilling_kernels": sorted(name for name, r in resources.items() if r.spills),
        "problems": check_resources(resources, GpuTarget.h200(), threads),
        "resources": {name: r.as_dict() for name, r in resources.items()},
    }


def sync_after(fn: Callable[[], Any], sync: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        fn()
        sync()
    return run


# ---- one model ------------------------------------------------------------------------------

def compile_model(name: str, args) -> tuple[dict, Any, Any, tuple]:
    """(row, compiled model, torch module, example inputs) of zoo model ``name`` at its default batch."""
    import tensorforge
    from tensorforge import models

    module, inputs = models.get(name)
    row: dict = {"model": name, "batch": models.describe(name).default_batch,
                 "inputs": [[list(x.shape), str(x.dtype).removeprefix("torch.")] for x in inputs]}
    t0 = time.perf_counter()
    cm = tensorforge.compile(module, inputs, target="cuda")
    row["compile_s"] = time.perf_counter() - t0
    source = cuda_source(cm)
    if source is None:
        row["kernels_skipped"] = "the compiled model exposes no CUDA source (.source)"
    else:
        try:
            row["kernels"] = kernel_report(cm, source, args.arch)
        except Exception as exc:      # a report must not stop the run
            row["kernels_error"] = one_line(exc)
    return row, cm, module, inputs


def dry_run_model(name: str, args, budget: Budget) -> dict:
    row, _, _, _ = compile_model(name, args)
    return row


def bench_model(name: str, args, budget: Budget) -> dict:
    import torch

    row, cm, module, inputs = compile_model(name, args)
    on_cuda = torch.cuda.is_available()
    device = torch.device("cuda" if on_cuda else "cpu")
    module = module.to(device)
    ref_inputs = tuple(x.to(device) for x in inputs)
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)
    contenders = {}
    run_tf = _tensorforge_run(row, cm, module, ref_inputs, on_cuda)
    if run_tf is not None:
        contenders["tensorforge"] = sync_after(run_tf, sync)
    if on_cuda:
        contenders["torch_eager"] = sync_after(lambda: _no_grad(module, ref_inputs), sync)
        compiled = _torch_compiled(module, ref_inputs, row, budget, sync)
        if compiled is not None:
            contenders["torch_compile"] = sync_after(compiled, sync)
    else:
        row["torch_eager_skipped"] = row["torch_compile_skipped"] = "torch has no CUDA"
    _time_contenders(row, contenders, args, budget)
    return row


def _tensorforge_run(row: dict, cm, module, ref_inputs: tuple, on_cuda: bool) -> Callable[[], Any] | None:
    """tensorforge's call after checking its outputs against torch eager's (the errors go into
    ``row``); None, with the reason in ``row``, where its CUDA build cannot run."""
    from tensorforge.runtime.cuda import cuda_device_available
    if not cuda_device_available():
        row["tensorforge_skipped"] = "no NVIDIA driver or GPU here: the CUDA build was compiled, not run"
        return None
    tf_inputs = ref_inputs if on_cuda else tuple(x.numpy() for x in ref_inputs)
    if not on_cuda:
        row["note"] = "torch has no CUDA here: the reference ran on the CPU, tensorforge got NumPy arrays"
    refs = as_numpy_list(_no_grad(module, ref_inputs))
    row.update(errors(as_numpy_list(cm(*tf_inputs)), refs))
    return lambda: cm(*tf_inputs)


def _time_contenders(row: dict, contenders: dict, args, budget: Budget) -> None:
    """Interleaved medians into ``row`` (``<name>_ms``) and tensorforge's speed-ups over its peers."""
    from tensorforge.benchmark import time_interleaved
    if not contenders:
        return
    timing_budget = max(1.0, min(args.model_timing_s, budget.left() - MODEL_RESERVE_S))
    timings = time_interleaved(contenders, repeats=args.repeats, warmup=args.warmup, budget_s=timing_budget)
    for key, t in timings.items():
        row[f"{key}_ms"] = t.median_ms
        row[f"{key}_rounds"] = len(t.samples)
    for peer in ("torch_eager", "torch_compile"):
        if f"{peer}_ms" in row and "tensorforge_ms" in row:
            row[f"speedup_vs_{peer}"] = row[f"{peer}_ms"] / row["tensorforge_ms"]


def _no_grad(module, inputs):
    import torch
    with torch.no_grad():
        return module(*inputs)


def _torch_compiled(module, inputs, row: dict, budget: Budget, sync) -> Callable[[], Any] | None:
    """torch.compile(module) after its first (compiling) call, or None with the reason in ``row``."""
    import torch
    if budget.left() < COMPILE_RESERVE_S:
        row["torch_compile_skipped"] = f"only {budget.left():.0f} s of the budget left (needs ~{COMPILE_RESERVE_S:.0f})"
        return None
    try:
        compiled = torch.compile(module)
        t0 = time.perf_counter()
        _no_grad(compiled, inputs)
        sync()
        row["torch_compile_s"] = time.perf_counter() - t0
    except BudgetExceeded:
        raise
    except Exception as exc:      # inductor needs a compiler, triton, ...: record why
        row["torch_compile_skipped"] = one_line(exc)
        return None
    return lambda: _no_grad(compiled, inputs)


# ---- the run --------------------------------------------------------------------------------

def environment(dry_run: bool) -> dict:
    """Versions and what this machine offers; import failures are recorded, not raised."""
    env: dict = {"python": platform.python_version(), "machine": platform.machine(), "dry_run": dry_run}
    checks = {
        "torch": lambda: __import__("torch").__version__,
        "tensorforge": lambda: __import__("tensorforge").__version__,
        "nvrtc": lambda: __import__("tensorforge.codegen.cuda.nvrtc", fromlist=["nvrtc_version"]).nvrtc_version(),
        "cuda_device": lambda: __import__("tensorforge.runtime.cuda", fromlist=["x"]).cuda_device_available(),
        "torch_cuda": lambda: __import__("torch").cuda.is_available(),
    }
    for key, check in checks.items():
        try:
            env[key] = check()
        except Exception as exc:      # the report says what is missing
            env[key] = None
            env[f"{key}_error"] = one_line(exc)
    if env.get("torch_cuda"):
        import torch
        env["gpu"] = torch.cuda.get_device_name(0)
    return env


def chosen_models(spec: str) -> list[str]:
    from tensorforge import models
    known = models.names()
    if not spec:
        return known
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return names


def run_models(names: list[str], args, budget: Budget, write: Callable[[list], None]) -> list[dict]:
    step = dry_run_model if args.dry_run else bench_model
    rows: list[dict] = []
    missing_api = None          # once target="cuda" is known missing, the other models are skipped
    for name in names:
        if missing_api is not None:
            rows.append({"model": name, "skipped": missing_api})
        elif budget.left() < MODEL_RESERVE_S:
            rows.append({"model": name, "skipped": f"the run's budget of {budget.seconds:.0f} s was spent"})
        else:
            print(f"{name} ...", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            try:
                row = step(name, args, budget)
            except Exception as exc:      # a benchmark keeps going and reports the failure
                row = {"model": name, "error": one_line(exc)}
                if args.verbose:
                    traceback.print_exc()
                if "unknown target 'cuda'" in str(exc):
                    missing_api = f"tensorforge.compile has no target='cuda' here ({one_line(exc)})"
            row["wall_s"] = time.perf_counter() - t0
            rows.append(row)
        write(rows)
    return rows


def print_summary(rows: list[dict]) -> None:
    for r in rows:
        if "skipped" in r or "error" in r:
            print(f"{r['model']:<22} {'SKIPPED' if 'skipped' in r else 'FAILED'}: {r.get('skipped') or r.get('error')}")
            continue
        k = r.get("kernels", {})
        parts = [f"compile {r['compile_s']:.1f} s", f"{k.get('kernels', '?')} kernels",
                 f"max {k.get('max_registers', '?')} regs", f"{len(k.get('problems', []))} problems"]
        if "max_rel_err" in r:
            parts.append(f"rel err {r['max_rel_err']:.1e}")
        for key in ("tensorforge", "torch_eager", "torch_compile"):
            if f"{key}_ms" in r:
                parts.append(f"{key} {r[f'{key}_ms']:.3f} ms")
        print(f"{r['model']:<22} " + ", ".join(parts))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="", help="comma-separated zoo model names (default: all)")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})")
    p.add_argument("--budget-s", type=float, default=270.0, help="bound on the whole run (default 270)")
    p.add_argument("--model-timing-s", type=float, default=20.0, help="timing budget per model")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--dry-run", action="store_true", help="no GPU: imports, compile, NVRTC, resource report")
    p.add_argument("--verbose", action="store_true", help="print tracebacks of failed models")
    args = p.parse_args(argv)

    budget = Budget(args.budget_s)
    env = environment(args.dry_run)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items() if k != "out"}

    def write(rows: list) -> None:
        tmp = out.with_suffix(out.suffix + ".tmp")
        tmp.write_text(json.dumps({"environment": env, "settings": settings, "models": rows}, indent=1,
                                  default=str))
        os.replace(tmp, out)

    if env.get("tensorforge") is None or env.get("torch") is None:
        write([])
        print(f"cannot run: {env.get('tensorforge_error') or env.get('torch_error')}", file=sys.stderr)
        return 1
    if not args.dry_run and not env.get("cuda_device"):
        print("no CUDA device here: tensorforge's CUDA builds are compiled, not run (see --dry-run)", file=sys.stderr)
    budget.arm()
    try:
        rows = run_models(chosen_models(args.models), args, budget, write)
    finally:
        budget.disarm()
    print_summary(rows)
    print(f"wrote {out} ({budget.seconds - budget.left():.0f} s)", file=sys.stderr)
    failed = [r for r in rows if "error" in r]
    return 1 if failed and not args.dry_run else 0


if __name__ == "__main__":
    sys.exit(main())
