"""Each quantized layer of a QDQ model against onnxruntime's, on onnxruntime's own inputs.

    .venv/bin/python benchmarks/qdq_layer_diff.py mobilenet_v2_int8.onnx            # 2 zoo inputs
    .venv/bin/python benchmarks/qdq_layer_diff.py resnet50_int8.onnx --zoo resnet50 --inputs 3
    .venv/bin/python benchmarks/qdq_layer_diff.py model.onnx --only 4,40

Whole-model agreement says whether tensorforge and onnxruntime differ, not where: a uint8 that
differs by one early in a network moves thousands of outputs of the later layers.  This script
runs the QDQ file once in onnxruntime with every QuantizeLinear output exposed, then, for each
QuantizeLinear, cuts the model down to the one op that feeds it (``onnx.utils.extract_model``
from the quantized tensors it reads to its quantized output), compiles that with
``tensorforge.compile`` and runs both on onnxruntime's own uint8 inputs of that layer.  So each
layer is compared on identical inputs.  It prints, per layer, the op, how many uint8 outputs
differ and by how much at most.  The inputs are the zoo model's (``--zoo``, default
mobilenet_v2; ``input_seed`` 1000 onwards), as ``int8_models.py --agreement`` draws them.
"""
from __future__ import annotations

import argparse
import os
import tempfile


def _sources(tensor: str, producer: dict, quantized: set) -> list[str]:
    """The quantized tensors the op feeding ``tensor`` reads (through its DequantizeLinears)."""
    found, stack = set(), [tensor]
    while stack:
        v = stack.pop()
        if v in quantized:
            found.add(v)
            continue
        node = producer.get(v)
        if node is not None:
            stack.extend(i for i in node.input if i in producer)
    return sorted(found)


def main() -> None:
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, utils

    import tensorforge
    from tensorforge.models import get

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a QDQ .onnx file (onnxruntime quantize_static)")
    ap.add_argument("--zoo", default="mobilenet_v2", help="the zoo model whose inputs to draw")
    ap.add_argument("--inputs", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated QuantizeLinear indices")
    args = ap.parse_args()
    ort.set_default_logger_severity(3)

    model = onnx.load(args.model)
    producer = {o: n for n in model.graph.node for o in n.output}
    quants = [n for n in model.graph.node if n.op_type == "QuantizeLinear"]
    quantized = {n.output[0] for n in quants}
    exposed = onnx.load(args.model)
    for n in quants:
        exposed.graph.output.append(helper.make_tensor_value_info(n.output[0], TensorProto.UINT8, None))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    full = ort.InferenceSession(exposed.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in full.get_outputs()]
    feeds = [i.name for i in full.get_inputs()]
    runs = []
    for i in range(args.inputs):
        xs = [t.numpy() for t in get(args.zoo, 1, input_seed=1000 + i)[1]]
        runs.append(dict(zip(names, full.run(None, dict(zip(feeds, xs))))))
    only = {int(v) for v in args.only.split(",") if v}
    total = 0
    with tempfile.TemporaryDirectory() as d:
        for k, q in enumerate(quants):
            sources = _sources(q.input[0], producer, quantized)
            if not sources or (only and k not in only):
                continue
            path = os.path.join(d, f"layer{k}.onnx")
            utils.extract_model(args.model, path, sources, [q.output[0]])
            layer = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
            order = [i.name for i in layer.get_inputs()]
            cm = tensorforge.compile(path)
            differ = size = worst = 0
            for run in runs:
                inputs = [run[s] for s in order]
                want = layer.run(None, dict(zip(order, inputs)))[0].astype(np.int32)
                got = np.asarray(cm(*inputs)).astype(np.int32)
                diff = np.abs(got - want)
                differ, size, worst = differ + int((diff > 0).sum()), size + want.size, max(worst, int(diff.max()))
            total += differ
            op = producer[q.input[0]].op_type
            print(f"{k:4d} {op:20s} {q.output[0][-48:]:48s} differ {differ}/{size}, at most {worst}", flush=True)
    print(f"differing uint8 outputs in all: {total}")


if __name__ == "__main__":
    main()
