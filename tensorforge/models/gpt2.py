"""A GPT-2 language model (HF ``GPT2LMHeadModel`` layout): pre-LayerNorm blocks, causal
attention, tanh-approximated GELU, learned positions, LM head tied to the token embeddings.

No KV cache: one forward pass over the whole sequence, as a compiler benchmark wants.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from .bert import init_transformer_weights, merge_heads, split_heads, token_inputs


@dataclass(frozen=True)
class GPT2Config:
    vocab: int = 50257
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    max_positions: int = 1024
    seq: int = 128                 # sequence length of the example inputs
    eps: float = 1e-5


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden)
        causal = torch.tril(torch.ones(cfg.max_positions, cfg.max_positions, dtype=torch.bool))
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq = x.shape[1]
        q, k, v = (split_heads(t, self.heads) for t in self.qkv(x).chunk(3, dim=-1))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        scores = torch.where(self.causal[:seq, :seq], scores, torch.finfo(scores.dtype).min)
        return self.proj(merge_heads(torch.matmul(torch.softmax(scores, dim=-1), v)))


class Block(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden, 4 * cfg.hidden), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * cfg.hidden, cfg.hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """``forward(input_ids) -> logits`` of shape (batch, seq, vocab)."""

    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab, cfg.hidden)
        self.wpe = nn.Embedding(cfg.max_positions, cfg.hidden)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        init_transformer_weights(self)
        self.lm_head.weight = self.wte.weight

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


SMALL = GPT2Config()
TINY = GPT2Config(vocab=1000, hidden=64, layers=2, heads=2, max_positions=64, seq=32)


def gpt2_small() -> GPT2:
    return GPT2(SMALL)


def gpt2_tiny() -> GPT2:
    return GPT2(TINY)


def example_inputs_small(batch: int, generator: torch.Generator) -> tuple[torch.Tensor]:
    return (token_inputs(batch, generator, SMALL.vocab, SMALL.seq),)


def example_inputs_tiny(batch: int, generator: torch.Generator) -> tuple[torch.Tensor]:
    return (token_inputs(batch, generator, TINY.vocab, TINY.seq),)
