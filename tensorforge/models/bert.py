"""A BERT encoder with pooler (HF ``BertModel`` layout, post-LayerNorm, erf GELU).

Attention is written as explicit matmul / softmax (no ``scaled_dot_product_attention``) so
that ``torch.export`` yields plain ATen ops that any frontend can map one by one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from . import randomize_norms


@dataclass(frozen=True)
class BertConfig:
    vocab: int = 30522
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    intermediate: int = 3072
    max_positions: int = 512
    type_vocab: int = 2
    seq: int = 128                 # sequence length of the example inputs
    eps: float = 1e-12


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, S, H*D) -> (B, H, S, D)."""
    b, s, hd = x.shape
    return x.view(b, s, heads, hd // heads).permute(0, 2, 1, 3)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, S, D) -> (B, S, H*D)."""
    b, h, s, d = x.shape
    return x.permute(0, 2, 1, 3).reshape(b, s, h * d)


class SelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.heads = cfg.heads
        self.query = nn.Linear(cfg.hidden, cfg.hidden)
        self.key = nn.Linear(cfg.hidden, cfg.hidden)
        self.value = nn.Linear(cfg.hidden, cfg.hidden)
        self.dense = nn.Linear(cfg.hidden, cfg.hidden)
        self.norm = nn.LayerNorm(cfg.hidden, eps=cfg.eps)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        q = split_heads(self.query(x), self.heads)
        k = split_heads(self.key(x), self.heads)
        v = split_heads(self.value(x), self.heads)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + mask_bias
        context = merge_heads(torch.matmul(torch.softmax(scores, dim=-1), v))
        return self.norm(x + self.dense(context))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.attention = SelfAttention(cfg)
        self.intermediate = nn.Linear(cfg.hidden, cfg.intermediate)
        self.act = nn.GELU()
        self.output = nn.Linear(cfg.intermediate, cfg.hidden)
        self.norm = nn.LayerNorm(cfg.hidden, eps=cfg.eps)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        x = self.attention(x, mask_bias)
        return self.norm(x + self.output(self.act(self.intermediate(x))))


class Bert(nn.Module):
    """``forward(input_ids, attention_mask) -> (sequence_output, pooled_output)``."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.cfg = cfg
        self.word_embeddings = nn.Embedding(cfg.vocab, cfg.hidden)
        self.position_embeddings = nn.Embedding(cfg.max_positions, cfg.hidden)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab, cfg.hidden)
        self.embedding_norm = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.layers))
        self.pooler = nn.Linear(cfg.hidden, cfg.hidden)
        self.register_buffer("position_ids", torch.arange(cfg.max_positions), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(cfg.max_positions, dtype=torch.long),
                             persistent=False)
        init_transformer_weights(self)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        seq = input_ids.shape[1]
        x = (self.word_embeddings(input_ids) + self.position_embeddings(self.position_ids[:seq])
             + self.token_type_embeddings(self.token_type_ids[:seq]))
        x = self.embedding_norm(x)
        # 1 = attend, 0 = padding; padded keys get a large negative bias before the softmax.
        keep = attention_mask[:, None, None, :].to(x.dtype)
        mask_bias = (1.0 - keep) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, mask_bias)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return x, pooled


def init_transformer_weights(module: nn.Module, std: float = 0.02) -> None:
    """N(0, std) for linear and embedding weights, zero biases (the BERT/GPT-2 recipe), then
    random norm affines so that LayerNorm's scale and shift are exercised."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, std)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.normal_(m.bias, 0.0, std)
    randomize_norms(module)


BASE = BertConfig()
TINY = BertConfig(vocab=1000, hidden=128, layers=2, heads=2, intermediate=512, max_positions=64, seq=32)


def bert_base() -> Bert:
    return Bert(BASE)


def bert_tiny() -> Bert:
    return Bert(TINY)


def token_inputs(batch: int, generator: torch.Generator, vocab: int, seq: int) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), generator=generator, dtype=torch.int64)


def padding_mask(batch: int, generator: torch.Generator, seq: int) -> torch.Tensor:
    """Ones then zeros: each sequence has a random length between seq/2 and seq."""
    lengths = torch.randint(seq // 2, seq + 1, (batch, 1), generator=generator)
    return (torch.arange(seq)[None, :] < lengths).to(torch.int64)


def _inputs(cfg: BertConfig, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return token_inputs(batch, generator, cfg.vocab, cfg.seq), padding_mask(batch, generator, cfg.seq)


def example_inputs_base(batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both int64 (batch, 128)."""
    return _inputs(BASE, batch, generator)


def example_inputs_tiny(batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both int64 (batch, 32)."""
    return _inputs(TINY, batch, generator)
