"""Eviction and preemption policies compared on one trace: hit rate, recomputed tokens,
bytes swapped.

One seeded trace (synthetic, or `--trace FILE`) is served with prefix caching on, in the
same KV memory, once per combination of

    cached-block eviction   lru (v1's order) | lfu | fifo    (policies/cache_pool.py)
    scheduler               v1: token budget, recompute only (scheduler_v1.py);
                            v0: recompute | swap (policies/preemption.py)

v0's `swap` gets `--swap-space` GiB of host blocks (v0's default: 4 GiB). Per run: hit
rate in tokens (in v1 rows a preempted request's re-admission lookup is counted apart, in
`preempted_hit_rate`, as v1's PrefixCacheStats does; v0 counts every admission),
evictions, preemptions, tokens discarded and actually recomputed, bytes swapped, steps.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from .. import workloads
from ..errors import MAX_BLOCK_SIZE, MAX_NUM_GPU_BLOCKS
from ..io.args import ArgParser, float_in, int_in
from ..policies import EVICTION_POLICIES, PREEMPTION_POLICIES, PrefixCachingManager, make_policy
from ..scheduler import make_scheduler
from ..sizing import preset
from .waste import DEFAULT_MEMORY_TOKENS, add_trace_args, load_requests, text_table

COLUMNS = tuple(
    """mode eviction preemption hit_rate evictions preemptions discarded_tokens
    recomputed_tokens swapped_mib steps""".split()
)

# one run's row, by COLUMNS: the policy names, then its counts and rates
PolicyRow = dict[str, str | float]


def compare(
    requests: Sequence[workloads.Request],
    tokens: Sequence[np.ndarray],
    *,
    block_size: int = 16,
    memory_tokens: int = DEFAULT_MEMORY_TOKENS,
    swap_space: float = 4.0,
    model: str = "opt-13b",
) -> list[PolicyRow]:
    block_bytes = preset(model).bytes_per_block(block_size)
    num_cpu_blocks = int(swap_space * 2**30 // block_bytes)
    rows: list[PolicyRow] = []
    runs = [("v1", e, "recompute") for e in EVICTION_POLICIES]
    runs += [("v0", e, p) for e in EVICTION_POLICIES for p in PREEMPTION_POLICIES]
    for mode, eviction, preemption in runs:
        m = PrefixCachingManager(
            memory_tokens // block_size, block_size, eviction=eviction, trace=False
        )
        if mode == "v1":
            s = make_scheduler(requests, m, mode="v1", tokens=tokens, record=False).run()
        else:
            policy = make_policy(preemption, num_cpu_blocks=num_cpu_blocks, block_bytes=block_bytes)
            s = make_scheduler(requests, m, policy, tokens=tokens, record=False).run()
        rows.append(
            {
                "mode": mode,
                "eviction": eviction,
                "preemption": preemption,
                "hit_rate": m.stats.hit_rate,
                "preempted_hit_rate": (
                    m.stats.preempted_hit_tokens / m.stats.preempted_prompt_tokens
                    if m.stats.preempted_prompt_tokens
                    else 0.0
                ),
                "evictions": m.stats.evictions,
                "block_floor": m.stats.block_floor,
                "preemptions": s.preemptions,
                "discarded_tokens": s.discarded_tokens,
                "recomputed_tokens": s.recomputed_tokens,
                "swapped_mib": getattr(getattr(s, "policy", None), "bytes_swapped", 0) / 2**20,
                "steps": s.now,
            }
        )
    return rows


def _cell(column: str, value: str | float) -> str:
    if isinstance(value, str):
        return value
    if column == "hit_rate":
        return f"{100 * value:.1f}%"
    return f"{value:.0f}" if column == "swapped_mib" else str(value)


def main(argv: list[str]) -> int:
    ap = ArgParser(prog="pagedsim policies", description=__doc__.split("\n\n")[0])
    add_trace_args(ap)
    ap.set_defaults(num_requests=300)
    ap.add_argument("--block-size", type=int_in(1, MAX_BLOCK_SIZE), default=16)
    mem = int_in(1, MAX_BLOCK_SIZE * MAX_NUM_GPU_BLOCKS)
    ap.add_argument("--memory-tokens", type=mem, default=DEFAULT_MEMORY_TOKENS)
    swap = "host swap space in GiB, as vLLM v0's --swap-space (default 4)"
    ap.add_argument("--swap-space", type=float_in(0, 2**20), default=4.0, help=swap)
    ap.add_argument("--model", default="opt-13b", help="sizing preset for block bytes")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.memory_tokens < args.block_size:
        ap.error("--memory-tokens must hold at least one block (>= --block-size)")
    requests, source = load_requests(args)  # errors: one line from pagedsim.app.cli.main
    tokens = workloads.prompt_tokens(requests, args.seed)
    sizes = {"block_size": args.block_size, "memory_tokens": args.memory_tokens}
    rows = compare(requests, tokens, **sizes, swap_space=args.swap_space, model=args.model)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(
        f"trace: {source}; block size {args.block_size}, memory {args.memory_tokens} token "
        f"slots, host swap {args.swap_space:g} GiB of {args.model} blocks"
    )
    print(text_table([COLUMNS, *(tuple(_cell(c, r[c]) for c in COLUMNS) for r in rows)]))
    return 0
