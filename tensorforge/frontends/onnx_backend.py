"""``onnx.backend.base.Backend`` over ``tensorforge.compile``: runs the ONNX conformance suite.

``prepare`` is ``tensorforge.compile(model)`` and ``run`` is calling the compiled model, so the
suite measures the public API itself.  What some cases need beyond a static compile happens
there (``tensorforge/specialize.py``): a model whose shape-like operands (Reshape's shape,
Slice's starts, TopK's K, ...) are model *inputs*, or whose symbolic dims native code needs as
numbers, compiles one specialisation per distinct value/shape on the call; bf16 tensors go in
and come out as ml_dtypes ``bfloat16`` arrays.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from .. import api
from ..errors import TensorforgeError

__all__ = ["TensorforgeBackend", "TensorforgeRep", "check_node_case", "prepare", "run_model", "run_node",
           "run_node_cases", "supports_device"]


def _data_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


class TensorforgeRep(BackendRep):
    """A prepared model: the ``CompiledModel`` that ``tensorforge.compile`` returned."""

    def __init__(self, model: onnx.ModelProto, compiled: api.CompiledModel):
        self.model = model
        self.compiled = compiled
        self.input_names = [vi.name for vi in _data_inputs(model)]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            arrays = [inputs[n] for n in self.input_names]
        else:
            arrays = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
        outs = self.compiled(*arrays)
        return tuple(outs) if isinstance(outs, tuple) else (outs,)   # a list is one sequence output


class TensorforgeBackend(Backend):
    """The ONNX backend API: ``prepare``, ``run_model``, ``run_node``, ``supports_device``.

    ``prepare(model, target=..., threads=...)`` picks the compile target (the default is the
    reference interpreter) and, for native targets, the threads a model runs on.
    """

    default_target = "interpreter"

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> TensorforgeRep:
        if not cls.supports_device(device):
            raise TensorforgeError(f"device '{device}' is not supported (tensorforge runs on CPU)")
        target = kwargs.get("target", cls.default_target)
        return TensorforgeRep(model, api.compile(model, target=target, threads=kwargs.get("threads")))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None, **kwargs: Any):
        """Runs one node: its inputs' types come from the arrays, its opset from ``opset_version``."""
        arrays = [np.asarray(x) for x in (inputs.values() if isinstance(inputs, dict) else inputs)]
        names = [n for n in node.input if n]
        graph_inputs = [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                        for n, a in zip(names, arrays)]
        graph_outputs = []
        for i, n in enumerate(node.output):
            if outputs_info is not None and i < len(outputs_info):
                dt, shape = outputs_info[i]
                graph_outputs.append(onnx.helper.make_tensor_value_info(
                    n, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dt)), shape))
            else:
                graph_outputs.append(onnx.helper.make_empty_tensor_value_info(n))
        graph = onnx.helper.make_graph([node], f"run_node_{node.op_type}", graph_inputs, graph_outputs)
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
        return cls.run_model(model, arrays, device, **kwargs)


def check_node_case(case, backend: type[Backend] = TensorforgeBackend, **options: Any) -> tuple[str, str]:
    """Runs one ONNX node test case: ``("pass" | "fail" | "skip", detail)``.

    ``options`` go to ``backend.prepare`` (``target="cpu"`` runs the case through native code).
    Outputs are compared as the ONNX backend test runner does; an ``UnsupportedOpError`` is a
    skip, a wrong result or any other exception a failure.
    """
    from onnx import TensorProto, numpy_helper
    from onnx.backend.test.runner import Runner

    from ..errors import UnsupportedOpError

    def array(x):
        if isinstance(x, list) or x is None:      # a sequence (list), an empty optional (None)
            return x if x is None else [array(e) for e in x]
        return numpy_helper.to_array(x) if isinstance(x, TensorProto) else np.asarray(x)
    try:
        rep = backend.prepare(case.model, "CPU", **options)
        for inputs, ref_outputs in case.data_sets:
            outs = rep.run([array(x) for x in inputs])
            Runner.assert_similar_outputs(*_flat_pair([array(x) for x in ref_outputs], list(outs)),
                                          rtol=case.rtol, atol=case.atol)
    except UnsupportedOpError as e:
        return "skip", str(e)
    except AssertionError as e:
        text = str(e).strip()
        return "fail", text.splitlines()[0] if text else "assertion failed"
    except Exception as e:  # noqa: BLE001 - a conformance run reports every kind of failure
        return "fail", f"{type(e).__name__}: {e}"
    return "pass", ""


def _flat_pair(ref: list, outs: list) -> tuple[list, list]:
    """Sequence outputs (lists) compared element by element: both sides flattened, after checking
    that the lists match in length (the runner's own recursion into lists breaks on 0-d elements)."""
    flat_ref, flat_out = [], []
    for r, o in zip(ref, outs):
        if isinstance(r, list) or isinstance(o, list):
            if not (isinstance(r, list) and isinstance(o, list)):
                raise AssertionError(f"expected a {type(r).__name__}, got a {type(o).__name__}")
            if len(r) != len(o):
                raise AssertionError(f"a sequence output has {len(o)} elements, expected {len(r)}")
            fr, fo = _flat_pair(r, o)
            flat_ref += fr
            flat_out += fo
        else:
            flat_ref.append(r)
            flat_out.append(o)
    if len(ref) != len(outs):
        raise AssertionError(f"{len(outs)} outputs, expected {len(ref)}")
    return flat_ref, flat_out


# The cases a forked worker of ``run_node_cases`` reads (inherited from the parent, not pickled).
_POOL_CASES: list = []
_POOL_OPTIONS: dict[str, Any] = {}


def _check_pooled(index: int) -> tuple[str, str, str]:
    case = _POOL_CASES[index]
    return (case.name, *check_node_case(case, **_POOL_OPTIONS))


def run_node_cases(cases: Sequence, jobs: int = 1, **options: Any) -> list[tuple[str, str, str]]:
    """``(name, status, detail)`` of every case in ``cases`` order, from ``jobs`` processes.

    A native conformance run spends most of its time compiling ~1,400 small libraries, one gcc run
    each; ``jobs`` worker processes (forked, so the cases are not rebuilt or pickled) compile
    side by side and share the on-disk compile cache.  With several jobs each native model runs
    on one thread unless ``threads`` is given.  Fork before any OpenMP code ran in this process
    (GNU libgomp is not fork-safe); with ``jobs=1`` the cases run here.
    """
    if jobs <= 1 or len(cases) < 2:
        return [(c.name, *check_node_case(c, **options)) for c in cases]
    import multiprocessing

    if options.get("target", TensorforgeBackend.default_target) != "interpreter":
        options.setdefault("threads", 1)
    global _POOL_CASES, _POOL_OPTIONS
    _POOL_CASES, _POOL_OPTIONS = list(cases), dict(options)
    try:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            return pool.map(_check_pooled, range(len(cases)), chunksize=4)
    finally:
        _POOL_CASES, _POOL_OPTIONS = [], {}


prepare = TensorforgeBackend.prepare
run_model = TensorforgeBackend.run_model
run_node = TensorforgeBackend.run_node
supports_device = TensorforgeBackend.supports_device
