"""``builtin.module``, ``func.func`` and ``func.return``: the containers every level shares."""
from __future__ import annotations

from typing import Sequence

from ..errors import IRError, VerificationError
from .core import Block, Operation, Region, Value
from .opdef import IS_SYMBOL, TERMINATOR, Attr, OpDef, register
from .types import Type


class FunctionType(Type):
    """``(inputs) -> results``: the type of a ``func.func``."""

    __slots__ = ("inputs", "results")

    def __init__(self, inputs: Sequence[Type], results: Sequence[Type]):
        object.__setattr__(self, "inputs", tuple(inputs))
        object.__setattr__(self, "results", tuple(results))

    def __eq__(self, other):
        return isinstance(other, FunctionType) and other.inputs == self.inputs and other.results == self.results

    def __hash__(self):
        return hash(("fn", self.inputs, self.results))

    def __str__(self):
        ins = ", ".join(map(str, self.inputs))
        outs = ", ".join(map(str, self.results))
        return f"({ins}) -> ({outs})"

    __repr__ = __str__


class ModuleOp(Operation):
    """Top-level container: one block of functions."""

    __slots__ = ()

    @staticmethod
    def create() -> "ModuleOp":
        m = ModuleOp("builtin.module", regions=[Region([Block()])])
        return m

    @property
    def body(self) -> Block:
        return self.regions[0].blocks[0]

    @property
    def functions(self) -> list["FuncOp"]:
        return [op for op in self.body if isinstance(op, FuncOp)]

    def function(self, name: str = "main") -> "FuncOp":
        for f in self.functions:
            if f.sym_name == name:
                return f
        raise IRError(f"module has no function '{name}' (has: {[f.sym_name for f in self.functions]})")

    @property
    def main(self) -> "FuncOp":
        fns = self.functions
        if len(fns) == 1:
            return fns[0]
        return self.function("main")

    def add_function(self, name: str, input_types: Sequence[Type],
                     arg_names: Sequence[str] | None = None) -> "FuncOp":
        f = FuncOp.create(name, input_types, arg_names)
        self.body.append(f)
        return f

    def __str__(self):
        from .printer import print_module
        return print_module(self)


class FuncOp(Operation):
    """A function: entry block arguments are its inputs, ``func.return`` gives its results."""

    __slots__ = ()

    @staticmethod
    def create(name: str, input_types: Sequence[Type], arg_names: Sequence[str] | None = None) -> "FuncOp":
        block = Block(input_types)
        if arg_names:
            for a, n in zip(block.args, arg_names):
                a.name_hint = n
        return FuncOp("func.func", attributes={"sym_name": name,
                                               "function_type": FunctionType(input_types, ())},
                      regions=[Region([block])])

    @property
    def sym_name(self) -> str:
        return self.attributes["sym_name"]

    @property
    def body(self) -> Block:
        return self.regions[0].blocks[0]

    @property
    def args(self) -> list[Value]:
        return self.body.args

    @property
    def return_op(self) -> Operation:
        last = self.body.last
        if last is None or last.name != "func.return":
            raise IRError(f"function '{self.sym_name}' has no func.return")
        return last

    @property
    def outputs(self) -> list[Value]:
        return list(self.return_op.operands)

    @property
    def function_type(self) -> FunctionType:
        return self.attributes["function_type"]

    def set_return(self, values: Sequence[Value]) -> Operation:
        """Ends the body with ``func.return values`` (replacing an existing return)."""
        last = self.body.last
        if last is not None and last.name == "func.return":
            last.set_operands(values)
            ret = last
        else:
            ret = self.body.append(Operation("func.return", list(values)))
        self.refresh_type()
        return ret

    def refresh_type(self) -> None:
        """Re-derive ``function_type`` after arguments or returned values changed type."""
        outs = [v.type for v in self.return_op.operands] if self.body.last is not None and \
            self.body.last.name == "func.return" else []
        self.attributes["function_type"] = FunctionType([a.type for a in self.args], outs)

    def builder(self):
        from .builder import Builder
        return Builder.at_end(self.body) if self.body.last is None or self.body.last.name != "func.return" \
            else Builder.before(self.body.last)


@register
class ModuleDef(OpDef):
    name = "builtin.module"
    results = ()
    attrs = {"sym_name": Attr("str", None)}
    op_class = ModuleOp


@register
class FuncDef(OpDef):
    name = "func.func"
    results = ()
    attrs = {"sym_name": Attr("str"), "function_type": Attr("type"),
             "sym_visibility": Attr("str", None)}
    traits = frozenset({IS_SYMBOL})
    op_class = FuncOp

    def verify(self, op) -> None:
        ft = op.attributes["function_type"]
        if not isinstance(ft, FunctionType):
            raise VerificationError("function_type must be a function type")
        body = op.regions[0].blocks[0]
        if tuple(a.type for a in body.args) != ft.inputs:
            raise VerificationError(f"entry block arguments {[str(a.type) for a in body.args]} "
                                    f"do not match function_type inputs {[str(t) for t in ft.inputs]}")
        last = body.last
        if last is None or last.name != "func.return":
            raise VerificationError("body must end with func.return")
        if tuple(v.type for v in last.operands) != ft.results:
            raise VerificationError(f"returned types {[str(v.type) for v in last.operands]} do not "
                                    f"match function_type results {[str(t) for t in ft.results]}")


@register
class ReturnDef(OpDef):
    name = "func.return"
    operands = ("values*",)
    results = ()
    traits = frozenset({TERMINATOR})
