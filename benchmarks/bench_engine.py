"""Engine speed: generated tokens per second of the paged engine (and the dense one).

    PYTHONPATH=. python benchmarks/bench_engine.py [--big] [--backend numpy]
    PYTHONPATH=. python benchmarks/bench_engine.py --vs-transformers [--big]

Two models through the Hugging Face loader: `shipped`, the character-level Shakespeare
model `pagedsim generate` serves, and with --big `100m`, a random bf16 Llama of ~100M
parameters in a temporary folder. `--tokens` greedy tokens for `--requests` prompts of
`--prompt` tokens, decoded together: wall time and tokens / s of the paged and dense
engines. --vs-transformers: tokens per CPU-second and peak memory beside transformers, each
side in a fresh process (benchmarks/README.md has the method and the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# vLLM's default max_num_batched_tokens on the CPU for the offline LLM class (0.34,
# vllm/engine/arg_utils.py): a batch prefills in one step, as transformers' generate does
CPU_BUDGET = 4096


def write_random_llama(directory: Path, seed: int = 0) -> Path:
    """A random Llama checkpoint of ~100M parameters in bf16 (hidden 768, 12 layers, 12 query
    / 4 KV heads, MLP 2048, vocab 32000, tied embeddings) in `directory`."""
    import ml_dtypes
    from safetensors.numpy import save_file

    hidden, layers, heads, kv_heads, mlp, vocab = 768, 12, 12, 4, 2048, 32000
    rng = np.random.default_rng(seed)
    d = hidden // heads

    def w(*shape):
        return (rng.standard_normal(shape, np.float32) / np.sqrt(shape[-1])).astype(
            ml_dtypes.bfloat16
        )

    t = {
        "model.embed_tokens.weight": w(vocab, hidden),
        "model.norm.weight": np.ones(hidden, ml_dtypes.bfloat16),
    }
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = np.ones(hidden, ml_dtypes.bfloat16)
        t[p + "post_attention_layernorm.weight"] = np.ones(hidden, ml_dtypes.bfloat16)
        for name, shape in {
            "self_attn.q": (heads * d, hidden),
            "self_attn.k": (kv_heads * d, hidden),
            "self_attn.v": (kv_heads * d, hidden),
            "self_attn.o": (hidden, heads * d),
            "mlp.gate": (mlp, hidden),
            "mlp.up": (mlp, hidden),
            "mlp.down": (hidden, mlp),
        }.items():
            t[f"{p}{name}_proj.weight"] = w(*shape)
    save_file(t, str(directory / "model.safetensors"))
    config = dict(
        architectures=["LlamaForCausalLM"],
        model_type="llama",
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=mlp,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        hidden_act="silu",
        torch_dtype="bfloat16",
    )
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    return directory


def paged_engine(model, requests, budget: int, backend: str):
    """A PagedEngine of 16-token blocks, just enough for `requests`, no prefix caching,
    `budget` tokens a step."""
    from pagedsim.block_table import blocks_needed
    from pagedsim.config import CacheConfig, SchedulerConfig
    from pagedsim.engine import PagedEngine

    blocks = sum(blocks_needed(len(r.prompt) + r.max_tokens, 16) for r in requests)
    cache = CacheConfig(block_size=16, num_gpu_blocks=blocks, enable_prefix_caching=False)
    scheduler = SchedulerConfig(max_num_batched_tokens=budget, preemption_mode="recompute")
    return PagedEngine(model, cache, scheduler, backend=backend)


def bench(model, requests, backend: str) -> dict:
    from pagedsim.engine import DenseEngine

    engine = paged_engine(model, requests, max(256, len(requests)), backend)
    start = time.perf_counter()
    engine.generate(requests)
    paged = time.perf_counter() - start
    start = time.perf_counter()
    DenseEngine(model).generate(requests)
    dense = time.perf_counter() - start
    generated = sum(r.max_tokens for r in requests)
    total = generated + sum(len(r.prompt) for r in requests)
    return dict(
        parameters=model.num_parameters,
        attention=engine.backend.where(),
        requests=len(requests),
        steps=len(engine.log),
        paged_seconds=round(paged, 2),
        paged_generated_tokens_per_s=round(generated / paged, 1),
        paged_all_tokens_per_s=round(total / paged, 1),
        dense_generated_tokens_per_s=round(generated / dense, 1),
    )


def one_side(
    side: str, directory: str, batch: int, prompt: int, tokens: int, budget: int = CPU_BUDGET
) -> dict:
    """Generate in this process with pagedsim or transformers; CPU time and peak memory.
    `budget`: pagedsim's max_num_batched_tokens."""
    rng = np.random.default_rng(0)
    config = json.loads((Path(directory) / "config.json").read_text())
    ids = rng.integers(1, config["vocab_size"], (batch, prompt))
    if side == "pagedsim":
        from pagedsim.engine import Request
        from pagedsim.engine.hf import load_model

        requests = [Request(tuple(int(t) for t in row), tokens) for row in ids]
        engine = paged_engine(load_model(directory), requests, max(budget, batch), "numpy")
        start = time.process_time()
        engine.generate(requests)
    else:
        import torch
        import transformers

        torch.set_num_threads(1)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            directory, torch_dtype=torch.float32
        ).eval()
        start = time.process_time()
        with torch.no_grad():
            model.generate(
                torch.tensor(ids),
                do_sample=False,
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                attention_mask=torch.ones_like(torch.tensor(ids)),
                pad_token_id=0,
            )
    cpu = time.process_time() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return dict(
        side=side,
        batch=batch,
        generated=batch * tokens,
        cpu_seconds=round(cpu, 2),
        tokens_per_cpu_second=round(batch * tokens / cpu, 1),
        peak_mib=round(peak),
    )


