"""HTML reports of ``tensorforge explain --html`` for full-size zoo models, and their screenshots.

    .venv/bin/python benchmarks/explain_reports.py                          # resnet18 and bert_base
    .venv/bin/python benchmarks/explain_reports.py --models resnet50 --out /tmp/reports

For each model it runs the command line (``tensorforge explain MODEL --html OUT/MODEL.html``), then,
when Debian's ``chromium`` is on PATH, renders the page headless at 1400x3000
(``OUT/MODEL.png``) so the graph pictures and the kernel table can be checked by eye.  Prints
the size of each report, how long it took and whether the screenshot is blank.  Not a test (a
full-size model takes a minute to compile and profile); ``tests/report`` renders a small one.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path


def screenshot(page: Path, png: Path) -> str:
    """Renders ``page`` headless; a note on the result."""
    chromium = shutil.which("chromium")
    if chromium is None:
        return "no chromium: screenshot skipped"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={png}", "--window-size=1400,3000", page.resolve().as_uri()],
                   capture_output=True, timeout=300)
    if not png.exists():
        return "chromium wrote no screenshot"
    from matplotlib.image import imread
    gray = imread(str(png))[..., :3].mean(axis=2)
    return f"{png} ({'blank!' if gray.var() < 1e-3 else f'pixel variance {gray.var():.3f}'})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,bert_base", help="comma-separated zoo names")
    ap.add_argument("--out", default="explain_reports", help="directory for the .html and .png files")
    ap.add_argument("--profile-runs", type=int, default=5)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    status = 0
    for name in args.models.split(","):
        page = out / f"{name}.html"
        t0 = time.perf_counter()
        rc = subprocess.run([sys.executable, "-m", "tensorforge.cli", "explain", name, "--html", str(page),
                             "--profile-runs", str(args.profile_runs)]).returncode
        took = time.perf_counter() - t0
        if rc != 0 or not page.exists():
            print(f"{name}: explain failed (exit code {rc})")
            status = 1
            continue
        print(f"{name}: {page} {page.stat().st_size / 1e6:.2f} MB in {took:.0f} s; "
              f"{screenshot(page, out / f'{name}.png')}")
    return status


if __name__ == "__main__":
    sys.exit(main())
