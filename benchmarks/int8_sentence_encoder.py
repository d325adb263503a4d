"""Sentence-embedding accuracy in int8 (issue #16): tensorforge's post-training int8 and bf16
against onnxruntime's ``quantize_dynamic``, per sentence, on a transformers ``BertModel`` used as a
sentence encoder and on the zoo's ``bert_base``.

    .venv/bin/python benchmarks/int8_sentence_encoder.py                 # bert-base size, seq 64: 10-20 minutes
    .venv/bin/python benchmarks/int8_sentence_encoder.py --small         # 4 layers, hidden 256: about 2 minutes
    .venv/bin/python benchmarks/int8_sentence_encoder.py --methods minmax percentile entropy --per-channel

The issue's target is per sentence, not on average: a retrieval index is only as good as its
worst embedding, so every evaluation sentence's cosine(f32, low precision) must stay >= 0.99 and
the table reports the minimum next to the median.

Nothing is downloaded, so the weights are random (``BertConfig``'s N(0, 0.02) init under a fixed
seed; the zoo's own random weights), **not a trained model**.  Random-init BERT is an easy case:
its activations are near-Gaussian, without the few huge outlier channels trained BERTs develop
(the usual reason per-tensor activation scales lose accuracy).  The layers do matter at bert-base
size (the mean-pooled embedding-layer output alone is only about 0.22 cosine to the final
embedding), so the encoder is exercised, but not with trained statistics.  The "0.95"
the issue quotes for onnxruntime was measured on a trained model; these numbers cannot confirm or
refute it.  To show how much room the cosine leaves, the table also gives ``spread``, the median
cosine between the f32 embeddings of two different sentences (a method whose cosine to f32 is not
well above it confuses sentences), and ``err/spread``, the worst ``|q - f32|`` relative to the
median distance of an f32 embedding from the evaluation set's mean embedding.

"Sentences" are random token ids (``[CLS] ... [SEP]``, then padding) of random lengths, padded to
``--seq`` with attention masks; calibration and evaluation sentences are drawn apart and checked
disjoint, because calibrating on the evaluation inputs would hide clipping of unseen ranges.
Latencies are medians over interleaved blocks of calls on ``--threads`` threads (one sentence
per call with ``--batch 1``); the machine may be shared, so compare within a model's rows.
"""
from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
import warnings

import numpy as np

CLS, SEP, PAD = 101, 102, 0


def _sentences(count: int, seq: int, vocab: int, seed: int, min_len: int = 4):
    """(input_ids, attention_mask) int64 arrays of shape (count, seq)."""
    rng = np.random.default_rng(seed)
    ids = np.full((count, seq), PAD, np.int64)
    mask = np.zeros((count, seq), np.int64)
    first = 1000 if vocab > 2000 else 3          # past BERT's special and unused tokens when there are any
    for i in range(count):
        n = int(rng.integers(min_len, seq + 1))
        ids[i, 0], ids[i, n - 1] = CLS % vocab, SEP % vocab
        ids[i, 1:n - 1] = rng.integers(first, vocab, n - 2)
        mask[i, :n] = 1
    return ids, mask


def _batches(ids, mask, batch: int):
    import torch
    return [(torch.from_numpy(ids[i:i + batch]), torch.from_numpy(mask[i:i + batch]))
            for i in range(0, len(ids) - batch + 1, batch)]


def _mean_pool(hidden, attention_mask):
    m = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)


def hf_encoder(small: bool, seed: int = 0):
    """A transformers ``BertModel`` (random init under ``seed``) wrapped as ``(ids, mask) -> embedding``."""
    import torch
    from transformers import BertConfig, BertModel

    if small:
        cfg = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
    else:
        cfg = BertConfig()                   # bert-base-uncased's sizes: 12 layers, hidden 768, 12 heads
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        bert = BertModel(cfg, add_pooling_layer=False).eval()

    class SentenceEncoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            return _mean_pool(hidden, attention_mask)

    return SentenceEncoder().eval(), cfg.vocab_size