ONE_THREAD = {v: "1" for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


def run_side(python: str, side: str, directory: str, batch: int, a: argparse.Namespace):
    """One side's row, measured in a fresh process with one BLAS / torch thread."""
    done = subprocess.run(
        [python, __file__, "--one", side, "--model", directory, "--batch", str(batch)]
        + ["--prompt", str(a.prompt), "--tokens", str(a.tokens), "--budget", str(a.budget)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **ONE_THREAD},
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def vs_transformers(directory: str, label: str, a: argparse.Namespace) -> None:
    """Side-by-side rows, the two sides alternating `a.repeats` times (each a fresh process),
    then the median of the per-pair ratios, which a loaded machine moves less than a rate."""
    for batch in [int(b) for b in a.batches.split(",")]:
        ratios = []
        for _ in range(a.repeats):
            p = run_side(sys.executable, "pagedsim", directory, batch, a)
            t = run_side(
                a.transformers_python or sys.executable, "transformers", directory, batch, a
            )
            ratios.append(p["tokens_per_cpu_second"] / t["tokens_per_cpu_second"])
            print(
                f"{label} batch {batch}: pagedsim {p['tokens_per_cpu_second']} tok/CPU-s, "
                f"{p['peak_mib']} MiB | transformers {t['tokens_per_cpu_second']} tok/CPU-s, "
                f"{t['peak_mib']} MiB ({ratios[-1]:.2f}x)",
                flush=True,
            )
        if a.repeats > 1:
            print(f"{label} batch {batch}: median ratio {statistics.median(ratios):.2f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--big", action="store_true", help="also the ~100M-parameter checkpoint")
    p.add_argument("--vs-transformers", action="store_true", help="rows beside transformers")
    p.add_argument("--one", choices=("pagedsim", "transformers"), help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--backend", default="auto")
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--batches", default="1,8", help="--vs-transformers: batch sizes")
    p.add_argument("--repeats", type=int, default=1, help="--vs-transformers: runs per side")
    p.add_argument("--transformers-python", help="--vs-transformers: torch's interpreter")
    p.add_argument(
        "--budget",
        type=int,
        default=CPU_BUDGET,
        help="pagedsim's max_num_batched_tokens (default %(default)s, vLLM's on the CPU)",
    )
    a = p.parse_args()
    if a.one:
        print(json.dumps(one_side(a.one, a.model, a.batch, a.prompt, a.tokens, a.budget)))
        return
    if a.vs_transformers:
        from pagedsim.engine.generate import DEFAULT_MODEL

        vs_transformers(str(DEFAULT_MODEL), "shipped", a)
        if a.big:
            with tempfile.TemporaryDirectory() as tmp:
                vs_transformers(str(write_random_llama(Path(tmp))), "100m", a)
        return
    from pagedsim.engine import Request
    from pagedsim.engine.generate import load

    model, _ = load()
    rng = np.random.default_rng(0)

    def requests(vocab):
        return [
            Request(tuple(int(t) for t in rng.integers(1, vocab, a.prompt)), a.tokens)
            for _ in range(a.requests)
        ]

    print("shipped", json.dumps(bench(model, requests(model.config.vocab), a.backend)))
    if a.big:
        from pagedsim.engine.hf import load_model

        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            big = load_model(write_random_llama(Path(tmp)))
            print(f"100m: written and loaded in {time.perf_counter() - start:.1f} s")
            print("100m", json.dumps(bench(big, requests(big.config.vocab), a.backend)))


if __name__ == "__main__":
    main()
