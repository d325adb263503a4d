"""Structured-mutation fuzzing of the ONNX importer and the IR text parser (issue #14, item 3).

The contract under test: whatever bytes or text a user hands tensorforge, the answer is a
result or a ``TensorforgeError`` -- never another exception, a hang or a crash, and never an
attempt to allocate terabytes because a dim says 2**40.

Targets:

``onnx``
    Mutated ``ModelProto`` seeds (``tests/fuzz_corpus/onnx``): op types, attribute kinds and
    values, dangling/duplicate/empty value names, cycles, dims (negative, zero, huge), element
    type codes, ``raw_data`` lengths, external data, opsets and domains, graph outputs,
    initializer/input clashes, subgraphs -- plus raw byte mutation of the serialized proto
    (bit flips, truncation, insertion).  Each goes to ``tensorforge.compile(model,
    target="interpreter")`` (and with ``--native-every K`` every K-th one also to ``"cpu"``);
    bytes that protobuf cannot parse go to ``frontends.onnx.load_model``.
``mlir``
    Token-level mutation of printed modules (``tests/fuzz_corpus/mlir``): deleted, duplicated
    and swapped tokens, changed numbers, unbalanced brackets and quotes, unknown op names, bad
    types, huge numbers and shapes, deep nesting, unicode, truncation.  Each goes to
    ``ir.parser.parse_module``; a module that parses must print and parse back.

Cases are a pure function of ``(target, seed, index)`` and the corpus, so a finding is
reproduced with ``--replay-case INDEX``.  By default every batch runs in a worker process
with a memory limit (``--mem-limit-mb``) and a per-case timeout: a crash or a hang kills only
the worker, is recorded against the case it was running, and a new worker continues after it.

    python -m tensorforge.testing.fuzz_parsers --target onnx --iterations 20000 --seed 1 --jobs 2
    python -m tensorforge.testing.fuzz_parsers --target mlir --iterations 50000 --seed 1 \\
        --save-findings tests/fuzz_corpus/findings/mlir
    python -m tensorforge.testing.fuzz_parsers --target onnx --replay tests/fuzz_corpus/findings/onnx

(coverage-guided fuzzing with atheris was not used: no atheris 3.1.0 wheel installs here.)
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import math
import os
import random
import re
import selectors
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

TARGETS = ("onnx", "mlir")
REPO_ROOT = Path(__file__).resolve().parents[2]
CORPUS_ROOT = REPO_ROOT / "tests" / "fuzz_corpus"
SUFFIX = {"onnx": ".onnx", "mlir": ".mlir"}


# ================================================================================================
# findings
# ================================================================================================
@dataclass
class Finding:
    """One input that broke the contract."""

    target: str
    index: int                    # case index (-1 for a corpus file)
    kind: str                     # "exception" | "hang" | "crash"
    error: str                    # exception type (or signal / timeout)
    message: str
    where: str                    # deepest tensorforge frame, "file:line in function"
    mutation: str                 # what the mutator did
    traceback: str = ""
    data_b64: str = field(default="", repr=False)

    @property
    def key(self) -> str:
        """What identifies a distinct bug: the kind, the exception type and where it was raised."""
        return f"{self.kind}:{self.error}@{self.where}"

    @property
    def data(self) -> bytes:
        return base64.b64decode(self.data_b64)

    def summary(self) -> str:
        return f"[{self.target} #{self.index}] {self.key}: {self.message[:200]}  ({self.mutation})"


OUTCOMES: dict[str, int] = {}
"""How the cases of this process ended: "ok", "parse-failed" or the TensorforgeError class name."""


def _outcome(name: str) -> None:
    OUTCOMES[name] = OUTCOMES.get(name, 0) + 1


class _Timeout(BaseException):
    """Raised by the in-process alarm; a BaseException so ``except Exception`` cannot swallow it."""


def _where(tb) -> str:
    frames = traceback.extract_tb(tb)
    ours = [f for f in frames if "tensorforge" in f.filename and "testing/fuzz_parsers" not in f.filename]
    f = (ours or frames or [None])[-1]
    if f is None:
        return "?"
    path = f.filename
    k = path.rfind("tensorforge/")
    return f"{path[k:] if k >= 0 else os.path.basename(path)}:{f.lineno} in {f.name}"


def _exception_finding(target: str, e: BaseException, mutation: str, data: bytes, index: int) -> Finding:
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-12:])
    return Finding(target, index, "exception", type(e).__name__, str(e)[:2000], _where(e.__traceback__),
                   mutation, tb[-6000:], base64.b64encode(data).decode())


# ================================================================================================
# the oracles: one case in, a Finding (contract broken) or None out
# ================================================================================================
def check_onnx(data: bytes, native: bool = False) -> BaseException | None:
    """Feeds serialized (possibly corrupt) ONNX bytes to tensorforge; returns the exception that
    broke the contract, or None.  A TensorforgeError is a correct answer."""
    import onnx

    import tensorforge
    from tensorforge.errors import TensorforgeError
    from tensorforge.frontends.onnx import load_model
    try:
        model = onnx.load_from_string(data)
    except Exception:
        model = None
    try:
        if model is None:                    # protobuf refuses the bytes: tensorforge must say so
            load_model(data)
            return AssertionError("load_model accepted bytes that protobuf cannot parse")
        tensorforge.compile(model, target="interpreter", db=None)
        if native:
            tensorforge.compile(model, target="cpu", db=None)
    except TensorforgeError as e:
        cause = _internal_cause(e)
        if cause is not None:      # a handler's exception that the importer's per-node wrapper named
            op = re.search(r"\(([A-Za-z0-9_]+), opset", str(e))
            _outcome(f"wrapped {type(cause).__name__} in {op.group(1) if op else '?'} at {_where(cause.__traceback__)}")
        else:
            _outcome(("bytes:" if model is None else "") + type(e).__name__)
        return None
    except _Timeout:
        raise
    except BaseException as e:  # noqa: BLE001 - everything else is a finding (MemoryError, RecursionError...)
        return e
    _outcome("ok-native" if native else "ok")
    return None


def _internal_cause(e: BaseException) -> BaseException | None:
    """The non-tensorforge exception a TensorforgeError was raised from, if any (the ONNX
    importer's per-node wrapper keeps a handler's unexpected exception as ``__cause__``)."""
    from tensorforge.errors import TensorforgeError
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if not isinstance(e, TensorforgeError):
            return e
        e = e.__cause__
    return None


def check_mlir(text: str) -> BaseException | None:
    """Parses (possibly corrupt) IR text; a module that parses must print and parse back."""
    from tensorforge.errors import TensorforgeError
    from tensorforge.ir.parser import parse_module
    from tensorforge.ir.printer import print_module
    try:
        module = parse_module(text, source="<fuzz>")
    except TensorforgeError as e:
        _outcome(type(e).__name__)
        return None
    except _Timeout:
        raise
    except BaseException as e:  # noqa: BLE001
        return e
    if _holds_big_constant(module):
        _outcome("ok-big")
        return None          # printing gigabytes of splat is not what this checks
    try:
        again = print_module(module, inline_resources=True)
        parse_module(again, source="<fuzz-reprint>")
        _outcome("ok")
    except _Timeout:
        raise
    except BaseException as e:  # noqa: BLE001 - a parsed module that does not round trip is a finding
        return AssertionError(f"parsed module does not print and parse back: {type(e).__name__}: {e}").with_traceback(
            e.__traceback__)
    return None


def _holds_big_constant(module, limit: int = 1 << 26) -> bool:
    from tensorforge.ir.attributes import Dense

    def big(v) -> bool:
        if isinstance(v, Dense):
            return v.array.nbytes > limit
        return isinstance(v, tuple) and any(big(x) for x in v)

    return any(big(v) for op in module.walk() for v in op.attributes.values())


# ================================================================================================
# seeds / corpus
# ================================================================================================
def load_corpus(target: str, corpus: str | os.PathLike | None = None) -> list[tuple[str, bytes]]:
    """(name, content) of the seed files, sorted by name; the built-in seeds when there are none."""
    directory = Path(corpus) if corpus else CORPUS_ROOT / target
    files = sorted(directory.glob("*" + SUFFIX[target])) if directory.is_dir() else []
    if files:
        return [(f.name, f.read_bytes()) for f in files]
    from .fuzz_parsers_seeds import mlir_seed_texts, onnx_seed_models
    if target == "onnx":
        return sorted((n + ".onnx", m.SerializeToString()) for n, m in onnx_seed_models().items())
    return sorted((n + ".mlir", t.encode()) for n, t in mlir_seed_texts().items())


def write_seed_corpus(root: str | os.PathLike) -> list[Path]:
    """Writes the built-in seeds to ``root/onnx`` and ``root/mlir``."""
    from .fuzz_parsers_seeds import mlir_seed_texts, onnx_seed_models
    root = Path(root)
    out = []
    for target, items in (("onnx", {n: m.SerializeToString() for n, m in onnx_seed_models().items()}),
                          ("mlir", {n: t.encode() for n, t in mlir_seed_texts().items()})):
        (root / target).mkdir(parents=True, exist_ok=True)
        for name, data in items.items():
            path = root / target / (name + SUFFIX[target])
            path.write_bytes(data)
            out.append(path)
    return out


# ================================================================================================
# ONNX mutation
# ================================================================================================
INTERESTING_INTS = [0, 1, -1, 2, -2, 3, 7, -7, 64, 255, 256, 2**15, 2**31 - 1, 2**31, -2**31, 2**32,
                    2**40, 2**62, 2**63 - 1, -2**63]
INTERESTING_DIMS = [0, 1, -1, -2, 2, 3, 1024, 2**20, 2**31, 2**40, 2**62, 2**63 - 1, -2**63]
INTERESTING_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-45, 1e38, 3.5e38, -1e308, float("inf"), float("-inf"),
                      float("nan")]
ATTR_NAMES = ["axis", "axes", "perm", "kernel_shape", "pads", "strides", "dilations", "group", "to", "value",
              "alpha", "beta", "epsilon", "keepdims", "mode", "transA", "transB", "auto_pad", "ceil_mode",
              "noop_with_empty_axes", "split", "starts", "ends", "shape", "blocksize", "num_outputs",
              "then_branch", "body", "zz_unknown", ""]
DOMAINS = ["", "ai.onnx", "com.microsoft", "ai.onnx.ml", "ai.onnx.preview.training", "x" * 40, "ai.onnx\x00"]
OPSETS = [0, 1, 5, 6, 7, 9, 11, 13, 17, 18, 19, 21, 22, 23, 24, 99, 2**31 - 1, 2**40, -1]
ELEM_TYPES = list(range(0, 27)) + [99, 2**31 - 1, -1]
EXTRA_OPS = ["", "Foo", "conv", "If", "Loop", "Scan", "RandomNormal", "StringNormalizer", "Relu\x00", "Ω",
             "MatMulInteger", "SequenceConstruct", "Optional", "TfIdfVectorizer"]


OP_FAMILIES = [
    ["Relu", "Tanh", "Sigmoid", "Exp", "Log", "Neg", "Abs", "Sqrt", "Reciprocal", "Floor", "Ceil", "Erf", "Sin",
     "Softplus", "Softsign", "Identity", "Sign", "HardSwish", "Elu", "Selu", "LeakyRelu", "Gelu", "Mish", "Not",
     "IsNaN", "Round", "Softmax", "LogSoftmax", "Hardmax", "Flatten", "Dropout", "Cast", "Shape", "Size",
     "GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceMax", "ReduceSum", "ReduceL2", "ArgMax", "NonZero"],
    ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "Equal", "Less", "Greater", "And", "Or",
     "Xor", "MatMul", "PRelu", "Mod", "BitShift", "Reshape", "Expand", "Tile", "Gather", "GatherElements",
     "Unsqueeze", "Squeeze", "Concat", "CumSum", "Range", "Where", "Einsum", "Slice", "Pad", "TopK"],
    ["Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "Gemm", "MatMul", "InstanceNormalization",
     "LayerNormalization", "GroupNormalization", "BatchNormalization", "LRN", "DepthToSpace", "SpaceToDepth"],
]


def _onnx_ops() -> list[str]:
    """Every op type of the default ONNX domain (fixed by the onnx version, not by which handlers
    tensorforge registers, so that a case index keeps meaning the same input)."""
    import onnx
    return sorted({s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain in ("", "ai.onnx")}) + EXTRA_OPS


class OnnxMutator:
    """Structured and byte-level mutations of serialized ModelProto seeds."""

    def __init__(self, seeds: list[tuple[str, bytes]]):
        import onnx
        self.onnx = onnx
        self.seeds = []
        for name, data in seeds:
            try:
                self.seeds.append((name, onnx.load_from_string(data)))
            except Exception:   # a corrupt seed still gets byte mutations
                self.seeds.append((name, data))
        self.ops = _onnx_ops()
        self.structured: list[Callable] = [
            self.op_type, self.attr_value, self.attr_value, self.attr_kind, self.attr_add, self.attr_del,
            self.attr_dup, self.node_input, self.node_input, self.node_output, self.node_delete, self.node_dup,
            self.node_swap, self.cycle, self.node_domain, self.dims, self.dims, self.elem_type, self.init_dims,
            self.init_dtype, self.init_data, self.init_data, self.init_external, self.init_name,
            self.graph_outputs, self.graph_inputs, self.opset, self.ir_version, self.constant_node,
            self.subgraph, self.huge_shape, self.huge_shape, self.sparse, self.value_info, self.local_function,
            # plausible changes: the model often stays valid, so the mutant reaches the handlers and passes
            self.similar_op, self.similar_op, self.small_attr, self.small_attr, self.small_attr, self.input_dims,
            self.input_dims,
        ]

    # ---- driver -------------------------------------------------------------------------------
    def case(self, rng: random.Random) -> tuple[bytes, str]:
        name, seed = rng.choice(self.seeds)
        steps = [name]
        if isinstance(seed, bytes):
            data = seed
        else:
            m = self.onnx.ModelProto()
            m.CopyFrom(seed)
            structured = rng.random() < 0.75
            for _ in range(rng.randint(1, 3) if structured else rng.randint(0, 1)):
                mut = rng.choice(self.structured)
                try:
                    steps.append(mut(m, rng) or mut.__name__)
                except (ValueError, TypeError, IndexError, OverflowError) as e:   # protobuf refused a value
                    steps.append(f"{mut.__name__}:refused({type(e).__name__})")
            try:
                data = m.SerializeToString()
            except Exception as e:  # noqa: BLE001 - protobuf cannot serialize what we built
                steps.append(f"serialize-failed({type(e).__name__})")
                data = seed.SerializeToString()
            if structured:
                return data, " / ".join(steps)
        for _ in range(rng.randint(1, 3)):
            data, what = _byte_mutation(data, rng)
            steps.append(what)
        return data, " / ".join(steps)

    # ---- helpers ------------------------------------------------------------------------------
    @staticmethod
    def _names(m) -> list[str]:
        g = m.graph
        return ([vi.name for vi in g.input] + [t.name for t in g.initializer]
                + [o for n in g.node for o in n.output] + ["", "nope", "x", "y"])

    @staticmethod
    def _node(m, rng):
        return rng.choice(m.graph.node) if len(m.graph.node) else None

    def _tensor(self, rng, name="t"):
        from onnx import TensorProto, helper
        code = rng.choice([TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT16,
                           TensorProto.BOOL, TensorProto.DOUBLE, TensorProto.UINT8])
        n = rng.choice([0, 1, 2, 3, 4])
        import numpy as np
        arr = np.arange(n).astype(helper.tensor_dtype_to_np_dtype(code))
        return helper.make_tensor(name, code, [n], arr.tobytes(), raw=True)

    def _value_infos(self, m):
        g = m.graph
        return [vi for vi in list(g.input) + list(g.output) + list(g.value_info) if vi.type.HasField("tensor_type")]

    # ---- structured mutators (each returns a description) --------------------------------------
    def op_type(self, m, rng):
        n = self._node(m, rng)
        if n is None:
            return "op_type:none"
        n.op_type = rng.choice(self.ops)
        return f"op_type({n.name}->{n.op_type!r})"

    def attr_value(self, m, rng):
        from onnx import AttributeProto as A
        nodes = [n for n in m.graph.node if len(n.attribute)]
        if not nodes:
            return self.attr_add(m, rng)
        n = rng.choice(nodes)
        a = rng.choice(n.attribute)
        if a.type == A.INT:
            a.i = rng.choice(INTERESTING_INTS)
        elif a.type == A.FLOAT:
            a.f = rng.choice(INTERESTING_FLOATS)
        elif a.type == A.INTS:
            vals = list(a.ints)
            how = rng.randrange(4)
            if how == 0 and vals:
                vals[rng.randrange(len(vals))] = rng.choice(INTERESTING_INTS)
            elif how == 1:
                vals = vals[:rng.randrange(len(vals) + 1)]
            elif how == 2:
                vals = vals + [rng.choice(INTERESTING_INTS) for _ in range(rng.randint(1, 6))]
            else:
                vals = [rng.choice(INTERESTING_INTS) for _ in range(rng.randint(0, 4))]
            del a.ints[:]
            a.ints.extend(vals)
        elif a.type == A.FLOATS:
            a.floats.append(rng.choice(INTERESTING_FLOATS))
        elif a.type == A.STRING:
            a.s = rng.choice([b"", b"\xff\xfe", b"NOTSET", b"SAME_UPPER", b"VALID", b"bogus", b"x" * 300])
        elif a.type == A.TENSOR:
            self._mutate_tensor(a.t, rng)
        elif a.type == A.GRAPH:
            del a.g.node[:]
        return f"attr_value({n.name}.{a.name})"

    def similar_op(self, m, rng):
        n = self._node(m, rng)
        if n is None:
            return "similar_op:none"
        for family in OP_FAMILIES:
            if n.op_type in family:
                n.op_type = rng.choice(family)
                break
        else:
            n.op_type = rng.choice(OP_FAMILIES[0] if len(n.input) == 1 else OP_FAMILIES[1])
        return f"similar_op({n.name}->{n.op_type})"

    def small_attr(self, m, rng):
        from onnx import AttributeProto as A
        nodes = [n for n in m.graph.node if any(a.type in (A.INT, A.INTS) for a in n.attribute)]
        if not nodes:
            return self.attr_add(m, rng)
        n = rng.choice(nodes)
        a = rng.choice([a for a in n.attribute if a.type in (A.INT, A.INTS)])
        if a.type == A.INT:
            a.i = rng.randint(-4, 4)
        else:
            vals = [v + rng.randint(-2, 2) if rng.random() < 0.5 else v for v in a.ints]
            if rng.random() < 0.3:
                vals = vals[:-1] if vals and rng.random() < 0.5 else vals + [rng.randint(-1, 3)]
            del a.ints[:]
            a.ints.extend(vals)
        return f"small_attr({n.name}.{a.name})"

    def input_dims(self, m, rng):
        vis = [vi for vi in m.graph.input if vi.type.HasField("tensor_type") and len(vi.type.tensor_type.shape.dim)]
        if not vis:
            return "input_dims:none"
        vi = rng.choice(vis)
        d = rng.choice(vi.type.tensor_type.shape.dim)
        if rng.random() < 0.7:
            d.dim_value = rng.choice([1, 2, 3, 4, 5, 8, 16, 0])
        else:
            d.dim_param = rng.choice(["N", "batch", "seq", "M"])
        return f"input_dims({vi.name})"

    def attr_kind(self, m, rng):
        nodes = [n for n in m.graph.node if len(n.attribute)]
        if not nodes:
            return "attr_kind:none"
        n = rng.choice(nodes)
        a = rng.choice(n.attribute)
        a.type = rng.choice(list(range(0, 15)))
        return f"attr_kind({n.name}.{a.name}->{a.type})"

    def attr_add(self, m, rng):
        from onnx import helper
        n = self._node(m, rng)
        if n is None:
            return "attr_add:none"
        name = rng.choice(ATTR_NAMES)
        value = rng.choice([rng.choice(INTERESTING_INTS), rng.choice(INTERESTING_FLOATS), b"abc",
                            [rng.choice(INTERESTING_INTS) for _ in range(rng.randint(1, 4))],
                            [0.5, 1.5], self._tensor(rng), [b"a", b"b"]])
        try:
            n.attribute.append(helper.make_attribute(name, value))
        except (ValueError, TypeError):
            return "attr_add:refused"
        return f"attr_add({n.name}.{name!r})"

    def attr_del(self, m, rng):
        nodes = [n for n in m.graph.node if len(n.attribute)]
        if not nodes:
            return "attr_del:none"
        n = rng.choice(nodes)
        k = rng.randrange(len(n.attribute))
        name = n.attribute[k].name
        del n.attribute[k]
        return f"attr_del({n.name}.{name})"

    def attr_dup(self, m, rng):
        nodes = [n for n in m.graph.node if len(n.attribute)]
        if not nodes:
            return "attr_dup:none"
        n = rng.choice(nodes)
        a = n.attribute.add()
        a.CopyFrom(rng.choice(n.attribute[:-1]))
        if a.type == 2:
            a.i = rng.choice(INTERESTING_INTS)
        return f"attr_dup({n.name}.{a.name})"

    def node_input(self, m, rng):
        n = self._node(m, rng)
        if n is None:
            return "node_input:none"
        names = self._names(m)
        how = rng.randrange(5)
        if how == 0 or not len(n.input):
            n.input.append(rng.choice(names))
        elif how == 1:
            del n.input[rng.randrange(len(n.input))]
        elif how == 2:
            n.input[rng.randrange(len(n.input))] = rng.choice(["", "dangling", "\x00", "x" * 1000])
        elif how == 3 and len(n.output):
            n.input[rng.randrange(len(n.input))] = n.output[0]          # self-loop
        else:
            n.input[rng.randrange(len(n.input))] = rng.choice(names)
        return f"node_input({n.name}, {how})"

    def node_output(self, m, rng):
        n = self._node(m, rng)
        if n is None:
            return "node_output:none"
        names = self._names(m)
        how = rng.randrange(4)
        if how == 0 or not len(n.output):
            n.output.append(rng.choice(names + ["extra"]))
        elif how == 1:
            del n.output[rng.randrange(len(n.output))]
        elif how == 2:
            n.output[rng.randrange(len(n.output))] = ""
        else:
            n.output[rng.randrange(len(n.output))] = rng.choice(names)   # redefinition / clash
        return f"node_output({n.name}, {how})"

    def node_delete(self, m, rng):
        if not len(m.graph.node):
            return "node_delete:none"
        k = rng.randrange(len(m.graph.node))
        name = m.graph.node[k].name
        del m.graph.node[k]
        return f"node_delete({name})"

    def node_dup(self, m, rng):
        n = self._node(m, rng)
        if n is None:
            return "node_dup:none"
        new = m.graph.node.add()
        new.CopyFrom(n)
        if rng.random() < 0.5:
            new.name = n.name          # same name too
        return f"node_dup({n.name})"

    def node_swap(self, m, rng):
        g = m.graph
        if len(g.node) < 2:
            return "node_swap:none"
        i, j = rng.sample(range(len(g.node)), 2)
        a, b = type(g.node[i])(), type(g.node[j])()
        a.CopyFrom(g.node[i])
        b.CopyFrom(g.node[j])
        g.node[i].CopyFrom(b)
        g.node[j].CopyFrom(a)
        return f"node_swap({i},{j})"

    def cycle(self, m, rng):
        g = m.graph
        if len(g.node) < 2:
            return "cycle:none"
        i = rng.randrange(len(g.node) - 1)
        j = rng.randrange(i, len(g.node))
        if len(g.node[i].input) and len(g.node[j].output):
            g.node[i].input[0] = g.node[j].output[0]
        return f"cycle({i}<-{j})"

    def node_domain(self, m, rng):
        n = self._node(m, rng)
        if n is None:
            return "node_domain:none"
        n.domain = rng.choice(DOMAINS)
        return f"node_domain({n.name}, {n.domain!r})"

    def dims(self, m, rng):
        vis = self._value_infos(m)
        if not vis:
            return "dims:none"
        vi = rng.choice(vis)
        tt = vi.type.tensor_type
        how = rng.randrange(6)
        if how == 0:
            tt.ClearField("shape")
        elif how == 1:
            d = tt.shape.dim.add()
            d.dim_value = rng.choice(INTERESTING_DIMS)
        elif how == 2 and len(tt.shape.dim):
            del tt.shape.dim[rng.randrange(len(tt.shape.dim))]
        elif how == 3 and len(tt.shape.dim):
            d = tt.shape.dim[rng.randrange(len(tt.shape.dim))]
            d.dim_param = rng.choice(["", "N", "batch size", "1+x", "%", "a*b", "seq-len", "x" * 200, "é", "0"])
        elif len(tt.shape.dim):
            d = tt.shape.dim[rng.randrange(len(tt.shape.dim))]
            d.dim_value = rng.choice(INTERESTING_DIMS)
        return f"dims({vi.name}, {how})"

    def elem_type(self, m, rng):
        vis = self._value_infos(m)
        if not vis:
            return "elem_type:none"
        vi = rng.choice(vis)
        if rng.random() < 0.15:
            vi.type.sequence_type.elem_type.tensor_type.elem_type = 1
            return f"elem_type({vi.name}, sequence)"
        vi.type.tensor_type.elem_type = rng.choice(ELEM_TYPES)
        return f"elem_type({vi.name}, {vi.type.tensor_type.elem_type})"

    def init_dims(self, m, rng):
        g = m.graph
        if not len(g.initializer):
            return "init_dims:none"
        t = rng.choice(g.initializer)
        how = rng.randrange(3)
        if how == 0 and len(t.dims):
            t.dims[rng.randrange(len(t.dims))] = rng.choice(INTERESTING_DIMS)
        elif how == 1:
            t.dims.append(rng.choice(INTERESTING_DIMS))
        elif len(t.dims):
            del t.dims[rng.randrange(len(t.dims))]
        return f"init_dims({t.name}, {list(t.dims)})"

    def init_dtype(self, m, rng):
        g = m.graph
        if not len(g.initializer):
            return "init_dtype:none"
        t = rng.choice(g.initializer)
        t.data_type = rng.choice(ELEM_TYPES)
        return f"init_dtype({t.name}, {t.data_type})"

    def _mutate_tensor(self, t, rng):
        how = rng.randrange(7)
        if how == 0 and t.raw_data:
            t.raw_data = t.raw_data[:rng.randrange(len(t.raw_data))]
        elif how == 1:
            t.raw_data = t.raw_data + bytes(rng.randrange(1, 9))
        elif how == 2:
            t.float_data.extend([1.0, 2.0])
        elif how == 3:
            t.int64_data.extend([rng.choice(INTERESTING_INTS)])
        elif how == 4:
            t.string_data.append(b"abc")
        elif how == 5:
            t.dims.append(rng.choice(INTERESTING_DIMS))
        else:
            t.data_type = rng.choice(ELEM_TYPES)
        return how

    def init_data(self, m, rng):
        g = m.graph
        if not len(g.initializer):
            return "init_data:none"
        t = rng.choice(g.initializer)
        return f"init_data({t.name}, {self._mutate_tensor(t, rng)})"

    def init_external(self, m, rng):
        from onnx import TensorProto
        g = m.graph
        if not len(g.initializer):
            return "init_external:none"
        t = rng.choice(g.initializer)
        t.data_location = TensorProto.EXTERNAL
        t.ClearField("raw_data")
        del t.external_data[:]
        loc = rng.choice(["weights.bin", "../../../etc/passwd", "/etc/hostname", "/dev/zero", "", "a\x00b",
                          "x" * 300])
        for k, v in (("location", loc), ("offset", str(rng.choice([0, 3, -1, 2**40]))),
                     ("length", str(rng.choice([0, 4, 64, -5, 2**40])))):
            if rng.random() < 0.85:
                e = t.external_data.add()
                e.key, e.value = k, v
        return f"init_external({t.name}, {loc!r})"

    def init_name(self, m, rng):
        g = m.graph
        if not len(g.initializer):
            return "init_name:none"
        t = rng.choice(g.initializer)
        how = rng.randrange(3)
        if how == 0 and len(g.input):
            t.name = rng.choice(g.input).name             # initializer shadows a graph input
        elif how == 1:
            dup = g.initializer.add()
            dup.CopyFrom(t)
            self._mutate_tensor(dup, rng)                 # two initializers, one name
        else:
            t.name = rng.choice(["", t.name + "_renamed"])
        return f"init_name({t.name}, {how})"

    def graph_outputs(self, m, rng):
        from onnx import TensorProto, helper
        g = m.graph
        how = rng.randrange(4)
        if how == 0:
            del g.output[:]
        elif how == 1:
            g.output.append(helper.make_tensor_value_info("undefined_value", TensorProto.FLOAT, [1]))
        elif how == 2 and len(g.output):
            g.output.append(g.output[0])
        elif len(g.output):
            g.output[0].name = rng.choice(self._names(m))
        return f"graph_outputs({how})"

    def graph_inputs(self, m, rng):
        from onnx import ValueInfoProto
        g = m.graph
        how = rng.randrange(3)
        if how == 0 and len(g.input):
            del g.input[rng.randrange(len(g.input))]
        elif how == 1 and len(g.input):
            g.input.append(g.input[0])
        else:
            g.input.append(ValueInfoProto(name=rng.choice(["untyped", g.node[0].output[0] if len(g.node) and
                                                           len(g.node[0].output) else "z"])))
        return f"graph_inputs({how})"

    def opset(self, m, rng):
        how = rng.randrange(4)
        if how == 0:
            del m.opset_import[:]
        elif how == 1 and len(m.opset_import):
            m.opset_import[0].domain = rng.choice(DOMAINS)
        elif how == 2:
            e = m.opset_import.add()
            e.domain, e.version = rng.choice(DOMAINS), rng.choice(OPSETS)
        elif len(m.opset_import):
            m.opset_import[0].version = rng.choice(OPSETS)
        return f"opset({how})"

    def ir_version(self, m, rng):
        m.ir_version = rng.choice([0, 1, 3, 7, 10, 11, 99, -1, 2**40])
        return f"ir_version({m.ir_version})"

    def constant_node(self, m, rng):
        from onnx import helper
        t = self._tensor(rng, "cv")
        if rng.random() < 0.6:
            self._mutate_tensor(t, rng)
        attr = rng.choice(["value", "value_int", "value_ints", "value_float", "sparse_value", "value_string"])
        kwargs = {"value": t, "value_int": rng.choice(INTERESTING_INTS), "value_ints": [1, -1, 2**40],
                  "value_float": 1.5, "value_string": "s", "sparse_value": None}
        node = helper.make_node("Constant", [], ["const_out"], name="fuzz_const")
        if attr != "sparse_value":
            node.attribute.append(helper.make_attribute(attr, kwargs[attr]))
        m.graph.node.insert(0, node)
        user = self._node(m, rng)
        if user is not None and len(user.input) and user is not m.graph.node[0]:
            user.input[rng.randrange(len(user.input))] = "const_out"
        else:
            m.graph.output.add().name = "const_out"
        return f"constant_node({attr})"

    def subgraph(self, m, rng):
        from onnx import TensorProto, helper
        body = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "body", [],
                                 [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)])
        n = self._node(m, rng)
        if n is None or rng.random() < 0.5:
            node = helper.make_node(rng.choice(["If", "Loop", "Scan", "Relu"]), ["x"], ["sub_out"], name="sub",
                                    then_branch=body, else_branch=body)
            m.graph.node.append(node)
            return f"subgraph(new {node.op_type})"
        n.attribute.append(helper.make_attribute(rng.choice(["body", "then_branch", "axis"]), body))
        return f"subgraph({n.name})"

    def huge_shape(self, m, rng):
        """A node whose output (or a constant fold of it) would be enormous."""
        import numpy as np
        from onnx import TensorProto, helper, numpy_helper
        big = rng.choice([[2**40], [2**20, 2**20], [2**31, 2], [2**62], [65536, 65536, 16], [-1, 2**40],
                          [0, 2**62], [2**33]])
        shape_name = f"huge_shape_{len(m.graph.initializer)}"
        m.graph.initializer.append(numpy_helper.from_array(np.array(big, np.int64), shape_name))
        one = f"huge_one_{len(m.graph.initializer)}"
        m.graph.initializer.append(numpy_helper.from_array(np.array([1.0], np.float32), one))
        kind = rng.choice(["ConstantOfShape", "Expand", "Reshape", "Tile", "Range", "Resize", "Pad", "OneHot",
                           "EyeLike", "input"])
        out = "huge_out"
        if kind == "ConstantOfShape":
            nodes = [helper.make_node(kind, [shape_name], [out])]
        elif kind in ("Expand", "Reshape", "Tile"):
            nodes = [helper.make_node(kind, [one, shape_name], [out])]
        elif kind == "Range":
            lim = f"huge_lim_{len(m.graph.initializer)}"
            m.graph.initializer.append(numpy_helper.from_array(np.array(big[-1], np.int64), lim))
            zero = f"huge_zero_{len(m.graph.initializer)}"
            m.graph.initializer.append(numpy_helper.from_array(np.array(0, np.int64), zero))
            step = f"huge_step_{len(m.graph.initializer)}"
            m.graph.initializer.append(numpy_helper.from_array(np.array(1, np.int64), step))
            nodes = [helper.make_node(kind, [zero, lim, step], [out])]
        elif kind == "Resize":
            nodes = [helper.make_node(kind, [one, "", "", shape_name], [out])]
        elif kind == "Pad":
            nodes = [helper.make_node(kind, [one, shape_name], [out])]
        elif kind == "OneHot":
            depth = f"huge_depth_{len(m.graph.initializer)}"
            m.graph.initializer.append(numpy_helper.from_array(np.array(big[-1], np.int64), depth))
            vals = f"huge_vals_{len(m.graph.initializer)}"
            m.graph.initializer.append(numpy_helper.from_array(np.array([0.0, 1.0], np.float32), vals))
            nodes = [helper.make_node(kind, [shape_name, depth, vals], [out])]
        elif kind == "EyeLike":
            m.graph.input.append(helper.make_tensor_value_info("huge_in", TensorProto.FLOAT, big[-2:]))
            nodes = [helper.make_node(kind, ["huge_in"], [out])]
        else:
            m.graph.input.append(helper.make_tensor_value_info("huge_in", TensorProto.FLOAT, big))
            nodes = [helper.make_node(rng.choice(["Relu", "ReduceSum", "Softmax", "Transpose"]), ["huge_in"], [out])]
        m.graph.node.extend(nodes)
        m.graph.output.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, None))
        return f"huge_shape({kind}, {big})"

    def sparse(self, m, rng):
        from onnx import helper
        values = self._tensor(rng, "sp")
        indices = self._tensor(rng, "sp_idx")
        sp = helper.make_sparse_tensor(values, indices, [rng.choice(INTERESTING_DIMS)])
        m.graph.sparse_initializer.append(sp)
        n = self._node(m, rng)
        if n is not None and len(n.input):
            n.input[rng.randrange(len(n.input))] = "sp"
        return "sparse"

    def value_info(self, m, rng):
        from onnx import helper
        names = self._names(m)
        m.graph.value_info.append(helper.make_tensor_value_info(rng.choice(names), rng.choice(ELEM_TYPES[:17]),
                                                                [rng.choice(INTERESTING_DIMS)]))
        return "value_info"

    def local_function(self, m, rng):
        from onnx import helper
        f = helper.make_function("local.fn", "MyRelu", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                                 [helper.make_opsetid("", 17)])
        m.functions.append(f)
        n = self._node(m, rng)
        if n is not None:
            n.op_type, n.domain = "MyRelu", "local.fn"
        return "local_function"


def _byte_mutation(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    b = bytearray(data)
    how = rng.randrange(8)
    if not b:
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 16))), "bytes:random"
    p = rng.randrange(len(b))
    if how == 0:
        for _ in range(rng.randint(1, 8)):
            q = rng.randrange(len(b))
            b[q] ^= 1 << rng.randrange(8)
        return bytes(b), "bytes:bitflip"
    if how == 1:
        return bytes(b[:p]), f"bytes:truncate({p})"
    if how == 2:
        ins = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        return bytes(b[:p] + ins + b[p:]), f"bytes:insert({p})"
    if how == 3:
        q = min(len(b), p + rng.randint(1, 32))
        return bytes(b[:p] + b[q:]), f"bytes:delete({p},{q})"
    if how == 4:
        q = min(len(b), p + rng.randint(1, 64))
        return bytes(b[:q] + b[p:q] + b[q:]), f"bytes:duplicate({p},{q})"
    if how == 5:
        b[p] = rng.choice([0x00, 0xFF, 0x7F, 0x80, 0x01])
        return bytes(b), f"bytes:set({p})"
    if how == 6:
        varint = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"
        return bytes(b[:p] + varint + b[p + 1:]), f"bytes:varint({p})"
    q = rng.randrange(len(b))
    b[p], b[q] = b[q], b[p]
    return bytes(b), "bytes:swap"


# ================================================================================================
# MLIR mutation
# ================================================================================================
_MLIR_TOKEN = re.compile(r"""(\s+|"(?:[^"\\\n]|\\.)*"|%[\w$.\-]+(?:\#\d+)?|\^[\w$.\-]+|0x[0-9A-Fa-f]+
    |[-+]?\d+\.\d*(?:[eE][-+]?\d+)?|[-+]?\d+|[A-Za-z_][\w$.]*|->|\{-\#|\#-\}|.)""", re.X | re.S)
INTERESTING_NUMBERS = ["0", "-1", "1", "2", "-0.0", "1e400", "-1e400", "1.5e-320", "nan", "inf", "0x", "0x0",
                       "0xFFFFFFFFFFFFFFFFFFFF", "0x7FC00000", "2147483648", "9223372036854775807",
                       "9223372036854775808", "-9223372036854775809", "18446744073709551616",
                       "99999999999999999999999999999999", "1" + "0" * 400, "007", "+3", "3.", "1e", "--1"]
BAD_TYPES = ["tensor<-1xf32>", "tensor<4xf33>", "tensor<?xf32>", "tensor<99999999999x99999999999xf32>",
             "tensor<4294967296x4294967296x4294967296xf32>", "memref<4xi1>", "index", "i7", "f32",
             'tensor<4x4xf32, "a,b">', 'tensor<?x?xf32, "N">', 'tensor<?xf32, "">', 'tensor<?xf32, "1+">',
             'tensor<?xf32, "N*N+1">', "tensor<xf32>", "tensor<0x0xf32>", "tensor<f32>", "tensor<4xbf16>",
             "tensor<4xi1>", "tensor<4xui8>", "memref<?xf32>", "(tensor<4xf32>) -> tensor<4xf32>", "none",
             "tensor<1x" * 200 + "f32>"]
PUNCT = ["{", "}", "(", ")", "[", "]", "<", ">", '"', ",", ":", "=", "->", "%", "^", "#", "{-#", "#-}", "\\"]
UNICODE = ["é", "\u202e", "\x00", "\U0001d7d8", "\ud800", "\ufeff", "\u00a0", "ﬁ", "\x7f", "\r", "\t"]
ODD_OPS = ['"graph.nonexistent"', '"graph."', '""', '"func.func"', '"builtin.module"', '"func.return"',
           '"graph.constant"', '"structured.kernel"', '"loop.for"', '"graph.add\\00"', '"\\ff"', '"a\\"b"']
ODD_ATTRS = ["dense<1.0> : tensor<100000000x100000000xf32>", "dense<1> : tensor<4294967296xi8>",
             "dense<[1, 2]> : tensor<3xf32>", 'dense<"0x0000"> : tensor<2xf32>', 'dense<"0xZZ"> : tensor<1xi8>',
             "dense<[[1], [2, 3]]> : tensor<2x2xi32>", "dense<> : tensor<2xf32>", "dense<300> : tensor<1xi8>",
             "dense<true> : tensor<2xi1>", "dense<1e39> : tensor<1xf32>", "array<i64: 1, 2, 99999999999999999999>",
             "array<f32: 1e400>", "array<i1: true, 2>", "array<i9: 1>", "dense_resource<missing> : tensor<4xf32>",
             "dense_resource<__elided__> : tensor<4xf32>", "0x8000 : f16", "0x1FFFF : f16", "1.5 : i32",
             "3 : tensor<4xf32>", "[" * 3000 + "]" * 3000, "[" * 50 + "1" + "]" * 50, '"\\zz"', '"\\ff"']


def _mlir_tokens(text: str) -> list[str]:
    return _MLIR_TOKEN.findall(text)


class MlirMutator:
    """Token-level mutation of printed IR modules."""

    def __init__(self, seeds: list[tuple[str, bytes]]):
        self.seeds = [(name, data.decode("utf-8", "replace")) for name, data in seeds]
        self.tokens = {name: _mlir_tokens(text) for name, text in self.seeds}
        self.ops = None

    def _op_names(self) -> list[str]:
        """The op names of the seeds (not the live registry: a case index keeps meaning the same text)."""
        if self.ops is None:
            names = {t for toks in self.tokens.values() for t in toks if re.fullmatch(r'"[a-z_]+\.[a-z_0-9.]+"', t)}
            self.ops = sorted(names) + ODD_OPS
        return self.ops

    def case(self, rng: random.Random) -> tuple[bytes, str]:
        name, _ = rng.choice(self.seeds)
        toks = list(self.tokens[name])
        steps = [name]
        for _ in range(rng.randint(1, 4)):
            steps.append(self.mutate(toks, rng))
        return "".join(toks).encode("utf-8", "surrogatepass"), " / ".join(steps)

    def mutate(self, toks: list[str], rng: random.Random) -> str:
        if not toks:
            toks.append(rng.choice(PUNCT))
            return "empty"
        solid = [i for i, t in enumerate(toks) if not t.isspace()] or [0]
        i = rng.choice(solid)
        how = rng.randrange(16)
        if how == 0:
            del toks[i]
            return f"delete({i})"
        if how == 1:
            toks.insert(i, toks[i])
            return f"duplicate({i})"
        if how == 2:
            j = rng.choice(solid)
            toks[i], toks[j] = toks[j], toks[i]
            return f"swap({i},{j})"
        if how == 3:
            nums = [k for k in solid if re.fullmatch(r"[-+]?(\d|0x)[\w.+\-]*", toks[k])] or [i]
            k = rng.choice(nums)
            toks[k] = rng.choice(INTERESTING_NUMBERS)
            return f"number({k}->{toks[k][:20]})"
        if how == 4:
            toks.insert(i, rng.choice(PUNCT))
            return f"punct({i})"
        if how == 5:
            names = [k for k in solid if toks[k].startswith('"') and "." in toks[k]] or [i]
            k = rng.choice(names)
            toks[k] = rng.choice(self._op_names())
            return f"op_name({k}->{toks[k]})"
        if how == 6:
            types = [k for k in solid if toks[k] in ("tensor", "memref", "index") or re.fullmatch(
                r"(f|i|bf|ui)\d+", toks[k])] or [i]
            k = rng.choice(types)
            j = k
            if toks[k] in ("tensor", "memref"):       # the whole tensor<...> spans to the next '>'
                while j < len(toks) - 1 and toks[j] != ">":
                    j += 1
            toks[k:j + 1] = [rng.choice(BAD_TYPES)]
            return f"type({k})"
        if how == 7:
            toks.insert(i, rng.choice(UNICODE))
            return f"unicode({i})"
        if how == 8:
            k = rng.randrange(len(toks))
            del toks[k:]
            return f"truncate({k})"
        if how == 9:
            depth = rng.choice([100, 1000, 5000, 20000])
            opener = rng.choice(["[", "(", "{", "<", "dense<", "array<i64:", "tensor<", "%0 = \"graph.add\"("])
            toks.insert(i, opener * depth)
            return f"nest({opener!r}x{depth})"
        if how == 10:
            j = rng.choice(solid)
            lo, hi = sorted((i, j))
            hi = min(hi, lo + 60)
            k = rng.randrange(len(toks))
            toks[k:k] = toks[lo:hi + 1]
            return f"splice({lo}:{hi}->{k})"
        if how == 11:
            vals = [k for k in solid if toks[k].startswith("%")] or [i]
            k = rng.choice(vals)
            toks[k] = rng.choice(["%undefined", "%0#5", "%0#99999999999999999999", "%arg0", "%", "%-",
                                  "%0", "%1", "%arg99", toks[rng.choice(vals)]])
            return f"value({k})"
        if how == 12:
            text = "".join(toks)
            lines = text.split("\n")
            a, b = rng.randrange(len(lines)), rng.randrange(len(lines))
            op = rng.randrange(3)
            if op == 0:
                del lines[a]
            elif op == 1:
                lines.insert(a, lines[b])
            else:
                lines[a], lines[b] = lines[b], lines[a]
            toks[:] = _mlir_tokens("\n".join(lines))
            return f"line({op},{a},{b})"
        if how == 13:
            attrs = [k for k in solid if toks[k] == "=" and k + 1 < len(toks)] or [i]
            k = rng.choice(attrs)
            j = k + 1
            while j < len(toks) and toks[j].isspace():
                j += 1
            end = j
            depth = 0
            while end < len(toks):       # replace one attribute value: up to ',' or '}' at depth 0
                t = toks[end]
                if t in ("[", "(", "<", "{"):
                    depth += 1
                elif t in ("]", ")", ">", "}"):
                    if depth == 0:
                        break
                    depth -= 1
                elif t == "," and depth == 0:
                    break
                end += 1
            toks[j:end] = [rng.choice(ODD_ATTRS)]
            return f"attr({j})"
        if how == 14:
            t = toks[i]
            if len(t) > 1:
                c = rng.randrange(len(t))
                toks[i] = t[:c] + chr(rng.choice([rng.randrange(32, 127), rng.randrange(0, 0x800)])) + t[c + 1:]
            return f"char({i})"
        quote = [k for k in solid if toks[k].startswith('"')] or [i]
        k = rng.choice(quote)
        toks[k] = toks[k][:-1] if rng.random() < 0.5 else toks[k] + '"'
        return f"quote({k})"


# ================================================================================================
# running cases
# ================================================================================================
def case_rng(target: str, seed: int, index: int) -> random.Random:
    return random.Random(f"{target}:{seed}:{index}")


class Cases:
    """The case source of a run: mutations ``(seed, index)`` of a corpus, or the files of a directory."""

    def __init__(self, target: str, seed: int = 0, corpus: str | None = None, replay: str | None = None):
        self.target, self.seed = target, seed
        self.files: list[tuple[str, bytes]] | None = None
        if replay is not None:
            d = Path(replay)
            self.files = [(f.name, f.read_bytes()) for f in sorted(d.glob("*" + SUFFIX[target]))] if d.is_dir() \
                else [(d.name, d.read_bytes())]
            return
        seeds = load_corpus(target, corpus)
        self.mutator = OnnxMutator(seeds) if target == "onnx" else MlirMutator(seeds)

    def __len__(self) -> int:
        return len(self.files) if self.files is not None else sys.maxsize

    def get(self, index: int) -> tuple[bytes, str]:
        if self.files is not None:
            name, data = self.files[index]
            return data, f"file {name}"
        return self.mutator.case(case_rng(self.target, self.seed, index))


def run_case(target: str, data: bytes, native: bool = False) -> BaseException | None:
    if target == "onnx":
        return check_onnx(data, native)
    return check_mlir(data.decode("utf-8", "surrogatepass"))


def _alarm(seconds: float):
    """Raises ``_Timeout`` in this (main) thread after ``seconds`` of CPU time: a busy shared
    machine does not turn a slow case into a hang.  (A case that waits without using CPU is
    caught by the wall-clock deadline of the worker's parent.)"""
    import signal
    if seconds <= 0 or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return None

    def handler(signum, frame):
        raise _Timeout(f"case ran past {seconds} s of CPU time")

    old = signal.signal(signal.SIGPROF, handler)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    return old


def _disarm(old) -> None:
    import signal
    if old is not None:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)


