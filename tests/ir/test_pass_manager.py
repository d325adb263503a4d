"""PassManager: textual pipelines, options, verify-each, IR printing and the timing report."""
import io

import numpy as np
import pytest

from tensorforge.errors import PassError
from tensorforge.ir import Module, interpret, tensor
from tensorforge.ir.pass_manager import Option, Pass, PassManager, count_ops, parse_pipeline
from tensorforge.passes.registry import get_pass, known_passes, pass_class, register_pass
from tensorforge.passes.graph.simplify import FoldPass, SimplifyPass


def sample_module():
    """exp(x + 0) + (2 * 3), with a dead op and a duplicate: every built-in pass has work."""
    m = Module()
    f = m.add_function("main", [tensor((2, 3))])
    g = f.builder().graph
    x = f.args[0]
    six = g.mul(g.constant(np.float32(2)), g.constant(np.float32(3)))
    e1 = g.exp(g.add(x, g.constant(np.zeros((2, 3), np.float32))))
    g.tanh(x)                                   # dead
    e2 = g.exp(g.add(x, g.constant(np.zeros((2, 3), np.float32))))
    f.set_return([g.add(g.add(e1, six), e2)])
    return m


X = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
WANT = 2 * np.exp(X) + 6


@register_pass
class BreakTypesPass(Pass):
    """Deliberately broken: changes a result type without touching its users."""

    name = "test-break-types"

    def run(self, module):
        for op in module.walk():
            if op.name == "graph.exp":
                op.results[0].type = tensor((7,), "f32")
                return True
        return False


@register_pass
class CountingPass(Pass):
    name = "test-counting"
    options = {"times": Option(1, "how often"), "scale": Option(1.0), "loud": Option(False),
               "label": Option("x")}

    def run(self, module):
        return False


# ---- pipeline text ---------------------------------------------------------------------------
def test_parse_pipeline_text():
    assert parse_pipeline("fold,dce , cse") == [("fold", {}), ("dce", {}), ("cse", {})]
    assert parse_pipeline("fold{limit=1000}, simplify{fold=false max-iterations=3}") == [
        ("fold", {"limit": "1000"}), ("simplify", {"fold": "false", "max-iterations": "3"})]
    assert parse_pipeline("a{x=1,y=2}") == [("a", {"x": "1", "y": "2"})]
    assert parse_pipeline("  ") == []


@pytest.mark.parametrize("text,message", [
    ("fold,,dce", "column 6: expected a pass name"),
    ("fold{limit=3", "'{' without '}'"),
    ("fold{limit}", "option 'limit' is not key=value"),
    ("fold dce", "expected ',' between passes"),
])
def test_parse_pipeline_errors(text, message):
    with pytest.raises(PassError, match=message):
        parse_pipeline(text)


def test_pipeline_options_are_typed_and_round_trip():
    pm = PassManager.parse("fold{limit=1000},dce,simplify{fold=false max-iterations=3},cse")
    fold, dce, simplify, cse = pm.passes
    assert isinstance(fold, FoldPass) and fold.limit == 1000 and isinstance(fold.limit, int)
    assert isinstance(simplify, SimplifyPass) and simplify.fold is False and simplify.max_iterations == 3
    assert pm.pipeline == "fold{limit=1000},dce,simplify{fold=false max_iterations=3},cse"
    assert PassManager.parse(pm.pipeline).pipeline == pm.pipeline
    c = get_pass("test-counting", times="0x10", scale="2.5", loud="yes", label="hello")
    assert (c.times, c.scale, c.loud, c.label) == (16, 2.5, True, "hello")
    assert get_pass("test-counting", scale=2).scale == 2.0


def test_unknown_pass_and_option_errors_list_what_exists():
    with pytest.raises(PassError) as e:
        PassManager.parse("fold,frobnicate")
    assert "unknown pass 'frobnicate'" in str(e.value)
    for name in ("cse", "dce", "fold", "simplify"):
        assert name in str(e.value)
    with pytest.raises(PassError, match=r"pass 'fold' has no option 'limt' \(options: limit, max_iterations\)"):
        PassManager.parse("fold{limt=3}")
    with pytest.raises(PassError, match="'many' is not a valid int"):
        PassManager.parse("fold{limit=many}")
    with pytest.raises(PassError, match="expected bool"):
        get_pass("simplify", fold=3)


