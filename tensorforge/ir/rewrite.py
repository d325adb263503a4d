"""Pattern rewriting: ``Pattern``, the ``PatternRewriter`` patterns act through, and two drivers.

Patterns never touch the IR behind the driver's back: every op they create, replace or erase
goes through the rewriter, which tells the driver so that exactly the ops that may now match
again (new ops, users of replaced values, producers that may have died) go back on the
worklist.  That keeps rewriting a whole model linear in practice instead of rescanning it.

- ``apply_patterns_greedily``: rewrite to a fixpoint, folding constants through the ops'
  ``fold`` hooks and dropping dead pure ops on the way (MLIR's canonicalizer driver).
- ``apply_conversion``: rewrite until every op is legal for the next level, or fail with the
  list of ops that stayed illegal.
"""
from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence, Union

import numpy as np

from ..errors import IRError, PassError
from .attributes import Dense
from .builder import Builder
from .core import Operation, Value
from .opdef import CONSTANT_LIKE, PURE, TERMINATOR, lookup
from .types import TensorType

DEFAULT_FOLD_LIMIT = 1 << 16
"""Largest folded result (elements) that may be bigger than the constants it came from."""


class RewriteWarning(UserWarning):
    """The greedy driver hit its iteration or rewrite cap before reaching a fixpoint."""


# ---- patterns -----------------------------------------------------------------------------
class Pattern:
    """One rewrite.  ``root`` lists the op names it can apply to (None: any op), so the
    driver tries a pattern only on ops it could match; higher ``benefit`` is tried first."""

    name: str = ""
    root: tuple[str, ...] | None = None
    benefit: int = 1

    def __init__(self, name: str | None = None, root: str | Iterable[str] | None = None,
                 benefit: int | None = None):
        self.name = name or type(self).name or type(self).__name__
        if root is not None:
            self.root = (root,) if isinstance(root, str) else tuple(root)
        elif isinstance(type(self).root, str):
            self.root = (type(self).root,)
        if benefit is not None:
            self.benefit = benefit

    def match_and_rewrite(self, op: Operation, rewriter: "PatternRewriter") -> bool:
        """Rewrites ``op`` through ``rewriter`` and returns True, or returns False untouched."""
        raise NotImplementedError

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}>"


class FunctionPattern(Pattern):
    """A pattern whose body is a plain function ``fn(op, rewriter) -> bool``."""

    def __init__(self, fn: Callable[[Operation, "PatternRewriter"], bool], name: str | None = None,
                 root: str | Iterable[str] | None = None, benefit: int | None = None):
        super().__init__(name or fn.__name__.replace("_", "-"), root, benefit)
        self.fn = fn

    def match_and_rewrite(self, op, rewriter):
        return bool(self.fn(op, rewriter))


def pattern(root: str | Iterable[str] | None = None, name: str | None = None,
            benefit: int | None = None) -> Callable[[Callable], FunctionPattern]:
    """Decorator: ``@pattern("graph.neg")`` turns ``def f(op, rewriter) -> bool`` into a Pattern."""
    def wrap(fn):
        return FunctionPattern(fn, name, root, benefit)
    return wrap


# ---- the rewriter -------------------------------------------------------------------------
class RewriteListener:
    """What a driver hears about IR changes; the base class ignores everything."""

    def op_inserted(self, op: Operation) -> None:
        pass

    def op_modified(self, op: Operation) -> None:
        pass

    def op_erased(self, op: Operation) -> None:
        pass

    def uses_changed(self, value: Value) -> None:
        """``value`` lost or gained uses: its producer may now be dead or single-use."""


