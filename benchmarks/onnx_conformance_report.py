"""ONNX node-test conformance of the tensorforge backend: passed / failed / skipped per op.

    .venv/bin/python benchmarks/onnx_conformance_report.py [--expanded] [--filter REGEX] [--show-failures]

Runs every node case that onnx ships (built in memory from ``onnx.backend.test.case.node``)
through ``TensorforgeBackend`` and compares with the reference outputs the way the ONNX
backend test runner does.  A case whose model tensorforge rejects (``UnsupportedOpError``)
counts as skipped; a wrong result or any other error as failed.
"""
from __future__ import annotations

import argparse
import collections
import re
import sys
import time
import warnings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expanded", action="store_true", help="also run the *_expanded function-body cases")
    parser.add_argument("--filter", default="", help="only cases whose name matches this regex")
    parser.add_argument("--show-failures", action="store_true", help="print each failing case and why")
    parser.add_argument("--show-skips", action="store_true", help="print each skipped case and why")
    args = parser.parse_args(argv)

    warnings.filterwarnings("ignore")
    from onnx.backend.test.loader import load_model_tests

    from tensorforge.frontends.onnx_backend import check_node_case

    pattern = re.compile(args.filter)
    cases = [c for c in load_model_tests(kind="node")
             if pattern.search(c.name) and (args.expanded or "_expanded" not in c.name)]
    per_op: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    totals: collections.Counter = collections.Counter()
    details = []
    start = time.perf_counter()
    for case in sorted(cases, key=lambda c: c.name):
        ops = sorted({n.op_type for n in case.model.graph.node})
        op = ops[0] if len(ops) == 1 else "+".join(ops) if len(ops) <= 3 else "(expanded)"
        status, detail = check_node_case(case)
        per_op[op][status] += 1
        totals[status] += 1
        details.append((status, case.name, detail))
    elapsed = time.perf_counter() - start

    print(f"{'op':<34}{'pass':>6}{'fail':>6}{'skip':>6}{'rate':>8}")
    for op in sorted(per_op):
        c = per_op[op]
        n = sum(c.values())
        print(f"{op[:33]:<34}{c['pass']:>6}{c['fail']:>6}{c['skip']:>6}{100.0 * c['pass'] / n:>7.0f}%")
    n = sum(totals.values())
    print(f"\n{totals['pass']} passed, {totals['fail']} failed, {totals['skip']} skipped "
          f"of {n} cases ({100.0 * totals['pass'] / max(n, 1):.1f}% pass) in {elapsed:.1f} s")
    for status, name, detail in details:
        if (status == "fail" and args.show_failures) or (status == "skip" and args.show_skips):
            print(f"{status.upper()} {name}: {detail[:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
