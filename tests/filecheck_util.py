"""FileCheck-style IR tests, run in-process from pytest.

An IR test file (``tests/passes/filecheck/*.mlir``) is generic-syntax IR with comment lines:

    // RUN: tf-opt %s -p 'simplify' | filecheck %s
    // CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3xf32>):
    // CHECK-NEXT:   "func.return"(%[[X]])

``RUN`` is read, not executed by a shell: ``tf-opt %s -p PIPELINE`` parses the file, runs the
pipeline through ``PassManager`` (verifying after every pass) and prints the module; the part
after ``| filecheck %s`` gives FileCheck options (``--check-prefix=FOO`` ...).  Each RUN line is
one run.  Options of ``tf-opt``: ``--no-numerics`` skips the numeric check, ``--rtol=R`` and
``--atol=A`` set its tolerances (default 1e-6 and 1e-7: the rules are exact up to rounding).

Numeric check: every function whose inputs have static shapes is interpreted on seeded random
inputs before and after the pipeline; integer and bool results must be equal, float results
close.  Inputs avoid zero (floats in +-[0.5, 2], integers in +-[1, 9]) so that rewrites
involving division and reciprocals are compared where both sides are finite.
"""
from __future__ import annotations

import io
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
from filecheck.finput import FInput
from filecheck.matcher import Matcher
from filecheck.options import parse_argv_options
from filecheck.parser import Parser, pattern_for_opts

from tensorforge.ir.builtin import FuncOp, ModuleOp
from tensorforge.ir.interpreter import run_function
from tensorforge.ir.parser import parse_module
from tensorforge.ir.pass_manager import PassManager
from tensorforge.ir.printer import print_module
from tensorforge.ir.types import DType, TensorType

_RUN = re.compile(r"^\s*//\s*RUN:\s*(.*)$", re.M)


# ---- FileCheck ----------------------------------------------------------------------------
def filecheck(output: str, checks: str, *, check_file: str = "<checks>", args: Sequence[str] = ()) -> str | None:
    """Matches ``output`` against the CHECK lines in ``checks``; None on success, else the diagnostic."""
    opts = parse_argv_options(["filecheck", *args, check_file])
    opts.input_file = "<ir>"
    parser = Parser(opts, io.StringIO(checks), *pattern_for_opts(opts))
    matcher = Matcher(opts, FInput("<ir>", FInput.canonicalize_line_ends(output)), parser)
    matcher.stderr = io.StringIO()
    if matcher.run() == 0:
        return None
    return matcher.stderr.getvalue()


def assert_filecheck(output: str, checks: str, **kw) -> None:
    problem = filecheck(output, checks, **kw)
    assert problem is None, f"FileCheck failed:\n{problem}\n--- output ---\n{output}"


# ---- numerics -----------------------------------------------------------------------------
def random_input(t: TensorType, rng: np.random.Generator) -> np.ndarray:
    shape = t.shape
    if t.dtype is DType.bool:
        return rng.integers(0, 2, size=shape).astype(bool)
    sign = np.where(rng.integers(0, 2, size=shape) == 1, 1, -1)
    if t.dtype.is_float:
        return (rng.uniform(0.5, 2.0, size=shape) * sign).astype(t.dtype.np)
    if t.dtype is DType.u8:
        return rng.integers(1, 10, size=shape).astype(np.uint8)
    return (rng.integers(1, 10, size=shape) * sign).astype(t.dtype.np)


def interpretable(func: FuncOp) -> bool:
    return all(isinstance(a.type, TensorType) and a.type.is_static for a in func.args)


def assert_same_numerics(before: ModuleOp, after: ModuleOp, *, rtol: float = 1e-6, atol: float = 1e-7,
                         seed: int = 0) -> int:
    """Runs each function of ``before`` and its namesake in ``after`` on the same random inputs.

    Returns how many functions were compared (functions with dynamic inputs are skipped).
    """
    compared = 0
    after_fns = {f.sym_name: f for f in after.functions}
    for f in before.functions:
        if not interpretable(f):
            continue
        rng = np.random.default_rng(seed)
        inputs = [random_input(a.type, rng) for a in f.args]
        want = run_function(f, inputs)
        got = run_function(after_fns[f.sym_name], inputs)
        assert len(got) == len(want), f"'{f.sym_name}': {len(got)} results, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape and g.dtype == w.dtype, \
                f"'{f.sym_name}' result #{i}: {g.dtype}{g.shape} != {w.dtype}{w.shape}"
            if w.dtype.kind == "f":
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True,
                                           err_msg=f"'{f.sym_name}' result #{i}")
            else:
                np.testing.assert_array_equal(g, w, err_msg=f"'{f.sym_name}' result #{i}")
        compared += 1
    return compared


# ---- IR test files ------------------------------------------------------------------------
@dataclass
class RunLine:
    pipeline: str
    filecheck_args: list[str] = field(default_factory=list)
    numerics: bool = True
    rtol: float = 1e-6
    atol: float = 1e-7


def parse_run_lines(text: str, where: str = "<file>") -> list[RunLine]:
    runs = []
    for m in _RUN.finditer(text):
        command = m.group(1)
        tool, bar, check = command.partition("|")
        tool_args, check_args = shlex.split(tool), shlex.split(check)
        assert bar and tool_args[:2] == ["tf-opt", "%s"] and check_args[:1] == ["filecheck"], \
            f"{where}: RUN line must read 'tf-opt %s -p PIPELINE | filecheck %s', got '{command}'"
        run = RunLine(pipeline="", filecheck_args=[a for a in check_args[1:] if a != "%s"])
        it = iter(tool_args[2:])
        for arg in it:
            key, _, value = arg.partition("=")
            if key in ("-p", "--pipeline"):
                run.pipeline = value or next(it)
            elif key == "--no-numerics":
                run.numerics = False
            elif key in ("--rtol", "--atol"):
                setattr(run, key[2:], float(value or next(it)))
            else:
                raise AssertionError(f"{where}: unknown tf-opt option '{arg}'")
        runs.append(run)
    assert runs, f"{where}: no '// RUN:' line"
    return runs


def run_pipeline_text(text: str, pipeline: str, source: str = "<text>") -> tuple[ModuleOp, ModuleOp, str]:
    """(input module, transformed module, printed output) for IR ``text`` and a pipeline."""
    before = parse_module(text, source=source)
    after = parse_module(text, source=source)
    PassManager.parse(pipeline, verify_each=True).run(after)
    return before, after, print_module(after)


def check_ir_file(path: str | Path) -> None:
    """Runs every RUN line of ``path``: pipeline, FileCheck, numeric comparison."""
    path = Path(path)
    text = path.read_text()
    for run in parse_run_lines(text, str(path)):
        before, after, output = run_pipeline_text(text, run.pipeline, str(path))
        assert_filecheck(output, text, check_file=str(path), args=run.filecheck_args)
        if run.numerics:
            assert_same_numerics(before, after, rtol=run.rtol, atol=run.atol)


def ir_files(directory: str | Path) -> list[Path]:
    return sorted(Path(directory).glob("*.mlir"))
