"""ONNX node-test conformance through the public API alone: ``tensorforge.compile`` and ``cm(*inputs)``.

    .venv/bin/python benchmarks/onnx_public_api_conformance.py [--target cpu|interpreter|cpu,interpreter]
        [--jobs N] [--filter REGEX] [--show-failures] [--show-skips] [--reasons N]

The ONNX backend here is what a user would write: ``prepare`` is ``tensorforge.compile(model)``
(no example inputs, no shapes; the target and, in worker processes, the thread count are the
only options) and ``run`` is ``cm(*inputs)``, its result returned as the outputs.  Nothing
converts inputs or outputs and nothing re-imports the model: whatever the node cases need (shape
operands given as inputs, symbolic dims, bf16 tensors, output dtypes) must come from the public
``CompiledModel``.  The cases are the non-expanded node cases onnx ships (as in
``onnx_conformance_report.py``); ``--reasons N`` prints the N most common failure and skip reasons.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import time
import warnings
from typing import Any

import numpy as np
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

import tensorforge


class PublicRep(BackendRep):
    def __init__(self, cm):
        self.cm = cm

    def run(self, inputs: Any, **kwargs: Any):
        arrays = list(inputs.values()) if isinstance(inputs, dict) else list(inputs)
        out = self.cm(*arrays)
        return out if isinstance(out, (tuple, list)) else (out,)


class PublicBackend(Backend):
    """``prepare`` = ``tensorforge.compile(model)``, ``run`` = ``cm(*inputs)``."""

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs: Any) -> PublicRep:
        if not cls.supports_device(device):
            raise tensorforge.TensorforgeError(f"device '{device}' is not supported")
        return PublicRep(tensorforge.compile(model, **kwargs))


def _reason(detail: str) -> str:
    """A failure detail reduced to its kind: node names, numbers and quoted names blanked."""
    text = re.sub(r"ONNX node '[^']*'", "node", detail)
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\[[^\]]*\]", "[…]", text)
    text = re.sub(r"\d+(\.\d+)?", "N", text)
    return text[:150]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="cpu",
                        help="compile target(s), comma-separated: cpu (default), interpreter")
    parser.add_argument("--jobs", "-j", type=int, default=1, help="worker processes (0: one per core)")
    parser.add_argument("--filter", default="", help="only cases whose name matches this regex")
    parser.add_argument("--show-failures", action="store_true", help="print each failing case and why")
    parser.add_argument("--show-skips", action="store_true", help="print each skipped case and why")
    parser.add_argument("--reasons", type=int, default=12, help="print the N most common fail/skip reasons")
    args = parser.parse_args(argv)
    targets = [t.strip() for t in args.target.split(",") if t.strip()]
    jobs = args.jobs or os.cpu_count() or 1

    warnings.filterwarnings("ignore")
    from onnx.backend.test.loader import load_model_tests

    from tensorforge.frontends.onnx_backend import run_node_cases

    pattern = re.compile(args.filter)
    cases = sorted((c for c in load_model_tests(kind="node") if pattern.search(c.name) and "_expanded" not in c.name),
                   key=lambda c: c.name)
    summaries = []
    for target in targets:
        start = time.perf_counter()
        rows = run_node_cases(cases, jobs=jobs, target=target, backend=PublicBackend)
        elapsed = time.perf_counter() - start
        totals = collections.Counter(status for _, status, _ in rows)
        n = len(rows)
        summaries.append(f"public API, target={target}: {totals['pass']} passed, {totals['fail']} failed, "
                         f"{totals['skip']} skipped of {n} cases ({100.0 * totals['pass'] / max(n, 1):.1f}% pass) "
                         f"in {elapsed:.1f} s" + (f" ({jobs} jobs)" if jobs > 1 else ""))
        for name, status, detail in rows:
            if (status == "fail" and args.show_failures) or (status == "skip" and args.show_skips):
                print(f"{target} {status.upper()} {name}: {detail[:300]}")
        if args.reasons:
            for status in ("fail", "skip"):
                reasons = collections.Counter(_reason(d) for _, s, d in rows if s == status)
                if reasons:
                    print(f"{target}: most common {status} reasons")
                    for text, count in reasons.most_common(args.reasons):
                        print(f"  {count:>4}  {text}")
    for line in summaries:
        print(line)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
