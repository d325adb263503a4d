"""ONNX node-test conformance of the tensorforge backend: passed / failed / skipped per op.

    .venv/bin/python benchmarks/onnx_conformance_report.py [--target interpreter|cpu|interpreter,cpu]
        [--jobs N] [--expanded] [--filter REGEX] [--show-failures] [--show-skips] [--show-gaps]

Runs every node case that onnx ships (built in memory from ``onnx.backend.test.case.node``)
through ``TensorforgeBackend`` and compares with the reference outputs the way the ONNX
backend test runner does.  A case whose model tensorforge rejects (``UnsupportedOpError``)
counts as skipped; a wrong result or any other error as failed.

``--target`` names one compile target or several (comma-separated): each gets its columns in
the per-op table and its summary line, and with two targets a side-by-side line and (with
``--show-gaps``) the cases that pass on the first and not on the second.  ``--jobs N`` runs the
cases in N processes (native targets compile one library per case; the compile cache under
``$TENSORFORGE_CACHE`` is shared, so a second run compiles nothing).
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import time
import warnings


def _op_of(case) -> str:
    ops = sorted({n.op_type for n in case.model.graph.node})
    return ops[0] if len(ops) == 1 else "+".join(ops) if len(ops) <= 3 else "(expanded)"


def _summary(target: str, totals: collections.Counter, elapsed: float) -> str:
    n = sum(totals.values())
    return (f"{target}: {totals['pass']} passed, {totals['fail']} failed, {totals['skip']} skipped of {n} "
            f"cases ({100.0 * totals['pass'] / max(n, 1):.1f}% pass) in {elapsed:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="interpreter",
                        help="compile target(s), comma-separated: interpreter (default), cpu")
    parser.add_argument("--jobs", "-j", type=int, default=1,
                        help="worker processes (0: one per core); native runs are compile-bound")
    parser.add_argument("--expanded", action="store_true", help="also run the *_expanded function-body cases")
    parser.add_argument("--filter", default="", help="only cases whose name matches this regex")
    parser.add_argument("--show-failures", action="store_true", help="print each failing case and why")
    parser.add_argument("--show-skips", action="store_true", help="print each skipped case and why")
    parser.add_argument("--show-gaps", action="store_true",
                        help="with two targets: print the cases that pass on the first but not the second")
    args = parser.parse_args(argv)
    targets = [t.strip() for t in args.target.split(",") if t.strip()]
    jobs = args.jobs or os.cpu_count() or 1

    warnings.filterwarnings("ignore")
    from onnx.backend.test.loader import load_model_tests

    from tensorforge.frontends.onnx_backend import run_node_cases

    pattern = re.compile(args.filter)
    cases = sorted((c for c in load_model_tests(kind="node")
                    if pattern.search(c.name) and (args.expanded or "_expanded" not in c.name)),
                   key=lambda c: c.name)
    ops = {c.name: _op_of(c) for c in cases}
    results: dict[str, dict[str, tuple[str, str]]] = {}
    lines = []
    for target in targets:
        start = time.perf_counter()
        rows = run_node_cases(cases, jobs=jobs, target=target)
        elapsed = time.perf_counter() - start
        results[target] = {name: (status, detail) for name, status, detail in rows}
        totals = collections.Counter(status for _, status, _ in rows)
        lines.append(_summary(target, totals, elapsed) + (f" ({jobs} jobs)" if jobs > 1 else ""))

    per_op: dict[str, dict[str, collections.Counter]] = collections.defaultdict(
        lambda: collections.defaultdict(collections.Counter))
    for target, res in results.items():
        for name, (status, _) in res.items():
            per_op[ops[name]][target][status] += 1
    head = f"{'op':<34}" + "".join(f"{t[:12] + ' pass':>17}{'fail':>6}{'skip':>6}{'rate':>7}" for t in targets)
    print(head)
    for op in sorted(per_op):
        row = f"{op[:33]:<34}"
        for t in targets:
            c = per_op[op][t]
            n = sum(c.values())
            row += f"{c['pass']:>17}{c['fail']:>6}{c['skip']:>6}{100.0 * c['pass'] / max(n, 1):>6.0f}%"
        print(row)
    print()
    for line in lines:
        print(line)
    if len(targets) >= 2:
        a, b = targets[0], targets[1]
        count = {t: collections.Counter(s for s, _ in results[t].values()) for t in (a, b)}
        print("side by side (pass/fail/skip): " + " | ".join(
            f"{t} {count[t]['pass']}/{count[t]['fail']}/{count[t]['skip']}" for t in (a, b)))
    for target in targets:
        for name, (status, detail) in results[target].items():
            if (status == "fail" and args.show_failures) or (status == "skip" and args.show_skips):
                print(f"{target} {status.upper()} {name}: {detail[:300]}")
    if args.show_gaps and len(targets) >= 2:
        a, b = targets[0], targets[1]
        for name in results[a]:
            if results[a][name][0] == "pass" and results[b][name][0] != "pass":
                status, detail = results[b][name]
                print(f"GAP {name}: {b} {status}: {detail[:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
