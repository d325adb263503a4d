"""Issue #16 on a cheap model: a transformers ``BertModel`` used as a sentence encoder (hidden
states mean-pooled over the attention mask) keeps every sentence embedding within cosine 0.99
of float32 in tensorforge int8.

The target is per sentence, not on average, because one bad embedding is one document a search
index can no longer find.  Random-init weights (nothing can be downloaded) make embeddings of
*different* random sentences already 0.90 (median) to 0.96 cosine apart, so 0.99 alone would let int8 all
but swap sentences; the test also asks that each int8 embedding is still nearest to its own
float32 embedding.  Calibration and evaluation sentences are drawn apart (calibrating on the
evaluation inputs would hide ranges calibration never saw) and padding lengths vary, so the
masked mean and the attention mask's large negative bias both go through the int8 graph.
benchmarks/int8_sentence_encoder.py measures the same at bert-base size against onnxruntime.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import tensorforge  # noqa: E402

SEQ, VOCAB = 16, 1000


class SentenceEncoder(torch.nn.Module):
    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)


def _sentences(count: int, seed: int):
    """(input_ids, attention_mask) int64 (count, SEQ): [CLS] random tokens [SEP], then padding."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((count, SEQ), np.int64)
    mask = np.zeros((count, SEQ), np.int64)
    for i in range(count):
        n = int(rng.integers(4, SEQ + 1))
        ids[i, :n] = np.concatenate([[1], rng.integers(3, VOCAB, n - 2), [2]])
        mask[i, :n] = 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


@pytest.fixture(scope="module")
def encoder_and_data():
    cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, max_position_embeddings=SEQ)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        encoder = SentenceEncoder(transformers.BertModel(cfg, add_pooling_layer=False)).eval()
    cal_ids, cal_mask = _sentences(32, seed=1)
    ev_ids, ev_mask = _sentences(16, seed=2)
    assert not ({tuple(r) for r in cal_ids.tolist()} & {tuple(r) for r in ev_ids.tolist()})
    calibration = [(cal_ids[i:i + 8], cal_mask[i:i + 8]) for i in range(0, 32, 8)]
    evaluation = [(ev_ids[i:i + 8], ev_mask[i:i + 8]) for i in range(0, 16, 8)]
    return encoder, calibration, evaluation


def _cosines(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_int8_sentence_embeddings_keep_cosine(encoder_and_data):
    encoder, calibration, evaluation = encoder_and_data
    q = tensorforge.quantize(encoder, calibration, example_inputs=evaluation[0])
    assert q.attributes["tf.quantized"], "nothing was quantized"
    cm = tensorforge.compile(encoder, evaluation[0], precision="int8", calibration=calibration)
    assert "tf_qgemm_" in cm.source
    with torch.no_grad():
        f32 = np.concatenate([encoder(*x).numpy() for x in evaluation])
    int8 = np.concatenate([np.asarray(cm(*x)) for x in evaluation])
    cos = _cosines(int8, f32)
    assert cos.min() >= 0.99, cos
    unit = lambda e: e / np.linalg.norm(e, axis=1, keepdims=True)  # noqa: E731
    nearest = (unit(int8.astype(np.float64)) @ unit(f32.astype(np.float64)).T).argmax(1)
    assert (nearest == np.arange(len(f32))).all(), nearest
