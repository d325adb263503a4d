"""The HTML report of ``tensorforge explain --html``: content checked against the compile path,
and (where Debian's chromium is installed) rendered headless to a screenshot that is not blank."""
import re
import shutil
import subprocess

import numpy as np
import pytest

from tensorforge import models
from tensorforge.codegen.c.build import build_native
from tensorforge.frontends.torch import import_torch
from tensorforge.ir.interpreter import run_function
from tensorforge.report import collect, render_html
from tensorforge.report import pictures as pictures_mod
from tensorforge.report.pictures import Node, Picture, blocks, collapse


@pytest.fixture(scope="module")
def resnet_report():
    net, inputs = models.get("resnet18_small")
    module = import_torch(net, inputs)
    xs = [t.numpy() for t in inputs]
    report = collect(module, "resnet18_small", xs, profile_runs=2)
    return report, render_html(report), module, xs


def test_report_content_matches_the_compiled_model(resnet_report):
    report, html, module, xs = resnet_report
    # the same (optimised) module compiled the normal way: same kernels, same arena
    native, src = build_native(module)
    assert "tf_profile" not in src and native.kernel_times() is None      # timers only when asked for
    assert len(report.kernels) == len(native.layout.kernel_names) == native.build["kernels"]
    assert [k.name for k in report.kernels] == native.layout.kernel_names
    # kernel table: one row per kernel call
    assert html.count("class='kernel-row'") == len(report.kernels)
    # graph pictures: before, after the optimiser, fused kernels
    assert html.count("<figure class='graph'>") == 3
    if shutil.which("dot"):
        assert len(re.findall(r"<svg[^>]*>", html)) >= 4          # three graphs + the memory picture
    # shares of the run sum to 100% and every kernel was timed
    assert sum(k.share for k in report.kernels) == pytest.approx(100.0, abs=1e-6)
    assert all(k.seconds > 0 for k in report.kernels)
    assert sum(k.seconds for k in report.kernels) <= report.run_seconds * 1.05
    # the peak shown is the plan's peak
    assert re.search(r"data-bytes='(\d+)'", html).group(1) == str(native.arena_bytes)
    assert report.memory.arena_bytes == native.arena_bytes
    # the profiling build computes what the interpreter computes
    assert report.max_abs_error is not None and report.max_abs_error < 1e-4
    ref = run_function(module.main, xs)[0]
    np.testing.assert_allclose(native(*xs), ref, rtol=1e-4, atol=1e-5)


def test_memory_plan_buffers_never_overlap_while_alive(resnet_report):
    mem = resnet_report[0].memory
    assert mem.buffers and mem.arena_bytes <= mem.naive_bytes
    assert max(b.offset + b.size for b in mem.buffers) == mem.arena_bytes
    for i, a in enumerate(mem.buffers):
        for b in mem.buffers[i + 1:]:
            if a.first <= b.last and b.first <= a.last:          # alive at the same time
                assert a.offset + a.size <= b.offset or b.offset + b.size <= a.offset, (a, b)


def test_kernel_code_has_schedule_and_source(resnet_report):
    report, html, _, _ = resnet_report
    assert {c.name for c in report.code} == {k.name for k in report.kernels}
    assert sum(c.calls for c in report.code) == len(report.kernels)
    for c in report.code:
        assert f"id='fn-{c.name}'" in html
        assert c.source.count(c.name) >= 1 and c.schedule
    assert html.count("class='csource'") == len(report.code)
    # passes: a row per pass plus the imported and optimised rows
    assert html.count("<tr>", html.index("class='pass-table'")) >= len(report.passes) + 2
    assert report.before.histogram["graph.batch_norm"] > 0 == report.after.histogram["graph.batch_norm"]


def test_text_pictures_without_graphviz(resnet_report, monkeypatch):
    monkeypatch.setattr(pictures_mod.shutil, "which", lambda name: None)
    html = render_html(resnet_report[0])
    assert html.count("class='textpic'") == 3
    assert "conv" in html[html.index("class='textpic'"):]


def _residual_chain(n_blocks: int) -> Picture:
    """input -> n blocks of (a -> b -> add(a's input, b))."""
    pic = Picture("chain", [Node("x", is_input=True, kind="input")])
    prev = 0
    for _ in range(n_blocks):
        a, b, c = len(pic.nodes), len(pic.nodes) + 1, len(pic.nodes) + 2
        pic.nodes += [Node("conv\n1x8", kind="conv"), Node("relu\n1x8", kind="relu"), Node("add\n1x8", kind="add")]
        pic.edges += [(prev, a), (a, b), (b, c), (prev, c)]
        prev = c
    return pic


def test_big_pictures_collapse_into_blocks_at_residual_boundaries():
    pic = _residual_chain(50)
    assert blocks(pic) == [[1 + 3 * i, 2 + 3 * i, 3 + 3 * i] for i in range(50)]
    small = collapse(pic, limit=1000)
    assert small is pic
    big = collapse(pic, limit=100)
    assert len(big.nodes) == 51 and len(big.edges) == 50 and "50 blocks" in big.note
    assert "1x conv" in big.nodes[1].label and "1x add" in big.nodes[1].label


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")
def test_report_renders_in_headless_chromium(resnet_report, tmp_path):
    imread = pytest.importorskip("matplotlib.image").imread
    page = tmp_path / "report.html"
    page.write_text(resnet_report[1])
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                    "--window-size=1400,3000", "--hide-scrollbars", page.as_uri()],
                   capture_output=True, timeout=120, check=False)
    assert shot.exists()
    img = imread(str(shot))
    assert img.shape[:2] == (3000, 1400)
    gray = img[..., :3].mean(axis=2)
    assert gray.var() > 1e-3                                    # not a blank page
    top = gray[150:1000]                                        # where the graph pictures are
    assert (top < 0.9).mean() > 0.01


def test_cli_refuses_an_unwritable_report_path_before_compiling(capsys):
    from tensorforge.cli import main
    assert main(["explain", "mlp_small", "--html", "/nonexistent-dir/report.html"]) == 1
    assert "directory does not exist" in capsys.readouterr().err
