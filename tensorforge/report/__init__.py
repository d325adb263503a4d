"""``tensorforge explain --html`` and ``--bisect``: what the compiler did to a model, and where its
native code first disagrees with the reference interpreter.

    report = collect(module, "resnet18", inputs)      # runs the compile path with timers
    Path("report.html").write_text(render_html(report))
    result = bisect(module, inputs)                   # first op whose native result diverges
"""
from .bisect import BisectResult, bisect
from .collect import Report, collect, example_inputs
from .html import render_html

__all__ = ["BisectResult", "Report", "bisect", "collect", "example_inputs", "render_html"]
