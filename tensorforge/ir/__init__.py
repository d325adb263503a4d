"""The IR core: types, values, ops, blocks, regions, modules, text, verification, rewriting."""
from .attributes import Dense
from .builder import Builder, DialectBuilder, make_op
from .builtin import FuncOp, FunctionType, ModuleOp
from .core import Block, Operation, Region, Value, op_key
from .interpreter import interpret, run_function
from .opdef import (COMMUTATIVE, CONSTANT_LIKE, ELEMENTWISE, PURE, SAME_SHAPE, TERMINATOR, Attr,
                    Cost, FusionKind, OpDef, lookup, register, registered_ops)
from .types import BufferType, DType, IndexType, ScalarType, TensorType, Type, tensor
from .verifier import verify
from .printer import print_module
from .parser import load_module, parse_module, save_module
from .structure import structural_diff, structural_hash, structurally_equal


def Module() -> ModuleOp:
    """An empty module."""
    return ModuleOp.create()


Function = FuncOp

__all__ = [
    "Attr", "Block", "BufferType", "Builder", "COMMUTATIVE", "CONSTANT_LIKE", "Cost", "DType", "Dense",
    "DialectBuilder", "ELEMENTWISE", "FuncOp", "Function", "FunctionType", "FusionKind", "IndexType",
    "Module", "ModuleOp", "OpDef", "Operation", "PURE", "Region", "SAME_SHAPE", "ScalarType", "TERMINATOR",
    "TensorType", "Type", "Value", "interpret", "lookup", "make_op", "op_key", "register",
    "registered_ops", "run_function", "tensor", "verify", "print_module", "parse_module", "save_module",
    "load_module", "structural_diff", "structural_hash", "structurally_equal",
]
