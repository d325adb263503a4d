"""Tuning tasks: the distinct kernels of a model, as the compiler will build them.

A model is imported, optimised and lowered to ``structured.kernel`` ops by exactly the steps
``tensorforge.compile`` takes (same pipeline, same fusion), so a task found here is a kernel that
compile will meet again.  Identical layers share one task: the key is a structural hash of the
kernel (its body, shapes and dtypes) plus which operands are constants (the tensorizer packs
constant weights, so that changes the code); the target is kept apart as ``target_key``, so one
database serves several machines.

Each task carries a *one-kernel function* (the constants it reads, the kernel, a return): the
measurer compiles exactly that, through the same code generator as a whole model.

Kernels over symbolic shapes (docs/dynamic_shapes.md) are tasks like any other: the key is the
structural hash of the kernel *with its symbolic types* (``"b*s"`` dims, symbolic domains), so
one record serves every size in the symbols' ranges, and nothing about the hints or ranges goes
into it.  The one-kernel function of such a task carries the model's symbol table (``tf.symbols``),
so the measurer builds the kernel exactly as the model's library does (taking ``tf_dims``) and
runs it at the hints; weight, flops, bytes and the contraction's problem are estimated at the
hints (``SymbolTable.hint``).  A static kernel of a dynamic model stays a static task (same key
and code as in a static model).
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..ir.builtin import FuncOp
from ..ir.core import Operation
from ..ir.structure import structural_hash
from ..ir.symbolic import SYMBOLS_ATTR, SymbolTable, enclosing_symbols_text, hint_of, hints_from, symbol_table_of

KEY_VERSION = "tf-workload-v1"
KINDS = ("gemm", "conv", "depthwise", "int8", "blocked", "loop", "fusion")


def constant_args(kernel: Operation) -> tuple[int, ...]:
    """Operand positions of ``kernel`` fed by a ``graph.constant`` (weights the tensorizer may pack)."""
    return tuple(i for i, v in enumerate(kernel.operands) if v.op is not None and v.op.name == "graph.constant")


def workload_key(kernel: Operation) -> str:
    """The database key of a kernel: structure, shapes, dtypes and which operands are constant.

    Compile (``apply.py``) and the tuner both call this on kernels of a lowered function, so a
    record stored under the key is found again for the same kernel in any model."""
    h = hashlib.sha256(f"{KEY_VERSION}|{_int8_shape(kernel) or structural_hash(kernel)}|"
                       f"const={constant_args(kernel)}".encode())
    return h.hexdigest()[:32]


def pair_key(first: Operation, second: Operation) -> str:
    """The database key of two kernels the code generator runs as one (``dw_pw``, ``pw_dw``:
    ``first`` fused with ``second``, the kernel right after it): both kernels' keys, so the
    record is found again for the same pair in any model."""
    h = hashlib.sha256(f"{KEY_VERSION}|fusion|{workload_key(first)}|{workload_key(second)}".encode())
    return h.hexdigest()[:32]


# attributes of an int8 kernel that change its work (the rest, scales and zero points, only its numbers)
_INT8_GEOMETRY = ("kernel", "strides", "pads", "dilations", "groups", "k", "n", "relu")


def _int8_shape(kernel: Operation) -> str | None:
    """What an int8 GEMM or convolution's tiling depends on: the op, its operands' and results'
    types and its geometry, without the quantization parameters, so that the identical layers of
    a quantized model (each with its own scales) are one task and one record; None for others."""
    from ..codegen.c.library_kernels import int8_tunable
    if not int8_tunable(kernel):
        return None
    from ..passes.lower.graph_to_kernels import library_op
    op = library_op(kernel)
    geometry = {k: str(op.attributes.get(k)) for k in _INT8_GEOMETRY if k in op.attributes}
    types = [str(v.type) for v in (*kernel.operands, *kernel.results)]
    return f"int8:{op.name}:{types}:{sorted(geometry.items())}"


@dataclass
class Task:
    """One distinct kernel of a model.

    ``kind``: "gemm"/"conv" (tensorized contractions, tuned through GemmParams), "depthwise" (a
    depthwise convolution's direct kernel, tuned through DepthwiseParams), "int8" (an int8 GEMM or
    convolution's VNNI kernel, tuned through its ``qgemm.Tiling``), "blocked" (a convolution in
    the blocked NCHW[16]c layout, tuned through its ``nchwc.BlockedParams``: algorithm, register
    tile, input chunk, band), "loop" (a scheduled
    loop nest, tuned through a schedule trace) or "fusion" (two kernels the code generator runs
    as one, ``dw_pw``/``pw_dw``, tuned through their band rows; ``func`` computes both and
    ``kernel`` is the first).  ``weight``: how many kernels of the model
    are this one.  ``flops``/``bytes`` are per call.  ``problem`` is the contraction's shape
    (M, N, K, batch; conv details) for the cost model's analytic features, empty for loop kernels.
    """

    key: str
    name: str
    kind: str
    func: FuncOp
    weight: int = 1
    flops: float = 0.0
    bytes: float = 0.0
    problem: dict = field(default_factory=dict)

    @property
    def kernel(self) -> Operation:
        return next(op for op in self.func.body if op.name == "structured.kernel")

    @property
    def symbols(self) -> SymbolTable:
        """The symbol table the task's function carries (empty for a static kernel)."""
        return symbol_table_of(self.func)

    @property
    def is_symbolic(self) -> bool:
        return bool(self.symbols.ranges)

    def hints(self) -> dict[str, int]:
        """The symbols' values a symbolic task is measured at (its table's hints); {} when static."""
        return self.symbols.hints()

    def at(self, **values: int) -> "Task":
        """This task measured at other symbol values: a copy whose table has those hints (the key,
        and so the records, stay the same); e.g. ``task.at(b=3, s=100)``."""
        from ..ir.symbolic import SymbolRange, set_symbol_table
        table = self.symbols
        unknown = set(values) - set(table.ranges)
        if unknown:
            raise ValueError(f"task {self.name} has no symbol(s) {sorted(unknown)} (it has {sorted(table.ranges)})")
        ranges = [SymbolRange(r.name, r.lo, r.hi, r.divisor, values.get(r.name, r.hint)) for r in table.ranges.values()]
        func = self.func.clone()
        set_symbol_table(func, SymbolTable(ranges))
        return Task(self.key, self.name, self.kind, func, self.weight, self.flops, self.bytes, dict(self.problem))

    def description(self) -> dict:
        """What a human reading the database sees about this workload."""
        k = self.kernel
        out = {"kernel": self.name, "kind": self.kind, "flops": self.flops, "bytes": self.bytes,
               "inputs": [_type_text(v.type) for v in k.operands],
               "outputs": [_type_text(r.type) for r in k.results], "problem": self.problem}
        table = self.symbols
        if table.ranges:        # what the numbers above were estimated (and the task measured) at
            out["symbols"] = {n: {"range": r.describe(), "hint": r.representative} for n, r in table.ranges.items()}
        return out

    def shape_text(self) -> str:
        """A short shape that tells apart tasks of one name (several ``conv_relu`` kernels of a
        ResNet): M x N x K of a plain contraction, else the output's shape, with a convolution's
        input channels, window and stride (``64->1x128x28x28 k3x3/2``)."""
        p = self.problem or {}
        conv = p.get("conv") or {}
        if self.kind == "fusion":
            return f"{p['fusion']} {p['channels']}x{'x'.join(map(str, p['out']))} bands of {p['band_rows']} rows"
        if self.kind == "gemm" and p.get("M"):
            batch = f" b{p['batch']}" if p.get("batch", 1) > 1 else ""
            return f"{p['M']}x{p['N']}x{p['K']}{batch}"
        results = self.kernel.results
        out = _type_text(results[0].type).rsplit("x", 1)[0] if results else ""
        if conv.get("kernel"):
            stride = max(conv.get("strides") or [1])
            cin = f"{conv['channels']}->" if conv.get("channels") else ""
            out = f"{cin}{out} k{'x'.join(map(str, conv['kernel']))}" + (f"/{stride}" if stride > 1 else "")
        return out

    def workload(self):
        from .database import Workload
        return Workload(self.key, self.description())

    def __str__(self) -> str:
        gf = f"{self.flops / 1e9:.3g} GFLOP" if self.flops else "-"
        return f"{self.name} [{self.kind}] x{self.weight} ({gf})"