class PatternRewriter(Builder):
    """A ``Builder`` whose insertion point is just before the op being rewritten.

    ``rewriter.graph.add(x, y)`` and ``rewriter.create(...)`` build ops there; ``replace_op``
    and ``erase_op`` change the IR.  Every change is reported to the driver's listener.
    """

    __slots__ = ("listener", "pattern_name")

    def __init__(self, listener: RewriteListener | None = None):
        super().__init__(None, None, None)  # type: ignore[arg-type]
        self.listener = listener or RewriteListener()
        self.pattern_name = ""

    # ---- insertion point -----------------------------------------------------------
    def set_insertion_point_before(self, op: Operation) -> None:
        self.block, self.anchor, self.loc = op.parent, op, op.loc

    def set_insertion_point_after(self, op: Operation) -> None:
        self.block, self.anchor, self.loc = op.parent, op.next, op.loc

    def insert(self, op: Operation) -> Operation:
        if self.block is None:
            raise IRError("PatternRewriter has no insertion point")
        super().insert(op)
        self.listener.op_inserted(op)
        return op

    # ---- changes -------------------------------------------------------------------
    def replace_op(self, op: Operation, new_values: Sequence[Value]) -> None:
        """Redirects every use of ``op``'s results to ``new_values`` and erases ``op``."""
        new_values = list(new_values)
        if len(new_values) != len(op.results):
            raise IRError(f"{self._who()}replacing '{op.name}'{op.location_str()}: {len(op.results)} "
                          f"results but {len(new_values)} replacement values")
        for old, new in zip(op.results, new_values):
            if old.type != new.type:
                raise IRError(f"{self._who()}replacing '{op.name}'{op.location_str()}: result "
                              f"#{old.index} has type {old.type}, replacement has {new.type}")
        for old, new in zip(op.results, new_values):
            self.replace_all_uses_with(old, new)
        self.erase_op(op)

    def replace_all_uses_with(self, old: Value, new: Value) -> None:
        for user in old.users:
            self.listener.op_modified(user)
        old.replace_all_uses_with(new)
        self.listener.uses_changed(new)

    def erase_op(self, op: Operation) -> None:
        """Erases ``op`` (its results must be unused); its operands' producers are revisited."""
        operands = list(op.operands)
        for nested in op.walk():
            self.listener.op_erased(nested)
        op.erase()
        for v in operands:
            self.listener.uses_changed(v)

    def notify_op_modified(self, op: Operation) -> None:
        """Call after changing ``op`` in place (attributes, operands)."""
        self.listener.op_modified(op)

    def set_attr(self, op: Operation, key: str, value: Any) -> None:
        op.set_attr(key, value)
        self.listener.op_modified(op)

    def set_operand(self, op: Operation, index: int, value: Value) -> None:
        old = op.operands[index]
        op.set_operand(index, value)
        self.listener.uses_changed(old)
        self.listener.op_modified(op)

    def constant(self, array, dtype=None, dialect: str = "graph") -> Value:
        """A ``<dialect>.constant`` holding ``array`` (a NumPy array, a number or a ``Dense``)."""
        dense = array if isinstance(array, Dense) else Dense(np.asarray(array), dtype)
        return self.create(f"{dialect}.constant", [], {"value": dense}).results[0]

    def _who(self) -> str:
        return f"pattern '{self.pattern_name}': " if self.pattern_name else ""


# ---- statistics ---------------------------------------------------------------------------
@dataclass
class RewriteStats:
    """What a driver did: pattern firings by name, folds by op name, dead ops removed."""

    fired: Counter = field(default_factory=Counter)
    folded: Counter = field(default_factory=Counter)
    erased: int = 0
    iterations: int = 0
    converged: bool = True

    @property
    def changed(self) -> bool:
        return bool(self.fired or self.folded or self.erased)

    @property
    def rewrites(self) -> int:
        return sum(self.fired.values()) + sum(self.folded.values()) + self.erased

    def merge(self, other: "RewriteStats") -> "RewriteStats":
        self.fired.update(other.fired)
        self.folded.update(other.folded)
        self.erased += other.erased
        self.iterations += other.iterations
        self.converged = self.converged and other.converged
        return self

    def __str__(self) -> str:
        rows = [(name, n) for name, n in self.fired.most_common()]
        rows += [(f"fold {name}", n) for name, n in self.folded.most_common()]
        if self.erased:
            rows.append(("erase dead op", self.erased))
        head = (f"{self.rewrites} rewrites in {self.iterations} iteration(s)"
                f"{'' if self.converged else ' (did not converge)'}")
        if not rows:
            return head
        width = max(len(r[0]) for r in rows)
        return "\n".join([head] + [f"  {name:<{width}}  {n:>6}" for name, n in rows])


