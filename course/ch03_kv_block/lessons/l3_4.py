"""Lesson 3.4: allocating and freeing blocks -- the free list and reference counts."""

from __future__ import annotations

from pagedsim import BlockError, BlockPool, KVCacheManager

TITLE = "Allocating and freeing blocks"
TITLE_ZH = "分配与释放 Block"
FIGURES = [("3.4-tour", "the tour as an animated GIF and a strip of key frames: fork, copy-on-write, free")]
TEXT = """
Blocks are borrowed from a shared pool and handed back when a sequence ends. The pool
keeps its free blocks on a linked list: allocate() pops the head and free() pushes the
block back, both O(1), no data moves. The chapter's trap: blocks can be *shared* (beam
search, parallel sampling, a forked sequence), so each block carries a reference count.
fork() adds one to every shared block; free() drops one, and the block returns to the
free list only when its count reaches 0. When a sharer appends into a shared, partly
filled last block, it first gets its own copy (copy-on-write).

The demo runs a fork, a copy-on-write and a finish on pagedsim's manager and prints each
step's sentence, the free list and the counts; then it shows a double free being refused.
"""
TEXT_ZH = """
Block 从公共的池里借出，序列结束时交还。池把空闲 Block 串成链表：allocate() 取表头，free() 插回表头，都是
O(1)，不搬数据。本章的坑：Block 可能被"共享"（beam search、并行采样、fork 出的序列），所以
每个 Block 带引用计数。fork() 给每个共享块加一；free() 减一，只有降到 0 才回到空闲链表。
共享者往一个共享的、未填满的最后一个 Block 追加时，先得到自己的副本（写时复制）。
"""


def demo(out_dir) -> None:
    m = KVCacheManager(6, 4)
    m.add_sequence("A", 6)
    m.fork("A", "B")
    m.append_tokens("B", 1)  # block 1 is shared and only half full: copy-on-write
    m.free_sequence("A")
    for snap in m.trace.snapshots:
        counts = {b: c for b, c in enumerate(snap.ref_counts) if c}
        print(f"step {snap.step}: {snap.caption}")
        print(f"         free list {list(snap.free_list)}  counts {counts}")
    print(f"copy-on-write pairs for copy_blocks: {m.drain_copies()}")
    pool = BlockPool(2, 4)
    b = pool.allocate()
    pool.free(b)
    try:
        pool.free(b)
    except BlockError as e:
        print(f"a double free is refused: BlockError: {e}")
