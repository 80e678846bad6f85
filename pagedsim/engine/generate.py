"""`pagedsim generate`: a small mixed workload served by the paged engine, step by step.

Four requests share a pool that is too small for all of them at once:
    r0  a prompt that starts with a shared "system" prefix, greedy
    r1  the same prefix plus a question, n = 2 seeded samples (v0 fork + copy-on-write)
    r2  beam search, width 2 (forks, copy-on-write, beams freed)
    r3  r0's prompt again: a prefix-cache hit capped at num_tokens - 1 (v1)
Each step prints its batch (prefill and decode tokens per sequence) and what the block
manager did (blocks allocated, shared, copied, freed; preemptions). The end reports
tokens computed vs skipped by prefix caching, bytes moved by copy-on-write and by
swapping, and whether every token and logit matched the dense engine.
`--json` prints the same as JSON; `--draw DIR` writes the manager's snapshot after
each engine step with pagedsim.draw's tour renderer.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

import numpy as np

from ..policies.preemption import PREEMPTION_POLICIES
from .dense import DenseEngine
from .model import ModelConfig, TinyModel
from .paged import PagedEngine
from .requests import Request

SYSTEM = (11, 12, 13, 14, 15, 16, 17, 18)  # two blocks of 4: the shared prefix


def workload() -> list:
    return [Request(SYSTEM + (21, 22), 4),
            Request(SYSTEM + (31, 32, 33), 3, n=2, temperature=0.8, seed=7),
            Request((41, 42, 43, 44, 45, 46), 3, beam_width=2),
            Request(SYSTEM + (21, 22), 2)]


def compare(dense: list, paged: list) -> dict:
    """Tokens equal per request, and the largest logit difference over shared positions."""
    tokens = all(d.outputs() == p.outputs() for d, p in zip(dense, paged))
    diffs = [float(np.abs(d.logits[k] - p.logits[k]).max())
             for d, p in zip(dense, paged) for k in d.logits if k in p.logits]
    same_keys = all(set(d.logits) == set(p.logits) for d, p in zip(dense, paged))
    return dict(tokens_match=tokens, logit_positions_match=same_keys,
                max_logit_diff=max(diffs, default=0.0))


def run(blocks: int = 10, block_size: int = 4, budget: int = 8, policy: str = "swap",
        prefix_caching: bool = True, backend: str = "kernels") -> tuple:
    """Serve `workload()` step by step. Returns (engine, marks, summary): marks[i] is the
    manager snapshot index after engine step i + 1; summary is what `generate` reports."""
    model = TinyModel(ModelConfig())
    engine = PagedEngine(model, blocks, block_size, max_batched_tokens=budget,
                         prefix_caching=prefix_caching, policy=policy, backend=backend,
                         trace=True, check=True)
    requests = workload()
    marks = []
    for r in requests:
        engine.submit(r)
    while not all(run.status == "done" for run in engine.runs):
        engine.step()
        marks.append(len(engine.blocks.manager.trace.snapshots) - 1)
    paged = [run.state for run in engine.runs]
    dense = DenseEngine(model).generate(requests)
    stats = engine.scheduler.stats
    summary = dict(
        steps=len(engine.log), backend=backend, block_bytes=engine.kv.block_bytes,
        computed_tokens=stats["computed_tokens"], skipped_by_prefix_cache=stats["cached_tokens"],
        recomputed_after_preemption=stats["recomputed_tokens"],
        preempted_recompute=stats["preempted_recompute"], preempted_swap=stats["preempted_swap"],
        cow_bytes=stats["cow_bytes"], swap_bytes=stats["swap_bytes"],
        outputs=[s.outputs() for s in paged], **compare(dense, paged))
    return engine, marks, summary


def step_frames(engine, marks) -> list:
    """The manager's snapshot after each engine step, captioned with that step's batch."""
    snaps = engine.blocks.manager.trace.snapshots
    return [replace(snaps[m], caption=f"engine step {i + 1}: " + " ".join(engine.log[i]["seqs"]))
            for i, m in enumerate(marks)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pagedsim generate", description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=10, help="blocks in the pool (default 10)")
    p.add_argument("--block-size", type=int, default=4)
    p.add_argument("--budget", type=int, default=8, help="max_batched_tokens per step")
    p.add_argument("--policy", choices=PREEMPTION_POLICIES, default="swap",
                   help="preemption of a single-sequence request (several sequences always swap)")
    p.add_argument("--no-prefix-cache", action="store_true")
    p.add_argument("--backend", choices=("kernels", "numpy"), default="kernels")
    p.add_argument("--json", action="store_true")
    p.add_argument("--draw", metavar="DIR", help="write a PNG per engine step and a GIF")
    args = p.parse_args(argv)
    try:
        engine, marks, summary = run(args.blocks, args.block_size, args.budget, args.policy,
                                     not args.no_prefix_cache, args.backend)
    except ValueError as e:  # a pool or budget too small for one request, a bad size
        p.error(str(e))
    if args.json:
        json.dump(dict(steps=engine.log, summary=summary), sys.stdout, indent=1)
        print()
    else:
        print(f"pagedsim generate: {len(engine.runs)} requests, pool of {args.blocks} blocks x "
              f"{args.block_size} tokens, budget {args.budget} tokens/step, kernels: {args.backend}")
        for rec in engine.log:
            extra = "".join(f", {k.replace('_', ' ')} {v}" for k, v in rec.items()
                            if k.startswith("preempted"))
            print(f"step {rec['step']:>2}: prefill {rec['prefill_tokens']:>2} + decode "
                  f"{rec['decode_tokens']} tokens | blocks +{rec['allocated']} allocated, "
                  f"{rec['shared']} shared, {rec['copied']} copied, {rec['freed']} freed, "
                  f"{rec['free_blocks']} free{extra}\n         {' '.join(rec['seqs'])}")
        s = summary
        print(f"\ntokens computed {s['computed_tokens']}, skipped by prefix caching "
              f"{s['skipped_by_prefix_cache']}, recomputed after preemption "
              f"{s['recomputed_after_preemption']}")
        print(f"bytes copied: copy-on-write {s['cow_bytes']}, swapping {s['swap_bytes']} "
              f"({s['preempted_swap']} swapped, {s['preempted_recompute']} recomputed)")
        for i, out in enumerate(s["outputs"]):
            print(f"r{i}: {out}")
        print(f"matches the dense engine: tokens {'yes' if s['tokens_match'] else 'NO'}, "
              f"max logit difference {s['max_logit_diff']:.2e}")
    if args.draw:
        from ..draw.animate import write_trace  # matplotlib only when asked for
        frames = step_frames(engine, marks)
        for path in write_trace(frames, args.draw, name="generate"):
            print(f"wrote {path}", file=sys.stderr)
    return 0 if summary["tokens_match"] else 1