# ---- greedy driver ------------------------------------------------------------------------
class _Worklist:
    """A LIFO of ops with O(1) membership; erased ops are dropped lazily when popped."""

    __slots__ = ("_stack", "_pending")

    def __init__(self):
        self._stack: list[Operation] = []
        self._pending: dict[int, Operation] = {}

    def push(self, op: Operation) -> None:
        if id(op) not in self._pending:
            self._pending[id(op)] = op
            self._stack.append(op)

    def remove(self, op: Operation) -> None:
        self._pending.pop(id(op), None)

    def pop(self) -> Operation | None:
        stack, pending = self._stack, self._pending
        while stack:
            op = stack.pop()
            if pending.pop(id(op), None) is not None:
                return op
        return None


def constant_value(value: Value) -> np.ndarray | None:
    """The array held by ``value`` when a constant-like op with a ``value`` attribute makes it."""
    op = value.op
    if op is None or op.opdef is None or CONSTANT_LIKE not in op.opdef.traits:
        return None
    dense = op.attributes.get("value")
    return dense.array if isinstance(dense, Dense) else None


def is_trivially_dead(op: Operation) -> bool:
    """A pure, non-terminator op none of whose results is used."""
    d = op.opdef
    if d is None or PURE not in d.traits or TERMINATOR in d.traits:
        return False
    return all(not r.uses for r in op.results)


def _constant_op_for(op: Operation) -> str | None:
    """The constant op of ``op``'s dialect that folded values materialise as, if it has one."""
    name = f"{op.dialect}.constant"
    d = lookup(name)
    if d is None or CONSTANT_LIKE not in d.traits or "value" not in d.attrs:
        return None
    return name


def fold_into_constants(op: Operation, rewriter: "PatternRewriter",
                        allow: Callable[[Operation, list], bool]) -> bool:
    """Replaces a pure op whose operands are all constants by constants of its dialect.

    ``allow(op, operand_arrays)`` is the size guard; it runs before anything is evaluated, so
    a refused broadcast is never computed.  Returns whether the op was replaced.
    """
    d = op.opdef
    if d is None or not op.operands or op.regions or PURE not in d.traits or CONSTANT_LIKE in d.traits:
        return False
    types = [r.type for r in op.results]
    if not types or not all(isinstance(t, TensorType) and t.is_static for t in types):
        return False           # one folded array cannot stand for a symbolic shape
    const_name = _constant_op_for(op)
    if const_name is None:
        return False
    consts = [constant_value(v) for v in op.operands]
    if not allow(op, consts):
        return False
    try:
        folded = d.fold(op, consts)
    except Exception:    # a reference that rejects these inputs: leave the op for run time
        return False
    if folded is None or len(folded) != len(types):
        return False
    arrays = [np.asarray(a) for a in folded]
    if any(a.shape != t.shape for a, t in zip(arrays, types)):
        return False
    values = [rewriter.create(const_name, [], {"value": Dense(a, t.dtype)}).results[0]
              for a, t in zip(arrays, types)]
    rewriter.replace_op(op, values)
    return True


