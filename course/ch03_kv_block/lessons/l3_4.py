"""Lesson 3.4: allocating and freeing blocks -- the free list and reference counts.

Mechanisms and versions: the plain pool's free list is a stack of ids, as vLLM v0's block
allocator keeps it; the prefix cache's is vLLM v1's FreeKVCacheBlockQueue; fork and
copy-on-write are vLLM v0 (BlockSpaceManager); sharing through the prefix cache, with a
hit capped at num_tokens - 1, is v1 (pagedsim.policies.prefix_cache).
"""

from __future__ import annotations

from pagedsim import BlockError, BlockPool, KVCacheManager
from pagedsim.policies.prefix_cache import PrefixCachingManager
from pagedsim.story import caption

TITLE = "Allocating and freeing blocks"
TITLE_ZH = "分配与释放 Block"
FIGURES = [
    (
        "3.4-tour",
        "the tour as an animated GIF and a strip of key frames: fork, copy-on-write (v0), free",
    )
]
FIGURES_ZH = [
    "导览的 GIF 动画和一排关键帧：fork、copy-on-write（v0）、释放"
]  # the captions of FIGURES, in order
TEXT = """
Blocks are borrowed from a shared pool and handed back when a sequence ends. The pool
keeps a free list of block ids: allocate() takes the head and free() puts the block back,
both O(1), no data moves. The chapter's trap: blocks can be *shared* (beam
search, parallel sampling, a forked sequence), so each block carries a reference count.
fork() adds one to every shared block; free() drops one, and the block returns to the
free list only when its count reaches 0. When a sharer appends into a shared, partly
filled last block, it first gets its own copy (copy-on-write).

Which vLLM is this? pagedsim's BlockPool keeps its free ids on a stack, as v0's block
allocator does. v1's prefix cache must also take a freed block back out of the middle
of the list (a cache hit on it), so its FreeKVCacheBlockQueue is a doubly linked queue
with O(1) removal anywhere: pagedsim's LinkedBlockPool, the one under the prefix cache,
and the one exercise 3.4a builds. fork() and copy-on-write are v0's block manager.
v1 never forks: a request for n samples becomes n requests, and they share their full
prompt blocks through the prefix cache (the same reference counts, raised by a cache
hit instead of a fork). A partly filled block is never shared in v1, so there is nothing
to copy on write. A cache hit is also capped at num_tokens - 1: the last prompt token
must be computed again to get its logits, so a prompt that fills its blocks exactly
recomputes its last block.

The demo first runs v0's way: a fork, a copy-on-write and a finish on pagedsim's manager,
printing each step's sentence, the free list and the counts, then a double free being
refused. Then v1's way: two requests with the same 32-token prompt on a prefix-caching
manager (blocks of 16): the second reuses block 0 and computes the second block's 16
tokens again, into a block of its own.
"""
TEXT_ZH = """
Block 从公共的池里借出，序列结束时交还。池维护一个空闲 Block 编号的列表：\
allocate() 取表头，free() 放回表头，都是
O(1)，不搬数据。本章的坑：Block 可能被"共享"（beam search、并行采样、fork 出的序列），所以
每个 Block 带引用计数。fork() 给每个共享块加一；free() 减一，只有降到 0 才回到空闲链表。
共享者往一个共享的、未填满的最后一个 Block 追加时，先得到自己的副本（写时复制）。

这是哪个版本的 vLLM？pagedsim 的 BlockPool 像 v0 的 Block 分配器一样，把空闲编号放在一个栈上。
v1 的前缀缓存还要把已释放的 Block 从链表中间取回（缓存命中），所以它的 FreeKVCacheBlockQueue
是可以 O(1) 从任意位置摘除的双向链表：即 pagedsim 的 LinkedBlockPool（前缀缓存下面的那个池），
也是练习 3.4a 要实现的结构。fork() 和写时复制属于 v0 的 Block 管理器。
v1 从不 fork：要 n 个采样的请求被拆成 n 个请求，它们通过
前缀缓存共享完整的 prompt Block（引用计数还是那一套，只是由缓存命中而不是 fork 加一）。v1 从不共享
未填满的 Block，所以也没有写时复制。缓存命中最多 num_tokens - 1 个 token：最后一个 prompt token
必须重新计算才能得到它的 logits，所以恰好填满整块的 prompt 要重算最后一个 Block。

演示先走 v0 的路：在 pagedsim 的管理器上做一次 fork、一次写时复制和一次结束，打印每一步的说明、
空闲链表和引用计数，再演示重复释放被拒绝。然后走 v1 的路：两个请求带着同样的 32 个 token 的 prompt
进入带前缀缓存的管理器（每块 16 个 token）：第二个复用 Block 0，把第二个 Block 的 16 个
token 重新计算一遍，写进自己的新 Block。
"""

