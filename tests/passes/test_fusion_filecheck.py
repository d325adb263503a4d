"""The fusion IR tests (tests/passes/filecheck/fuse_*.mlir): FileCheck and numerics.

``tests/passes/filecheck/test_ir_files.py`` FileChecks every IR file of the directory; the fusion
files say ``--no-numerics`` there because the graph interpreter does not run structured kernels.
Here each RUN line of each fusion file is run again and every function is evaluated before
(graph interpreter) and after (graph ops and kernels: ``run_lowered``, the structured
interpreter) on the same seeded inputs.  Tolerance: 1e-5 relative (fused expressions round in
another order, e.g. a folded BatchNorm scale).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tensorforge.ir.interpreter import run_function
from tensorforge.passes.fusion.evaluate import run_lowered
from tests.filecheck_util import (assert_filecheck, interpretable, parse_run_lines, random_input,
                                  run_pipeline_text)

HERE = Path(__file__).parent / "filecheck"
FILES = sorted(HERE.glob("fuse_*.mlir"))
CASES = [(p, i) for p in FILES for i in range(len(parse_run_lines(p.read_text(), str(p))))]


def test_every_strategy_has_a_file():
    names = {p.stem for p in FILES}
    assert {"fuse_vertical", "fuse_horizontal", "fuse_reuse", "fuse_category", "fuse_all", "fuse_vetoes"} <= names


@pytest.mark.parametrize("path,run", CASES, ids=[f"{p.stem}-{i}" for p, i in CASES])
def test_fusion_ir_file(path, run):
    text = path.read_text()
    line = parse_run_lines(text, str(path))[run]
    before, after, output = run_pipeline_text(text, line.pipeline, str(path))
    assert_filecheck(output, text, check_file=str(path), args=line.filecheck_args)
    left = {op.name for f in after.functions for op in f.body} - {"graph.constant", "structured.kernel", "func.return"}
    assert not left, f"fusion left ops unlowered: {left}"
    after_fns = {f.sym_name: f for f in after.functions}
    compared = 0
    for f in before.functions:
        assert interpretable(f)
        rng = np.random.default_rng(7)
        inputs = [random_input(a.type, rng) for a in f.args]
        want = run_function(f, inputs)
        got = run_lowered(after_fns[f.sym_name], inputs)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{path.stem}: {f.sym_name}")
        compared += 1
    assert compared == len(before.functions) >= 2