class _GreedyDriver(RewriteListener):
    def __init__(self, root: Operation, patterns: Sequence[Pattern], *, fold: bool, fold_limit: int,
                 max_iterations: int, max_rewrites: int | None, visit: Callable[[Operation], bool] | None):
        if max_iterations < 1:
            raise PassError(f"max_iterations must be at least 1, got {max_iterations}")
        self.root = root
        self.fold = fold
        self.fold_limit = fold_limit
        self.max_iterations = max_iterations
        self.max_rewrites = max_rewrites
        self.visit = visit
        self.ordered = [p for _, p in sorted(enumerate(patterns), key=lambda ip: (-ip[1].benefit, ip[0]))]
        self.by_name: dict[str, list[Pattern]] = {}
        self.worklist = _Worklist()
        self.rewriter = PatternRewriter(self)
        self.stats = RewriteStats()
        self.changed = False
        self.count = 0             # rewrites in the current iteration

    # ---- listener ------------------------------------------------------------------
    def op_inserted(self, op):
        self.changed = True
        for nested in op.walk():
            self.worklist.push(nested)

    def op_modified(self, op):
        self.changed = True
        self.worklist.push(op)

    def op_erased(self, op):
        self.changed = True
        self.worklist.remove(op)

    def uses_changed(self, value):
        if value.op is not None:
            self.worklist.push(value.op)

    # ---- driving -------------------------------------------------------------------
    def run(self, on_nonconvergence: str) -> RewriteStats:
        last_round: Counter = Counter()
        for iteration in range(1, self.max_iterations + 1):
            self.stats.iterations = iteration
            self.changed = False
            before = Counter(self.stats.fired) + Counter(self.stats.folded)
            ops = [op for op in self.root.walk() if op is not self.root]
            budget = self.max_rewrites if self.max_rewrites is not None else 32 * len(ops) + 1000
            for op in reversed(ops):
                self.worklist.push(op)
            self.count = 0
            while (op := self.worklist.pop()) is not None:
                if self.count >= budget:
                    self.changed = True
                    break
                self._process(op)
            last_round = Counter(self.stats.fired) + Counter(self.stats.folded)
            last_round.subtract(before)
            if not self.changed:
                return self.stats
        self.stats.converged = False
        self._report_nonconvergence(on_nonconvergence, +last_round)
        return self.stats

    def _report_nonconvergence(self, mode: str, last_round: Counter) -> None:
        if mode == "ignore":
            return
        firing = ", ".join(f"{n} x{c}" for n, c in last_round.most_common(5)) or "none recorded"
        msg = (f"greedy rewriting did not reach a fixpoint in {self.max_iterations} iteration(s) "
               f"({self.stats.rewrites} rewrites); still firing in the last iteration: {firing}. "
               f"Look for patterns that undo each other, or raise max_iterations / max_rewrites.")
        if mode == "error":
            raise PassError(msg)
        warnings.warn(msg, RewriteWarning, stacklevel=4)

    def _process(self, op: Operation) -> None:
        if op.parent is None:          # erased or detached since it was queued
            return
        if is_trivially_dead(op):
            self.rewriter.erase_op(op)
            self.stats.erased += 1
            self.count += 1
            return
        if self.visit is not None and not self.visit(op):
            return
        if self.fold and self._try_fold(op):
            return
        candidates = self.by_name.get(op.name)
        if candidates is None:
            candidates = self.by_name[op.name] = [p for p in self.ordered if p.root is None or op.name in p.root]
        rewriter = self.rewriter
        for p in candidates:
            rewriter.set_insertion_point_before(op)
            rewriter.pattern_name = p.name
            try:
                fired = p.match_and_rewrite(op, rewriter)
            except PassError:
                raise
            except Exception as e:
                raise PassError(f"pattern '{p.name}' failed on '{op.name}'{op.location_str()}: "
                                f"{type(e).__name__}: {e}") from e
            if fired:
                self.stats.fired[p.name] += 1
                self.count += 1
                self.changed = True
                if op.parent is not None:      # rewritten in place: it may match again
                    self.worklist.push(op)
                return

    def _within_fold_limit(self, op: Operation, consts: list) -> bool:
        """Folds results up to ``fold_limit`` elements, or any result no bigger than its inputs.
        A result of symbolic shape never folds: one array cannot stand for every size."""
        types = [r.type for r in op.results]
        if not all(getattr(t, "is_static", True) for t in types):
            return False
        if sum(t.num_elements for t in types) <= self.fold_limit:
            return True
        return sum(t.nbytes for t in types) <= sum(c.nbytes for c in consts if c is not None)

    def _try_fold(self, op: Operation) -> bool:
        rewriter = self.rewriter
        rewriter.set_insertion_point_before(op)
        rewriter.pattern_name = f"fold {op.name}"
        if not fold_into_constants(op, rewriter, self._within_fold_limit):
            return False
        self.stats.folded[op.name] += 1
        self.count += 1
        return True


