"""The blocked layout's joins, on and off, in one process: the fused inverted bottleneck
(``graph.mbconv_nchwc``) and the squeeze-excitation gate in the 1x1 conv (``conv_nchwc {gate}``).

    .venv/bin/python benchmarks/nchwc_joins.py                                  # MobileNetV2, EfficientNet-B0, b1 and b8
    .venv/bin/python benchmarks/nchwc_joins.py --models mobilenet_v2 --batches 1 --repeats 30
    .venv/bin/python benchmarks/nchwc_joins.py --models mobilenet_v2 --kernels    # also the fused kernels' timers

Each model is compiled as a user compiles it (``tensorforge.compile``, 2 threads, no tuning
database) with both joins, without the fused chains (``TENSORFORGE_NCHWC_DW_PW=0`` while it
compiles) and without the gate (``TENSORFORGE_NCHWC_GATE=0``), then the builds are called through
``cm(x)`` interleaved (``time_interleaved``: each build's turn a 0.2 s pause, one untimed call and
3 timed calls): medians, and each build's speed over the build without either join.  The fused
builds' outputs are checked against the separate kernels' (the chains give the same bits, the gate
rounds its products in another order).

``--kernels`` builds the model with and without the chains with kernel timers (the build that
``tensorforge explain --profile`` makes), runs them in alternating rounds and prints each fused
kernel's median time against the summed medians of the kernels it replaces, in program order.
The machine is shared and noisy: compare within one run.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time

SWITCHES = {"chains": "TENSORFORGE_NCHWC_DW_PW", "gate": "TENSORFORGE_NCHWC_GATE"}


def _load(name: str, batch: int):
    import numpy as np
    import onnx

    from tensorforge.benchmark.peers import _onnx_bytes
    from tensorforge.commands.loading import load_model
    lm = load_model(name, batch, {})
    return onnx.load_from_string(_onnx_bytes(lm)), [np.asarray(a) for a in lm.inputs]


@contextlib.contextmanager
def _switched_off(off: tuple[str, ...]):
    """The given joins switched off (their variables set to 0) while the block compiles."""
    saved = {v: os.environ.get(v) for v in SWITCHES.values()}
    try:
        for name in off:
            os.environ[SWITCHES[name]] = "0"
        yield
    finally:
        for v, old in saved.items():
            if old is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = old


def _compiled(proto, off: tuple[str, ...], threads: int):
    import tensorforge
    with _switched_off(off):
        return tensorforge.compile(proto, threads=threads, db=None)


def _first(out):
    import numpy as np
    return np.asarray(out[0] if isinstance(out, (list, tuple)) else out)


def end_to_end(name: str, batch: int, threads: int, repeats: int) -> None:
    import numpy as np

    from tensorforge.benchmark import time_interleaved
    proto, xs = _load(name, batch)
    builds = {"both joins": (), "no chains": ("chains",), "no gate": ("gate",), "neither": ("chains", "gate")}
    models = {k: _compiled(proto, off, threads) for k, off in builds.items()}
    ref = _first(models["neither"](*xs))
    for k, m in models.items():
        got = _first(m(*xs))
        err = float(np.abs(got - ref).max() / max(1e-30, np.abs(ref).max()))
        if err > 1e-5:
            raise SystemExit(f"{name} b{batch} {k}: {err:.1e} relative from the separate kernels")
    t = time_interleaved({k: (lambda m=m: m(*xs)) for k, m in models.items()}, repeats=repeats, warmup=2, block=3,
                         pause_s=0.2)
    base = statistics.median(t["neither"].samples)
    cells = [f"{k} {statistics.median(v.samples) * 1e3:.3f} ms ({base / statistics.median(v.samples):.3f}x)"
             for k, v in t.items()]
    print(f"{name} b{batch}: " + ", ".join(cells))


def kernel_timers(name: str, batch: int, rounds: int) -> None:
    """Each fused kernel against the kernels it replaces, kernel timers of both builds."""
    import numpy as np

    import tensorforge
    from tensorforge.codegen.c.build import build_lowered
    from tensorforge.codegen.target import Target
    from tensorforge.passes.lower.graph_to_kernels import is_library_kernel, library_op
    from tensorforge.passes.pipeline import default_pipeline
    from tensorforge.report.collect import lower_with_log
    proto, xs = _load(name, batch)
    target = Target.host()

    def build(off: tuple[str, ...]):
        with _switched_off(off):
            module = tensorforge.import_model(proto)
            default_pipeline(target).run(module)
        lowered, _ = lower_with_log(module, target)
        model, _ = build_lowered(lowered, module, target, profile=True)
        convs = []
        for op in lowered.main.body:
            if op.name == "structured.kernel":
                lop = library_op(op) if is_library_kernel(op) else None
                convs.append(1 + bool(lop.attributes.get("expand")) + bool(lop.attributes.get("project"))
                             if lop is not None and lop.name == "graph.mbconv_nchwc" else 0)
        return model, convs
    (fused, convs), (apart, _) = build(()), build(("chains",))
    samples: dict[str, list] = {"fused": [], "apart": []}
    for _ in range(rounds):
        for key, m in (("fused", fused), ("apart", apart)):
            m.reset_kernel_times()
            for _ in range(3):
                m(*xs)
            samples[key].append(m.kernel_times().copy() / 3)
            time.sleep(0.05)
    f, a = (np.median(np.array(samples[k]), axis=0) * 1e3 for k in ("fused", "apart"))
    j = total_f = total_a = 0
    print(f"{name} b{batch}: fused kernels against the kernels they replace (ms, medians of {rounds} rounds)")
    for i, n in enumerate(convs):
        if n:
            replaced = a[j:j + n]
            print(f"  kernel {i:3d}: {f[i]:.3f} against {' + '.join(f'{x:.3f}' for x in replaced)} = "
                  f"{replaced.sum():.3f} ({replaced.sum() / f[i]:.2f}x)")
            total_f += f[i]
            total_a += replaced.sum()
        j += max(1, n)
    print(f"  all fused kernels {total_f:.3f} ms against {total_a:.3f} ms ({total_a / max(total_f, 1e-9):.2f}x); "
          f"whole model {f.sum():.3f} against {a.sum():.3f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="mobilenet_v2,efficientnet_b0")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--kernels", action="store_true", help="also each fused kernel's timer against the kernels it replaces")
    ap.add_argument("--rounds", type=int, default=40, help="rounds of the kernel timers")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    print(f"load average before: {os.getloadavg()}")
    for name in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            end_to_end(name, batch, args.threads, args.repeats if batch == 1 else max(5, args.repeats // 2))
            if args.kernels:
                kernel_timers(name, batch, args.rounds if batch == 1 else max(8, args.rounds // 4))
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