def zoo_encoder(small: bool):
    """The zoo's BERT (``bert_tiny`` with ``--small``): it returns (sequence_output, pooled); the
    pooler is a tanh of the first token, not a sentence embedding, so the sequence output is
    mean-pooled over the mask like the transformers model's."""
    import torch

    from tensorforge.models import get
    from tensorforge.models.bert import BASE, TINY
    zoo, _ = get("bert_tiny" if small else "bert_base")

    class ZooSentenceEncoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.zoo = zoo

        def forward(self, input_ids, attention_mask):
            return _mean_pool(self.zoo(input_ids, attention_mask)[0], attention_mask)

    cfg = TINY if small else BASE
    return ZooSentenceEncoder().eval(), cfg.vocab, cfg.max_positions


def _onnx(encoder, example, per_channel: bool) -> tuple[bytes, bytes]:
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(encoder, example, buf, dynamo=False, input_names=["input_ids", "attention_mask"],
                          output_names=["embedding"])
    f32 = buf.getvalue()
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "f32.onnx"), os.path.join(d, "int8.onnx")
        with open(src, "wb") as f:
            f.write(f32)
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8, per_channel=per_channel)
        with open(dst, "rb") as f:
            return f32, f.read()


def _session(model: bytes, threads: int):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-30)


def _spread(f32: np.ndarray) -> tuple[float, float]:
    """(median cosine between different sentences, median distance from the mean embedding)."""
    n = len(f32)
    unit = f32 / np.linalg.norm(f32, axis=1, keepdims=True)
    pair = (unit @ unit.T)[~np.eye(n, dtype=bool)]
    return float(np.median(pair)), float(np.median(np.linalg.norm(f32 - f32.mean(0), axis=1)))


