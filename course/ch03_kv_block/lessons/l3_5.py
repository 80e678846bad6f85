"""Lesson 3.5: choosing the block size."""

from __future__ import annotations

import numpy as np

from pagedsim import blocks_needed
from pagedsim.sizing import preset

TITLE = "Choosing the block size"
TEXT = """
Small blocks (8, 16) waste little -- at most block_size - 1 slots per sequence, in its last
block -- but mean longer block tables and more allocations. Large blocks (32, 64) are
cheaper to manage but waste more, most of all on short sequences. The chapter's default
is 16. The demo measures the trade-off on a synthetic ShareGPT-like workload: for each
block size, the waste, the table entries, and the memory for Llama-2-7B; then it applies
exercise 3.5's rule (the largest size that fits the budget with at most 10% waste).
"""
TEXT_ZH = """
小 Block（8、16）浪费少——每个序列最多浪费 block_size - 1 个槽位，都在最后一个 Block 里——
但 Block Table 更长、分配更频繁；大 Block（32、64）管理开销小，却浪费更多，短序列尤甚。
本章默认 16。演示在合成的类 ShareGPT 负载上测量这一权衡：每种 block_size 的浪费、表项数和
Llama-2-7B 的显存占用，再用练习 3.5 的规则（预算内、浪费不超过 10% 的最大 block_size）做选择。
"""


def workload_lengths():
    try:
        from pagedsim.workloads import synthetic
        reqs = synthetic("sharegpt", 400, seed=0)
        return [r.prompt_len + r.output_len for r in reqs], "pagedsim.workloads sharegpt, 400 requests"
    except ImportError:
        rng = np.random.default_rng(0)
        return rng.lognormal(5.5, 0.9, 400).astype(int).clip(4, 4096).tolist(), "lognormal, 400 requests"


def demo(out_dir) -> None:
    from course.ch03_kv_block.solutions.ex3_5_block_size import choose_block_size

    lengths, what = workload_lengths()
    spec = preset("llama-2-7b")
    print(f"workload: {what}, {sum(lengths):,} tokens in all")
    print(f"{'block':>6} {'waste':>8} {'entries':>8} {'GiB (llama-2-7b)':>17}")
    for bs in (1, 8, 16, 32, 64, 128, 256):
        blocks = sum(blocks_needed(n, bs) for n in lengths)
        waste = 1 - sum(lengths) / (blocks * bs)
        print(f"{bs:>6} {waste:>8.2%} {blocks:>8,} {blocks * spec.bytes_per_block(bs) / 2**30:>17.2f}")
    budget = int(1.05 * sum(lengths) * spec.bytes_per_token())
    chosen = choose_block_size(lengths, spec.bytes_per_token(), budget)
    print(f"with a budget of {budget / 2**30:.2f} GiB and waste <= 10%, the rule picks block_size {chosen}")
