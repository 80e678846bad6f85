"""The prefix cache's block pool: cached free blocks, a hash index, eviction by name (v1).

The reference is vLLM v1's block_pool.py: a freed block keeps its contents and hash until
it is handed out again. On `LinkedBlockPool`'s free list:

    head -> [uncached free blocks ...] [cached free blocks ...] <- tail

Freed blocks without a hash go to the head, with a hash to the tail (vLLM 0.34's
`free_blocks`: `prepend_n`, then `append_n`). `allocate()` takes the head while it is
uncached, else evicts the cached free block with the smallest key of
`EVICTION_KEYS[eviction]` (the smallest key goes first):

    lru   the one whose last owner let go longest ago (v1's only order: free-queue order)
    lfu   the one hit the fewest times (ties: lru)            -- ours, for the lab
    fifo  the one cached first                                -- ours, for the lab

How to add one: an entry (pool, block, now) -> sortable key in `EVICTION_KEYS`; the
manager, the lab and tests/core/test_registries.py take their names from it.

The index maps a chained hash to its blocks (v1's `cached_block_hash_to_block`). A hit is
never trusted on the hash alone: the tokens are compared, and so is the parent's *content
id* (one per distinct (parent content id, tokens), kept while a cached block, a cached
child or a live sequence (`pin`) holds it): a colliding hash cannot splice two prefixes,
and a child still matches after its parent was evicted, as v1's chain does.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import OutOfBlocks, bool_arg, choice_arg, count_arg
from ..kv_events import MEDIUM_GPU, AllBlocksCleared, BlockRemoved
from ..linked_pool import LinkedBlockPool
from .cache_stats import CacheStats

ROOT = 0  # the content id "parent" of a sequence's first block

# name -> (pool, block, now) -> key; the cached free block with the smallest key is evicted
EvictionKey = Callable[["CachingBlockPool", int, int], tuple[int, ...]]
EVICTION_KEYS: dict[str, EvictionKey] = {
    "lru": lambda pool, b, now: (now,),
    "lfu": lambda pool, b, now: (pool.hits_of(b), now),
    "fifo": lambda pool, b, now: (pool.born_of(b),),
}
EVICTION_POLICIES = tuple(EVICTION_KEYS)
Tokens = tuple[int, ...]  # one block's token ids


class CachingBlockPool(LinkedBlockPool):
    """A LinkedBlockPool whose free list keeps cached blocks behind uncached ones (module doc)."""

    __slots__ = (
        "eviction",
        "stats",
        "_key",
        "_by_hash",
        "_children",
        "_content",
        "_node",
        "_cid",
        "_next_cid",
        "_hits",
        "_born",
        "_stamp",
        "_heap",
        "_clock",
        "_evict_key",
        "kv_event_queue",
        "_protected",
        "_group",
    )

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        eviction: str = "lru",
        stats: CacheStats | None = None,
        enable_kv_cache_events: bool = False,
    ):
        bool_arg("enable_kv_cache_events", enable_kv_cache_events)
        choice_arg("eviction", eviction, tuple(EVICTION_KEYS))
        super().__init__(num_gpu_blocks, block_size, "fifo")
        n = self.num_gpu_blocks
        self.eviction = eviction  # which cached free block is overwritten first
        self.stats = stats if stats is not None else CacheStats()
        self._evict_key = EVICTION_KEYS[eviction]
        # cached block -> (hash, tokens, parent content id)
        self._key: dict[int, tuple[int, Tokens, int]] = {}
        self._by_hash: dict[int, list[int]] = {}  # hash -> cached blocks with that hash
        self._children: dict[int, list[int]] = {}  # parent content id -> cached children
        # (parent content id, tokens, or ("extra keys", keys) for a root) -> content id
        self._content: dict[tuple[int, tuple[Any, ...]], int] = {}
        # content id -> [parent id, tokens, cached blocks, refs]
        self._node: dict[int, list[Any]] = {}
        # refs: child contents plus pins (live sequences whose next block will follow it)
        self._cid = [ROOT] * n  # [num_gpu_blocks] content id of each cached block
        self._next_cid = ROOT + 1  # content ids are never reused
        self._hits = [0] * n  # [num_gpu_blocks] times each cached block was hit
        self._born = [0] * n  # [num_gpu_blocks] logical time the block was cached (fifo)
        self._stamp = [0] * n  # [num_gpu_blocks] invalidates stale heap entries
        # (key, stamp, block) for cached free blocks
        self._heap: list[tuple[tuple[int, ...], int, int]] = []
        self._clock = itertools.count()  # logical time for the keys
        # KV cache events awaiting take_events() (v1: BlockPool.kv_event_queue); None: off
        self.kv_event_queue: list[Any] | None = [] if enable_kv_cache_events else None
        self._protected: frozenset[int] = frozenset()  # cached free blocks eviction must skip
        # cached block -> the KV cache group that cached it (for BlockRemoved's group_idx)
        self._group: dict[int, int] = {}

    # ---- queries -------------------------------------------------------------------
    def is_cached(self, b: int) -> bool:
        return b in self._key

    def hash_of(self, b: int) -> int:
        return self._key[b][0]

    def tokens_of(self, b: int) -> Tokens:
        return self._key[b][1]

    def parent_key(self, b: int) -> int:
        """How a child block names cached block b as its parent: b's content id."""
        return self._cid[b]

    def hits_of(self, b: int) -> int:
        return self._hits[b]

    def born_of(self, b: int) -> int:
        return self._born[b]

    def lookup(self, h: int, tokens: Tokens, parent: int) -> int | None:
        """The cached block holding `tokens` right after `parent`, or None."""
        key = self._key
        for b in self._by_hash.get(h, ()):
            if key[b][1] == tokens and key[b][2] == parent:
                return b
        return None

    def content_id(self, parent: int, tokens: Tokens) -> int | None:
        """The id of `tokens` after `parent`; None if no cached block holds it or a later one."""
        return self._content.get((parent, tokens))

    def block_with(self, cid: int) -> int | None:
        """A cached block holding content `cid` (the oldest), or None."""
        blocks = self._node[cid][2]
        return blocks[0] if blocks else None

    def root_of(self, extra_keys: tuple[Any, ...]) -> int | None:
        """The content id a prompt with these extra keys starts from (None: nothing can hit)."""
        return ROOT if not extra_keys else self._content.get((ROOT, ("extra keys", extra_keys)))

    def intern_root(self, extra_keys: tuple[Any, ...]) -> int:
        """`root_of`, made on first use: a content node with no block of its own."""
        cid = self.root_of(extra_keys)
        if cid is None:
            cid = self._content[(ROOT, ("extra keys", extra_keys))] = self._next_cid
            self._next_cid += 1
            self._node[cid] = [ROOT, ("extra keys", extra_keys), [], 0]
        return cid

    def take_events(self) -> list[Any]:
        """The queued KV cache events, oldest first; the queue is emptied (v1: take_events)."""
        if self.kv_event_queue is None:
            return []
        out, self.kv_event_queue = self.kv_event_queue, []
        return out

    def reset(self) -> bool:
        """Forget every cached block (v1: reset_prefix_cache); False while any is in use."""
        if self.num_free_blocks != self.num_gpu_blocks:
            return False
        for b in list(self._key):
            self._forget(b)  # content ids no live sequence pins are pruned with their blocks
        self._heap.clear()
        if self.kv_event_queue is not None:
            self.kv_event_queue.append(AllBlocksCleared())
        return True

    def evict_blocks(self, block_ids: Any) -> None:
        """Forget the cached contents of these blocks (v1's evict_blocks), all or nothing; a free
        one keeps its place on the free list, as vLLM 0.34 leaves it."""
        if isinstance(block_ids, (str, bytes)) or not hasattr(block_ids, "__iter__"):
            raise TypeError(
                f"block_ids must be an iterable of block ids, got {type(block_ids).__name__}"
            )
        ids = [self._check_id(b) for b in block_ids]
        for b in dict.fromkeys(ids):
            if b not in self._key:
                continue
            if self.kv_event_queue is not None:
                self.kv_event_queue.append(self._removed(b))
            self._forget(b)

    def children_of(self, parent: int) -> list[int]:
        return self._children.get(parent, [])

    def cached_free_blocks(self) -> list[int]:
        return [b for b in self.free_list() if b in self._key]

    # ---- cache changes -------------------------------------------------------------
    def cache(
        self, b: int, h: int, tokens: Tokens, parent: int, group_idx: int | None = None
    ) -> None:
        """Record that allocated block b holds `tokens` after `parent` (v1: cache_full_blocks)."""
        assert b not in self._key and self._ref[b] > 0, f"block {b} cannot be cached now"
        cid = self._content.get((parent, tokens))
        if cid is None:
            cid = self._content[(parent, tokens)] = self._next_cid
            self._next_cid += 1
            self._node[cid] = [parent, tokens, [], 0]
            if parent != ROOT:
                self._node[parent][3] += 1
        self._node[cid][2].append(b)
        self._cid[b] = cid
        self._key[b] = (h, tokens, parent)
        self._by_hash.setdefault(h, []).append(b)
        self._children.setdefault(parent, []).append(b)
        self._born[b] = next(self._clock)
        self._hits[b] = 0
        if group_idx is not None:
            self._group[b] = group_idx

    def touch(self, b: int) -> None:
        """A hit: one more owner, taking b off the free list if it was free (v1: touch)."""
        if self._ref[b]:
            self.incref(b)
        else:
            self.take(b)
        self._hits[b] += 1

    def _removed(self, b: int) -> BlockRemoved:
        """The event for evicting cached block b: its hash, medium and group (v1's fields)."""
        return BlockRemoved([self._key[b][0]], MEDIUM_GPU, group_idx=self._group.get(b))

    def _forget(self, b: int) -> None:
        self._group.pop(b, None)
        h, tokens, parent = self._key.pop(b)
        self._by_hash[h].remove(b)
        if not self._by_hash[h]:
            del self._by_hash[h]
        self._children[parent].remove(b)
        if not self._children[parent]:
            del self._children[parent]
        cid = self._cid[b]
        self._node[cid][2].remove(b)
        self._prune(cid)
        self._stamp[b] += 1

    def pin(self, cid: int) -> None:
        """Keep content `cid` alive: a live sequence will hash its next block after it."""
        if cid != ROOT:
            self._node[cid][3] += 1

    def unpin(self, cid: int) -> None:
        if cid != ROOT:
            self._node[cid][3] -= 1
            self._prune(cid)

    def _prune(self, cid: int) -> None:
        """Drop content ids that nothing holds any more, walking up the prefix."""
        while cid != ROOT and not self._node[cid][2] and not self._node[cid][3]:
            parent, tokens, _, _ = self._node.pop(cid)
            del self._content[(parent, tokens)]
            cid = parent
            if cid != ROOT:
                self._node[cid][3] -= 1

    # ---- the free list -------------------------------------------------------------
    def allocate(self) -> int:
        b = self.head()
        if b is not None and b in self._key:  # every free block is cached: evict one
            b = self._pick_victim()
            if self.kv_event_queue is not None:  # v1: _maybe_evict_cached_block
                self.kv_event_queue.append(self._removed(b))
            self._forget(b)
            self.stats.evictions += 1
            return self.take(b)
        return super().allocate()

    def allocate_many(self, k: int) -> list[int]:
        """`allocate` k times (each may evict), all or nothing."""
        k = count_arg("k", k)
        if k > self.num_free_blocks:
            raise OutOfBlocks(k, self.num_free_blocks, f"allocate_many({k})")
        return [self.allocate() for _ in range(k)]

    def release(self, blocks: Any) -> None:
        """v1's free_blocks: unhashed blocks go to the head as one run (prepend_n, order
        kept), hashed ones to the tail in the order given (append_n). All or nothing."""
        blocks = self._check_ids(blocks)
        unhashed = []
        for b in blocks:
            if self._ref[b] > 1 or b in self._key:
                self.free(b)  # a cached block's last free queues it at the tail (_push)
            else:
                unhashed.append(b)
        for b in reversed(unhashed):  # each at the head in turn: the first given leads
            self.free(b)

    def _push(self, b: int, to_head: bool | None = None) -> None:
        cached = b in self._key
        if cached:  # queued for eviction under its policy's key
            self._stamp[b] += 1
            key = self._evict_key(self, b, next(self._clock))
            heapq.heappush(self._heap, (key, self._stamp[b], b))
            if len(self._heap) > 2 * len(self._stamp):  # mostly stale: a pool whose hits
                self._compact()  # never evict would otherwise grow its heap forever
        super()._push(b, to_head=not cached)

    def _compact(self) -> None:
        """Drop the stale heap entries (an older stamp never matches again)."""
        self._heap = [e for e in self._heap if e[1] == self._stamp[e[2]]]
        heapq.heapify(self._heap)

    def _pick_victim(self) -> int:
        # protected entries, pushed back once a victim is found
        kept: list[tuple[tuple[int, ...], int, int]] = []
        while True:
            entry = heapq.heappop(self._heap)
            _, stamp, b = entry
            if stamp == self._stamp[b] and not self._ref[b] and b in self._key:
                if b not in self._protected:
                    for e in kept:
                        heapq.heappush(self._heap, e)
                    return b
                kept.append(entry)

    @contextmanager
    def protecting(self, blocks: Iterable[int]) -> Iterator[None]:
        """A context in which these cached free blocks are never evicted (vLLM issue #33775)."""
        self._protected = frozenset(blocks)
        try:
            yield
        finally:
            self._protected = frozenset()

    def check_invariants(self) -> None:
        super().check_invariants()
        for b, (h, tokens, parent) in self._key.items():
            assert b in self._by_hash[h] and b in self._children[parent], f"block {b} index drift"
            assert self._content[(parent, tokens)] == self._cid[b], f"block {b} content drift"
            assert b in self._node[self._cid[b]][2], f"block {b} content drift"
            assert len(tokens) == self.block_size, f"cached block {b} is not full"
        children: dict[int, int] = {}  # content id -> cached children naming it
        for parent, _, _, _ in self._node.values():
            children[parent] = children.get(parent, 0) + 1
        for cid, (_, _, blocks, refs) in self._node.items():
            assert refs >= children.get(cid, 0), f"content {cid} has fewer refs than children"
            assert blocks or refs, f"content {cid} is held by nothing but was not dropped"
        for (parent, content), cid in self._content.items():  # extra-key roots hold no block
            if content and content[0] == "extra keys":
                assert parent == ROOT and not self._node[cid][2], f"root {cid} holds a block"
        assert not self._protected, "blocks stayed protected from eviction after a step"
        assert self._group.keys() <= self._key.keys(), "a group kept for an uncached block"
        queue = self.kv_event_queue or ()
        assert all(
            type(e).__name__ in ("BlockStored", "BlockRemoved", "AllBlocksCleared") for e in queue
        ), "something other than a KV cache event was queued"
