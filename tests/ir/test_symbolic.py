"""Symbolic dimension arithmetic (ir/symbolic.py): canonical forms, evaluation, C text, round trips."""
from __future__ import annotations

import subprocess
import shutil

import pytest

from tensorforge.errors import ShapeError
from tensorforge.ir import Module, tensor
from tensorforge.ir.parser import parse_module
from tensorforge.ir.printer import print_module
from tensorforge.ir.structure import structural_hash
from tensorforge.ir.symbolic import (SymbolRange, SymbolTable, canonical, dim_add, dim_ceildiv, dim_divides,
                                     dim_floordiv, dim_max, dim_min, dim_mod, dim_mul, dim_prod, dim_sub,
                                     dims_equal, evaluate, parse, set_symbol_table, shape_symbols,
                                     symbol_table_of, to_c)


def test_static_dims_stay_ints():
    assert dim_mul(3, 4) == 12 and dim_prod([2, 3, 4]) == 24 and dim_floordiv(7, 2) == 3
    assert dim_mul("b", 0) == 0 and dim_sub("s", "s") == 0 and dim_floordiv(dim_mul("b", 6), dim_mul("b", 3)) == 2


def test_canonical_forms_compare_equal():
    assert canonical("s*b*2") == canonical("2*b*s") == "2*b*s"
    assert dims_equal(dim_mul(dim_mul("b", "s"), 768), dim_mul(768, dim_mul("s", "b")))
    assert dim_floordiv(dim_prod(["b", "s", 768]), dim_mul(12, 64)) == "b*s"
    assert dim_floordiv(dim_prod(["b", "s", 768]), dim_mul("b", "s")) == 768
    assert dim_min("s", "s") == "s" and dim_max("s", dim_add("s", 1)) == "s+1"
    assert canonical("min(s,8)") == canonical("min(8, s)")
    assert dim_mod(dim_mul("b", 4), 2) == 0


def test_evaluate_matches_python_semantics():
    env = {"b": 5, "s": 17}
    for text, want in [("(s-1)//2+1", 9), ("s%4", 1), ("min(s,8)*b", 40), ("max(s,32)", 32), ("2*b*s-3", 167)]:
        assert evaluate(canonical(text), env) == want, text
    assert evaluate(dim_ceildiv("s", 4), env) == 5


def test_c_expressions_compile_and_agree(tmp_path):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    exprs = ["(s-1)//2+1", "s%4", "min(s,8)*b", "max(s,32)", "2*b*s-3", "(b*s+7)//8"]
    lines = ["#include <stdio.h>", "#include <stdint.h>",
             "static inline int64_t tf_floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }",
             "static inline int64_t tf_imod(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }",
             "int main(void) { const int64_t tf_sym_b = 5, tf_sym_s = 17;"]
    lines += [f'  printf("%lld\\n", (long long)({to_c(canonical(e))}));' for e in exprs]
    lines.append("  return 0; }")
    src = tmp_path / "t.c"
    src.write_text("\n".join(lines))
    subprocess.run([cc, str(src), "-o", str(tmp_path / "t")], check=True, timeout=60)
    out = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True, timeout=10).stdout.split()
    assert [int(x) for x in out] == [evaluate(canonical(e), {"b": 5, "s": 17}) for e in exprs]


def test_errors_name_the_dimension():
    with pytest.raises(ShapeError, match="b"):
        dim_floordiv("b", "s")
    with pytest.raises(ShapeError, match="no value"):
        evaluate("b*s", {"b": 1})
    with pytest.raises(ShapeError):
        parse("b+*")


def test_divisibility_uses_declared_divisors():
    table = SymbolTable([SymbolRange("s", 8, 512, divisor=8)])
    assert dim_divides(4, dim_mul("b", 8)) and not dim_divides(4, "s")
    assert dim_divides(4, "s", table) and dim_divides(16, dim_mul("s", 2), table)


def test_ranges_hints_and_bounds():
    table = SymbolTable([SymbolRange("b", 1, 64, hint=8), SymbolRange("s", 1, 512)])
    assert table.hint(dim_mul("b", "s")) == 8 * 64
    assert table.upper_bound(dim_mul("b", "s")) == 64 * 512
    assert table.get("b").contains(64) and not table.get("b").contains(65)
    assert SymbolTable.from_json(table.to_json()).ranges == table.ranges


def test_symbolic_types_and_table_round_trip_through_text():
    m = Module()
    f = m.add_function("main", [tensor(("b", "s", 8)), tensor(("min(s,4)", "2*b*s"))])
    set_symbol_table(f, SymbolTable([SymbolRange("b", 1, 64, hint=2), SymbolRange("s", 1, 512)]))
    b = f.builder()
    y = b.create("graph.identity", [f.args[1]]).result
    f.set_return([y])
    text = print_module(m)
    back = parse_module(text)
    assert structural_hash(back) == structural_hash(m)
    assert back.main.args[1].type.shape == ("min(4,s)", "2*b*s")
    assert symbol_table_of(back.main).get("b").hi == 64
    assert shape_symbols(back.main.args[1].type.shape) == ["s", "b"]
