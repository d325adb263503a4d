"""A tuning task as plain data, to ship to other nodes.

IR objects do not pickle (types are immutable, values and ops point at each other), so a task
travels as its one-kernel function's text in the generic syntax (``ir/printer.py``) with its large
constants as arrays beside it, plus the task's small fields.  The receiver parses it back and
checks that the kernel's workload key is the same, so a build or a measurement can never be
stored under another task's key.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...errors import TensorforgeError
from ..tasks import Task, workload_key


@dataclass
class TaskWire:
    key: str
    name: str
    kind: str
    weight: int
    flops: float
    bytes: float
    problem: dict
    text: str
    resources: dict[str, np.ndarray] = field(default_factory=dict)


def pack(task: Task) -> TaskWire:
    from ...ir.printer import print_module
    resources: dict[str, np.ndarray] = {}
    text = print_module(task.func, resources=resources)
    return TaskWire(task.key, task.name, task.kind, task.weight, task.flops, task.bytes, dict(task.problem),
                    text, resources)


def unpack(wire: TaskWire) -> Task:
    from ...ir.parser import parse_module
    module = parse_module(wire.text, wire.resources, source=f"<task {wire.name}>")
    func = next(op for op in module.body if op.name == "func.func")
    task = Task(wire.key, wire.name, wire.kind, func, wire.weight, wire.flops, wire.bytes, dict(wire.problem))
    got = workload_key(task.kernel)
    if got != wire.key:
        raise TensorforgeError(f"task {wire.name} changed on the way to this node (key {got[:12]} instead of "
                               f"{wire.key[:12]}): run the same tensorforge version on every node")
    return task
