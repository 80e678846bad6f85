"""Exercise 3.4a: the free list, with O(1) allocate and free and reference counts.

Solved; the spec is the docstring of exercises/ex3_4a_free_list.py.
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
    # ---- the exercise ------------------------------------------------------
    def _unlink(self, b: int) -> None:
        """Remove node b from the free list in O(1); num_free goes down by one."""
        p, n = self.prev[b], self.next[b]
        self.next[p] = n
        self.prev[n] = p
        self.num_free -= 1

    def _push(self, b: int) -> None:
        """Insert node b right after the head sentinel in O(1); num_free goes up by one."""
        n = self.next[self.head]
        self.prev[b], self.next[b] = self.head, n
        self.next[self.head] = b
        self.prev[n] = b
        self.num_free += 1

    def allocate(self) -> int:
        """Pop the first free block, give it a count of 1 and return it. PoolError if none."""
        b = self.next[self.head]
        if b == self.tail:
            raise PoolError("no free block")
        self._unlink(b)
        self.ref[b] = 1
        return b

    def take(self, b: int) -> int:
        """Remove a specific *free* block from wherever it is on the list; count becomes 1."""
        self._check(b)
        if self.ref[b]:
            raise PoolError(f"block {b} is in use (count {self.ref[b]}); cannot take it")
        self._unlink(b)
        self.ref[b] = 1
        return b

    def incref(self, b: int) -> int:
        """One more owner for an allocated block (a fork). Returns the new count."""
        self._check(b)
        if not self.ref[b]:
            raise PoolError(f"block {b} is free; allocate it before sharing it")
        self.ref[b] += 1
        return self.ref[b]

    def free(self, b: int) -> int:
        """One owner fewer. Push b back only when the count reaches 0. Returns the new count.

        Freeing a block whose count is already 0 is a double free: raise PoolError and
        change nothing.
        """
        self._check(b)
        if not self.ref[b]:
            raise PoolError(f"block {b} is already free (double free)")
        self.ref[b] -= 1
        if not self.ref[b]:
            self._push(b)
        return self.ref[b]
