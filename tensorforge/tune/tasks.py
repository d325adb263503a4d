"""Tuning tasks: the distinct kernels of a model, as the compiler will build them.

A model is imported, optimised and lowered to ``structured.kernel`` ops by exactly the steps
``tensorforge.compile`` takes (same pipeline, same fusion), so a task found here is a kernel that
compile will meet again.  Identical layers share one task: the key is a structural hash of the
kernel (its body, shapes and dtypes) plus which operands are constants (the tensorizer packs
constant weights, so that changes the code); the target is kept apart as ``target_key``, so one
database serves several machines.

Each task carries a *one-kernel function* (the constants it reads, the kernel, a return): the
measurer compiles exactly that, through the same code generator as a whole model.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..ir.builtin import FuncOp
from ..ir.core import Operation
from ..ir.structure import structural_hash

KEY_VERSION = "tf-workload-v1"
KINDS = ("gemm", "conv", "loop")


def constant_args(kernel: Operation) -> tuple[int, ...]:
    """Operand positions of ``kernel`` fed by a ``graph.constant`` (weights the tensorizer may pack)."""
    return tuple(i for i, v in enumerate(kernel.operands) if v.op is not None and v.op.name == "graph.constant")


def workload_key(kernel: Operation) -> str:
    """The database key of a kernel: structure, shapes, dtypes and which operands are constant.

    Compile (``apply.py``) and the tuner both call this on kernels of a lowered function, so a
    record stored under the key is found again for the same kernel in any model."""
    h = hashlib.sha256(f"{KEY_VERSION}|{structural_hash(kernel)}|const={constant_args(kernel)}".encode())
    return h.hexdigest()[:32]


@dataclass
class Task:
    """One distinct kernel of a model.

    ``kind``: "gemm"/"conv" (tensorized contractions, tuned through GemmParams) or "loop" (a
    scheduled loop nest, tuned through a schedule trace).  ``weight``: how many kernels of the model
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

    def description(self) -> dict:
        """What a human reading the database sees about this workload."""
        k = self.kernel
        return {"kernel": self.name, "kind": self.kind, "flops": self.flops, "bytes": self.bytes,
                "inputs": [_type_text(v.type) for v in k.operands],
                "outputs": [_type_text(r.type) for r in k.results], "problem": self.problem}

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
                     passes: Any = None) -> FuncOp:
    """``model`` imported, verified, optimised and lowered to kernels as ``compile`` does it."""
    from ..api import import_model
    from ..codegen.target import Target
    from ..ir.verifier import verify
    from ..passes.lower.graph_to_kernels import lower_function
    target = target or Target.host()
    module = import_model(model, example_inputs)
    verify(module)
    module = module.clone()
    if passes is not False and passes != "":
        from ..passes.pipeline import optimize
        optimize(module, "cpu", passes)
        verify(module)
    func = module.main
    lower_function(func, target)
    return func


def single_kernel_function(kernel: Operation, name: str = "task") -> FuncOp:
    """A function computing only ``kernel``: its non-constant operands become arguments, its
    constants are copied (the tensorizer then packs them as it would in the model)."""
    args: list = []
    seen: dict[int, int] = {}
    for v in kernel.operands:
        if (v.op is None or v.op.name != "graph.constant") and id(v) not in seen:
            seen[id(v)] = len(args)
            args.append(v)
    fn = FuncOp.create(name, [v.type for v in args])
    mapping = {old: new for old, new in zip(args, fn.args)}
    done: set[int] = set()
    for v in kernel.operands:
        if v.op is not None and v.op.name == "graph.constant" and id(v) not in done:
            done.add(id(v))
            fn.body.append(v.op.clone(mapping))
    clone = kernel.clone(mapping)
    fn.body.append(clone)
    fn.set_return(list(clone.results))
    return fn


def kernel_flops(kernel: Operation) -> float:
    """Scalar operations per call: every compute's domain times the ops in its body (at least one)."""
    from ..dialects.structured.ops import ComputeView
    total = 0.0
    for op in kernel.regions[0].blocks[0]:
        if op.name != "structured.compute":
            continue
        cv = ComputeView(op)
        ops = sum(1 for o in op.regions[0].blocks[0] if o.name.startswith("scalar.")
                  and o.name not in ("scalar.const", "scalar.index_cast", "scalar.cast")) if op.regions else 1
        total += math.prod(cv.domain) * max(ops, 1)
    return float(total)


def kernel_bytes(kernel: Operation) -> float:
    return float(sum(getattr(v.type, "nbytes", 0) for v in list(kernel.operands) + list(kernel.results)))


def classify(kernel: Operation, target) -> tuple[str, dict, float | None]:
    """(kind, problem, flops) of a kernel: how the tensorizer would build it."""
    from ..codegen.c.tensorize import Tensorizer
    plan = Tensorizer(target).plan(kernel, set(constant_args(kernel)))
    if plan is None:
        return "loop", {}, None
    r = plan.roles
    problem = {"M": r.M, "N": r.N, "K": r.K, "batch": r.batch_count, "conv": None}
    kind = plan.kind
    if kind in ("conv", "fold", "direct", "winograd"):   # one task kind; the algorithm is a knob of its space
        p = plan.plan
        problem["conv"] = {"kernel": list(p.kernel), "strides": list(p.strides), "channels": p.channels,
                           "algorithm": "im2col" if kind == "conv" else kind,
                           "algorithms": Tensorizer(target).conv_algorithms(p, set(constant_args(kernel)))}
        kind = "conv"
    return kind, problem, 2.0 * r.M * r.N * r.K * r.batch_count


def extract_tasks(model: Any, example_inputs: Sequence | None = None, target=None, passes: Any = None,
                  kinds: Sequence[str] = KINDS) -> list[Task]:
    """The distinct kernels of ``model`` (any object ``compile`` takes), heaviest total work first."""
    from ..codegen.target import Target
    target = target or Target.host()
    func = model if isinstance(model, FuncOp) else lowered_function(model, example_inputs, target, passes)
    return tasks_of_function(func, target, kinds)


def tasks_of_function(func: FuncOp, target, kinds: Sequence[str] = KINDS) -> list[Task]:
    """The distinct kernels of an already lowered function."""
    tasks: dict[str, Task] = {}
    for op in func.body:
        if op.name != "structured.kernel":
            continue
        key = workload_key(op)
        if key in tasks:
            tasks[key].weight += 1
            continue
        kind, problem, flops = classify(op, target)
        name = str(op.attributes.get("sym_name", "kernel"))
        tasks[key] = Task(key, name, kind, single_kernel_function(op, name), 1,
                          flops if flops is not None else kernel_flops(op), kernel_bytes(op), problem)
    out = [t for t in tasks.values() if t.kind in kinds]
    out.sort(key=lambda t: -(t.weight * max(t.flops, t.bytes)))
    return out
