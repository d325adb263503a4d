"""Seed inputs for ``fuzz_parsers``: small ONNX models and printed IR modules.

The ONNX seeds are built with ``onnx.helper`` (no torch, no download) so that they cover what the
mutator should reach: conv, matmul, attention (dynamic ``dim_param`` shapes with the
``Shape -> Gather -> Concat -> Reshape`` chain), shape arithmetic, initializers of several element
types stored as ``raw_data`` and as typed fields, a ``Constant`` node, an external-data reference
and a subgraph attribute.  The IR seeds are those models printed at the graph, structured and loop
levels.  ``python -m tensorforge.testing.fuzz_parsers --write-seeds DIR`` writes both.
"""
from __future__ import annotations

import numpy as np


def _onnx():
    import onnx
    from onnx import TensorProto, helper
    return onnx, TensorProto, helper


def _rand(rng, shape, dtype=np.float32):
    return (rng.standard_normal(shape) * 0.5).astype(dtype)


def onnx_seed_models() -> dict[str, "onnx.ModelProto"]:  # noqa: F821
    """name -> ModelProto; every one but ``external`` and ``subgraph`` imports cleanly."""
    onnx, TP, h = _onnx()
    from onnx import numpy_helper as nh
    rng = np.random.default_rng(0)
    op = lambda v: [h.make_opsetid("", v)]  # noqa: E731
    models = {}

    # conv: Conv + Relu + MaxPool + GlobalAveragePool + Flatten + Gemm (static shapes)
    g = h.make_graph(
        [h.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1],
                     kernel_shape=[3, 3]),
         h.make_node("Relu", ["c"], ["r"], name="relu"),
         h.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
         h.make_node("GlobalAveragePool", ["p"], ["gp"], name="gap"),
         h.make_node("Flatten", ["gp"], ["f"], name="flatten", axis=1),
         h.make_node("Gemm", ["f", "w2", "b2"], ["y"], name="fc", transB=1, alpha=1.0)],
        "conv", [h.make_tensor_value_info("x", TP.FLOAT, [1, 3, 8, 8])],
        [h.make_tensor_value_info("y", TP.FLOAT, [1, 5])],
        [nh.from_array(_rand(rng, (4, 3, 3, 3)), "w"), nh.from_array(_rand(rng, (4,)), "b"),
         nh.from_array(_rand(rng, (5, 4)), "w2"), nh.from_array(_rand(rng, (5,)), "b2")])
    models["conv"] = h.make_model(g, opset_imports=op(17))

    # matmul: dynamic batch, MatMul + Add + Tanh + Softmax, a value_info
    g = h.make_graph(
        [h.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
         h.make_node("Add", ["m", "b"], ["a"], name="add"),
         h.make_node("Tanh", ["a"], ["t"], name="tanh"),
         h.make_node("Softmax", ["t"], ["y"], name="softmax", axis=-1)],
        "matmul", [h.make_tensor_value_info("x", TP.FLOAT, ["N", 16])],
        [h.make_tensor_value_info("y", TP.FLOAT, ["N", 8])],
        [nh.from_array(_rand(rng, (16, 8)), "w"), nh.from_array(_rand(rng, (8,)), "b")],
        value_info=[h.make_tensor_value_info("m", TP.FLOAT, ["N", 8])])
    models["matmul"] = h.make_model(g, opset_imports=op(13))

    # attention: x[batch, seq, 16] -> q/k/v, heads via Shape/Gather/Concat/Reshape, LayerNorm
    d, heads = 16, 2
    nodes = [h.make_node("MatMul", ["x", f"w{n}"], [n], name=f"proj_{n}") for n in "qkv"]
    nodes += [h.make_node("Shape", ["x"], ["shp"], name="shape"),
              h.make_node("Gather", ["shp", "i0"], ["bsz"], name="g0", axis=0),
              h.make_node("Gather", ["shp", "i1"], ["seq"], name="g1", axis=0),
              h.make_node("Unsqueeze", ["bsz", "ax0"], ["bsz1"], name="u0"),
              h.make_node("Unsqueeze", ["seq", "ax0"], ["seq1"], name="u1"),
              h.make_node("Concat", ["bsz1", "seq1", "hd"], ["hshape"], name="cat", axis=0)]
    for n in "qkv":
        nodes += [h.make_node("Reshape", [n, "hshape"], [f"{n}4"], name=f"split_{n}"),
                  h.make_node("Transpose", [f"{n}4"], [f"{n}t"], name=f"tr_{n}",
                              perm=[0, 2, 3, 1] if n == "k" else [0, 2, 1, 3])]
    nodes += [h.make_node("MatMul", ["qt", "kt"], ["s"], name="scores"),
              h.make_node("Div", ["s", "scale"], ["ss"], name="scale"),
              h.make_node("Softmax", ["ss"], ["pr"], name="probs", axis=-1),
              h.make_node("MatMul", ["pr", "vt"], ["o"], name="ctx"),
              h.make_node("Transpose", ["o"], ["ot"], name="tr_o", perm=[0, 2, 1, 3]),
              h.make_node("Concat", ["bsz1", "seq1", "dm"], ["oshape"], name="cat_o", axis=0),
              h.make_node("Reshape", ["ot", "oshape"], ["om"], name="merge"),
              h.make_node("LayerNormalization", ["om", "gamma", "beta"], ["y"], name="ln", axis=-1,
                          epsilon=1e-5)]
    inits = [nh.from_array(_rand(rng, (d, d)), f"w{n}") for n in "qkv"]
    inits += [nh.from_array(np.array(0, np.int64), "i0"), nh.from_array(np.array(1, np.int64), "i1"),
              nh.from_array(np.array([0], np.int64), "ax0"),
              nh.from_array(np.array([heads, d // heads], np.int64), "hd"),
              nh.from_array(np.array([d], np.int64), "dm"),
              nh.from_array(np.array(np.sqrt(d // heads), np.float32), "scale"),
              nh.from_array(np.ones(d, np.float32), "gamma"), nh.from_array(np.zeros(d, np.float32), "beta")]
    g = h.make_graph(nodes, "attention", [h.make_tensor_value_info("x", TP.FLOAT, ["batch", "seq", d])],
                     [h.make_tensor_value_info("y", TP.FLOAT, ["batch", "seq", d])], inits)
    models["attention"] = h.make_model(g, opset_imports=op(17))

    # shapes: dim_param arithmetic, ConstantOfShape, Expand, Slice, Range, Cast
    g = h.make_graph(
        [h.make_node("Shape", ["x"], ["s"], name="shape"),
         h.make_node("Slice", ["s", "st", "en"], ["s2"], name="slice_shape"),
         h.make_node("ConstantOfShape", ["s2"], ["z"], name="zeros",
                     value=nh.from_array(np.array([1.5], np.float32))),
         h.make_node("Add", ["x", "z"], ["xz"], name="add"),
         h.make_node("Expand", ["one", "s"], ["e"], name="expand"),
         h.make_node("Mul", ["xz", "e"], ["m"], name="mul"),
         h.make_node("Range", ["r0", "r1", "r2"], ["rg"], name="range"),
         h.make_node("Cast", ["rg"], ["rf"], name="cast", to=TP.FLOAT),
         h.make_node("Add", ["m", "rf"], ["y"], name="add_range"),
         h.make_node("ReduceSum", ["y", "axes"], ["r"], name="reduce", keepdims=0)],
        "shapes", [h.make_tensor_value_info("x", TP.FLOAT, ["n", 4])],
        [h.make_tensor_value_info("y", TP.FLOAT, ["n", 4]), h.make_tensor_value_info("r", TP.FLOAT, [4])],
        [nh.from_array(np.array([0], np.int64), "st"), nh.from_array(np.array([2], np.int64), "en"),
         nh.from_array(np.array([1.0], np.float32), "one"),
         nh.from_array(np.array(0, np.int64), "r0"), nh.from_array(np.array(4, np.int64), "r1"),
         nh.from_array(np.array(1, np.int64), "r2"), nh.from_array(np.array([0], np.int64), "axes")])
    models["shapes"] = h.make_model(g, opset_imports=op(18))

    # dtypes: initializers of many element types (raw_data and typed fields), Cast, Where, Constant
    typed = [
        h.make_tensor("i8", TP.INT8, [3], [1, -2, 3]),
        h.make_tensor("i16", TP.INT16, [3], [100, -200, 300]),
        h.make_tensor("i32", TP.INT32, [3], [7, 8, 9]),
        h.make_tensor("i64", TP.INT64, [3], [1, 2, 3]),
        h.make_tensor("u8", TP.UINT8, [3], np.array([1, 2, 255], np.uint8).tobytes(), raw=True),
        h.make_tensor("f16", TP.FLOAT16, [3], np.array([0.5, 1, 2], np.float16).tobytes(), raw=True),
        h.make_tensor("f64", TP.DOUBLE, [3], [0.25, 0.5, 0.75]),
        h.make_tensor("bf", TP.BFLOAT16, [3], np.array([0x3f80, 0x4000, 0x4040], np.uint16).tobytes(), raw=True),
        h.make_tensor("b", TP.BOOL, [3], [True, False, True]),
        h.make_tensor("f32", TP.FLOAT, [3], [1.0, 2.0, 3.0]),
    ]
    nodes = [h.make_node("Cast", [n], [f"{n}_f"], name=f"cast_{n}", to=TP.FLOAT)
             for n in ("i8", "i16", "i32", "i64", "u8", "f16", "f64", "bf")]
    nodes.append(h.make_node("Constant", [], ["c"], name="const",
                             value=h.make_tensor("cv", TP.FLOAT, [3], [0.1, 0.2, 0.3])))
    nodes.append(h.make_node("Sum", [f"{n}_f" for n in ("i8", "i16", "i32", "i64", "u8", "f16", "f64", "bf")]
                             + ["c", "x"], ["s"], name="sum"))
    nodes.append(h.make_node("Where", ["b", "s", "f32"], ["y"], name="where"))
    nodes.append(h.make_node("Cast", ["y"], ["yi"], name="cast_out", to=TP.INT32))
    g = h.make_graph(nodes, "dtypes", [h.make_tensor_value_info("x", TP.FLOAT, [3])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [3]), h.make_tensor_value_info("yi", TP.INT32, [3])],
                     typed)
    models["dtypes"] = h.make_model(g, opset_imports=op(19))

    # external: an initializer whose data lives in a file next to the model (not there)
    w = TP(name="w", data_type=TP.FLOAT, dims=[4, 4])
    w.data_location = TP.EXTERNAL
    for k, v in (("location", "weights.bin"), ("offset", "0"), ("length", "64")):
        e = w.external_data.add()
        e.key, e.value = k, v
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "external",
                     [h.make_tensor_value_info("x", TP.FLOAT, [2, 4])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [2, 4])], [w])
    models["external"] = h.make_model(g, opset_imports=op(17))

    # subgraph: If with two branches (GRAPH attributes), next to ordinary ops
    then_g = h.make_graph([h.make_node("Relu", ["x"], ["t_out"], name="then_relu")], "then", [],
                          [h.make_tensor_value_info("t_out", TP.FLOAT, [4])])
    else_g = h.make_graph([h.make_node("Neg", ["x"], ["e_out"], name="else_neg")], "else", [],
                          [h.make_tensor_value_info("e_out", TP.FLOAT, [4])])
    g = h.make_graph(
        [h.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
         h.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
         h.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g)],
        "subgraph", [h.make_tensor_value_info("x", TP.FLOAT, [4])],
        [h.make_tensor_value_info("y", TP.FLOAT, [4])], [nh.from_array(np.array(0, np.float32), "zero")])
    models["subgraph"] = h.make_model(g, opset_imports=op(17))

    for m in models.values():
        m.ir_version = min(m.ir_version, 9)
        m.producer_name = "tensorforge-fuzz-seed"
    return models


def mlir_seed_texts() -> dict[str, str]:
    """name -> printed module: the ONNX seeds at graph level (optimised and not), and lowered to
    structured kernels and loop functions; some with a ``dialect_resources`` trailer."""
    import tensorforge
    from tensorforge.frontends.onnx import import_onnx
    from tensorforge.ir.builtin import ModuleOp
    from tensorforge.ir.printer import print_module

    models = onnx_seed_models()
    texts: dict[str, str] = {}
    for name in ("conv", "matmul", "attention", "shapes", "dtypes"):
        m = import_onnx(models[name])
        texts[f"{name}_graph"] = print_module(m, inline_resources=True, large_elements=16)
    static = {"conv": None, "matmul": {"N": 2}, "dtypes": None}
    for name, shapes in static.items():
        cm = tensorforge.compile(models[name], target="interpreter", shapes=shapes)
        texts[f"{name}_opt"] = print_module(cm.module, inline_resources=True, large_elements=16)
        try:
            from tensorforge.passes.lower import graph_to_kernels, structured_to_loop
        except ImportError:     # pragma: no cover - lowering not available
            continue
        lowered = cm.module.clone()
        graph_to_kernels.lower_module(lowered)
        texts[f"{name}_structured"] = print_module(lowered, inline_resources=True, large_elements=16)
        loops = ModuleOp.create()
        for k in [o for o in lowered.main.body if o.name == "structured.kernel"][:3]:
            loops.body.append(structured_to_loop.lower_kernel(k))
        texts[f"{name}_loop"] = print_module(loops, inline_resources=True, large_elements=16)
    return texts