def _type_text(t) -> str:
    shape = getattr(t, "shape", ())
    return f"{'x'.join(map(str, shape))}x{getattr(t, 'dtype', '')}" if shape else str(getattr(t, "dtype", t))


def lowered_function(model: Any, example_inputs: Sequence | None = None, target=None,
                     passes: Any = None, *, shapes: Any = None, dynamic_shapes: Any = None) -> FuncOp:
    """``model`` imported, verified, optimised and lowered to kernels as ``compile`` does it;
    ``shapes`` / ``dynamic_shapes`` as ``compile`` takes them (a torch module with
    ``dynamic_shapes`` lowers to kernels over symbolic shapes)."""
    return lowered_module(model, example_inputs, target, passes, shapes=shapes, dynamic_shapes=dynamic_shapes).main


def lowered_module(model: Any, example_inputs: Sequence | None = None, target=None,
                   passes: Any = None, *, shapes: Any = None, dynamic_shapes: Any = None):
    """The module of ``lowered_function`` (what ``codegen.c.build.build_lowered`` builds)."""
    from ..api import import_model
    from ..codegen.target import Target
    from ..ir.verifier import verify
    from ..passes.lower.graph_to_kernels import lower_function
    target = target or Target.host()
    extra = {k: v for k, v in (("shapes", shapes), ("dynamic_shapes", dynamic_shapes)) if v is not None}
    module = import_model(model, example_inputs, **extra)
    verify(module)
    module = module.clone()
    if passes is not False and passes != "":
        from ..passes.pipeline import optimize
        optimize(module, "cpu", passes)
        verify(module)
    func = module.main
    lower_function(func, target)
    return module


