"""Parses MLIR generic operation syntax (what ``printer.print_module`` writes) back into IR.

One regex tokenizer, then recursive descent over the token list.  Big data never goes
through per-character Python: hex blobs are decoded with ``bytes.fromhex`` and viewed with
``np.frombuffer``, and the file-level resource trailer is located with ``rfind`` so its
(possibly hundreds of megabytes of) hex is never tokenized.

Every error is a ``ParseError`` whose one-line message starts with ``source:line:col``
(or a ``VerificationError`` from the verifier, which starts with the op's location).
"""
from __future__ import annotations

import gc
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ParseError, TensorforgeError
from .attributes import Dense, DialectAttr, SymbolRef
from .symbolic import split_symbol_list
from .builder import make_op
from .builtin import FunctionType, ModuleOp
from .core import Block, Operation, Region, Value
from .opdef import lookup
from .printer import (ARG_NAMES, RESULT_NAMES, array_from_bytes, f64_from_bits, float_from_bits, is_isolated,
                      print_module)
from .types import BufferType, DType, IndexType, ScalarType, TensorType, Type
from .verifier import verify as verify_module

_TOKEN_RE = re.compile(r"""
  (?P<ws>\s+|//[^\n]*)
| (?P<shaped>(?:tensor|memref)<(?:(?:\d+|\?)x)*[A-Za-z][A-Za-z0-9]*(?:\s*,\s*"[^"\\\n]*")?>)
| (?P<value>%[A-Za-z0-9_$.\-]+(?:\#\d+)?)
| (?P<label>\^[A-Za-z0-9_$.\-]+)
| (?P<string>"[^"\\\n]*(?:\\.[^"\\\n]*)*")
| (?P<hex>0x[0-9A-Fa-f]+)
| (?P<float>[-+]?\d+\.\d*(?:[eE][-+]?\d+)?)
| (?P<int>[-+]?\d+)
| (?P<ident>[A-Za-z_][A-Za-z0-9_$.]*)
| (?P<punct>->|\{-\#|\#-\}|[(){}\[\]<>,:=])
| (?P<hash>\#[A-Za-z_][A-Za-z0-9_$.]*)
| (?P<symbol>@[A-Za-z_][A-Za-z0-9_$.\-]*|@"[^"\\\n]*")
| (?P<bad>.)
""", re.X | re.S)
_SHAPED_RE = re.compile(r'(tensor|memref)<((?:(?:\d+|\?)x)*)([A-Za-z][A-Za-z0-9]*)(?:\s*,\s*"([^"]*)")?>')
_ESCAPE_RE = re.compile(rb'\\(["\\nt]|[0-9A-Fa-f]{2})')
_SIMPLE_ESCAPES = {b'"': b'"', b"\\": b"\\", b"n": b"\n", b"t": b"\t"}
_DTYPES = {d.value: d for d in DType}
_INT_ARRAY = {"i1", "i8", "i16", "i32", "i64"}
_FLOAT_ARRAY = {"f32": DType.f32, "f64": DType.f64, "f16": DType.f16}
# Deepest nesting of ops (regions), attribute lists, types and dense lists the parser accepts; deeper
# text is a ParseError instead of a RecursionError.  Real modules nest a few levels.
MAX_NESTING = 100
# Largest splat (one value for a whole tensor) that the parser materialises; a bigger one is a
# ParseError naming the type instead of an attempt to allocate terabytes for a corrupt dim.
MAX_SPLAT_BYTES = 1 << 30
_TRAILER_RE = re.compile(r"\{-#\s*(?:dialect_resources|external_resources)\s*:")
_TRAILER_TOKEN = re.compile(r'\s*(?:(\{-\#|\#-\}|[{}:,])|([A-Za-z_][A-Za-z0-9_$.\-]*)|(")|([^\s,{}"]+))')


# ---- public API -----------------------------------------------------------------------
def parse_module(text: str, resources: dict | None = None, source: str = "<text>",
                 verify: bool = True) -> ModuleOp:
    """Parses a module; ``resources`` maps ``dense_resource`` names to arrays.

    Names not in ``resources`` are looked up in the text's ``{-# dialect_resources #-}``
    trailer.  Top-level ops that are not a single ``builtin.module`` are wrapped in one.
    """
    # Parsing only allocates live, cyclic objects (values <-> ops): the cyclic GC would rescan the
    # growing graph again and again for nothing, which makes big modules several times slower.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        end, blobs = _split_trailer(text, source)
        module = _Parser(text, end, resources or {}, blobs, source).parse_top()
        if verify:
            verify_module(module)
    finally:
        if gc_was_enabled:
            gc.enable()
    return module


