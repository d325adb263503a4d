"""Static zoo latency of this checkout against another commit, in one run.

    .venv/bin/python benchmarks/compare_commits.py --base 1c0ce78              # the zoo, batch 1
    .venv/bin/python benchmarks/compare_commits.py --base HEAD~5 --models mlp,resnet18 --rounds 5
    .venv/bin/python benchmarks/compare_commits.py --base 49313de~1 --this-kwargs '{"fast_math": true}'

The other commit is checked out with ``git worktree`` into a temporary folder.  Each model is
compiled once per checkout (cold start excluded), then the two checkouts take turns: a round runs
one child process per checkout (alternating which goes first), each importing its own
``tensorforge`` and timing ``--calls`` calls of ``cm(*inputs)`` after warm-up on the same inputs
(the zoo's, batch 1, NumPy in).  The table gives the median over rounds of each checkout's median
call time and the median of the per-round ratios base/this (>1: this checkout is faster), with the
spread over rounds.  Static builds must not regress when dynamic shapes land: this is the check.
The machine is shared and noisy: read the ratios, not the times.  A benchmark, not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import tensorforge
from tensorforge import models
name, calls, threads = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
extra = json.loads(sys.argv[5])
module, inputs = models.get(name)
cm = tensorforge.compile(module, inputs, threads=threads, db=None, **extra)
xs = [x.numpy() for x in inputs]
for _ in range(3):
    cm(*xs)
times = []
for _ in range(calls):
    t0 = time.perf_counter()
    cm(*xs)
    times.append(time.perf_counter() - t0)
print(json.dumps({"file": tensorforge.__file__, "median_ms": float(np.median(times)) * 1e3}))
"""


def _child(root: str, name: str, calls: int, threads: int, extra: str = "{}") -> float:
    env = dict(os.environ, PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", CHILD, root, name, str(calls), str(threads), extra], env=env,
                         capture_output=True, text=True, timeout=1800, cwd=root)
    if out.returncode:
        raise RuntimeError(f"{name} in {root} failed:\n{out.stderr[-2000:]}")
    row = json.loads(out.stdout.strip().splitlines()[-1])
    if not row["file"].startswith(root):
        raise RuntimeError(f"{root}: imported tensorforge from {row['file']}")
    return row["median_ms"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", required=True, help="the commit to compare with")
    p.add_argument("--models", default="mlp,resnet18,mobilenet_v2,resnet50,bert_base,gpt2_small")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    p.add_argument("--this-kwargs", default="{}",
                   help='JSON keyword arguments of tensorforge.compile for this checkout only, e.g. '
                        '\'{"fast_math": true}\' to build with the compiler flags of a base from before '
                        'the IEEE default (separates that decision from the change under test)')
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        base_root = os.path.join(tmp, "base")
        subprocess.run(["git", "worktree", "add", "--detach", base_root, args.base], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            rows = [_compare(name, base_root, args) for name in args.models.split(",")]
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", base_root], cwd=ROOT, capture_output=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


def _compare(name: str, base_root: str, args) -> dict:
    _child(base_root, name, 1, args.threads)           # compile both once: rounds time warm caches
    _child(ROOT, name, 1, args.threads, args.this_kwargs)
    base, this, ratios = [], [], []
    for r in range(args.rounds):
        order = [(base_root, base, "{}"), (ROOT, this, args.this_kwargs)]
        for root, sink, extra in (order if r % 2 == 0 else order[::-1]):
            sink.append(_child(root, name, args.calls, args.threads, extra))
        ratios.append(base[-1] / this[-1])
    q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
    row = {"model": name, "base_ms": statistics.median(base), "this_ms": statistics.median(this),
           "ratio": statistics.median(ratios), "ratio_iqr": q[2] - q[0], "load": os.getloadavg()[0]}
    print(f"{name:14s} base {row['base_ms']:9.2f} ms   this {row['this_ms']:9.2f} ms   base/this "
          f"{row['ratio']:.3f} (IQR {row['ratio_iqr']:.3f})  load {row['load']:.1f}", flush=True)
    return row


if __name__ == "__main__":
    sys.exit(main())