def test_registry():
    assert {"simplify", "dce", "cse", "fold"} <= set(known_passes())
    assert pass_class("dce") is get_pass("dce").__class__
    assert get_pass("cse") is not get_pass("cse")
    with pytest.raises(PassError, match="registered twice"):
        register_pass(type("Other", (Pass,), {"name": "dce", "run": lambda self, m: False}))
    with pytest.raises(PassError, match="needs a Pass subclass"):
        register_pass(type("Nameless", (Pass,), {}))


# ---- running --------------------------------------------------------------------------------
def test_default_pipeline_keeps_numerics_and_shrinks_the_graph():
    m = sample_module()
    report = PassManager.parse("fold,dce,cse,simplify", verify_each=True).run(m)
    assert [r.name for r in report] == ["fold", "dce", "cse", "simplify"]
    assert report.changed
    np.testing.assert_allclose(interpret(m, X)[0], WANT, rtol=1e-6)
    names = [op.name for op in m.main.body]
    assert names.count("graph.exp") == 1 and "graph.tanh" not in names and "graph.mul" not in names


def test_report_counts_ops_and_prints_a_table():
    m = sample_module()
    start = count_ops(m)
    report = PassManager.parse("fold,dce,cse,simplify").run(m)
    first, last = report.records[0], report.records[-1]
    assert first.ops_before == start and last.ops_after == count_ops(m) < start
    for a, b in zip(report.records, report.records[1:]):
        assert a.ops_after == b.ops_before
    assert all(r.seconds >= 0 for r in report) and report.total_seconds == sum(r.seconds for r in report)
    cse = report.records[2]
    assert cse.changed and cse.ops_after < cse.ops_before
    text = str(report).splitlines()
    assert text[0].split() == ["pass", "time", "(ms)", "ops", "before", "ops", "after", "changed"]
    assert [line.split()[0] for line in text[2:]] == ["fold", "dce", "cse", "simplify", "total"]
    assert text[-1].split()[2:] == [str(start), str(count_ops(m)), "yes"]


def test_verify_each_names_the_pass_that_broke_the_ir():
    pm = PassManager.parse("fold,test-break-types,dce", verify_each=True)
    with pytest.raises(PassError, match=r"pass 'test-break-types' \(#2 of 'fold,test-break-types,dce'\) "
                                        r"left invalid IR: .*graph\.exp"):
        pm.run(sample_module())
    PassManager.parse("fold,test-break-types").run(sample_module())      # unchecked: goes through


def test_verify_each_checks_the_input_first():
    m = sample_module()
    BreakTypesPass().run(m)
    with pytest.raises(PassError, match="input IR is invalid before pipeline 'dce' ran"):
        PassManager.parse("dce", verify_each=True).run(m)


def test_print_ir_after_all_and_after_change():
    out = io.StringIO()
    PassManager.parse("dce,test-counting,cse", print_ir_after_all=True, stream=out).run(sample_module())
    text = out.getvalue()
    headers = [line for line in text.splitlines() if line.startswith("// -----// IR Dump After")]
    assert headers == ["// -----// IR Dump After dce //----- //", "// -----// IR Dump After test-counting //----- //",
                       "// -----// IR Dump After cse //----- //"]
    dumps = text.split("// -----// IR Dump After ")[1:]
    assert "graph.tanh" not in dumps[0] and dumps[0].count('"graph.exp"') == 2
    assert dumps[2].count('"graph.exp"') == 1

    out = io.StringIO()
    pm = PassManager.parse("dce,test-counting{times=2},cse", print_ir_after_change=True, stream=out)
    pm.run(sample_module())
    headers = [line for line in out.getvalue().splitlines() if line.startswith("// -----//")]
    assert headers == ["// -----// IR Dump After dce //----- //", "// -----// IR Dump After cse //----- //"]


def test_add_passes_by_object_and_name():
    pm = PassManager().add("dce").add(FoldPass(limit=5)).add("simplify", fold=False)
    assert pm.pipeline == "dce,fold{limit=5},simplify{fold=false}"
    with pytest.raises(PassError, match="not a Pass"):
        pm.add(42)
    with pytest.raises(PassError, match="options go with a pass name"):
        pm.add(FoldPass(), limit=3)


def test_passes_keep_statistics():
    m = sample_module()
    simplify = SimplifyPass()
    assert simplify.run(m)
    assert simplify.stats.fired["add-zero"] == 2 and simplify.stats.folded["graph.mul"] == 1
    assert not simplify.run(m)
