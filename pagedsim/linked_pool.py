"""The block pool with vLLM v1's free queue: an intrusive doubly linked list (3.4).

A prefix cache takes a freed-but-cached block back from the middle of the free list, which
`BlockPool`'s stacks cannot do in O(1); vLLM v1's `FreeKVCacheBlockQueue` is a doubly linked
list for that reason, and so is this one (the chapter's `next_free`, plus a `prev`). Only
the free-list primitives differ from `BlockPool`'s:

    _prev[b], _next[b]  neighbours on the free list; the sentinels are ids num_gpu_blocks
                        (head) and num_gpu_blocks + 1 (tail)

Invariants (checked by `check_invariants`, on top of the pool's own):
    * walking the list from the head visits exactly `num_free_blocks` blocks, then the tail;
    * prev/next are symmetric: _prev[_next[x]] == x for every node on the list.
"""

from __future__ import annotations

from collections.abc import Iterable

from .block_pool import BlockPool


class LinkedBlockPool(BlockPool):
    """A BlockPool whose free list is a doubly linked list: O(1) removal from anywhere."""

    __slots__ = ("_prev", "_next", "_head", "_tail")

    def _make_free_list(self) -> None:
        num_gpu_blocks = self.num_gpu_blocks
        head, tail = num_gpu_blocks, num_gpu_blocks + 1
        self._head, self._tail = head, tail  # sentinel node ids
        # head -> 0 -> 1 -> ... -> n-1 -> tail
        self._next = list(range(1, num_gpu_blocks + 1)) + [0, tail]  # [num_gpu_blocks + 2]
        self._next[num_gpu_blocks - 1] = tail
        self._prev = [head] + list(range(num_gpu_blocks - 1)) + [head, num_gpu_blocks - 1]
        self._prev[tail] = num_gpu_blocks - 1

    def head(self) -> int | None:
        b = self._next[self._head]
        return None if b == self._tail else b

    def free_list(self) -> list[int]:
        out, nxt, b = [], self._next, self._next[self._head]
        while b != self._tail:
            out.append(b)
            b = nxt[b]
        return out

    def _pop_run(self, k: int) -> list[int]:
        nxt, head = self._next, self._head
        out, b = [], nxt[head]
        for _ in range(k):
            out.append(b)
            b = nxt[b]
        nxt[head] = b  # head now skips the whole run
        self._prev[b] = head
        self.num_free_blocks -= k
        return out

    def _push_run(self, gone: list[int]) -> None:
        nxt, prv = self._next, self._prev
        order: Iterable[int]
        if self.free_order == "fifo":  # after the tail, in order
            left, right, order = prv[self._tail], self._tail, gone
        elif self.free_order == "lifo":  # each one in turn at the head: the last freed leads
            left, right, order = self._head, nxt[self._head], reversed(gone)
        else:  # prepend: one run at the head, in order (v1's prepend_n)
            left, right, order = self._head, nxt[self._head], gone
        for b in order:
            nxt[left] = b
            prv[b] = left
            left = b
        nxt[left] = right
        prv[right] = left
        self.num_free_blocks += len(gone)

    def _push(self, b: int, to_head: bool | None = None) -> None:
        if to_head is None:
            to_head = self.free_order != "fifo"
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

    def _unlink(self, b: int) -> None:
        p, n = self._prev[b], self._next[b]
        self._next[p] = n
        self._prev[n] = p
        self.num_free_blocks -= 1

    def _checked_free_list(self) -> list[int]:
        nxt, prv = self._next, self._prev
        assert prv[self._head] == self._head, "head sentinel's prev was overwritten"
        out: list[int] = []
        seen, node = set(), self._head
        while node != self._tail:
            n = nxt[node]
            assert prv[n] == node, f"prev/next not symmetric between {node} and {n}"
            node = n
            if node == self._tail:
                break
            assert 0 <= node < self.num_gpu_blocks, f"free list reaches invalid node {node}"
            assert node not in seen, f"free list has a cycle through block {node}"
            seen.add(node)
            out.append(node)
            assert len(out) <= self.num_gpu_blocks, "free list is longer than the pool"
        assert len(out) == self.num_free_blocks, (
            f"free list walk has {len(out)} blocks but num_free_blocks is {self.num_free_blocks}"
        )
        return out