def run_inprocess(cases: Cases, start: int, stop: int, timeout: float = 10.0, native_every: int = 0,
                  on_begin: Callable[[int], None] | None = None) -> list[Finding]:
    """Runs cases ``start..stop-1`` in this process (a crash ends it; a hang is caught by SIGALRM
    when this is the main thread)."""
    import warnings
    warnings.simplefilter("ignore")
    findings = []
    for index in range(start, min(stop, len(cases))):
        if on_begin is not None:
            on_begin(index)
        data, mutation = cases.get(index)
        native = bool(native_every) and index % native_every == 0
        old = _alarm(timeout)
        try:
            err = run_case(cases.target, data, native)
        except _Timeout as e:
            err = None
            findings.append(Finding(cases.target, index, "hang", "Timeout", str(e), "?", mutation, "",
                                    base64.b64encode(data).decode()))
        finally:
            _disarm(old)
        if err is not None:
            findings.append(_exception_finding(cases.target, err, mutation, data, index))
    return findings


# ---- worker processes ----------------------------------------------------------------------------
def _worker_main(args) -> int:
    """``--worker``: runs a range of cases, reporting on fd 3-like channel (the original stdout)."""
    import faulthandler
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)                         # anything tensorforge prints goes to stderr, not the protocol
    sys.stdout = sys.stderr
    faulthandler.enable()
    if args.mem_limit_mb:
        import resource
        limit = args.mem_limit_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    cases = Cases(args.target, args.seed, args.corpus, args.replay)

    def begin(i: int) -> None:
        out.write(f"B {i}\n")

    for f in run_inprocess(cases, args.start, args.stop, args.timeout, args.native_every, begin):
        out.write("F " + json.dumps(asdict(f)) + "\n")
    out.write("S " + json.dumps(OUTCOMES) + "\n")
    out.write("E\n")
    out.flush()
    return 0