def parse_generic(text: str, source: str = "<text>") -> list[Operation]:
    """The top-level ops of a module in another dialect set (e.g. StableHLO), as generic ops.

    Nothing is looked up, inferred or verified: every op keeps its name, operands, result types,
    regions and attributes as written, so a frontend can walk the tree and convert it.  Attributes
    in a dialect's own syntax (``#stablehlo.conv<...>``) become ``DialectAttr`` (name and text),
    ``@name`` a ``SymbolRef``, ``{...}`` a dict, and a key without a value (a unit attribute)
    ``True``.  Errors are ``ParseError``s with ``source:line:col``, as for ``parse_module``.
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        end, blobs = _split_trailer(text, source)
        parser = _Parser(text, end, {}, blobs, source, generic=True)
        ops = []
        while parser.kind != "eof":
            if parser.kind == "hash":          # an alias definition (#loc1 = loc(...)): not needed
                parser.next()
                parser.expect("=", "'=' after an attribute alias")
                parser.attr()
                continue
            ops.append(parser.operation())
        return ops
    finally:
        if gc_was_enabled:
            gc.enable()


def save_module(module: Operation, path: str | os.PathLike, large_elements: int = 64) -> None:
    """Writes ``path`` (text) and, when there are large constants, ``path + ".npz"`` (their data)."""
    resources: dict[str, np.ndarray] = {}
    text = print_module(module, resources=resources, large_elements=large_elements)
    Path(path).write_text(text)
    sidecar = Path(str(path) + ".npz")
    if resources:
        np.savez(sidecar, **resources)
    elif sidecar.exists():
        sidecar.unlink()      # a stale sidecar would silently feed old weights to load_module


def load_module(path: str | os.PathLike, verify: bool = True) -> ModuleOp:
    """Reads what ``save_module`` wrote."""
    text = Path(path).read_text()
    sidecar = Path(str(path) + ".npz")
    resources: dict[str, np.ndarray] = {}
    if sidecar.exists():
        with np.load(sidecar) as data:
            for name in data.files:
                arr = data[name]
                arr.flags.writeable = False   # we own it: lets Dense share it instead of copying
                resources[name] = arr
    return parse_module(text, resources, source=str(path), verify=verify)


# ---- positions ------------------------------------------------------------------------
class _Lines:
    """``pos -> (line, col)``, incremental so that locating every op stays linear."""

    __slots__ = ("text", "pos", "line")

    def __init__(self, text: str):
        self.text, self.pos, self.line = text, 0, 1

    def __call__(self, pos: int) -> tuple[int, int]:
        if pos < self.pos:
            self.pos, self.line = 0, 1
        self.line += self.text.count("\n", self.pos, pos)
        self.pos = pos
        return self.line, pos - self.text.rfind("\n", 0, pos)


def _error(lines: _Lines, source: str, message: str, pos: int) -> ParseError:
    line, col = lines(pos)
    return ParseError(message.replace("\n", " "), line, col, source)


# ---- resource trailer -----------------------------------------------------------------
def _split_trailer(text: str, source: str) -> tuple[int, dict[str, tuple[int, int]]]:
    """Where the body ends, and builtin resource name -> (start, end) of its hex digits."""
    pos = text.rfind("{-#")
    if pos < 0 or not _TRAILER_RE.match(text, pos):
        return len(text), {}
    lines = _Lines(text)
    scan = _TrailerScanner(text, pos, lines, source)
    tree = scan.parse()
    builtin = tree.get("dialect_resources", {}).get("builtin", {})
    if not isinstance(builtin, dict):
        raise _error(lines, source, "dialect_resources.builtin must be a dictionary", pos)
    blobs = {}
    for name, span in builtin.items():
        if not isinstance(span, tuple):
            raise _error(lines, source, f"resource '{name}' is not a hex string", pos)
        blobs[name] = span
    return pos, blobs


class _TrailerScanner:
    """``{-# key: {key: "0x..", ...}, ... #-}``; strings are kept as spans, never copied."""

    def __init__(self, text: str, pos: int, lines: _Lines, source: str):
        self.text, self.pos, self.lines, self.source = text, pos, lines, source

    def fail(self, message: str) -> ParseError:
        return _error(self.lines, self.source, message, self.pos)

    def token(self) -> tuple[str, str]:
        m = _TRAILER_TOKEN.match(self.text, self.pos)
        if m is None:
            raise self.fail("unexpected end of the resource section")
        self.pos = m.end()
        punct, ident, quote, other = m.groups()
        if punct:
            return punct, punct
        if ident:
            return "ident", ident
        if quote:
            return "string", ""
        return "other", other

    def expect(self, kind: str) -> None:
        start = self.pos
        got, text = self.token()
        if got != kind:
            self.pos = start
            raise self.fail(f"expected '{kind}' in the resource section, got '{text}'")

    def parse(self) -> dict:
        self.expect("{-#")
        tree = self.entries("#-}")
        if self.text[self.pos:].strip():
            raise self.fail("unexpected text after the resource section")
        return tree

    def entries(self, close: str) -> dict:
        out: dict[str, Any] = {}
        while True:
            start = self.pos
            kind, key = self.token()
            if kind == close and not out:
                return out
            if kind != "ident":
                self.pos = start
                raise self.fail(f"expected a resource key, got '{key}'")
            self.expect(":")
            start = self.pos
            kind, text = self.token()
            if kind == "{":
                out[key] = self.entries("}")
            elif kind == "string":
                begin = self.pos
                stop = self.text.find('"', begin)
                if stop < 0:
                    raise self.fail("unterminated string in the resource section")
                if not self.text.startswith("0x", begin):
                    self.pos = begin
                    raise self.fail(f"resource '{key}' must be a \"0x...\" hex blob")
                out[key] = (begin + 2, stop)
                self.pos = stop + 1
            elif kind in ("ident", "other"):
                out[key] = text
            else:
                self.pos = start
                raise self.fail(f"bad value for resource key '{key}'")
            start = self.pos
            kind, text = self.token()
            if kind == close:
                return out
            if kind != ",":
                self.pos = start
                raise self.fail(f"expected ',' or '{close}' in the resource section, got '{text}'")


# ---- the parser -----------------------------------------------------------------------
class _Parser:
    def __init__(self, text: str, end: int, resources: dict, blobs: dict, source: str, generic: bool = False):
        self.text, self.source = text, source
        self.generic = generic      # parse_generic: ops are not looked up (see there)
        self.resources, self.blobs = resources, blobs
        self.lines = _Lines(text)
        kinds, texts, poss = [], [], []
        for m in _TOKEN_RE.finditer(text, 0, end):
            kind = m.lastgroup
            if kind == "ws":
                continue
            if kind == "bad":
                raise _error(self.lines, source, f"unexpected character {m.group()!r}", m.start())
            tok = m.group()
            kinds.append(tok if kind == "punct" else kind)
            texts.append(tok)
            poss.append(m.start())
        kinds.append("eof")
        texts.append("end of input")
        poss.append(end)
        self.kinds, self.texts, self.poss = kinds, texts, poss
        self.i = 0
        # Value namespaces: one frame per isolated op (module, function), one dict per region.
        self.frames: list[list[dict[str, tuple[list[Value], int]]]] = [[{}]]
        self.type_cache: dict[str, Type] = {}
        self.dense_cache: dict[tuple[str, Type], Dense] = {}
        self.depth = 0          # nesting of ops, attributes, types, dense lists (see MAX_NESTING)

    # -- token helpers ---------------------------------------------------------------------
    @property
    def kind(self) -> str:
        return self.kinds[self.i]

    @property
    def pos(self) -> int:
        return self.poss[self.i]

    def fail(self, message: str, pos: int | None = None) -> ParseError:
        return _error(self.lines, self.source, message, self.pos if pos is None else pos)

    def next(self) -> str:
        tok = self.texts[self.i]
        self.i += 1
        return tok

    def accept(self, kind: str) -> bool:
        if self.kinds[self.i] == kind:
            self.i += 1
            return True
        return False

    def expect(self, kind: str, what: str | None = None) -> str:
        if self.kinds[self.i] != kind:
            raise self.fail(f"expected {what or repr(kind)}, got '{self.texts[self.i]}'")
        return self.next()

    def loc(self, pos: int) -> str:
        line, col = self.lines(pos)
        return f"{self.source}:{line}:{col}"

    # -- structure -------------------------------------------------------------------------
    def parse_top(self) -> ModuleOp:
        ops = []
        while self.kind != "eof":
            ops.append(self.operation())
        if len(ops) == 1 and isinstance(ops[0], ModuleOp):
            return ops[0]
        module = ModuleOp.create()
        for op in ops:
            module.body.append(op)
        return module

    def nest(self, pos: int) -> None:
        """One level deeper; past ``MAX_NESTING`` a ParseError (not a RecursionError).  Levels are
        not popped on errors: a ParseError ends the parse."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.fail(f"nesting deeper than {MAX_NESTING} levels (regions, attribute lists or types; "
                            f"unbalanced brackets?)", pos)

    def operation(self) -> Operation:
        start = self.pos
        self.nest(start)
        loc = self.loc(start)     # now, while positions still increase (regions come later)
        groups: list[tuple[str, int, int]] = []
        if self.kind == "value":
            while True:
                p = self.pos
                name = self.expect("value", "a result name")
                if "#" in name:
                    raise self.fail(f"result name '{name}' cannot carry a '#' index", p)
                count = 1
                if self.accept(":"):
                    count = int(self.expect("int", "a result count"))
                    if count < 1:
                        raise self.fail("result count must be at least 1")
                groups.append((name, count, p))
                if not self.accept(","):
                    break
            self.expect("=")
        name_pos = self.pos
        name = _unquote(self.expect("string", 'an op name in quotes ("dialect.op")'), self, name_pos)
        opdef = None if self.generic else lookup(name)
        if opdef is None and not self.generic:
            raise self.fail(f"unknown op '{name}' (no definition is registered under this name)", name_pos)
        self.expect("(")
        operands: list[tuple[Value, int]] = []
        if not self.accept(")"):
            while True:
                p = self.pos
                operands.append((self.use(self.expect("value", "an operand"), p), p))
                if self.accept(")"):
                    break
                self.expect(",", "',' or ')' in the operand list")
        if self.kind == "[":
            raise self.fail("successor blocks are not supported")
        attrs: dict[str, Any] = {}
        if self.accept("<"):
            self.attr_dict(attrs)
            self.expect(">")
        regions: list[Region] = []
        if self.accept("("):
            isolated = is_isolated(name)
            if isolated:
                self.frames.append([{}])
            while True:
                regions.append(self.region())
                if self.accept(")"):
                    break
                self.expect(",", "',' or ')' after a region")
            if isolated:
                self.frames.pop()
        if self.kind == "{":
            self.attr_dict(attrs)
        self.expect(":", "':' and the op's function type")
        sig_pos = self.pos
        in_types, out_types = self.signature()
        self.skip_location()
        if len(in_types) != len(operands):
            raise self.fail(f"'{name}' has {len(operands)} operands but its type lists {len(in_types)}", sig_pos)
        for i, ((v, p), t) in enumerate(zip(operands, in_types)):
            if v.type != t:
                raise self.fail(f"operand #{i} of '{name}' has type {v.type} but the op's type says {t}", p)
        n_names = sum(c for _, c, _ in groups)
        if n_names != len(out_types):
            raise self.fail(f"'{name}' defines {len(out_types)} results but {n_names} are named", start)
        if self.generic:
            op = Operation(name, [v for v, _ in operands], out_types, attrs, regions, loc, None)
            self.define_results(groups, op)
            self.depth -= 1
            return op
        if opdef.op_class is not None and (len(regions) != 1 or len(regions[0].blocks) != 1):
            raise self.fail(f"'{name}' needs exactly one region with one block", start)
        names = {k: attrs.pop(k) for k in (ARG_NAMES, RESULT_NAMES) if k in attrs} if name == "func.func" else {}
        attrs = _fix_attr_kinds(opdef, attrs)
        try:
            op = make_op(name, [v for v, _ in operands], attrs, out_types, regions, loc=loc)
        except TensorforgeError as e:
            msg = str(e)
            raise self.fail(msg if msg.startswith(f"'{name}'") else f"'{name}': {msg}", start) from None
        if names:
            self.apply_names(op, names, start)
        self.define_results(groups, op)
        self.depth -= 1
        return op

    def define_results(self, groups: list[tuple[str, int, int]], op: Operation) -> None:
        k = 0
        for rname, count, p in groups:
            self.define(rname, op.results[k:k + count], p)
            k += count

    def skip_location(self) -> None:
        """A trailing ``loc(...)`` (debug location) is read and dropped."""
        if self.kind == "ident" and self.texts[self.i] == "loc" and self.kinds[self.i + 1] == "(":
            self.i += 2
            depth = 1
            while depth:
                if self.kind == "eof":
                    raise self.fail("unterminated loc(...)")
                depth += {"(": 1, ")": -1}.get(self.kind, 0)
                self.i += 1

    def apply_names(self, func: Operation, names: dict[str, Any], pos: int) -> None:
        """``tf.arg_names`` / ``tf.result_names`` (see ``printer.function_name_attrs``) -> name hints."""
        block = func.regions[0].blocks[0]
        ret = block.last if block.last is not None and block.last.name == "func.return" else None
        for key, values in ((ARG_NAMES, block.args), (RESULT_NAMES, ret.operands if ret else [])):
            given = names.get(key)
            if given is None:
                continue
            if not isinstance(given, tuple) or len(given) != len(values) or \
                    not all(isinstance(n, str) for n in given):
                raise self.fail(f"'{key}' must list one name (a string, \"\" for none) per "
                                f"{'argument' if key == ARG_NAMES else 'returned value'} ({len(values)})", pos)
            for v, n in zip(values, given):
                if n:
                    v.name_hint = n

    def region(self) -> Region:
        self.expect("{", "'{' to open a region")
        scopes = self.frames[-1]
        scopes.append({})
        blocks: list[Block] = []
        labels: set[str] = set()
        if self.kind not in ("}", "label"):
            blocks.append(self.block_ops(Block()))
        while self.kind == "label":
            p = self.pos
            label = self.next()
            if label in labels:
                raise self.fail(f"redefinition of block '{label}'", p)
            labels.add(label)
            args: list[tuple[str, Type, int]] = []
            if self.accept("("):
                while True:
                    ap = self.pos
                    aname = self.expect("value", "a block argument")
                    self.expect(":", "':' and the argument type")
                    args.append((aname, self.type(), ap))
                    if self.accept(")"):
                        break
                    self.expect(",", "',' or ')' in the block arguments")
            self.expect(":", "':' after the block label")
            block = Block([t for _, t, _ in args])
            for (aname, _, ap), value in zip(args, block.args):
                self.define(aname, [value], ap)
            blocks.append(self.block_ops(block))
        self.expect("}", "'}' to close the region")
        scopes.pop()
        return Region(blocks)

    def block_ops(self, block: Block) -> Block:
        while self.kind not in ("}", "label", "eof"):
            block.append(self.operation())
        return block

    # -- values ----------------------------------------------------------------------------
    def define(self, name: str, values: list[Value], pos: int) -> None:
        scopes = self.frames[-1]
        for scope in scopes:
            if name in scope:
                line, col = self.lines(scope[name][1])
                raise self.fail(f"redefinition of value '{name}' (first defined at {line}:{col})", pos)
        scopes[-1][name] = (values, pos)

    def use(self, token: str, pos: int) -> Value:
        name, _, index = token.partition("#")
        for scope in reversed(self.frames[-1]):
            entry = scope.get(name)
            if entry is not None:
                break
        else:
            hint = ""
            if any(name in s for frame in self.frames[:-1] for s in frame):
                hint = " here: it is defined outside this function (functions are isolated from above)"
            raise self.fail(f"use of undefined value '{name}'{hint}", pos)
        values = entry[0]
        i = int(index) if index else 0
        if i >= len(values):
            raise self.fail(f"'{token}': '{name}' has only {len(values)} result(s)", pos)
        return values[i]

    # -- types -----------------------------------------------------------------------------
    def signature(self) -> tuple[list[Type], list[Type]]:
        self.expect("(", "'(' to open the op's operand types")
        ins = self.type_list(")")
        self.expect("->", "'->' in the op's function type")
        if self.accept("("):
            return ins, self.type_list(")")
        return ins, [self.type()]

    def type_list(self, close: str) -> list[Type]:
        out: list[Type] = []
        if self.accept(close):
            return out
        while True:
            out.append(self.type())
            if self.accept(close):
                return out
            self.expect(",", f"',' or '{close}' in a type list")

    def type(self) -> Type:
        self.nest(self.pos)
        t = self._type()
        self.depth -= 1
        return t

    def _type(self) -> Type:
        kind, tok, p = self.kind, self.texts[self.i], self.pos
        if kind == "shaped":
            self.i += 1
            t = self.type_cache.get(tok)
            if t is None:
                t = self.type_cache[tok] = self.shaped_type(tok, p)
            return t
        if kind == "ident":
            self.i += 1
            if tok == "index":
                return IndexType()
            dtype = _DTYPES.get(tok)
            if dtype is None:
                raise self.fail(f"unknown type '{tok}'", p)
            return ScalarType(dtype)
        if kind == "(":
            self.i += 1
            ins = self.type_list(")")
            self.expect("->", "'->' in a function type")
            outs = self.type_list(")") if self.accept("(") else [self.type()]
            return FunctionType(ins, outs)
        raise self.fail(f"expected a type, got '{tok}'", p)

    def shaped_type(self, tok: str, pos: int) -> Type:
        kind, dims_text, elt, encoding = _SHAPED_RE.fullmatch(tok).groups()
        dtype = _DTYPES.get(elt)
        if dtype is None:
            raise self.fail(f"unknown element type '{elt}' in {tok}", pos)
        syms = split_symbol_list(encoding) if encoding else []
        dims: list[int | str] = []
        k = 0
        for d in dims_text.split("x")[:-1]:
            if d == "?":
                if k >= len(syms) or not syms[k]:
                    raise self.fail(f"dynamic dimension #{len(dims)} of {tok} has no symbol name "
                                    f"(write e.g. {kind}<?x4xf32, \"N\">)", pos)
                dims.append(syms[k])
                k += 1
            else:
                dims.append(int(d))
        if k != len(syms):
            raise self.fail(f"{tok} names {len(syms)} symbols for {k} dynamic dimensions", pos)
        return TensorType(dims, dtype) if kind == "tensor" else BufferType(dims, dtype)

    def static_tensor_type(self, what: str) -> TensorType:
        p = self.pos
        t = self.type()
        if not isinstance(t, TensorType) or not t.is_static:
            raise self.fail(f"{what} needs a static tensor type, got {t}", p)
        return t

    # -- attributes ------------------------------------------------------------------------
    def attr_dict(self, attrs: dict[str, Any]) -> None:
        self.expect("{")
        if self.accept("}"):
            return
        while True:
            p = self.pos
            if self.kind == "string":
                key = _unquote(self.next(), self, p)
            else:
                key = self.expect("ident", "an attribute name")
            if key in attrs:
                raise self.fail(f"attribute '{key}' is given twice", p)
            if self.generic and self.kind in (",", "}"):
                attrs[key] = True                 # a unit attribute ({llvm.emit_c_interface})
            else:
                self.expect("=", f"'=' and a value for attribute '{key}'")
                attrs[key] = self.attr()
            if self.accept("}"):
                return
            self.expect(",", "',' or '}' in the attribute dictionary")

    def attr(self) -> Any:
        self.nest(self.pos)
        value = self._attr()
        self.depth -= 1
        return value

    def _attr(self) -> Any:
        kind, tok, p = self.kind, self.texts[self.i], self.pos
        if kind == "ident":
            if tok in ("true", "false"):
                self.i += 1
                return tok == "true"
            if tok == "array":
                return self.dense_array()
            if tok == "dense":
                return self.dense()
            if tok == "dense_resource":
                return self.dense_resource()
            if tok in _DTYPES:
                self.i += 1
                return _DTYPES[tok]
            if tok == "index":
                self.i += 1
                return IndexType()
            if tok == "loc" and self.generic and self.kinds[self.i + 1] == "(":
                self.skip_location()           # a location alias's value (#loc1 = loc(...))
                return DialectAttr("loc", "")
            raise self.fail(f"unknown attribute value '{tok}'", p)
        if kind in ("int", "float", "hex"):
            self.i += 1
            t = self.type() if self.accept(":") else None
            return _number(tok, t, self, p)
        if kind == "string":
            self.i += 1
            return _unquote(tok, self, p)
        if kind == "[":
            self.i += 1
            items = []
            if self.accept("]"):
                return ()
            while True:
                items.append(self.attr())
                if self.accept("]"):
                    return tuple(items)
                self.expect(",", "',' or ']' in a list attribute")
        if kind in ("shaped", "("):
            return self.type()
        if kind == "hash":
            return self.dialect_attr()
        if kind == "symbol":
            self.i += 1
            return SymbolRef(_unquote(tok[1:], self, p) if tok.startswith('@"') else tok[1:])
        if kind == "{" and self.generic:
            nested: dict[str, Any] = {}
            self.attr_dict(nested)
            return nested
        raise self.fail(f"expected an attribute value, got '{tok}'", p)

    def dialect_attr(self) -> DialectAttr:
        """``#name<body>`` (the body kept as text, nested ``<>`` balanced, ``->`` skipped) or ``#alias``."""
        name = self.next()[1:]
        if self.kind != "<":
            return DialectAttr(name, "")
        start = self.pos
        self.i += 1
        depth = 1
        while True:
            kind = self.kind
            if kind == "eof":
                raise self.fail(f"unterminated '#{name}<'", start)
            if kind == "<":
                depth += 1
            elif kind == ">":
                depth -= 1
                if depth == 0:
                    body = self.text[start + 1:self.pos]
                    self.i += 1
                    return DialectAttr(name, " ".join(body.split()))
            self.i += 1

    def dense_array(self) -> tuple:
        self.i += 1
        self.expect("<", "'<' after 'array'")
        p = self.pos
        elt = self.expect("ident", "an element type")
        if elt not in _INT_ARRAY and elt not in _FLOAT_ARRAY:
            raise self.fail(f"unsupported array element type '{elt}'", p)
        values = []
        if self.accept(":"):
            while True:
                vp = self.pos
                if self.kind not in ("int", "float", "hex", "ident"):
                    raise self.fail(f"expected an array element, got '{self.texts[self.i]}'")
                tok = self.next()
                if elt == "i1":
                    if tok not in ("true", "false"):
                        raise self.fail(f"expected true or false, got '{tok}'", vp)
                    values.append(tok == "true")
                else:
                    values.append(_number(tok, ScalarType(_FLOAT_ARRAY[elt]) if elt in _FLOAT_ARRAY
                                          else ScalarType(DType.i64), self, vp))
                if not self.accept(","):
                    break
        self.expect(">", "'>' to close the array")
        return tuple(values)

    def dense(self) -> Dense:
        start = self.pos
        self.i += 1
        self.expect("<", "'<' after 'dense'")
        data: bytes | None = None
        shape: tuple | None = None
        flat: list[tuple[str, int]] = []
        if self.kind == "string":
            p = self.pos
            tok = self.next()
            if not tok.startswith('"0x'):
                raise self.fail('dense string data must be hex ("0x...")', p)
            try:
                data = bytes.fromhex(tok[3:-1])
            except ValueError:
                raise self.fail("bad hex digits in dense data", p) from None
        elif self.kind != ">":
            shape = self.dense_elements(flat)
        self.expect(">", "'>' to close the dense literal")
        self.expect(":", "':' and the type of the dense literal")
        t = self.static_tensor_type("a dense literal")
        size, dtype = math.prod(t.shape), t.dtype
        if size * dtype.np.itemsize > MAX_SPLAT_BYTES and (shape == () or (data is not None and len(data) <= 8)):
            raise self.fail(f"splat dense literal of {t} would take {size * dtype.np.itemsize} bytes, more than "
                            f"the parser materialises ({MAX_SPLAT_BYTES}); its dims are probably wrong", start)
        if data is not None:
            width = 2 if dtype is DType.bf16 else dtype.itemsize
            if len(data) not in (size * width, width):
                raise self.fail(f"hex data has {len(data)} bytes; {t} needs {size * width}", start)
            return Dense(array_from_bytes(data, dtype, t.shape), dtype)
        if shape is None:
            if size:
                raise self.fail(f"empty dense literal for {t}, which has {size} elements", start)
            return Dense(np.zeros(t.shape, dtype.np), dtype)
        arr = self.element_array(flat, dtype)
        if shape == () and t.shape != ():
            arr = np.full(t.shape, arr[0], dtype=arr.dtype)
        elif shape != t.shape:
            raise self.fail(f"dense literal has shape {shape} but its type is {t}", start)
        return Dense(arr.reshape(t.shape), dtype)

    def dense_elements(self, flat: list[tuple[str, int]]) -> tuple:
        """Nested ``[...]`` lists: appends (token, pos) to ``flat``, returns the nesting's shape."""
        if self.kind in ("int", "float", "hex", "ident"):
            flat.append((self.texts[self.i], self.pos))
            self.i += 1
            return ()
        p = self.pos
        self.expect("[", "a dense element or '['")
        if self.accept("]"):
            return (0,)
        self.nest(p)
        shapes = []
        while True:
            shapes.append(self.dense_elements(flat))
            if self.accept("]"):
                break
            self.expect(",", "',' or ']' in a dense literal")
        if any(s != shapes[0] for s in shapes):
            raise self.fail("ragged dense literal: nested lists have different lengths", p)
        self.depth -= 1
        return (len(shapes),) + shapes[0]

    def element_array(self, flat: list[tuple[str, int]], dtype: DType) -> np.ndarray:
        if dtype is DType.bool:
            vals = []
            for tok, p in flat:
                if tok not in ("true", "false", "0", "1"):
                    raise self.fail(f"expected true or false, got '{tok}'", p)
                vals.append(tok in ("true", "1"))
            return np.array(vals, dtype=np.bool_)
        if not dtype.is_float:
            vals = []
            for tok, p in flat:
                try:
                    vals.append(int(tok, 16) if tok.startswith("0x") else int(tok))
                    np.array(vals[-1:], dtype=dtype.np)
                except (ValueError, OverflowError):
                    raise self.fail(f"'{tok}' is not a valid {dtype} value", p) from None
            return np.array(vals, dtype=dtype.np)
        vals, hexes = [], []
        for k, (tok, p) in enumerate(flat):
            if tok.startswith("0x"):
                hexes.append((k, _float_bits(tok, dtype, self, p)))
                vals.append(0.0)
            else:
                try:
                    vals.append(float(tok))
                except ValueError:
                    raise self.fail(f"'{tok}' is not a valid {dtype} value", p) from None
        wide = np.array(vals, dtype=np.float64)
        with np.errstate(over="ignore"):
            arr = wide.astype(dtype.np)
        overflow = np.flatnonzero(np.isinf(arr) & np.isfinite(wide))
        if overflow.size:
            tok, p = flat[overflow[0]]
            raise self.fail(f"'{tok}' is out of range for {dtype}", p)
        if hexes:
            idx = [k for k, _ in hexes]
            arr[idx] = float_from_bits(np.array([b for _, b in hexes], dtype=np.uint64), dtype)
        return arr

    def dense_resource(self) -> Dense:
        self.i += 1
        self.expect("<", "'<' after 'dense_resource'")
        p = self.pos
        name = self.expect("ident", "a resource name")
        self.expect(">", "'>' after the resource name")
        self.expect(":", "':' and the type of the resource")
        t = self.static_tensor_type("a dense_resource")
        cached = self.dense_cache.get((name, t))
        if cached is not None:
            return cached
        dense = Dense(self.resource_array(name, t, p), t.dtype)
        self.dense_cache[(name, t)] = dense
        return dense

    def resource_array(self, name: str, t: TensorType, pos: int) -> np.ndarray:
        dtype, size = t.dtype, math.prod(t.shape)
        if name in self.resources:
            arr = np.asarray(self.resources[name])
            if arr.dtype != dtype.np:
                raise self.fail(f"resource '{name}' holds {arr.dtype} data but its type is {t}", pos)
            if arr.size != size:
                raise self.fail(f"resource '{name}' has {arr.size} elements but its type is {t}", pos)
            return arr if arr.shape == t.shape else arr.reshape(t.shape)
        span = self.blobs.get(name)
        if span is None:
            raise self.fail(f"missing resource '{name}': pass resources= (save_module keeps them in "
                            f"the .npz sidecar) or print with inline_resources=True", pos)
        try:
            blob = bytes.fromhex(self.text[span[0]:span[1]])
        except ValueError:
            raise _error(self.lines, self.source, f"resource '{name}' has bad hex digits", span[0]) from None
        width = 2 if dtype is DType.bf16 else dtype.itemsize
        if len(blob) != 4 + size * width:
            raise self.fail(f"resource '{name}' has {len(blob) - 4} data bytes; {t} needs {size * width}", pos)
        return array_from_bytes(memoryview(blob)[4:], dtype, t.shape)


# ---- small helpers --------------------------------------------------------------------
def _number(tok: str, t: Type | None, parser: _Parser, pos: int) -> int | float:
    """An integer or float literal with an optional ``: type`` (hex means raw bits for floats)."""
    is_float_type = isinstance(t, ScalarType) and t.dtype.is_float
    if t is not None and not isinstance(t, (ScalarType, IndexType)):
        raise parser.fail(f"a number needs a scalar type, got {t}", pos)
    if tok.startswith("0x"):
        if not is_float_type:
            return int(tok, 16)
        bits = _float_bits(tok, t.dtype, parser, pos)
        if t.dtype is DType.f64:
            return f64_from_bits(bits)
        return float(float_from_bits(np.array([bits], dtype=np.uint64), t.dtype)[0])
    try:
        if "." in tok or "e" in tok or "E" in tok:
            if t is not None and not is_float_type:
                raise parser.fail(f"float literal {tok} with integer type {t}", pos)
            value = float(tok)
        else:
            value = int(tok)
            if is_float_type:
                value = float(value)
    except ValueError:
        raise parser.fail(f"bad number '{tok}'", pos) from None
    except OverflowError:          # an integer literal beyond any float, given a float type
        raise parser.fail(f"'{tok}' is out of range for {t}", pos) from None
    if is_float_type and t.dtype is not DType.f64:
        with np.errstate(over="ignore"):
            narrow = float(np.array(value, dtype=t.dtype.np))
        if math.isinf(narrow) and math.isfinite(value):
            raise parser.fail(f"'{tok}' is out of range for {t}", pos)
        value = narrow
    return value


def _float_bits(tok: str, dtype: DType, parser: _Parser, pos: int) -> int:
    """A hex float literal: the IEEE bit pattern, which must fit the type's width."""
    bits = int(tok, 16)
    width = 16 if dtype is DType.bf16 else 8 * dtype.itemsize
    if bits >> width:
        raise parser.fail(f"hex float literal {tok} does not fit {dtype} ({width} bits)", pos)
    return bits


def _unquote(tok: str, parser: _Parser, pos: int) -> str:
    body = tok[1:-1]
    if "\\" not in body:
        return body
    raw = body.encode("utf-8")
    out, k = [], 0
    while True:
        j = raw.find(b"\\", k)
        if j < 0:
            out.append(raw[k:])
            break
        out.append(raw[k:j])
        m = _ESCAPE_RE.match(raw, j)
        if m is None:
            raise parser.fail("bad escape in string (use \\\\, \\\", \\n, \\t or \\XX hex)", pos)
        e = m.group(1)
        out.append(_SIMPLE_ESCAPES.get(e) or bytes([int(e, 16)]))
        k = m.end()
    try:
        return b"".join(out).decode("utf-8")
    except UnicodeDecodeError:
        raise parser.fail("string escapes are not valid UTF-8", pos) from None


def _fix_attr_kinds(opdef, attrs: dict[str, Any]) -> dict[str, Any]:
    """``f32`` reads as a DType; where the op declares a ``type`` attribute it means the scalar type."""
    for key, value in attrs.items():
        if isinstance(value, DType):
            spec = opdef.attrs.get(key)
            if spec is not None and spec.kind == "type":
                attrs[key] = ScalarType(value)
    return attrs


__all__ = ["parse_module", "parse_generic", "save_module", "load_module"]
