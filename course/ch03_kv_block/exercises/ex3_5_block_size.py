"""Exercise 3.5 (your file): how much a block size wastes, and picking one for a workload and a
budget.

A sequence of L tokens holds ceil(L / B) blocks of B slots; the empty slots at the
end of its last block are its waste (internal fragmentation, at most B - 1 per
sequence). Small blocks waste little but make long block tables and many
allocations; large blocks are cheap to manage but waste more. `choose_block_size`
makes the chapter's trade-off a rule:

    the largest candidate B such that
        all sequences fit in the budget:  allocated slots * bytes_per_token <= budget
        and the waste stays small:        empty slots / allocated slots   <= max_waste

中文：L 个 token 占 ceil(L / B) 个 B 槽位的 Block，最后一个块末尾的空槽位就是浪费（内部碎片，
每个序列最多 B - 1）。浪费比例 = 空槽位 / 已分配槽位。choose_block_size 把本章的权衡写成规则：
在候选值中取最大的 B，使所有序列放得进预算（已分配槽位 × 每 token 字节数 <= 预算），且浪费比例
<= max_waste（两处都是 <=，恰好等于也算合格）；默认候选 (8, 16, 32, 64, 128)，默认上限 10%；
没有合格值时抛出提到 budget 的 ValueError。

Reference: Kwon et al., SOSP 2023, section 7.2 (the block-size ablation; vLLM defaults to 16).
"""

from __future__ import annotations


def waste(lengths, block_size: int) -> int:
    """Empty slots in the last blocks of sequences with these token counts."""
    # TODO(student): for each length, blocks (ceil!) times block_size minus the length.
    raise NotImplementedError("waste")


def waste_fraction(lengths, block_size: int) -> float:
    """Empty slots over allocated slots (0.0 when nothing is allocated)."""
    # TODO(student): waste divided by all allocated slots; mind the empty workload.
    raise NotImplementedError("waste_fraction")


def choose_block_size(lengths, bytes_per_token: int, budget_bytes: int,
                      candidates=(8, 16, 32, 64, 128), max_waste: float = 0.1) -> int:
    """The largest candidate that fits the budget with a waste fraction <= max_waste.

    Raises ValueError naming the budget when no candidate qualifies.
    """
    # TODO(student): try candidates from largest to smallest; return the first to pass both tests.
    raise NotImplementedError("choose_block_size")