def bench(label: str, encoder, vocab: int, args) -> list[dict]:
    import torch

    import tensorforge
    from tensorforge.benchmark import time_interleaved
    from tensorforge.quantization.bf16 import supported as bf16_supported

    cal_ids, cal_mask = _sentences(args.calibration, args.seq, vocab, seed=1000)
    ev_ids, ev_mask = _sentences(args.eval, args.seq, vocab, seed=2000)
    seen = {tuple(r) for r in cal_ids}
    assert not any(tuple(r) in seen for r in ev_ids), "calibration and evaluation sentences overlap"
    calibration = _batches(cal_ids, cal_mask, args.batch)
    evaluation = _batches(ev_ids, ev_mask, args.batch)
    example = evaluation[0]
    with torch.no_grad():
        f32 = np.concatenate([encoder(*x).numpy() for x in evaluation])
    spread_cos, spread_dist = _spread(f32)

    runners: dict[str, callable] = {}
    build_s: dict[str, float] = {}
    notes: dict[str, str] = {}
    for method in args.methods:
        t0 = time.perf_counter()
        cm = tensorforge.compile(encoder, example, threads=args.threads, precision="int8", calibration=calibration,
                                 calibration_method=method, keep_first_last=not args.quantize_all)
        name = f"tf-int8 {method}"
        build_s[name] = time.perf_counter() - t0
        notes[name] = f"{len(cm.module.attributes['tf.quantized'])} contractions int8"
        runners[name] = lambda x, cm=cm: np.asarray(cm(*x))
    if bf16_supported():
        t0 = time.perf_counter()
        cm = tensorforge.compile(encoder, example, threads=args.threads, precision="bf16")
        build_s["tf-bf16"] = time.perf_counter() - t0
        runners["tf-bf16"] = lambda x, cm=cm: np.asarray(cm(*x))
    else:
        print(f"{label}: this CPU has no avx512_bf16, tf-bf16 skipped")
    t0 = time.perf_counter()
    onnx_f32, onnx_int8 = _onnx(encoder, example, args.per_channel)
    ort_int8, ort_f32 = _session(onnx_int8, args.threads), _session(onnx_f32, args.threads)
    ort_name = f"ort-int8 dynamic ({'per-channel' if args.per_channel else 'per-tensor'})"
    build_s[ort_name] = time.perf_counter() - t0
    notes[ort_name] = f"{onnx_int8.count(b'MatMulInteger')} MatMulInteger"
    runners[ort_name] = lambda x, s=ort_int8: s.run(None, {"input_ids": x[0].numpy(), "attention_mask": x[1].numpy()})[0]
    t0 = time.perf_counter()
    tf_f32 = tensorforge.compile(encoder, example, threads=args.threads)
    build_s["tf-f32"] = time.perf_counter() - t0
    runners["tf-f32"] = lambda x, cm=tf_f32: np.asarray(cm(*x))
    runners["ort-f32"] = lambda x, s=ort_f32: s.run(None, {"input_ids": x[0].numpy(), "attention_mask": x[1].numpy()})[0]

    def torch_f32(x):
        with torch.no_grad():
            return encoder(*x).numpy()
    runners["torch-f32"] = torch_f32

    x0 = evaluation[0]
    times = time_interleaved({k: (lambda f=f: f(x0)) for k, f in runners.items()}, repeats=args.repeats, warmup=5,
                             block=args.block, pause_s=args.pause)
    rows = []
    for name, run in runners.items():
        out = np.concatenate([run(x) for x in evaluation]).reshape(f32.shape)
        cos = _cosines(out, f32)
        err = np.linalg.norm(out.astype(np.float64) - f32, axis=1) / spread_dist
        rows.append({"model": label, "method": name, "min": float(cos.min()), "median": float(np.median(cos)),
                     "below": int((cos < 0.99).sum()), "n": len(cos), "err": float(err.max()),
                     "ms": times[name].median_ms, "build_s": build_s.get(name), "note": notes.get(name, "")})
    for r in rows:
        r["spread"] = spread_cos
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="4 layers, hidden 256 (and the zoo's bert_tiny)")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1, help="sentences per call (calibration, evaluation, timing)")
    ap.add_argument("--calibration", type=int, default=16, help="calibration sentences")
    ap.add_argument("--eval", type=int, default=64, help="evaluation sentences")
    ap.add_argument("--methods", nargs="*", default=["minmax", "percentile"], choices=["minmax", "percentile", "entropy"])
    ap.add_argument("--quantize-all", action="store_true",
                    help="quantize the first and last contractions too (kept float32 by default)")
    ap.add_argument("--per-channel", action="store_true", help="onnxruntime weights per channel (default per tensor)")
    ap.add_argument("--models", nargs="*", default=["transformers", "zoo"], choices=["transformers", "zoo"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--block", type=int, default=3)
    ap.add_argument("--pause", type=float, default=0.2)
    args = ap.parse_args()

    import torch
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=FutureWarning)
    if args.calibration % args.batch or args.eval % args.batch:
        ap.error("--calibration and --eval must be multiples of --batch")

    rows = []
    for which in args.models:
        if which == "transformers":
            encoder, vocab = hf_encoder(args.small)
            label = "transformers BertModel " + ("4L/256" if args.small else "12L/768")
        else:
            encoder, vocab, positions = zoo_encoder(args.small)
            if args.seq > positions:
                ap.error(f"--seq {args.seq} exceeds the zoo model's {positions} positions")
            label = "zoo " + ("bert_tiny 2L/128" if args.small else "bert_base 12L/768")
        rows += bench(label, encoder, vocab, args)
        print(f"{label}: done", flush=True)

    print()
    print("RANDOM-INIT WEIGHTS, not a trained model: the cosines below say nothing about a trained encoder's "
          "outlier channels (see the docstring).")
    print(f"seq {args.seq}, batch {args.batch}, {args.calibration} calibration / {args.eval} evaluation sentences "
          f"(disjoint), {args.threads} thread(s); ms: medians of {args.repeats} interleaved rounds of {args.block} "
          f"calls; load average {os.getloadavg()[0]:.2f}")
    print()
    print("| model | method | min cos | median cos | sentences < 0.99 | worst err/spread | spread cos | ms | build s | note |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        b = f"{r['build_s']:.1f}" if r["build_s"] is not None else ""
        print(f"| {r['model']} | {r['method']} | {r['min']:.6f} | {r['median']:.6f} | {r['below']}/{r['n']} | "
              f"{r['err']:.4f} | {r['spread']:.4f} | {r['ms']:.2f} | {b} | {r['note']} |")


if __name__ == "__main__":
    main()
