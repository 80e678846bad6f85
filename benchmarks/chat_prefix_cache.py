"""Multi-turn chat through the prefix cache: prompt tokens served from cache vs computed.

    PYTHONPATH=$PWD python benchmarks/chat_prefix_cache.py [--json]

8 conversations x 6 turns, block size 16, 4096 blocks, seed 0; each prompt is the whole
history plus a new message; each response's KV is computed but for its last sampled token
(vLLM v1). It uses only calls older checkouts had too (PYTHONPATH=that checkout for a
before/after): there, generated blocks are not cached and block hits count as tokens.
"""

from __future__ import annotations

import argparse
import inspect
import json

import numpy as np

from pagedsim.policies import PrefixCachingManager


def chat_workload(
    conversations=8, turns=6, seed=0, message=(20, 120), response=(50, 300), vocab=32000
):
    """[conversation][turn] -> (message ids, response ids), seeded."""
    rng = np.random.default_rng(seed)
    return [
        [
            (
                rng.integers(0, vocab, int(rng.integers(*message))).tolist(),
                rng.integers(0, vocab, int(rng.integers(*response))).tolist(),
            )
            for _ in range(turns)
        ]
        for _ in range(conversations)
    ]


def run(chat, block_size=16, num_gpu_blocks=4096) -> dict:
    m = PrefixCachingManager(num_gpu_blocks, block_size, trace=False)
    with_ids = "token_ids" in inspect.signature(m.append_tokens).parameters
    token_stats = hasattr(m.stats, "hit_tokens")
    history = [[] for _ in chat]
    per_turn = []
    for t in range(len(chat[0])):
        prompt_total = hit_total = 0
        for c, conv in enumerate(chat):
            msg, resp = conv[t]
            prompt = history[c] + msg
            before = m.stats.hit_tokens if token_stats else m.stats.hits * block_size
            m.add_sequence((c, t), len(prompt), prompt)
            after = m.stats.hit_tokens if token_stats else m.stats.hits * block_size
            prompt_total += len(prompt)
            hit_total += after - before
            computed = resp[:-1]  # the last sampled token never gets KV
            if computed:
                ids = {"token_ids": computed} if with_ids else {}
                m.append_tokens((c, t), len(computed), **ids)
            m.free_sequence((c, t))
            history[c] = prompt + resp
        turn = {"turn": t + 1, "prompt_tokens": prompt_total, "hit_tokens": hit_total}
        per_turn.append({**turn, "computed_prefill_tokens": prompt_total - hit_total})
    total_p = sum(r["prompt_tokens"] for r in per_turn)
    total_h = sum(r["hit_tokens"] for r in per_turn)
    out = {"prompt_tokens": total_p, "hit_tokens": total_h, "hit_fraction": total_h / total_p}
    out.update(computed_prefill_tokens=total_p - total_h, per_turn=per_turn)
    return {**out, "generated_ids_reach_cache": with_ids}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conversations", type=int, default=8)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    r = run(chat_workload(args.conversations, args.turns, args.seed))
    if args.json:
        print(json.dumps(r, indent=2))
        return
    print(
        f"prompt tokens {r['prompt_tokens']}, served from cache {r['hit_tokens']} "
        f"({100 * r['hit_fraction']:.1f}%), computed prefill {r['computed_prefill_tokens']}"
    )
    for row in r["per_turn"]:
        print(
            f"  turn {row['turn']}: {100 * row['hit_tokens'] / row['prompt_tokens']:5.1f}% "
            f"from cache, {row['computed_prefill_tokens']} computed"
        )


if __name__ == "__main__":
    main()
