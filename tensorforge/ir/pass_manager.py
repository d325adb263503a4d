"""Passes and the pass manager: pipelines named by text, verified, printed and timed.

    pm = PassManager.parse("fold{limit=1000},dce,cse,simplify", verify_each=True)
    report = pm.run(module)
    print(report)                        # per-pass time and op counts

A pipeline is ``name{key=value key=value},name,...``: options go in braces, separated by spaces
or commas; ``-`` and ``_`` in option names are the same.  Passes are looked up by name in
``tensorforge.passes.registry``.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator, Sequence, TextIO

from ..errors import PassError, TensorforgeError
from .core import Operation


# ---- passes -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Option:
    """A pass option: its default (whose type is the option's type) and a one-line doc."""

    default: Any
    doc: str = ""

    def coerce(self, value: Any, where: str) -> Any:
        kind = type(self.default)
        if isinstance(value, str) and kind is not str:
            return _parse_option_text(value, kind, where)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if self.default is not None and not isinstance(value, kind):
            raise PassError(f"{where}: expected {kind.__name__}, got {value!r}")
        return value


def _parse_option_text(text: str, kind: type, where: str) -> Any:
    t = text.strip()
    try:
        if kind is bool:
            low = t.lower()
            if low in ("true", "1", "yes", "on"):
                return True
            if low in ("false", "0", "no", "off"):
                return False
            raise ValueError
        if kind is int:
            return int(t.replace("_", ""), 0)
        if kind is float:
            return float(t)
    except ValueError:
        pass
    else:
        return t
    raise PassError(f"{where}: '{text}' is not a valid {kind.__name__}")


class Pass:
    """One transformation of a module.  Subclasses set ``name`` (and ``options``) and define
    ``run(module) -> bool`` returning whether the IR changed.  Option values are attributes."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    options: ClassVar[dict[str, Option]] = {}

    def __init__(self, **options: Any):
        for key, opt in self.options.items():
            setattr(self, key, opt.default)
        for key, value in options.items():
            k = key.replace("-", "_")
            if k not in self.options:
                known = ", ".join(self.options) or "none"
                raise PassError(f"pass '{self.name}' has no option '{key}' (options: {known})")
            setattr(self, k, self.options[k].coerce(value, f"pass '{self.name}' option '{key}'"))

    def run(self, module: Operation) -> bool:
        raise NotImplementedError

    @property
    def option_values(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.options}

    def pipeline_text(self) -> str:
        """``name{key=value ...}`` with the options that differ from their defaults."""
        changed = [f"{k}={_format_option(v)}" for k, v in self.option_values.items()
                   if v != self.options[k].default]
        return self.name + (("{" + " ".join(changed) + "}") if changed else "")

    def __repr__(self):
        return f"<Pass {self.pipeline_text()}>"


def _format_option(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


# ---- pipeline text ------------------------------------------------------------------------
def parse_pipeline(text: str) -> list[tuple[str, dict[str, str]]]:
    """``"a,b{k=v x=y},c"`` -> ``[("a", {}), ("b", {"k": "v", "x": "y"}), ("c", {})]``."""
    items: list[tuple[str, dict[str, str]]] = []
    i, n = 0, len(text)

    def fail(msg: str, at: int) -> None:
        raise PassError(f"pipeline '{text}', column {at + 1}: {msg}")

    while True:
        while i < n and text[i] in " \t\n":
            i += 1
        start = i
        while i < n and (text[i].isalnum() or text[i] in "-_."):
            i += 1
        name = text[start:i]
        if not name:
            if i >= n and not items and not text.strip():
                return []
            fail("expected a pass name", i)
        options: dict[str, str] = {}
        while i < n and text[i] in " \t\n":
            i += 1
        if i < n and text[i] == "{":
            close = text.find("}", i)
            if close < 0:
                fail("'{' without '}'", i)
            for part in text[i + 1:close].replace(",", " ").split():
                key, eq, value = part.partition("=")
                if not eq or not key:
                    fail(f"option '{part}' is not key=value", i)
                options[key] = value
            i = close + 1
        items.append((name, options))
        while i < n and text[i] in " \t\n":
            i += 1
        if i >= n:
            return items
        if text[i] != ",":
            fail(f"expected ',' between passes, found '{text[i]}'", i)
        i += 1


# ---- report -------------------------------------------------------------------------------
@dataclass
class PassRecord:
    """One pass run: what it was, how long it took, op counts around it, whether it changed IR."""

    name: str
    seconds: float
    ops_before: int
    ops_after: int
    changed: bool


@dataclass
class PassReport:
    """Per-pass timing and op counts; prints as a table."""

    records: list[PassRecord] = field(default_factory=list)

    @property
    def total_seconds(self) -> float:
        return sum(r.seconds for r in self.records)

    @property
    def changed(self) -> bool:
        return any(r.changed for r in self.records)

    def __iter__(self) -> Iterator[PassRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def __str__(self) -> str:
        rows = [(r.name, f"{r.seconds * 1e3:.2f}", str(r.ops_before), str(r.ops_after),
                 "yes" if r.changed else "no") for r in self.records]
        if self.records:
            rows.append(("total", f"{self.total_seconds * 1e3:.2f}", str(self.records[0].ops_before),
                         str(self.records[-1].ops_after), "yes" if self.changed else "no"))
        head = ("pass", "time (ms)", "ops before", "ops after", "changed")
        widths = [max(len(head[c]), *(len(r[c]) for r in rows)) if rows else len(head[c]) for c in range(5)]
        lines = ["  ".join(h.ljust(w) if c == 0 else h.rjust(w) for c, (h, w) in enumerate(zip(head, widths)))]
        lines.append("  ".join("-" * w for w in widths))
        for r in rows:
            lines.append("  ".join(v.ljust(w) if c == 0 else v.rjust(w) for c, (v, w) in enumerate(zip(r, widths))))
        return "\n".join(lines)


def count_ops(root: Operation) -> int:
    """Ops nested under ``root`` (not counting ``root``)."""
    return sum(1 for _ in root.walk()) - 1


# ---- the manager --------------------------------------------------------------------------
class PassManager:
    """Runs passes in order; optionally verifies and prints the IR after each one."""

    def __init__(self, passes: Sequence[Pass | str] = (), *, verify_each: bool = False,
                 print_ir_after_all: bool = False, print_ir_after_change: bool = False,
                 stream: TextIO | None = None, allow_unregistered: bool = False):
        self.passes: list[Pass] = []
        self.verify_each = verify_each
        self.print_ir_after_all = print_ir_after_all
        self.print_ir_after_change = print_ir_after_change
        self.stream = stream
        self.allow_unregistered = allow_unregistered
        for p in passes:
            self.add(p)

    @classmethod
    def parse(cls, pipeline: str, **kwargs: Any) -> "PassManager":
        """A manager for a textual pipeline such as ``"fold{limit=1000},dce,cse"``."""
        from ..passes.registry import get_pass
        pm = cls(**kwargs)
        for name, options in parse_pipeline(pipeline):
            pm.passes.append(get_pass(name, **options))
        return pm

    def add(self, p: Pass | str, **options: Any) -> "PassManager":
        if isinstance(p, str):
            from ..passes.registry import get_pass
            p = get_pass(p, **options)
        elif options:
            raise PassError("options go with a pass name, not a Pass instance")
        if not isinstance(p, Pass):
            raise PassError(f"{p!r} is not a Pass")
        self.passes.append(p)
        return self

    @property
    def pipeline(self) -> str:
        return ",".join(p.pipeline_text() for p in self.passes)

    def __str__(self) -> str:
        return self.pipeline

    def run(self, module: Operation) -> PassReport:
        report = PassReport()
        if self.verify_each:
            self._verify(module, None, 0)
        count = count_ops(module)
        for i, p in enumerate(self.passes):
            start = time.perf_counter()
            changed = bool(p.run(module))
            seconds = time.perf_counter() - start
            after = count_ops(module)
            report.records.append(PassRecord(p.pipeline_text(), seconds, count, after, changed))
            count = after
            if self.print_ir_after_all or (self.print_ir_after_change and changed):
                self._print(module, p)
            if self.verify_each:
                self._verify(module, p, i)
        return report

    def _verify(self, module: Operation, p: Pass | None, index: int) -> None:
        from .verifier import verify
        try:
            verify(module, allow_unregistered=self.allow_unregistered)
        except TensorforgeError as e:
            if p is None:
                raise PassError(f"the input IR is invalid before pipeline '{self.pipeline}' ran: {e}") from e
            raise PassError(f"pass '{p.name}' (#{index + 1} of '{self.pipeline}') left invalid IR: {e}") from e

    def _print(self, module: Operation, p: Pass) -> None:
        from .printer import print_module
        stream = self.stream if self.stream is not None else sys.stderr
        stream.write(f"// -----// IR Dump After {p.pipeline_text()} //----- //\n")
        stream.write(print_module(module))
        stream.write("\n")


__all__ = ["Option", "Pass", "PassManager", "PassRecord", "PassReport", "count_ops", "parse_pipeline"]