def run_isolated(target: str, seed: int, start: int, stop: int, corpus: str | None = None,
                 replay: str | None = None, timeout: float = 10.0, native_every: int = 0,
                 mem_limit_mb: int = 4096, progress: Callable[[int], None] | None = None,
                 cases: Cases | None = None) -> tuple[int, list[Finding]]:
    """Runs cases ``start..stop-1`` in worker processes: a crash or hang kills one worker, is
    recorded against its case, and a new worker resumes after it.  Returns (cases run, findings)."""
    findings: list[Finding] = []
    i, done = start, 0
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONFAULTHANDLER="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    while i < stop:
        cmd = [sys.executable, "-m", "tensorforge.testing.fuzz_parsers", "--worker", "--target", target,
               "--seed", str(seed), "--start", str(i), "--stop", str(stop), "--timeout", str(timeout),
               "--native-every", str(native_every), "--mem-limit-mb", str(mem_limit_mb)]
        if corpus:
            cmd += ["--corpus", str(corpus)]
        if replay:
            cmd += ["--replay", str(replay)]
        import tempfile
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env, cwd=str(REPO_ROOT))
            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ)
            current, finished, deadline = None, False, time.monotonic() + 120 + timeout   # startup: imports
            buf = b""
            while True:
                wait = deadline - time.monotonic()
                events = sel.select(max(0.0, wait)) if wait > 0 else []
                if not events:
                    if time.monotonic() >= deadline:
                        proc.kill()
                        proc.wait()
                        break
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if line.startswith(b"B "):
                        if current is not None:
                            done += 1
                            if progress:
                                progress(1)
                        current = int(line[2:])
                        deadline = time.monotonic() + WALL_FACTOR * timeout + 30
                    elif line.startswith(b"F "):
                        findings.append(Finding(**json.loads(line[2:])))
                    elif line.startswith(b"S "):
                        for k, v in json.loads(line[2:]).items():
                            with _STATS_LOCK:
                                STATS[k] = STATS.get(k, 0) + v
                    elif line == b"E":
                        finished = True
            sel.close()
            rc = proc.wait()
            proc.stdout.close()
            if finished:
                if current is not None:
                    done += 1
                    if progress:
                        progress(1)
                break
            err.seek(0)
            stderr = err.read().decode("utf-8", "replace")[-4000:]
        if current is None:
            raise RuntimeError(f"fuzz worker failed to start (exit {rc}):\n{stderr}")
        timed_out = rc in (-9,) and time.monotonic() >= deadline
        src = cases or Cases(target, seed, corpus, replay)
        data, mutation = src.get(current)
        if timed_out:
            findings.append(Finding(target, current, "hang", "Timeout",
                                    f"no answer within {WALL_FACTOR * timeout + 30:.0f} s (wall clock)",
                                    "?", mutation, stderr, base64.b64encode(data).decode()))
        else:
            sig = -rc if rc < 0 else 0
            what = f"signal {sig}" if sig else f"exit {rc}"
            findings.append(Finding(target, current, "crash", what, stderr.strip().splitlines()[-1] if stderr.strip()
                                    else what, _crash_where(stderr), mutation, stderr,
                                    base64.b64encode(data).decode()))
        done += 1
        if progress:
            progress(1)
        i = current + 1
    return done, findings


