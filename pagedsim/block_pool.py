"""The physical block pool: every block made up front, a free list, ref counts (3.4).

The chapter's `KVBlock` carries `ref_count` and `next_free`; here the counts live in a list
indexed by block id (struct of arrays), and the free list is two Python stacks, as vLLM
v0's allocator keeps them. Removal from the middle (`take`, a prefix-cache hit) is a
search here; vLLM v1's `FreeKVCacheBlockQueue` is a doubly linked list for O(1) removal:
`LinkedBlockPool` (linked_pool.py) replaces the free-list primitives. `free_order` says
where a block whose count reaches 0 goes: "lifo" to the head (the chapter's order, v0's),
"prepend" to the head as one run in the order given (v1 0.34's `prepend_n`), "fifo" to
the tail (older v1).

Invariants (checked by `check_invariants`):
    * the free list holds exactly `num_free_blocks` valid ids, none twice;
    * a block is on the list exactly when its count is 0;
    * `num_shared` equals the number of blocks whose count is above 1.
"""

from __future__ import annotations

from typing import Any

from .errors import (
    MAX_BLOCK_SIZE,
    MAX_NUM_GPU_BLOCKS,
    BlockError,
    OutOfBlocks,
    choice_arg,
    count_arg,
)

FREE_ORDERS = ("lifo", "prepend", "fifo")


