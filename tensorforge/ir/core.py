"""SSA IR nodes shared by every level: ``Value``, ``Operation``, ``Block``, ``Region``.

Lowering a model creates 10^4-10^5 ops, so nodes carry ``__slots__`` and nothing that a
pass does not read.  Ops in a block form an intrusive doubly linked list so that insert
and erase are O(1) while passes walk worklists.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Sequence

from ..errors import IRError
from .attributes import attr_key, check_attr
from .types import Type


class Value:
    """An SSA value: one producer (an op result or a block argument), a list of uses."""

    __slots__ = ("type", "owner", "index", "uses", "name_hint")

    def __init__(self, type: Type, owner: "Operation | Block", index: int, name_hint: str | None = None):
        self.type = type
        self.owner = owner
        self.index = index
        self.uses: list[tuple[Operation, int]] = []
        self.name_hint = name_hint

    @property
    def op(self) -> "Operation | None":
        """The producing op, or None for a block argument."""
        return self.owner if isinstance(self.owner, Operation) else None

    @property
    def is_block_arg(self) -> bool:
        return isinstance(self.owner, Block)

    @property
    def users(self) -> list["Operation"]:
        seen: dict[int, Operation] = {}
        for op, _ in self.uses:
            seen.setdefault(id(op), op)
        return list(seen.values())

    @property
    def has_uses(self) -> bool:
        return bool(self.uses)

    def replace_all_uses_with(self, new: "Value") -> None:
        if new is self:
            return
        if new.type != self.type:
            raise IRError(f"replace_all_uses_with: type {new.type} does not match {self.type}")
        for op, i in self.uses:
            op.operands[i] = new
            new.uses.append((op, i))
        self.uses = []

    def replace_uses_if(self, new: "Value", pred: Callable[["Operation"], bool]) -> None:
        keep = []
        for op, i in self.uses:
            if pred(op):
                op.operands[i] = new
                new.uses.append((op, i))
            else:
                keep.append((op, i))
        self.uses = keep

    def __repr__(self):
        where = self.owner.name if isinstance(self.owner, Operation) else "arg"
        return f"<Value {where}#{self.index}: {self.type}>"


class Operation:
    """One op: a name (``dialect.op``), operands, results, attributes and optional regions.

    The op's definition (``opdef``) is looked up once by name; verifier, printer,
    interpreter and passes read it from there.
    """

    __slots__ = ("name", "opdef", "operands", "results", "attributes", "regions",
                 "parent", "prev", "next", "loc", "__weakref__")

    def __init__(self, name: str, operands: Sequence[Value] = (), result_types: Sequence[Type] = (),
                 attributes: dict[str, Any] | None = None, regions: Sequence["Region"] = (),
                 loc: Any = None, opdef=None):
        from .opdef import lookup
        self.name = name
        self.opdef = opdef if opdef is not None else lookup(name)
        self.operands: list[Value] = []
        for i, v in enumerate(operands):
            if not isinstance(v, Value):
                raise IRError(f"'{name}': operand #{i} is {type(v).__name__}, expected a Value")
            self.operands.append(v)
            v.uses.append((self, i))
        self.results = [Value(t, self, i) for i, t in enumerate(result_types)]
        self.attributes: dict[str, Any] = dict(attributes) if attributes else {}
        self.regions: list[Region] = []
        for r in regions:
            self.add_region(r)
        self.parent: Block | None = None
        self.prev: Operation | None = None
        self.next: Operation | None = None
        self.loc = loc

    # ---- convenience -----------------------------------------------------------------
    @property
    def result(self) -> Value:
        if len(self.results) != 1:
            raise IRError(f"'{self.name}' has {len(self.results)} results, not one")
        return self.results[0]

    @property
    def dialect(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def short_name(self) -> str:
        return self.name.split(".", 1)[-1]

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attributes.get(key, default)

    def set_attr(self, key: str, value: Any) -> None:
        self.attributes[key] = check_attr(value, f"'{self.name}' attribute '{key}'")

    def has_trait(self, trait: str) -> bool:
        return self.opdef is not None and trait in self.opdef.traits

    @property
    def users(self) -> list["Operation"]:
        seen: dict[int, Operation] = {}
        for r in self.results:
            for op, _ in r.uses:
                seen.setdefault(id(op), op)
        return list(seen.values())

    def add_region(self, region: "Region") -> "Region":
        if region.parent is not None:
            raise IRError("region already belongs to an op")
        region.parent = self
        self.regions.append(region)
        return region

    def set_operand(self, i: int, value: Value) -> None:
        old = self.operands[i]
        old.uses.remove((self, i))
        self.operands[i] = value
        value.uses.append((self, i))

    def set_operands(self, values: Sequence[Value]) -> None:
        self.drop_operand_uses()
        self.operands = list(values)
        for i, v in enumerate(self.operands):
            v.uses.append((self, i))

    def drop_operand_uses(self) -> None:
        for i, v in enumerate(self.operands):
            try:
                v.uses.remove((self, i))
            except ValueError:
                pass

    # ---- structure -------------------------------------------------------------------
    def erase(self) -> None:
        """Unlink and destroy; refuses while a result still has uses (safe erase)."""
        for r in self.results:
            if r.uses:
                users = ", ".join(sorted({u.name for u, _ in r.uses}))
                raise IRError(f"cannot erase '{self.name}': result #{r.index} is still used by {users}")
        self.drop_all_references()
        if self.parent is not None:
            self.parent._unlink(self)

    def drop_all_references(self) -> None:
        self.drop_operand_uses()
        self.operands = []
        for region in self.regions:
            for block in region.blocks:
                for op in block.ops:
                    op.drop_all_references()

    def detach(self) -> "Operation":
        if self.parent is not None:
            self.parent._unlink(self)
        return self

    def move_before(self, anchor: "Operation") -> None:
        self.detach()
        anchor.parent.insert_before(self, anchor)

    def move_after(self, anchor: "Operation") -> None:
        self.detach()
        anchor.parent.insert_after(self, anchor)

    def walk(self, fn: Callable[["Operation"], None] | None = None) -> Iterator["Operation"] | None:
        """Pre-order walk over this op and every op nested in its regions."""
        if fn is not None:
            for op in self.walk():
                fn(op)
            return None
        return self._walk()

    def _walk(self) -> Iterator["Operation"]:
        stack = [self]
        while stack:
            op = stack.pop()
            yield op
            nested = []
            for region in op.regions:
                for block in region.blocks:
                    nested.extend(block.ops)
            stack.extend(reversed(nested))

    @property
    def parent_op(self) -> "Operation | None":
        if self.parent is None or self.parent.parent is None:
            return None
        return self.parent.parent.parent

    def is_before_in_block(self, other: "Operation") -> bool:
        block = self.parent
        if block is None or other.parent is not block:
            raise IRError("is_before_in_block: ops are not in the same block")
        block._number_ops()
        return block._order[id(self)] < block._order[id(other)]

    def clone(self, mapping: dict[Value, Value] | None = None) -> "Operation":
        """Deep copy; operands are remapped through ``mapping`` (which the clone extends)."""
        mapping = {} if mapping is None else mapping
        new = type(self).__new__(type(self))
        Operation.__init__(new, self.name, [mapping.get(v, v) for v in self.operands],
                           [r.type for r in self.results], self.attributes, (), self.loc, self.opdef)
        for old_r, new_r in zip(self.results, new.results):
            new_r.name_hint = old_r.name_hint
            mapping[old_r] = new_r
        for region in self.regions:
            new.add_region(region.clone(mapping))
        return new

    def location_str(self) -> str:
        return "" if self.loc is None else f" at {self.loc}"

    def __repr__(self):
        res = ", ".join(str(r.type) for r in self.results)
        return f"<{self.name} -> ({res}){self.location_str()}>"


class Block:
    """A list of ops (intrusive linked list) with block arguments."""

    __slots__ = ("args", "first", "last", "parent", "_count", "_order", "__weakref__")

    def __init__(self, arg_types: Sequence[Type] = ()):
        self.args = [Value(t, self, i) for i, t in enumerate(arg_types)]
        self.first: Operation | None = None
        self.last: Operation | None = None
        self.parent: Region | None = None
        self._count = 0
        self._order: dict[int, int] | None = None

    def add_arg(self, type: Type) -> Value:
        v = Value(type, self, len(self.args))
        self.args.append(v)
        return v

    def __iter__(self) -> Iterator[Operation]:
        op = self.first
        while op is not None:
            nxt = op.next
            yield op
            op = nxt

    def __len__(self):
        return self._count

    @property
    def ops(self) -> list[Operation]:
        return list(self)

    @property
    def terminator(self) -> Operation | None:
        return self.last

    def _link(self, op: Operation, prev: Operation | None, nxt: Operation | None) -> None:
        if op.parent is not None:
            raise IRError(f"'{op.name}' is already in a block; detach it first")
        op.parent, op.prev, op.next = self, prev, nxt
        if prev is None:
            self.first = op
        else:
            prev.next = op
        if nxt is None:
            self.last = op
        else:
            nxt.prev = op
        self._count += 1
        self._order = None

    def _unlink(self, op: Operation) -> None:
        if op.prev is None:
            self.first = op.next
        else:
            op.prev.next = op.next
        if op.next is None:
            self.last = op.prev
        else:
            op.next.prev = op.prev
        op.parent = op.prev = op.next = None
        self._count -= 1
        self._order = None

    def append(self, op: Operation) -> Operation:
        self._link(op, self.last, None)
        return op

    def prepend(self, op: Operation) -> Operation:
        self._link(op, None, self.first)
        return op

    def insert_before(self, op: Operation, anchor: Operation) -> Operation:
        self._link(op, anchor.prev, anchor)
        return op

    def insert_after(self, op: Operation, anchor: Operation) -> Operation:
        self._link(op, anchor, anchor.next)
        return op

    def _number_ops(self) -> None:
        if self._order is None:
            self._order = {id(op): i for i, op in enumerate(self)}

    def clone(self, mapping: dict[Value, Value]) -> "Block":
        new = Block([a.type for a in self.args])
        for old, nv in zip(self.args, new.args):
            nv.name_hint = old.name_hint
            mapping[old] = nv
        for op in self:
            new.append(op.clone(mapping))
        return new

    @property
    def parent_op(self) -> Operation | None:
        return None if self.parent is None else self.parent.parent


class Region:
    """A list of blocks owned by an op (function bodies, loop bodies)."""

    __slots__ = ("blocks", "parent")

    def __init__(self, blocks: Iterable[Block] = ()):
        self.blocks: list[Block] = []
        self.parent: Operation | None = None
        for b in blocks:
            self.add_block(b)

    def add_block(self, block: Block) -> Block:
        block.parent = self
        self.blocks.append(block)
        return block

    @property
    def block(self) -> Block:
        return self.blocks[0]

    def clone(self, mapping: dict[Value, Value]) -> "Region":
        return Region([b.clone(mapping) for b in self.blocks])


def op_key(op: Operation) -> tuple:
    """Hashable identity of what an op computes (name, attributes, operands, result types).

    Two pure ops with equal keys compute the same values: this is CSE's test.
    """
    attrs = tuple(sorted((k, attr_key(v)) for k, v in op.attributes.items()))
    return (op.name, tuple(id(v) for v in op.operands), attrs, tuple(r.type for r in op.results))


class OpView:
    """Base of typed read-only views over an op (``ComputeView``, ``ForView``, ...)."""

    __slots__ = ("op",)

    def __init__(self, op: Operation):
        self.op = op

    @property
    def body(self) -> Block:
        """The entry block of the op's first region."""
        return self.op.regions[0].blocks[0]