def is_symbolic_kernel(kernel: Operation) -> bool:
    """Whether ``kernel`` has a symbolic dim in an operand or result type or a compute domain."""
    for v in list(kernel.operands) + list(kernel.results):
        if any(isinstance(d, str) for d in getattr(v.type, "shape", ())):
            return True
    return any(isinstance(d, str) for op in kernel.regions[0].blocks[0] if op.name == "structured.compute"
               for d in op.attributes["domain"])


def kernel_symbols(kernel: Operation) -> SymbolTable | None:
    """The symbol table of the function holding a symbolic ``kernel`` (its ``tf.symbols``); None
    for a static kernel or one whose function declares no symbols (default hints then)."""
    if not is_symbolic_kernel(kernel):
        return None
    text = enclosing_symbols_text(kernel)
    return SymbolTable.from_json(json.loads(text)) if text else None


def single_kernel_function(kernel: Operation, name: str = "task") -> FuncOp:
    """A function computing only ``kernel``: its non-constant operands become arguments, its
    constants are copied (the tensorizer then packs them as it would in the model).  A symbolic
    kernel's function gets the symbol table of the kernel's function, so the code generator
    builds it as in the model (``tf_dims`` in the model's symbol order) and lowering copies the
    hints onto its loop nest."""
    return kernels_function([kernel], name)


def kernels_function(kernels: Sequence[Operation], name: str = "task") -> FuncOp:
    """``single_kernel_function`` of consecutive kernels (a fused pair): operands none of them
    computes become arguments, and the function returns the last kernel's results."""
    produced = {id(r) for k in kernels for r in k.results}
    operands = [v for k in kernels for v in k.operands]
    args: list = []
    seen: set[int] = set()
    for v in operands:
        if (v.op is None or v.op.name != "graph.constant") and id(v) not in produced and id(v) not in seen:
            seen.add(id(v))
            args.append(v)
    fn = FuncOp.create(name, [v.type for v in args])
    mapping = {old: new for old, new in zip(args, fn.args)}
    done: set[int] = set()
    for v in operands:
        if v.op is not None and v.op.name == "graph.constant" and id(v) not in done:
            done.add(id(v))
            fn.body.append(v.op.clone(mapping))
    clones = [k.clone(mapping) for k in kernels]
    for clone in clones:
        fn.body.append(clone)
    fn.set_return(list(clones[-1].results))
    if is_symbolic_kernel(kernels[0]):
        text = enclosing_symbols_text(kernels[0])
        if text:
            fn.attributes[SYMBOLS_ATTR] = text
    return fn


