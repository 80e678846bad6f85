"""The physical block pool: every block made up front, an O(1) free list, ref counts (3.4).

The chapter's `KVBlock` struct carries `ref_count` and a `next_free` pointer. Here
the same fields live as parallel lists indexed by block id ("struct of arrays"),
which is how a GPU-side pool would lay them out and is faster in Python than one
object per block:

    _ref[b]   how many block tables hold block b; 0 means b is on the free list
    _prev[b]  the previous block on the free list (or the head sentinel)
    _next[b]  the next block on the free list (or the tail sentinel)

The free list is an *intrusive doubly linked list* with two sentinel nodes, ids
`num_blocks` (head) and `num_blocks + 1` (tail). Why not a Python list or deque?
Because a doubly linked list can also unlink a block from the *middle* in O(1)
(`take`), which prefix caching needs when a freed-but-still-cached block is hit
again -- the same reason vLLM v1's `FreeKVCacheBlockQueue` is built this way.

This is vLLM v1's free queue (`FreeKVCacheBlockQueue`). Order: `allocate()` always
pops the head. `free_order` decides where a block whose count reaches 0 goes back:
    "lifo"  to the head, the chapter's order (the hottest block is reused first);
    "fifo"  to the tail, as vLLM v1 does with prefix caching off (older v1 appended every
            freed block). With prefix caching see policies/prefix_cache.py: recent v1 puts
            unhashed blocks at the front and hashed ones at the back.

`allocate_many` pops a run of blocks in one splice; `release` links the blocks whose
count reaches 0 back in one splice, as `_push` on each in turn would. A subclass that
decides where a freed block goes (a caching pool, say) overrides `_push` and `release`,
and `allocate`/`allocate_many` if it decides which block is handed out.

Other classes read the pool only through its public queries (the counters
`num_free_blocks`, v1's name, and `num_shared`; `ref_count`, `is_shared`, `head`,
`free_list`, `ref_counts`).

Invariants (checked by `check_invariants`):
    * walking the list from the head visits exactly `num_free_blocks` blocks, then the tail;
    * prev/next are symmetric: _prev[_next[x]] == x for every node on the list;
    * a block is on the list exactly when its count is 0;
    * `num_shared` equals the number of blocks whose count is above 1.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .errors import MAX_BLOCK_SIZE, MAX_NUM_BLOCKS, BlockError, OutOfBlocks, count_arg

FREE_ORDERS = ("lifo", "fifo")


class BlockPool:
    __slots__ = (
        "num_blocks",
        "block_size",
        "free_order",
        "_ref",
        "_prev",
        "_next",
        "_head",
        "_tail",
        "num_free_blocks",
        "num_shared",
    )

    def __init__(self, num_blocks: int, block_size: int, free_order: str = "lifo"):
        num_blocks = count_arg("num_blocks", num_blocks, 1, MAX_NUM_BLOCKS)
        block_size = count_arg("block_size", block_size, 1, MAX_BLOCK_SIZE)
        if not isinstance(free_order, str):
            raise TypeError(f"free_order must be a str, got {type(free_order).__name__}")
        if free_order not in FREE_ORDERS:
            raise ValueError(f"free_order must be one of {FREE_ORDERS}, got {free_order!r}")
        self.num_blocks = num_blocks  # physical blocks, fixed for the pool's life
        self.block_size = block_size  # tokens per block
        self.free_order = free_order  # where a freed block re-enters the list
        head, tail = num_blocks, num_blocks + 1
        self._head, self._tail = head, tail  # sentinel node ids
        self._ref = [0] * num_blocks  # [num_blocks] reference counts
        # Initial list: head -> 0 -> 1 -> ... -> n-1 -> tail.
        self._next = list(range(1, num_blocks + 1)) + [0, tail]  # [num_blocks + 2]
        self._next[num_blocks - 1] = tail
        self._prev = [head] + list(range(num_blocks - 1)) + [head, num_blocks - 1]
        self._prev[tail] = num_blocks - 1
        # Two counters everyone may read and only the pool writes (plain attributes, as
        # vLLM v1's FreeKVCacheBlockQueue.num_free_blocks is, because the manager reads them
        # on every token; check_invariants recounts both):
        self.num_free_blocks = num_blocks  # length of the free list
        self.num_shared = 0  # blocks whose count is above 1 (callers skip copy-on-write checks)

    # ---- queries -----------------------------------------------------------
    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def ref_count(self, block_id: int) -> int:
        return self._ref[self._check_id(block_id)]

    def is_shared(self, block_id: int) -> bool:
        """Is the block held by more than one table (so a write must copy it first)?"""
        return self._ref[self._check_id(block_id)] > 1

    def head(self) -> int | None:
        """The block `allocate()` would hand out next, or None when none is free."""
        b = self._next[self._head]
        return None if b == self._tail else b

    def is_free(self, block_id: int) -> bool:
        return self._ref[self._check_id(block_id)] == 0

    def free_list(self) -> list[int]:
        """Free block ids, head first: the order in which `allocate()` hands them out."""
        out, nxt, b = [], self._next, self._next[self._head]
        while b != self._tail:
            out.append(b)
            b = nxt[b]
        return out

    def ref_counts(self) -> list[int]:
        return list(self._ref)

    # ---- mutations ---------------------------------------------------------
    def allocate(self) -> int:
        """Pop the head of the free list and give it a count of 1. O(1)."""
        b = self._next[self._head]
        if b == self._tail:
            raise OutOfBlocks(1, 0, "allocate()")
        self._unlink(b)
        self._ref[b] = 1
        return b

    def allocate_many(self, k: int) -> list[int]:
        """Pop `k` blocks from the head in one splice; all or nothing."""
        if type(k) is not int or k < 0:
            k = count_arg("k", k)
        if k > self.num_free_blocks:
            raise OutOfBlocks(k, self.num_free_blocks, f"allocate_many({k})")
        nxt, ref, head = self._next, self._ref, self._head
        out, b = [], nxt[head]
        for _ in range(k):
            ref[b] = 1
            out.append(b)
            b = nxt[b]
        nxt[head] = b  # head now skips the whole run
        self._prev[b] = head
        self.num_free_blocks -= k
        return out

    def take(self, block_id: int) -> int:
        """Remove a specific free block from anywhere in the list (a prefix-cache hit). O(1)."""
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
        """Drop one owner. The block rejoins the free list only when its count hits 0.

        Returns the new count.
        """
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
        """`free` for many blocks, in order; all or nothing.

        The blocks whose count reaches 0 rejoin the list as one spliced run, in exactly the
        order `free` called on each in turn would leave them. Every id is checked as its
        count drops; on a bad one the counts already dropped are put back before the error
        is raised. When nothing is shared (every held block has count 1, the common case)
        the ids are checked first and then counted and linked in one pass."""
        if type(blocks) is not list:
            if isinstance(blocks, (str, bytes)) or not hasattr(blocks, "__iter__"):
                raise TypeError(
                    f"blocks must be an iterable of block ids, got {type(blocks).__name__}"
                )
            blocks = list(blocks)
        if not blocks:
            return
        if not self.num_shared and self._release_unshared(blocks):
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
        self._splice(gone)

    def _release_unshared(self, blocks: list[int]) -> bool:
        """`release` when no block is shared: every listed block must be a held int id
        (count 1), listed once. One pass checks each and drops its count to 0 (so one listed
        twice is found at 0 the second time); if any is not, the counts it dropped go back
        and it returns False, with nothing changed (the caller then finds the error).
        A second pass links them all in."""
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
        if done != len(blocks):
            for b in blocks[:done]:
                ref[b] = 1
            return False
        nxt, prv = self._next, self._prev
        order: Iterable[int]
        if self.free_order == "lifo":  # each one in turn at the head: the last freed leads
            left, right, order = self._head, nxt[self._head], reversed(blocks)
        else:
            left, right, order = prv[self._tail], self._tail, blocks
        for b in order:
            nxt[left] = b
            prv[b] = left
            left = b
        nxt[left] = right
        prv[right] = left
        self.num_free_blocks += len(blocks)
        return True

    def _splice(self, gone: list[int]) -> None:
        """Link blocks whose count just reached 0 onto the list, as `_push` each in turn would."""
        if not gone:
            return
        nxt, prv = self._next, self._prev
        if self.free_order == "lifo":  # each one in turn at the head: the last freed leads
            gone.reverse()
            left, right = self._head, nxt[self._head]
        else:
            left, right = prv[self._tail], self._tail
        for b in gone:
            nxt[left] = b
            prv[b] = left
            left = b
        nxt[left] = right
        prv[right] = left
        self.num_free_blocks += len(gone)

    # ---- the intrusive list --------------------------------------------------
    def _unlink(self, b: int) -> None:
        p, n = self._prev[b], self._next[b]
        self._next[p] = n
        self._prev[n] = p
        self.num_free_blocks -= 1

    def _push(self, b: int, to_head: bool | None = None) -> None:
        """Put block b back on the free list: at the head, or at the tail (default: free_order)."""
        if to_head is None:
            to_head = self.free_order == "lifo"
        if to_head:  # insert right after the head sentinel
            p = self._head
            n = self._next[p]
        else:  # insert right before the tail sentinel
            n = self._tail
            p = self._prev[n]
        self._prev[b], self._next[b] = p, n
        self._next[p] = b
        self._prev[n] = b
        self.num_free_blocks += 1

    def _check_id(self, block_id: object) -> int:
        # TypeError if not an int
        b = block_id if type(block_id) is int else count_arg("block id", block_id, low=None)
        if not 0 <= b < self.num_blocks:
            raise BlockError(f"block {b} is out of range [0, {self.num_blocks})")
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
        elif min(blocks) < 0 or max(blocks) >= self.num_blocks:
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
        nxt, prv = self._next, self._prev
        assert prv[self._head] == self._head, "head sentinel's prev was overwritten"
        seen, node, steps = set(), self._head, 0
        while node != self._tail:
            n = nxt[node]
            assert prv[n] == node, f"prev/next not symmetric between {node} and {n}"
            node = n
            if node == self._tail:
                break
            assert 0 <= node < self.num_blocks, f"free list reaches invalid node {node}"
            assert node not in seen, f"free list has a cycle through block {node}"
            seen.add(node)
            steps += 1
            assert steps <= self.num_blocks, "free list is longer than the pool"
        assert steps == self.num_free_blocks, (
            f"free list walk has {steps} blocks but num_free_blocks is {self.num_free_blocks}"
        )
        shared = sum(1 for count in self._ref if count > 1)
        assert shared == self.num_shared, (
            f"{shared} blocks have a count above 1 but num_shared is {self.num_shared}"
        )
        for b, count in enumerate(self._ref):
            assert count >= 0, f"block {b} has negative ref count {count}"
            assert (count == 0) == (b in seen), (
                f"block {b} has ref count {count} but is "
                f"{'on' if b in seen else 'not on'} the free list"
            )
