"""Lesson 3.3: logical blocks vs physical blocks (the block table)."""

from __future__ import annotations

import numpy as np

from course.ch03_kv_block.lessons import verdict
from pagedsim import KVCacheManager

TITLE = "Logical blocks vs physical blocks"
TITLE_ZH = "逻辑块与物理块"
FIGURES = [
    (
        "3.3-logical-vs-physical",
        "two sequences contiguous in logical blocks, scattered in physical memory",
    )
]
FIGURES_ZH = ["两个序列在逻辑块上连续，在物理内存里分散"]
TEXT = """
A sequence's tokens are contiguous only in *logical* space: token p is in logical block
p // block_size, at offset p % block_size. The block table maps each logical block to a
physical block, wherever the pool found one, so a sequence's memory can be scattered:
block_table[logical] = physical, one array lookup, O(1). A token's slot (its flat index
in the cache) is physical * block_size + offset; the write_kv kernel scatters new K/V to
slots, and the paged_attention kernel reads them back through the table.

The demo interleaves two sequences so their blocks mix, prints the tables and slots, and
runs the paged_attention kernel against a NumPy float64 reference.

Reading the kernel you just ran. paged_attention is the top of a ladder you can climb one
file at a time, one idea per file. Start with cuda_kernels/reference.py (the float64
meaning, about 30 lines), then cuda_kernels/ladder/ in this order: rung1_naive.py (one
thread per sequence and head, two passes), rung2_cta.py (a thread block, a shared-memory
sum), rung3_online.py (online softmax, one pass), rung4_shuffle.py (warp shuffles),
rung5_vector.py (16-byte loads), rung6_tokens.py (several tokens per warp step and the
(m, l, acc) merge), rung7_gqa.py (K/V read once per group of query heads), rung8_split.py
(split-K, the merge across warps), rung9_cp_async.py (a cp.async ring),
rung10_tensor.py (tensor cores) and rung11_production.py (what fast/ adds). Every rung has
paged_attention's meaning: RUNGS[k].decode(query, cache, tables, lens). The demo lists them
and checks each against the same reference; a rung that cannot serve the demo's float32 K/V
(rung10's tensor cores take float16) says why instead. `python -m cuda_kernels.report
--ladder --arch sm_90` (the ptx extra) measures them without a GPU: SASS per K/V byte in the
steady loop, registers, spills; cuda_kernels/README.md has the table, the glossary of the
kernels' constant names, and where each PTX technique is explained.
"""
TEXT_ZH = """
序列的 token 只在"逻辑"上连续：第 p 个 token 位于逻辑块 p // block_size 的偏移 p % block_size。
Block Table 把每个逻辑块映射到物理块（池里任何位置都行），所以序列的内存可以分散存放：
block_table[逻辑块] = 物理块，一次数组索引，O(1)。token 的 slot = 物理块 × block_size + 偏移；
write_kv 内核按 slot 写入新的 K/V，paged_attention 内核再通过 Block Table 读回。

读懂刚才运行的内核：paged_attention 是一架梯子的顶端，每个文件只多一个想法。先读
cuda_kernels/reference.py（float64 的定义，约 30 行），再按顺序读 cuda_kernels/ladder/：
rung1_naive.py、rung2_cta.py、rung3_online.py、rung4_shuffle.py、rung5_vector.py、
rung6_tokens.py、rung7_gqa.py、rung8_split.py、rung9_cp_async.py、rung10_tensor.py
（张量核心）和 rung11_production.py（fast/ 在此之上加了什么）。每一级都与 paged_attention 含义相同：
RUNGS[k].decode(query, cache, tables, lens)。演示会逐级列出并与同一参考比对；不能处理演示中
float32 K/V 的一级（rung10 的张量核心只接受 float16）会说明原因；
`python -m cuda_kernels.report --ladder --arch sm_90` 无需 GPU 即可统计每级的 SASS。
"""

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