# The worker times a case in CPU seconds; its parent gives up on a silent worker after this many
# times the timeout in wall-clock seconds (plus 30 s): a deadlock, or a machine far too busy.
WALL_FACTOR = 6
STATS: dict[str, int] = {}
"""The outcomes reported by the worker processes of this process's runs."""
_STATS_LOCK = threading.Lock()


def _crash_where(stderr: str) -> str:
    frames = re.findall(r'File "([^"]*tensorforge/[^"]*)", line (\d+) in (\w+)', stderr)
    if frames:
        path, line, fn = frames[0]    # faulthandler prints the innermost frame first
        return f"{path[path.rfind('tensorforge/'):]}:{line} in {fn}"
    return "?"


def run_campaign(target: str, iterations: int, seed: int = 0, corpus: str | None = None, jobs: int = 1,
                 timeout: float = 10.0, native_every: int = 0, mem_limit_mb: int = 4096, isolate: bool = True,
                 replay: str | None = None, verbose: bool = False) -> tuple[int, list[Finding]]:
    """Runs ``iterations`` cases (or every file of ``replay``) split over ``jobs`` workers."""
    cases = Cases(target, seed, corpus, replay)
    total = min(iterations, len(cases)) if replay is None else len(cases)
    if not isolate:
        return total, run_inprocess(cases, 0, total, timeout, native_every)
    jobs = max(1, min(jobs, total or 1))
    bounds = [(total * k // jobs, total * (k + 1) // jobs) for k in range(jobs)]
    results: list[tuple[int, list[Finding]]] = [(0, [])] * jobs
    count = [0]
    lock = threading.Lock()
    t0 = time.monotonic()

    def progress(n: int) -> None:
        with lock:
            count[0] += n
            if verbose and count[0] % 1000 == 0:
                print(f"  {count[0]}/{total} cases, {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)

    def work(k: int) -> None:
        lo, hi = bounds[k]
        results[k] = run_isolated(target, seed, lo, hi, corpus, replay, timeout, native_every, mem_limit_mb,
                                  progress, cases)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(n for n, _ in results), [f for _, fs in results for f in fs]


# ================================================================================================
# minimisation and the findings corpus
# ================================================================================================
def _same(target: str, data: bytes, key: str, timeout: float) -> bool:
    old = _alarm(timeout)
    try:
        err = run_case(target, data)
    except _Timeout:
        return key.startswith("hang:")
    finally:
        _disarm(old)
    if err is None:
        return False
    return f"exception:{type(err).__name__}@{_where(err.__traceback__)}" == key


def minimise(finding: Finding, timeout: float = 10.0, budget: int = 300) -> bytes:
    """A smaller input that still fails the same way (same exception type and place)."""
    data, key, target = finding.data, finding.key, finding.target
    if finding.kind != "exception":
        return data
    tries = [0]

    def ok(candidate: bytes) -> bool:
        tries[0] += 1
        return tries[0] <= budget and _same(target, candidate, key, timeout)

    if target == "mlir":
        units = data.decode("utf-8", "surrogatepass").split("\n")
        units = _ddmin(units, lambda u: ok("\n".join(u).encode("utf-8", "surrogatepass")))
        return "\n".join(units).encode("utf-8", "surrogatepass")
    import onnx
    try:
        model = onnx.load_from_string(data)
    except Exception:   # noqa: BLE001 - byte-level junk: keep as is
        return data
    for field_path in (("graph", "node"), ("graph", "initializer"), ("graph", "value_info"), ("graph", "output"),
                       ("graph", "sparse_initializer"), ("functions",)):
        parent = model
        for p in field_path[:-1]:
            parent = getattr(parent, p)
        repeated = getattr(parent, field_path[-1])
        k = len(repeated) - 1
        while k >= 0:
            saved = [type(x)() for x in repeated]
            for s, x in zip(saved, repeated):
                s.CopyFrom(x)
            del repeated[k]
            if not ok(model.SerializeToString()):
                del repeated[:]
                repeated.extend(saved)
            k -= 1
    for node in model.graph.node:
        k = len(node.attribute) - 1
        while k >= 0:
            saved = [type(a)() for a in node.attribute]
            for s, a in zip(saved, node.attribute):
                s.CopyFrom(a)
            del node.attribute[k]
            if not ok(model.SerializeToString()):
                del node.attribute[:]
                node.attribute.extend(saved)
            k -= 1
    smaller = model.SerializeToString()
    return smaller if _same(target, smaller, key, timeout) else data


def _ddmin(units: list, ok: Callable[[list], bool]) -> list:
    n = 2
    while len(units) >= 2:
        chunk = math.ceil(len(units) / n)
        reduced = False
        for k in range(0, len(units), chunk):
            candidate = units[:k] + units[k + chunk:]
            if candidate and ok(candidate):
                units, n, reduced = candidate, max(n - 1, 2), True
                break
        if not reduced:
            if n >= len(units):
                break
            n = min(len(units), n * 2)
    return units


def save_findings(findings: list[Finding], directory: str | os.PathLike, minimise_inputs: bool = True) -> list[Path]:
    """One file per distinct finding key (the smallest input), named after the key's hash."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    best: dict[str, Finding] = {}
    for f in findings:
        if f.key not in best or len(f.data) < len(best[f.key].data):
            best[f.key] = f
    out = []
    for key, f in sorted(best.items()):
        data = minimise(f) if minimise_inputs else f.data
        name = re.sub(r"[^A-Za-z0-9]+", "_", f"{f.error}_{f.where.split(' in ')[-1]}")[:60]
        path = directory / f"{name}_{hashlib.sha1(key.encode()).hexdigest()[:8]}{SUFFIX[f.target]}"
        path.write_bytes(data)
        out.append(path)
    return out


def report(findings: list[Finding]) -> str:
    groups: dict[str, list[Finding]] = {}
    for f in findings:
        groups.setdefault(f.key, []).append(f)
    lines = [f"{len(findings)} finding(s), {len(groups)} distinct"]
    for key, fs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        f = min(fs, key=lambda x: len(x.data))
        lines.append(f"  {len(fs):5d} x {key}\n         {f.message[:300]!r}\n         e.g. case #{f.index}: "
                     f"{f.mutation[:200]}")
    return "\n".join(lines)


# ================================================================================================
# command line
# ================================================================================================
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tensorforge.testing.fuzz_parsers", description=__doc__.split("\n")[0])
    ap.add_argument("--target", choices=TARGETS, default="onnx")
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", help="seed directory (default tests/fuzz_corpus/<target>)")
    ap.add_argument("--replay", help="run every file of this directory (or this one file) instead of mutations")
    ap.add_argument("--replay-case", type=int, help="run case INDEX in this process and print its traceback")
    ap.add_argument("--dump-case", help="with --replay-case: write the case's input to this file")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=10.0, help="CPU seconds per case before it counts as a hang")
    ap.add_argument("--native-every", type=int, default=0, help="also compile every K-th case for target='cpu'")
    ap.add_argument("--mem-limit-mb", type=int, default=4096, help="address-space limit of each worker")
    ap.add_argument("--in-process", action="store_true", help="no worker processes (a crash ends the run)")
    ap.add_argument("--save-findings", help="write one minimised input per distinct finding here")
    ap.add_argument("--write-seeds", help="write the built-in seed corpus under this directory and exit")
    ap.add_argument("--json", help="write all findings as JSON here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--stop", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        return _worker_main(args)
    if args.write_seeds:
        for p in write_seed_corpus(args.write_seeds):
            print(p, p.stat().st_size)
        return 0
    if args.replay_case is not None:
        cases = Cases(args.target, args.seed, args.corpus, args.replay)
        data, mutation = cases.get(args.replay_case)
        print(f"case #{args.replay_case}: {mutation} ({len(data)} bytes)")
        if args.dump_case:
            Path(args.dump_case).write_bytes(data)
        err = run_case(args.target, data, bool(args.native_every))
        if err is None:
            print("ok: a result or a TensorforgeError")
            return 0
        traceback.print_exception(type(err), err, err.__traceback__)
        return 1
    t0 = time.monotonic()
    n, findings = run_campaign(args.target, args.iterations, args.seed, args.corpus, args.jobs, args.timeout,
                               args.native_every, args.mem_limit_mb, not args.in_process, args.replay, verbose=True)
    print(f"{args.target}: {n} cases in {time.monotonic() - t0:.1f} s (seed {args.seed})")
    stats = STATS if not args.in_process else OUTCOMES
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(stats.items(), key=lambda kv: -kv[1])))
    print(report(findings))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(f) for f in findings], indent=1))
    if args.save_findings and findings:
        for p in save_findings(findings, args.save_findings):
            print("saved", p)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