def kernel_flops(kernel: Operation, table: SymbolTable | None = None) -> float:
    """Scalar operations per call: every compute's domain times the ops in its body (at least one);
    symbolic extents count at their hints (``table``, else the default hints)."""
    from ..dialects.structured.ops import ComputeView
    total = 0.0
    for op in kernel.regions[0].blocks[0]:
        if op.name != "structured.compute":
            continue
        cv = ComputeView(op)
        ops = sum(1 for o in op.regions[0].blocks[0] if o.name.startswith("scalar.")
                  and o.name not in ("scalar.const", "scalar.index_cast", "scalar.cast")) if op.regions else 1
        total += math.prod(hint_of(d, table) for d in cv.domain) * max(ops, 1)
    return float(total)


def kernel_bytes(kernel: Operation, table: SymbolTable | None = None) -> float:
    """Bytes of the operands and results per call (symbolic dims at their hints)."""
    total = 0
    for v in list(kernel.operands) + list(kernel.results):
        t = v.type
        shape, dtype = getattr(t, "shape", None), getattr(t, "dtype", None)
        if shape is None or dtype is None:
            total += getattr(t, "nbytes", 0)
            continue
        total += math.prod(hint_of(d, table) for d in shape) * dtype.itemsize
    return float(total)


def classify(kernel: Operation, target, table: SymbolTable | None = None) -> tuple[str, dict, float | None]:
    """(kind, problem, flops) of a kernel: how the tensorizer would build it.  ``table``: the
    symbols' hints (as ``Tensorizer.prepare`` reads them from the model's function; default: the
    kernel's function's table).  A symbolic problem's M/N/K/batch are their hints (numbers for the
    space and the cost model); ``problem["dims"]`` keeps the symbolic ones."""
    if table is None:
        table = kernel_symbols(kernel)
    with hints_from(table):
        return _classify(kernel, target, table)


def _classify(kernel: Operation, target, table: SymbolTable | None) -> tuple[str, dict, float | None]:
    from ..codegen.c.library_kernels import blocked_tunable, int8_tunable
    from ..codegen.c.tensorize import DIRECT_TRANSPOSED, Tensorizer
    if int8_tunable(kernel):
        return _int8_problem(kernel)
    if blocked_tunable(kernel):
        return _blocked_problem(kernel)
    plan = Tensorizer(target).plan(kernel, set(constant_args(kernel)), table)
    if plan is None:
        return "loop", {}, None
    r = plan.roles
    dims = {"M": r.M, "N": r.N, "K": r.K, "batch": r.batch_count}
    problem = {k: hint_of(d, table) for k, d in dims.items()}
    problem["conv"] = None
    if any(isinstance(d, str) for d in dims.values()):
        problem["dims"] = dims
    kind = plan.kind
    if kind == "depthwise":
        from ..codegen.c import depthwise
        p, vw = plan.plan, target.vector_width
        problem["conv"] = {"kernel": list(p.kernel), "strides": list(p.strides), "channels": p.channels,
                           "algorithm": "depthwise", "out": [p.shape.oh, p.shape.ow],
                           "lanes": depthwise.lanes_shape(p.shape, vw) is not None}
    if kind in ("conv", "fold", "direct", "winograd", "winograd4", "narrow"):   # one task kind; the algorithm is a knob of its space
        p = plan.plan
        problem["conv"] = {"kernel": list(p.kernel), "strides": list(p.strides), "channels": p.channels,
                           "algorithm": ("im2col" if kind == "conv" else
                                         DIRECT_TRANSPOSED if kind == "direct" and plan.transposed else kind),
                           "algorithms": Tensorizer(target).conv_algorithms(p, set(constant_args(kernel)))}
        kind = "conv"
    return kind, problem, 2.0 * problem["M"] * problem["N"] * problem["K"] * problem["batch"]


