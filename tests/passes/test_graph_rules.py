"""Every rule and pattern of the graph optimiser has an IR test where it fires and one where it
must not, and keeps the interpreter's results there.

The cases are the functions of the IR files ``filecheck/<pass>*.mlir`` named
``<rule>_fires...`` or ``<rule>_stays...`` (dashes as underscores).  Each runs alone through its
pass; the driver's statistics say which rules fired.  (The files themselves also run, whole,
through ``filecheck/test_ir_files.py``.)
"""
from pathlib import Path

import pytest

from tensorforge.ir import Module, verify
from tensorforge.ir.parser import parse_module
from tensorforge.passes.graph.const_fold import fold_guarded
from tensorforge.passes.graph.fold_inference import FOLD_PATTERNS, fold_inference
from tensorforge.passes.graph.layout import layout_patterns, optimize_layout
from tensorforge.passes.graph.rules_extra import EXTRA_PATTERNS, EXTRA_RULES, LAYOUT_PATTERNS, simplify_extra
from tensorforge.passes.graph.shape_prop import propagate_shapes, shape_prop_patterns
from tests.filecheck_util import assert_same_numerics

FILECHECK_DIR = Path(__file__).parent / "filecheck"

PASSES = {
    "simplify_extra": (simplify_extra,
                       [r.name for r in EXTRA_RULES] + [p.name for p in EXTRA_PATTERNS + LAYOUT_PATTERNS]),
    "shape_prop": (propagate_shapes, [p.name for p in shape_prop_patterns()]),
    "const_fold": (fold_guarded, ["const-fold"]),
    "fold_inference": (fold_inference, [p.name for p in FOLD_PATTERNS] + ["identity"]),
    "layout": (lambda m: optimize_layout(m, block=4), [p.name for p in layout_patterns(4)]),
}
"""IR file prefix -> (the pass as a function returning RewriteStats, the rules it must cover)."""


def _cases():
    cases = []
    for prefix, (_, rules) in PASSES.items():
        by_stem = {r.replace("-", "_"): r for r in rules}
        for path in sorted(FILECHECK_DIR.glob(f"{prefix}*.mlir")):
            for f in parse_module(path.read_text(), source=str(path)).functions:
                for stem, rule in by_stem.items():
                    for kind in ("fires", "stays"):
                        if f.sym_name.startswith(f"{stem}_{kind}"):
                            m = Module()
                            m.body.append(f.clone())
                            cases.append((prefix, rule, kind, f.sym_name, m))
    return cases


CASES = _cases()
RULES = [(prefix, rule) for prefix, (_, rules) in PASSES.items() for rule in rules]


@pytest.mark.parametrize("prefix,rule", RULES, ids=[r for _, r in RULES])
def test_every_rule_has_a_firing_and_a_non_firing_ir_test(prefix, rule):
    kinds = {kind for p, r, kind, _, _ in CASES if (p, r) == (prefix, rule)}
    assert kinds == {"fires", "stays"}, f"rule '{rule}' of {prefix} lacks IR tests: has {sorted(kinds)}"


@pytest.mark.parametrize("prefix,rule,kind,fname,module", CASES, ids=[c[3] for c in CASES])
def test_rule_fires_exactly_where_its_test_says(prefix, rule, kind, fname, module):
    before = module.clone()
    stats = PASSES[prefix][0](module)
    verify(module)
    assert stats.converged
    if kind == "fires":
        assert stats.fired[rule] >= 1, f"'{rule}' did not fire in {fname}: {stats}"
    else:
        assert stats.fired[rule] == 0, f"'{rule}' fired in {fname}: {stats}"
    assert_same_numerics(before, module, rtol=1e-5, atol=1e-6)


def test_rule_names_are_unique_across_the_optimiser():
    names = [r for _, r in RULES]
    assert len(names) == len(set(names)) and len(names) >= 45
