"""Lesson 3.5: choosing the block size -- waste against table length and the kernel's lookups.

One waste definition throughout, the same as figure 3.5 (pagedsim/draw/tradeoff.py) and
`pagedsim sweep` (pagedsim/labs/sweep.py): over every decode step of every request,
empty slots / allocated slots, i.e. exercise 3.5's waste_fraction applied to the
sequence length after each step. Workload: synthetic("sharegpt", 500, seed=0).

Reference: Kwon et al., SOSP 2023, section 7.1 (kernel microbenchmark) and 7.2 (block size).
"""

from __future__ import annotations

from course.ch03_kv_block.lessons import reference, verdict
from pagedsim.sizing import preset

NUM_REQUESTS, SEED, SIZES = 500, 0, (1, 4, 8, 16, 32, 64, 128, 256)
SHARED_PREFIX = 100  # tokens two prompts share (a system prompt), for the prefix-cache column


def step_lengths():
    """The sequence length after every decode step of the workload (the figure's lengths)."""
    from pagedsim.workloads import synthetic

    requests = synthetic("sharegpt", NUM_REQUESTS, seed=SEED)
    return [n for r in requests for n in range(r.prompt_len + 1, r.total_len + 1)]


def demo(out_dir) -> None:
    ref = reference("3.5")
    choose_block_size, waste_fraction = ref.choose_block_size, ref.waste_fraction

    lengths = step_lengths()
    spec = preset("llama-2-7b")
    per_lookup = lambda b: b * 2 * spec.num_kv_heads * spec.head_dim * spec.dtype_bytes  # noqa: E731 - one layer
    print(
        f"workload: synthetic ShareGPT, {NUM_REQUESTS} requests, seed {SEED}: {len(lengths):,} "
        f"decode steps"
    )
    print(
        f"{'B':>4} {'waste':>7} {'lookups/seq/step':>17} {'KV bytes per lookup (1 layer)':>30} "
        f"{'hit of a ' + str(SHARED_PREFIX) + '-token prefix':>26}"
    )
    for b in SIZES:
        entries = sum(-(-n // b) for n in lengths) / len(lengths)
        hit = SHARED_PREFIX // b * b  # full blocks only (v1)
        print(
            f"{b:>4} {waste_fraction(lengths, b):>7.1%} {entries:>17.1f} {per_lookup(b):>30,} "
            f"{hit:>26}"
        )
    print(
        "same waste numbers: `pagedsim figures --only 3.5-block-size-tradeoff` and "
        f"`pagedsim sweep --num-requests {NUM_REQUESTS} --figure DIR`"
    )
    unbounded = 10**18  # the pool's size is set by the GPU, not by B: no budget limit here
    chosen = {}
    for limit in (0.02, 0.05):
        chosen[limit] = choose_block_size(lengths, spec.bytes_per_token(), unbounded, SIZES, limit)
        print(f"exercise 3.5's rule, waste <= {limit:.0%}: block_size {chosen[limit]}")
    print(
        "look at: B=16 is the first size whose lookups per step drop below ~30 while waste stays "
        "under 2%."
    )
    w16 = waste_fraction(lengths, 16)
    verdict(
        f"the rule picks {chosen[0.02]} at a 2% waste limit and {chosen[0.05]} at 5%; at "
        f"vLLM's default 16 this workload wastes {w16:.1%}, so 16 is "
        f"{'inside' if w16 <= 0.02 else 'outside'} the 2% limit, and smaller "
        "blocks would save little memory while multiplying the kernel's lookups",
        f"浪费上限 2% 时规则选 {chosen[0.02]}，5% 时选 {chosen[0.05]}；在 vLLM 默认的 16 下这个负载"
        f"浪费 {w16:.1%}，{'在' if w16 <= 0.02 else '超出'} 2% 上限"
        f"{'之内' if w16 <= 0.02 else ''}；更小的 Block 省不了多少显存，却让内核的查表次数成倍增加",
    )