def _int8_problem(kernel: Operation) -> tuple[str, dict, float]:
    """("int8", problem, flops) of an int8 GEMM (rows x n x k) or convolution (the implicit GEMM
    of one image: out channels x pixels x channels * window, batch = images)."""
    from ..passes.lower.graph_to_kernels import library_op
    op = library_op(kernel)
    at = op.attributes
    if op.name == "graph.qmatmul":
        rows = math.prod(int(d) for d in kernel.operands[0].type.shape[:-1])
        problem = {"M": rows, "N": int(at["n"]), "K": int(at["k"]), "batch": 1, "conv": None}
    else:
        n, c = (int(d) for d in kernel.operands[0].type.shape[:2])
        o, oh, ow = (int(d) for d in kernel.results[0].type.shape[1:])
        kh, kw = (int(v) for v in at["kernel"])
        problem = {"M": o, "N": oh * ow, "K": c * kh * kw, "batch": n,
                   "conv": {"kernel": [kh, kw], "strides": [int(v) for v in (at.get("strides") or (1, 1))],
                            "channels": c, "algorithm": "int8"}}
    return "int8", problem, 2.0 * problem["M"] * problem["N"] * problem["K"] * problem["batch"]


def _blocked_problem(kernel: Operation) -> tuple[str, dict, float]:
    """("blocked", problem, flops) of a blocked conv: the implicit GEMM of one image (out channels x
    positions x reduction), batch = images, and in ``conv`` what its space needs: the geometry,
    the groups, the algorithms it may run and the one it runs untuned.  A fused chain is its tuned
    1x1 conv's GEMM (``blocked_geometry``) with the other convs' flops added."""
    import dataclasses
    from ..codegen.c.library_kernels import blocked_algorithms, blocked_geometry, nchwc_winograd
    g, groups = blocked_geometry(kernel)
    algorithms = blocked_algorithms(kernel)
    taps = g.kh * g.kw
    reduction = taps if groups > 1 else (g.ci or g.cb * g.bi) * taps
    m = nchwc_winograd(kernel)
    untuned = algorithms[0] if algorithms in (("depthwise",), ("mbconv",)) else f"winograd{m}" if m else "direct"
    problem = {"M": g.ob * g.vw, "N": g.oh * g.ow, "K": reduction, "batch": g.n,
               "conv": {"kernel": [g.kh, g.kw], "strides": [g.sh, g.sw], "channels": g.ci or g.cb * g.bi,
                        "algorithm": untuned, "algorithms": list(algorithms), "groups": groups,
                        "geometry": dataclasses.asdict(g)}}
    flops = 2.0 * problem["M"] * problem["N"] * problem["K"] * problem["batch"]
    if untuned == "mbconv":                 # the chain's other convs
        from ..codegen.c import nchwc_mbconv
        from ..passes.lower.graph_to_kernels import library_op
        chain = nchwc_mbconv.chain_of(kernel, library_op(kernel))
        gd, other = chain.dw, chain.expand if chain.project is not None else None
        flops += 2.0 * gd.n * gd.ob * gd.vw * gd.oh * gd.ow * gd.kh * gd.kw + (2.0 * other.macs if other else 0.0)
    return "blocked", problem, flops


def extract_tasks(model: Any, example_inputs: Sequence | None = None, target=None, passes: Any = None,
                  kinds: Sequence[str] = KINDS, *, shapes: Any = None, dynamic_shapes: Any = None) -> list[Task]:
    """The distinct kernels of ``model`` (any object ``compile`` takes), heaviest total work first
    (symbolic kernels weighed at their hints)."""
    from ..codegen.target import Target
    target = target or Target.host()
    func = model if isinstance(model, FuncOp) else lowered_function(model, example_inputs, target, passes,
                                                                    shapes=shapes, dynamic_shapes=dynamic_shapes)
    return tasks_of_function(func, target, kinds)