NAME_MAP = [
    ("BlockPool.allocate()", "v0: pop from the block allocator's free ids"),
    ("LinkedBlockPool.allocate()", "FreeKVCacheBlockQueue.popleft()"),
    ("LinkedBlockPool.take(b)", "FreeKVCacheBlockQueue.remove(block)"),
    ("BlockPool.ref_count(b)", "KVCacheBlock.ref_cnt"),
    ("PrefixCachingManager.get_computed_blocks", "KVCacheManager.get_computed_blocks"),
    ("PrefixCachingManager.allocate_slots", "KVCacheManager.allocate_slots"),
]


def _v0_fork_demo() -> dict:
    m = KVCacheManager(6, 4)
    m.add_sequence("A", 6)
    m.fork("A", "B")
    m.append_tokens("B", 1)  # block 1 is shared and only half full: copy-on-write
    m.free_sequence("A")
    for snap in m.trace.snapshots:
        counts = {b: c for b, c in enumerate(snap.ref_counts) if c}
        print(f"step {snap.step}: {caption(snap)}")
        print(f"         free list {list(snap.free_list)}  counts {counts}")
    copies = m.drain_copies()
    print(f"copy-on-write pairs for copy_blocks: {copies}")
    pool = BlockPool(2, 4)
    b = pool.allocate()
    pool.free(b)
    refused = False
    try:
        pool.free(b)
    except BlockError as e:
        refused = True
        print(f"a double free is refused: BlockError: {e}")
    return {"copies": copies, "refused": refused, "free": m.num_free_blocks, "blocks": 6}


def _v1_cache_demo() -> dict:
    m = PrefixCachingManager(8, 16)
    prompt = list(range(1000, 1032))  # 32 tokens: exactly two full blocks of 16
    for seq in ("A", "B"):
        before = (m.stats.hit_tokens, m.stats.prompt_tokens)
        computed = m.get_computed_blocks(prompt)
        new = m.allocate_slots(
            seq, len(prompt) - computed.num_tokens, new_token_ids=prompt, computed=computed
        )
        hit, looked_up = m.stats.hit_tokens - before[0], m.stats.prompt_tokens - before[1]
        print(
            f"request {seq}: block table {m.block_table(seq).blocks}, cached blocks reused "
            f"{list(computed.blocks)}, new blocks {new}; hit_tokens/prompt_tokens = "
            f"{hit}/{looked_up}"
        )
    counts = {
        b: m.pool.ref_count(b)
        for b in sorted(set(m.block_table("A").blocks + m.block_table("B").blocks))
    }
    print(
        f"reference counts {counts}: block 0 is shared (count 2). Block 1 is full and cached "
        f"too, but B's "
        "hit is capped at n - 1 = 31 tokens, which holds one full block, so B computes its last "
        "16 tokens again, into block 2"
    )
    return {"shared": sorted(b for b, c in counts.items() if c > 1)}


def demo(out_dir) -> None:
    from course.ch03_kv_block.lessons import verdict

    print("v0: fork and copy-on-write")
    v0 = _v0_fork_demo()
    print("\nv1: no fork; two requests share a full prompt block through the prefix cache")
    v1 = _v1_cache_demo()
    print(
        "\nnames here -> vLLM v1 (the full map is in the project's docs: docs/vllm-name-map.md "
        "in the repository):"
    )
    for ours, theirs in NAME_MAP:
        print(f"  {ours:<42} {theirs}")
    print(
        "look at: the counts after the fork (2 on both of A's blocks), the one copy-on-write "
        "pair when B writes into the half-full shared block, and the v1 counts (block 0 shared "
        "without any fork)."
    )
    v0_ok = len(v0["copies"]) == 1 and v0["refused"]
    verdict(
        (
            f"v0 shared both blocks at the fork and copied exactly {len(v0['copies'])} (the "
            f"half-full one B wrote into), a double free was refused, and v1 shared block(s) "
            f"{v1['shared']} through the prefix cache: "
            "counts, not copies, make sharing cheap"
        )
        if v0_ok
        else f"expected one copy-on-write pair and a refused double free, got {v0['copies']} and "
        f"refused={v0['refused']}",
        (
            f"v0 在 fork 时共享了两个 Block，只复制了 {len(v0['copies'])} 个（B 写入的那个半满 "
            f"Block），重复释放被拒绝，v1 通过前缀缓存共享了 Block {v1['shared']}：让共享变便宜"
            f"的是计数，而不是复制"
        )
        if v0_ok
        else f"应有一对 copy-on-write 和一次被拒绝的重复释放，实际是 {v0['copies']} 和 "
        f"refused={v0['refused']}",
    )
