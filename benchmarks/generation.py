"""Greedy generation through ``torch.compile(backend="tensorforge", dynamic=True)``.

    .venv/bin/python benchmarks/generation.py                    # gpt2 small + a 4-layer GQA Llama
    .venv/bin/python benchmarks/generation.py --only llama --tokens 16

Two transformers decoders with random weights: GPT-2 small (the zoo's architecture: 12 layers,
hidden 768, 12 heads) and a ``LlamaForCausalLM`` with 4 layers and fewer key/value heads than query
heads (grouped-query attention).  Each generates ``--tokens`` tokens with
``model.generate(ids, max_new_tokens=N, do_sample=False)`` (greedy, KV cache growing one token per
step) three ways: eager, ``model.forward`` compiled by ``torch.compile(backend="tensorforge",
dynamic=True)`` and by ``torch.compile(dynamic=True)`` (Inductor), in the same process.

Reported per model: whether the tokens equal eager's, how many times the tensorforge backend was
invoked over the whole generation (the promise: at most 3; Dynamo's float-specialisation restarts
are absorbed inside the backend, and any that escaped would show up here as extra invocations), the
C compiler runs, and per-token latency (generation wall time / tokens, median of ``--repeats``
generations after one warm-up generation) of each contender.  A benchmark, not a test.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time


def _models(only: list[str]):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if "gpt2" in only:
        cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
        yield "gpt2_small", GPT2LMHeadModel(cfg).eval()
    if "llama" in only:
        cfg = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
                          num_key_value_heads=2, vocab_size=32000, max_position_embeddings=512)
        yield "llama_gqa", LlamaForCausalLM(cfg).eval()


def _generate(model, ids, tokens: int):
    import torch

    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, do_sample=False,
                              min_new_tokens=tokens, pad_token_id=0)


def _per_token_ms(model, ids, tokens: int, repeats: int) -> float:
    _generate(model, ids, tokens)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _generate(model, ids, tokens)
        times.append((time.perf_counter() - t0) / tokens * 1e3)
    return statistics.median(times)


def run_model(name: str, model, args) -> dict:
    import torch

    from tensorforge.codegen.c import toolchain
    from tensorforge.frontends.torch import tensorforge_backend

    ids = torch.randint(0, model.config.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    eager_tokens = _generate(model, ids, args.tokens)
    eager_ms = _per_token_ms(model, ids, args.tokens, args.repeats)

    calls, restarts = [], []

    def counting_backend(gm, example_inputs):
        calls.append(len(gm.graph.nodes))
        try:
            return tensorforge_backend(gm, example_inputs)
        except Exception as e:      # Dynamo's restart (floats it specialises) passes through here
            restarts.append(type(e).__name__)
            raise

    eager_forward = model.forward
    torch._dynamo.reset()
    model.forward = torch.compile(eager_forward, backend=counting_backend, dynamic=True)
    runs = toolchain.stats.compiler_runs
    t0 = time.perf_counter()
    tf_tokens = _generate(model, ids, args.tokens)
    first_s = time.perf_counter() - t0
    tf_ms = _per_token_ms(model, ids, args.tokens, args.repeats)
    compiler_runs = toolchain.stats.compiler_runs - runs

    torch._dynamo.reset()
    model.forward = torch.compile(eager_forward, dynamic=True)
    ind_tokens = _generate(model, ids, args.tokens)
    ind_ms = _per_token_ms(model, ids, args.tokens, args.repeats)
    model.forward = eager_forward
    torch._dynamo.reset()

    row = {"model": name, "tokens_equal": bool(torch.equal(tf_tokens, eager_tokens)),
           "inductor_tokens_equal": bool(torch.equal(ind_tokens, eager_tokens)),
           "backend_invocations": len(calls), "restarts": restarts, "graph_nodes": calls,
           "compiler_runs": compiler_runs,
           "first_generation_s": first_s, "eager_ms_per_token": eager_ms, "tensorforge_ms_per_token": tf_ms,
           "inductor_ms_per_token": ind_ms}
    print(f"{name}: tokens equal {row['tokens_equal']} (inductor {row['inductor_tokens_equal']}), backend invoked "
          f"{len(calls)}x (graph nodes {calls}; {len(restarts)} of them Dynamo restarts: {restarts}), "
          f"{compiler_runs} C compiler runs, first generation {first_s:.1f} s\n"
          f"  ms/token: tensorforge {tf_ms:.2f}  eager {eager_ms:.2f} ({eager_ms / tf_ms:.2f}x)  "
          f"inductor {ind_ms:.2f} ({ind_ms / tf_ms:.2f}x)", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", default="gpt2,llama")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--prompt", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--specialize-float", action="store_true",
                   help="torch._dynamo.config.specialize_float = True (floats are constants: no restarts)")
    args = p.parse_args(argv)
    if args.specialize_float:
        import torch._dynamo.config
        torch._dynamo.config.specialize_float = True
    for name, model in _models(args.only.split(",")):
        run_model(name, model, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
