"""Exercise 3.4a (your file): the free list, with O(1) allocate and free and reference counts.

The chapter's BlockManager keeps a singly linked free list (`next_free`). This pool
keeps a *doubly* linked one, as vLLM v1's `FreeKVCacheBlockQueue` does, so that a
block can also be unlinked from the middle in O(1) (`take`, for a prefix-cache hit).
The links live in parallel lists indexed by block id, with two sentinel nodes:

    head = num_gpu_blocks, tail = num_gpu_blocks + 1
    next[x] / prev[x]  neighbours of node x on the free list
    ref[b]             owners of block b; 0 exactly when b is on the free list

allocate() pops the block right after the head; free(b) drops one owner and pushes b
back right after the head (LIFO, as in the chapter) only when its count reaches 0.

中文：本章的 BlockManager 用单向链表保存空闲块；这里像 vLLM v1 的 FreeKVCacheBlockQueue 一样
用双向链表，这样也能 O(1) 地从中间摘下一个块（take，用于前缀缓存命中）。链接存放在按块号
索引的并行列表里，另有两个哨兵：head = num_gpu_blocks，tail = num_gpu_blocks + 1；
ref[b] 是块 b 的持有者数，为 0 当且仅当 b 在空闲链表上。allocate() 取头哨兵之后的块；
free(b) 减少一个持有者，只有计数降到 0 时才把 b 插回头哨兵之后（后进先出）。
重复释放、take 一个在用的块、incref 一个空闲块都抛 PoolError，且不改变任何状态。

Reference: vLLM v1, vllm/v1/core/kv_cache_utils.py (FreeKVCacheBlockQueue) and
block_pool.py; Kwon et al., SOSP 2023, section 4.2.
"""

from __future__ import annotations


class PoolError(ValueError):
    """A caller misused the pool: a double free, an id out of range, or no free block."""


class FreeListPool:
    def __init__(self, num_gpu_blocks: int):
        if not isinstance(num_gpu_blocks, int) or num_gpu_blocks < 1:
            raise ValueError(f"num_gpu_blocks must be a positive int, got {num_gpu_blocks!r}")
        self.num_gpu_blocks = num_gpu_blocks
        self.head, self.tail = num_gpu_blocks, num_gpu_blocks + 1  # sentinel node ids
        self.ref = [0] * num_gpu_blocks  # [num_gpu_blocks] owners of each block
        self.next = [0] * (num_gpu_blocks + 2)  # [num_gpu_blocks + 2] next free-list node
        self.prev = [0] * (num_gpu_blocks + 2)  # [num_gpu_blocks + 2] previous free-list node
        self.next[self.head], self.prev[self.tail] = self.tail, self.head  # empty list
        self.prev[self.head], self.next[self.tail] = self.head, self.tail
        self.num_free = 0
        for b in reversed(range(num_gpu_blocks)):  # so that block 0 ends up first
            self._push(b)

    def free_list(self) -> list[int]:
        """The free blocks, head first (the order allocate() hands them out)."""
        out, b = [], self.next[self.head]
        while b != self.tail and len(out) <= self.num_gpu_blocks:
            out.append(b)
            b = self.next[b]
        return out

    def _check(self, b) -> int:
        if not isinstance(b, int) or not 0 <= b < self.num_gpu_blocks:
            raise PoolError(f"block {b!r} is not in [0, {self.num_gpu_blocks})")
        return b

    # take, incref and free start with self._check(b): an id that is not an int in
    # [0, num_gpu_blocks) raises PoolError before anything changes.
    # ---- the exercise: replace each TODO line and the raise under it ------
    def _unlink(self, b: int) -> None:
        """Remove node b from the free list in O(1); num_free goes down by one."""
        # TODO(student): join prev[b] and next[b] to each other, then count one free block fewer.
        raise NotImplementedError("_unlink")

    def _push(self, b: int) -> None:
        """Insert node b right after the head sentinel in O(1); num_free goes up by one."""
        # TODO(student): link b between the head and the old first block (four pointer writes).
        raise NotImplementedError("_push")

    def allocate(self) -> int:
        """Pop the first free block, give it a count of 1 and return it. PoolError if none."""
        # TODO(student): take next[head]; if it is the tail there is nothing free.
        raise NotImplementedError("allocate")

    def take(self, b: int) -> int:
        """Remove a specific *free* block from wherever it is on the list; count becomes 1."""
        # TODO(student): refuse a block in use (PoolError), otherwise unlink it and set its count.
        raise NotImplementedError("take")

    def incref(self, b: int) -> int:
        """One more owner for an allocated block (a fork). Returns the new count."""
        # TODO(student): refuse a free block (PoolError); otherwise add one to its count.
        raise NotImplementedError("incref")

    def free(self, b: int) -> int:
        """One owner fewer. Push b back only when the count reaches 0. Returns the new count.

        Freeing a block whose count is already 0 is a double free: raise PoolError and
        change nothing.
        """
        # TODO(student): refuse a double free, drop one owner, push b only when nobody is left.
        raise NotImplementedError("free")