def tasks_of_function(func: FuncOp, target, kinds: Sequence[str] = KINDS) -> list[Task]:
    """The distinct kernels of an already lowered function."""
    from ..codegen.c.library_kernels import blocked_tunable, int8_tunable
    from ..passes.lower.graph_to_kernels import is_library_kernel
    tasks: dict[str, Task] = {}
    weight_bytes = None             # the model's, for its blocked tasks (``measure.rotate_bytes``)
    for op in func.body:
        if op.name != "structured.kernel" or (is_library_kernel(op) and not (int8_tunable(op) or blocked_tunable(op))):
            continue                                     # hand-written C without knobs: nothing to tune
        key = workload_key(op)
        if key in tasks:
            tasks[key].weight += 1
            continue
        table = kernel_symbols(op)
        name = str(op.attributes.get("sym_name", "kernel"))
        if table is None and is_symbolic_kernel(op):
            from ..errors import TensorforgeError
            raise TensorforgeError(f"kernel {name} has symbolic dims but its function declares no ranges for them "
                                   f"(tf.symbols): tuning measures a symbolic kernel at its symbols' hints; "
                                   f"declare them (dynamic_shapes=..., ir.symbolic.set_symbol_table) or bind "
                                   f"the sizes (shapes=...)")
        kind, problem, flops = classify(op, target, table)
        if kind == "blocked":       # how cold its weights are in the model (``measure.rotate_bytes``)
            weight_bytes = model_weight_bytes(func) if weight_bytes is None else weight_bytes
            problem["model_weight_bytes"] = weight_bytes
        tasks[key] = Task(key, name, kind, single_kernel_function(op, name), 1,
                          flops if flops is not None else kernel_flops(op, table), kernel_bytes(op, table), problem)
    if "fusion" in kinds:
        for task in fusion_tasks(func, target, tasks):
            if task.key in tasks:
                tasks[task.key].weight += 1
            else:
                tasks[task.key] = task
    out = [t for t in tasks.values() if t.kind in kinds]
    out.sort(key=lambda t: -(t.weight * max(t.flops, t.bytes)))
    return out


def model_weight_bytes(func: FuncOp) -> int:
    """Bytes of the constants of a lowered function: what one run of the model reads besides its
    activations, so what passes through the caches between two calls of one of its kernels."""
    return int(sum(op.attributes["value"].array.nbytes for op in func.body if op.name == "graph.constant"))


def fusion_tasks(func: FuncOp, target, single: dict[str, Task]) -> list[Task]:
    """One task per pair of kernels the code generator fuses (``dw_pw``, ``pw_dw``: found as
    ``generate_model_c`` finds them, ``model.fused_pairs``, untuned), in program order (a pair met twice is listed
    twice); ``single``: the function's one-kernel tasks by key (their flops and bytes)."""
    from ..codegen.c import dw_pw
    from ..codegen.c.model import fused_pairs
    from ..codegen.c.tensorize import Tensorizer
    if symbol_table_of(func).ranges or not any(t.kind == "depthwise" for t in single.values()):
        return []           # fused pairs are static kernels, one of them depthwise (no weights packed for naught)
    tz = Tensorizer(target).prepare(func)
    pairs = fused_pairs(func.body, tz)
    out = []
    for first in func.body:
        if id(first) not in pairs:
            continue
        second, module = pairs[id(first)]
        dw = tz.plans[id(first if module is dw_pw else second)]
        s = dw.plan.shape
        rows, bands = module.band_rows(dw)
        a, b = single.get(workload_key(first)), single.get(workload_key(second))
        name = f"{first.attributes.get('sym_name', 'kernel')}+{second.attributes.get('sym_name', 'kernel')}"
        problem = {"fusion": module.__name__.rsplit(".", 1)[-1], "out": [s.oh, s.ow], "channels": dw.plan.channels,
                   "band_rows": rows, "bands": bands, "choices": dw_pw.band_choices(s.oh)}
        out.append(Task(pair_key(first, second), name, "fusion", kernels_function([first, second], name), 1,
                        (a.flops if a else 0.0) + (b.flops if b else 0.0),
                        (a.bytes if a else 0.0) + (b.bytes if b else 0.0), problem))
    return out
