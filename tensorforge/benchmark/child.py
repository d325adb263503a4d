"""Running one benchmark setting in a fresh process.

Thread counts of OpenBLAS and OpenMP are fixed when a library loads, so a benchmark that compares
1 and 2 threads runs each setting as ``script --child JSON`` with its own environment; the child
prints its result as JSON on its last line.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys


def run_child(script: str, payload: dict, env: dict[str, str], label: str) -> dict:
    """Runs ``script --child <payload>`` under ``env`` and returns the JSON of its last output line."""
    cmd = [sys.executable, os.path.abspath(script), "--child", json.dumps(payload)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"benchmark subprocess for {label} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