def apply_patterns_greedily(root: Operation, patterns: Sequence[Pattern], *, max_iterations: int = 10,
                            fold: bool = True, fold_limit: int = DEFAULT_FOLD_LIMIT,
                            max_rewrites: int | None = None,
                            on_nonconvergence: str = "warn") -> RewriteStats:
    """Applies ``patterns`` (and, with ``fold``, the ops' fold hooks) under ``root`` to a fixpoint.

    An iteration drains a worklist seeded with every op; it repeats while the previous
    iteration changed anything, at most ``max_iterations`` times.  ``max_rewrites`` caps one
    iteration (default: 32 per op + 1000) so that patterns undoing each other cannot loop
    forever.  Without a fixpoint the driver warns (``on_nonconvergence="warn"``, a
    ``RewriteWarning``), raises ``PassError`` ("error") or stays quiet ("ignore"); the stats say
    ``converged=False`` either way.  Dead pure ops are erased as they appear.  Folding skips
    results of more than ``fold_limit`` elements that would be bigger than their inputs.
    """
    if on_nonconvergence not in ("warn", "error", "ignore"):
        raise PassError(f"on_nonconvergence must be 'warn', 'error' or 'ignore', not {on_nonconvergence!r}")
    driver = _GreedyDriver(root, patterns, fold=fold, fold_limit=fold_limit, max_iterations=max_iterations,
                           max_rewrites=max_rewrites, visit=None)
    return driver.run(on_nonconvergence)


# ---- conversion driver --------------------------------------------------------------------
Legality = Union[str, Iterable[str], Callable[[Operation], bool]]
ALWAYS_LEGAL_DIALECTS = ("builtin", "func")
"""Containers every level shares: never illegal, whatever the target says."""


def legality(legal: Legality) -> Callable[[Operation], bool]:
    """Turns a legality spec into a predicate.

    Strings name ops (``"graph.constant"``) or whole dialects (``"structured"`` or
    ``"structured."``); a callable decides per op.  Module, function and return ops are always legal.
    """
    if callable(legal):
        decide = legal
    else:
        names = {legal} if isinstance(legal, str) else set(legal)
        exact = {n for n in names if "." in n and not n.endswith(".")}
        dialects = {n.rstrip(".") for n in names if n not in exact}

        def decide(op: Operation) -> bool:
            return op.name in exact or op.dialect in dialects

    def is_legal(op: Operation) -> bool:
        return op.dialect in ALWAYS_LEGAL_DIALECTS or bool(decide(op))

    return is_legal


def _illegal_report(illegal: list[Operation], converged: bool, show: int = 5) -> str:
    groups: dict[str, list[Operation]] = {}
    for op in illegal:
        groups.setdefault(op.name, []).append(op)
    lines = [f"conversion left {len(illegal)} illegal op(s); no pattern made them legal"
             + ("" if converged else " (rewriting also did not converge)") + ":"]
    for name, ops in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        locs = [str(op.loc) if op.loc is not None else "<unknown location>" for op in ops[:show]]
        more = f", ... {len(ops) - show} more" if len(ops) > show else ""
        lines.append(f"  {name} x{len(ops)} at {', '.join(locs)}{more}")
    lines.append("Add a conversion pattern for these ops, or mark them legal for this target.")
    return "\n".join(lines)


def apply_conversion(root: Operation, patterns: Sequence[Pattern], legal: Legality, *,
                     max_iterations: int = 10, max_rewrites: int | None = None) -> RewriteStats:
    """Rewrites illegal ops with ``patterns`` until every op under ``root`` is legal.

    Patterns are tried only on illegal ops (legal ones are left alone; dead pure ops are
    still dropped).  Raises ``PassError`` listing, per op name, how many ops stayed illegal
    and where they are.
    """
    is_legal = legality(legal)
    driver = _GreedyDriver(root, patterns, fold=False, fold_limit=0, max_iterations=max_iterations,
                           max_rewrites=max_rewrites, visit=lambda op: not is_legal(op))
    stats = driver.run("ignore")
    illegal = [op for op in root.walk() if op is not root and not is_legal(op)]
    if illegal:
        raise PassError(_illegal_report(illegal, stats.converged))
    return stats


__all__ = [
    "ALWAYS_LEGAL_DIALECTS", "DEFAULT_FOLD_LIMIT", "FunctionPattern", "Pattern", "PatternRewriter",
    "RewriteListener", "RewriteStats", "RewriteWarning", "apply_conversion", "apply_patterns_greedily",
    "constant_value", "is_trivially_dead", "legality", "pattern",
]
