"""Exercise 3.4b (your file): fork, and copy-on-write when a sequence appends after a fork.

Beam search and parallel sampling fork a sequence: the child starts with the
parent's whole block table and every block gains an owner (its count goes up).
Full blocks are never written again, so they can stay shared for ever. The last
block is different when it is only partly filled: the next token of *either*
sequence would be written into it, over the other one's future token. So before
writing into a shared, partly filled last block, the writer gets a private copy:

    1. allocate a new block             (dst)
    2. record (src, dst) for the copy kernel (cuda_kernels.copy_blocks)
    3. drop the writer's ownership of src (pool.free: the count goes down by one)
    4. put dst in the writer's table

Tables here are plain lists of physical block ids; `pool` is a pagedsim.BlockPool
(allocate, incref, free, ref_count).

中文：beam search 和并行采样会 fork 一个序列：子序列拿到父序列完整的 Block Table，每个块
多一个持有者。写满的块不会再被写，可以一直共享；最后一个块如果没写满，两个序列的下一个
token 都会写进去。所以往共享的、未写满的最后一个块写之前，写者先得到私有副本：分配新块 dst，
记录 (src, dst) 交给拷贝内核，pool.free(src) 放弃对 src 的持有，把 dst 放进自己的表。序列结束时
free_table 从最后一个块往前释放。

Reference: Kwon et al., SOSP 2023, section 4.4 (parallel sampling, beam search,
copy-on-write at block granularity).
"""

from __future__ import annotations


def fork(pool, parent: list[int]) -> list[int]:
    """Return the child's table: the same blocks as `parent`, each with one more owner."""
    # TODO(student): copy the list and add one owner to every block in it.
    raise NotImplementedError("fork")


def slot_for_append(pool, table: list[int], position: int, block_size: int, copies: list) -> int:
    """Prepare the slot for token `position` (the sequence's current length) and return it.

    Changes `table` in place: a new block when the last one is full (or the table is
    empty), a private copy when the last block is partly full and shared; in the
    second case (src, dst) is appended to `copies`.
    """
    # TODO(student): new block at offset 0; copy-on-write if the last block's count is above 1.
    raise NotImplementedError("slot_for_append")


def free_table(pool, table: list[int]) -> None:
    """The sequence finished: drop its ownership of every block (last block first)."""
    # TODO(student): pool.free every block, the last one first (reversed), then empty the table.
    raise NotImplementedError("free_table")