class BlockPool:
    __slots__ = (
        "num_gpu_blocks",
        "block_size",
        "free_order",
        "_ref",
        "_free",
        "_back",
        "num_free_blocks",
        "num_shared",
    )

    def __init__(self, num_gpu_blocks: int, block_size: int, free_order: str = "lifo"):
        num_gpu_blocks = count_arg("num_gpu_blocks", num_gpu_blocks, 1, MAX_NUM_GPU_BLOCKS)
        block_size = count_arg("block_size", block_size, 1, MAX_BLOCK_SIZE)
        choice_arg("free_order", free_order, FREE_ORDERS)
        self.num_gpu_blocks = num_gpu_blocks  # physical blocks, fixed for the pool's life
        self.block_size = block_size  # tokens per block
        self.free_order = free_order  # where a freed block re-enters the list
        self._ref = [0] * num_gpu_blocks  # [num_gpu_blocks] reference counts
        # read by everyone on every token, written only here (as v1's num_free_blocks)
        self.num_free_blocks = num_gpu_blocks  # length of the free list
        self.num_shared = 0  # blocks whose count is above 1 (callers skip copy-on-write checks)
        self._make_free_list()

    # ---- the free list: ids on two stacks (LinkedBlockPool replaces this section) ----
    def _make_free_list(self) -> None:
        """Every block free, head first: 0, 1, ..., num_gpu_blocks - 1."""
        self._free = list(range(self.num_gpu_blocks - 1, -1, -1))  # [num_free] the head last
        self._back: list[int] = []  # blocks freed to the tail, oldest first

    def head(self) -> int | None:
        """The block `allocate()` would hand out next, or None when none is free."""
        if self._free:
            return self._free[-1]
        return self._back[0] if self._back else None

    def free_list(self) -> list[int]:
        """Free block ids, head first: the order in which `allocate()` hands them out."""
        return self._free[::-1] + self._back

    def _pop_run(self, k: int) -> list[int]:
        """Take the first k (1 <= k <= num_free_blocks) blocks off the list, head first."""
        free = self._free
        if len(free) < k:  # the tail's blocks come next: they go under the head's, in order
            free[:0] = self._back[::-1]
            self._back.clear()
        run = free[-k:]
        del free[-k:]
        run.reverse()
        self.num_free_blocks -= k
        return run

    def _push_run(self, gone: list[int]) -> None:
        """Put blocks whose count just reached 0 back, as `_push` on each in turn would."""
        if self.free_order == "lifo":  # each one in turn on top: the last freed leads
            self._free += gone
        elif self.free_order == "prepend":  # one run on top, in order: the first leads
            self._free += gone[::-1]
        else:
            self._back += gone
        self.num_free_blocks += len(gone)

    def _push(self, b: int, to_head: bool | None = None) -> None:
        """Put block b back on the free list: at the head, or at the tail (default: free_order)."""
        if to_head is None:
            to_head = self.free_order != "fifo"
        (self._free if to_head else self._back).append(b)
        self.num_free_blocks += 1

    def _unlink(self, b: int) -> None:
        """Take free block b off the list, wherever it is: O(1) at the head, else a search."""
        free = self._free
        if free and free[-1] == b:
            free.pop()
        else:
            try:
                free.remove(b)  # one search: the caller checked that b is free
            except ValueError:
                self._back.remove(b)
        self.num_free_blocks -= 1

    def _checked_free_list(self) -> list[int]:
        """The free list, head first, after checking its structure (for check_invariants)."""
        free = self.free_list()
        assert all(type(b) is int and 0 <= b < self.num_gpu_blocks for b in free), (
            f"free list holds an id outside the pool: {free}"
        )
        assert len(set(free)) == len(free), "free list names a block twice"
        assert len(free) == self.num_free_blocks, (
            f"free list has {len(free)} blocks but num_free_blocks is {self.num_free_blocks}"
        )
        return free

    # ---- queries -----------------------------------------------------------
    @property
    def num_used(self) -> int:
        return self.num_gpu_blocks - self.num_free_blocks

    def ref_count(self, block_id: int) -> int:
        return self._ref[self._check_id(block_id)]

    def is_shared(self, block_id: int) -> bool:
        """Is the block held by more than one table (so a write must copy it first)?"""
        return self._ref[self._check_id(block_id)] > 1

    def is_free(self, block_id: int) -> bool:
        return self._ref[self._check_id(block_id)] == 0

    def ref_counts(self) -> list[int]:
        return list(self._ref)

    # ---- mutations ---------------------------------------------------------
    def allocate(self) -> int:
        """Take the head of the free list and give it a count of 1. O(1)."""
        if not self.num_free_blocks:
            raise OutOfBlocks(1, 0, "allocate()")
        (b,) = self._pop_run(1)
        self._ref[b] = 1
        return b

    def allocate_many(self, k: int) -> list[int]:
        """Take `k` blocks off the head at once, head first; all or nothing."""
        if type(k) is not int or k < 0:
            k = count_arg("k", k)
        if k > self.num_free_blocks:
            raise OutOfBlocks(k, self.num_free_blocks, f"allocate_many({k})")
        if not k:
            return []
        ref, out = self._ref, self._pop_run(k)
        for b in out:
            ref[b] = 1
        return out

    def take(self, block_id: int) -> int:
        """Remove a specific free block from anywhere in the list (a prefix-cache hit)."""
        b = self._check_id(block_id)
        if self._ref[b]:
            raise BlockError(f"block {b} is not free (ref count {self._ref[b]}); cannot take it")
        self._unlink(b)
        self._ref[b] = 1
        return b

    def incref(self, block_id: int) -> int:
        """Add an owner to an allocated block (fork / beam search). Returns the new count."""
        b = self._check_id(block_id)
        if not self._ref[b]:
            raise BlockError(f"block {b} is free; allocate it before sharing it")
        count = self._ref[b] + 1
        self._ref[b] = count
        if count == 2:
            self.num_shared += 1
        return count

    def free(self, block_id: int) -> int:
        """Drop one owner; the new count. At 0 the block rejoins the free list."""
        b = self._check_id(block_id)
        count = self._ref[b]
        if not count:
            raise BlockError(f"block {b} is already free (double free)")
        count -= 1
        self._ref[b] = count
        if not count:
            self._push(b)
        elif count == 1:
            self.num_shared -= 1
        return count

    def release(self, blocks: Any) -> None:
        """`free` for many blocks, in order; all or nothing (on a bad id the counts already
        dropped go back first). The blocks reaching 0 rejoin the list in one `_push_run`."""
        if type(blocks) is not list:
            if isinstance(blocks, (str, bytes)) or not hasattr(blocks, "__iter__"):
                raise TypeError(
                    f"blocks must be an iterable of block ids, got {type(blocks).__name__}"
                )
            blocks = list(blocks)
        if not blocks:
            return
        if not self.num_shared and self._drop_unshared(blocks):
            self._push_run(blocks)
            return
        ref, gone, unshared, done = self._ref, [], 0, 0
        try:
            for b in blocks:
                count = ref[b] - 1  # TypeError / IndexError for a bad id: undone below
                if count < 0 or type(b) is not int or b < 0:
                    raise IndexError(b)
                ref[b] = count
                done += 1
                if not count:
                    gone.append(b)
                elif count == 1:
                    unshared += 1
        except (IndexError, TypeError):
            for b in blocks[:done]:
                ref[b] += 1
            checked = self._check_ids(blocks)  # the precise error for the first bad id
            return self.release(checked)  # NumPy integers: valid ids after all
        self.num_shared -= unshared
        if gone:
            self._push_run(gone)

    def _drop_unshared(self, blocks: list[int]) -> bool:
        """`release`'s one pass when nothing is shared: drop every count from 1 to 0; False,
        with nothing changed, at an id that is not held once (the caller finds the error)."""
        ref = self._ref
        done = 0  # blocks checked and dropped to 0
        try:
            for b in blocks:
                if ref[b] != 1 or type(b) is not int or b < 0:
                    break
                ref[b] = 0
                done += 1
        except (IndexError, TypeError):
            pass
        if done == len(blocks):
            return True
        for b in blocks[:done]:
            ref[b] = 1
        return False

    def _check_id(self, block_id: object) -> int:
        # TypeError if not an int
        b = block_id if type(block_id) is int else count_arg("block id", block_id, low=None)
        if not 0 <= b < self.num_gpu_blocks:
            raise BlockError(f"block {b} is out of range [0, {self.num_gpu_blocks})")
        return b

    def _check_ids(self, given: Any) -> list[int]:
        """`given` as a list of valid, allocated ids, each held at least as often as listed."""
        if isinstance(given, (str, bytes)) or not hasattr(given, "__iter__"):
            raise TypeError(f"blocks must be an iterable of block ids, got {type(given).__name__}")
        blocks: list[int] = list(given)
        if not blocks:
            return blocks
        if set(map(type, blocks)) != {int}:
            blocks = [self._check_id(b) for b in blocks]
        elif min(blocks) < 0 or max(blocks) >= self.num_gpu_blocks:
            for b in blocks:
                self._check_id(b)  # raises for the first one out of range
        ref = self._ref
        if len(set(blocks)) == len(blocks):
            if 0 in map(ref.__getitem__, blocks):
                bad: int | None = next(b for b in blocks if not ref[b])
                raise BlockError(f"block {bad} is already free (double free)")
            return blocks
        listed: dict[int, int] = {}
        for b in blocks:
            listed[b] = listed.get(b, 0) + 1
        bad = next((b for b, k in listed.items() if ref[b] < k), None)
        if bad is not None:
            raise BlockError(
                f"block {bad} is listed {listed[bad]} times but has {ref[bad]} owner(s)"
            )
        return blocks

    # ---- invariants ----------------------------------------------------------
    def check_invariants(self) -> None:
        """Raise AssertionError if the pool's internal structure has drifted."""
        on_list = set(self._checked_free_list())
        shared = sum(1 for count in self._ref if count > 1)
        assert shared == self.num_shared, (
            f"{shared} blocks have a count above 1 but num_shared is {self.num_shared}"
        )
        for b, count in enumerate(self._ref):
            assert count >= 0, f"block {b} has negative ref count {count}"
            assert (count == 0) == (b in on_list), (
                f"block {b} has ref count {count} but is "
                f"{'on' if b in on_list else 'not on'} the free list"
            )
