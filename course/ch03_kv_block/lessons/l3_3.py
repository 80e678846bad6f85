"""Lesson 3.3: logical blocks vs physical blocks (the block table)."""

from __future__ import annotations

import numpy as np

from course.ch03_kv_block.lessons import verdict
from pagedsim import KVCacheManager

# float32 softmax and sums over at most a few hundred tokens stay well inside this; a wrong
# gather (another token's K/V) is off by 0.1 or more
TOLERANCE = 1e-5


def demo(out_dir) -> None:
    m = KVCacheManager(10, 4)
    m.add_sequence("A", 5)
    m.add_sequence("B", 6)
    m.append_tokens("A", 4)
    for s in ("A", "B"):
        print(f"seq {s}: block table {m.block_table(s).blocks}, slots {m.slot_mapping(s).tolist()}")
    import cuda_kernels  # here, not at the top: it loads Numba
    from cuda_kernels import reference

    rng = np.random.default_rng(0)
    cache = rng.standard_normal((10, 2, 2, 4, 8)).astype(np.float32)  # [N, 2, H_kv, B, D]
    tables = np.zeros((2, 3), np.int32)  # [S, max_blocks]
    for i, s in enumerate(("A", "B")):
        t = m.block_table(s).blocks
        tables[i, : len(t)] = t
    lens = np.array([m.num_tokens("A"), m.num_tokens("B")], np.int32)
    # [S, H, D]: 4 query heads share 2 KV heads
    query = rng.standard_normal((2, 4, 8)).astype(np.float32)
    out = cuda_kernels.paged_attention(query, cache, tables, lens)
    ref = reference.paged_attention(query, cache, tables, lens)
    err = float(np.abs(out - ref).max())
    print(
        f"paged_attention on {cuda_kernels.backend()}: max |kernel - float64 reference| = {err:.2e}"
    )
    _climb_the_ladder(query, cache, tables, lens, ref)
    eps = float(np.finfo(np.float32).eps)
    if err <= TOLERANCE:
        verdict(
            f"max error {err:.2e} is within the tolerance {TOLERANCE:.0e} (float32 arithmetic "
            f"against a float64 reference; {err / eps:.1f} x float32's epsilon {eps:.1e}): the "
            "kernel reads every token through the block table correctly",
            f"最大误差 {err:.2e} 在容差 {TOLERANCE:.0e} 之内（float32 运算对比 float64 参"
            f"考；约为 float32 机器精度 {eps:.1e} 的 {err / eps:.1f} 倍）：内核按 Block Table "
            f"正确地读到了每个 token",
        )
    else:
        verdict(
            f"max error {err:.2e} is OUTSIDE the tolerance {TOLERANCE:.0e}: the kernel reads the "
            "wrong tokens (a wrong table entry, offset or KV head), not just rounds differently",
            f"最大误差 {err:.2e} 超出了容差 {TOLERANCE:.0e}：内核读错了 token（表项、偏移或 KV 头不"
            "对），而不只是舍入不同",
        )


def _climb_the_ladder(query, cache, tables, lens, ref) -> None:
    """Each rung of cuda_kernels/ladder/ on the demo's inputs, in reading order."""
    from cuda_kernels.ladder import RUNGS

    print("the ladder (cuda_kernels/ladder/), in reading order:")
    width = max(len(rung.file.name) for rung in RUNGS)
    for rung in RUNGS:
        try:
            err = float(np.abs(rung.decode(query, cache, tables, lens) - ref).max())
            got = f"max |rung - float64 reference| = {err:.1e}"
        except ValueError as why:  # a fast rung refuses a shape it cannot serve, and says why
            got = f"refused: {why}"
        print(f"  {rung.file.name:<{width}} {rung.idea}\n  {'':<{width}} {got}")
