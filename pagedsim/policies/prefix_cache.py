"""Automatic prefix caching: full blocks found again by a chained hash (vLLM v1 kv_cache_utils).

A *full* prompt block is named by a chained hash of (parent block's hash, its own
tokens), so equal hashes mean "the same tokens after the same prefix". A hit is
never trusted on the hash alone: the candidate's tokens are compared, and its
recorded parent must be the block we matched one position earlier (with the same
*generation*, bumped every time a block is evicted and reused), so the whole prefix
is confirmed exactly even if the hash function collides.

When a cached block's count falls to 0 it keeps its contents and hash and goes back
to the free list, behind every uncached free block:

    head -> [uncached free blocks ...] [cached free blocks ...] <- tail

`allocate()` therefore hands out an uncached block while there is one. Only when
all free blocks hold cached contents does it *evict* one, chosen by name:

    lru   the one whose last owner let go longest ago
    lfu   the one hit the fewest times (ties: lru)
    fifo  the one cached first

A later request with the same prefix takes a cached free block back out of the
middle of the list with `BlockPool.take`, in O(1). Only prompt blocks are cached.

Stats: hits and misses (full prompt blocks), evictions, and the *block floor*:
prompt tokens that match a cached sequence but could not be shared because they do
not fill a block (compared against the cached children of the last matched block).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

import numpy as np

from ..block_pool import BlockPool
from ..errors import OutOfBlocks
from ..block_table import BlockTable, blocks_needed
from ..manager import KVCacheManager
from .. import trace as tr

EVICTION_POLICIES = ("lru", "lfu", "fifo")
ROOT = (-1, 0)  # the (block, generation) "parent" of a prompt's first block


def chained_hash(parent_hash: int, tokens: tuple) -> int:
    return hash((parent_hash, tokens))


@dataclass
class CacheStats:
    hits: int = 0  # full prompt blocks found in the cache
    misses: int = 0  # full prompt blocks that had to be computed
    evictions: int = 0  # cached blocks whose contents were overwritten
    block_floor: int = 0  # shared prefix tokens left unshared by a partial block

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class CachingBlockPool(BlockPool):
    """A pool whose free list keeps cached blocks behind uncached ones (see module doc)."""

    def __init__(self, num_blocks: int, block_size: int, cache: "PrefixCachingManager"):
        super().__init__(num_blocks, block_size, "fifo")
        self._cache = cache

    def allocate(self) -> int:
        b = self._next[self._head]
        if b != self._tail and b in self._cache._key:  # only cached blocks are free
            b = self._cache._pick_victim()
            self._cache._forget(b)
            self._cache.stats.evictions += 1
            return self.take(b)
        return super().allocate()

    def allocate_many(self, k: int) -> list[int]:
        """`allocate` k times (each may evict), all or nothing."""
        if k > self._num_free:
            raise OutOfBlocks(k, self._num_free, f"allocate_many({k})")
        return [self.allocate() for _ in range(k)]

    def release(self, blocks) -> None:
        """`free` each block, so cached ones are queued for eviction in order."""
        for b in blocks:
            self.free(b)

    def _push(self, b: int) -> None:
        if b in self._cache._key:  # cached: to the tail, in eviction order
            n = self._tail
            p = self._prev[n]
            self._cache._became_free(b)
        else:  # uncached: to the head, handed out first
            p = self._head
            n = self._next[p]
        self._prev[b], self._next[b] = p, n
        self._next[p] = b
        self._prev[n] = b
        self._num_free += 1


class PrefixCachingManager(KVCacheManager):
    def __init__(self, num_blocks: int, block_size: int, *, eviction: str = "lru",
                 hash_fn=chained_hash, **kwargs):
        if eviction not in EVICTION_POLICIES:
            raise ValueError(f"eviction must be one of {EVICTION_POLICIES}, got {eviction!r}")
        self.eviction = eviction  # which cached free block to overwrite first
        self.hash_fn = hash_fn  # (parent_hash, tokens) -> int; collisions are tolerated
        self.stats = CacheStats()
        self._key: dict[int, tuple] = {}  # cached block -> (hash, tokens, parent (block, gen))
        self._by_hash: dict[int, list[int]] = {}  # hash -> cached blocks with that hash
        self._children: dict[tuple, list[int]] = {}  # parent (block, gen) -> cached children
        self._gen: list[int] = [0] * num_blocks  # bumped when a block's cached contents die
        self._hits: list[int] = [0] * num_blocks  # times each cached block was hit
        self._clock = itertools.count()  # logical time for lru/fifo keys
        self._born: list[int] = [0] * num_blocks  # when the block was cached (fifo)
        self._stamp: list[int] = [0] * num_blocks  # invalidates stale heap entries
        self._heap: list[tuple] = []  # (key, stamp, block) for cached free blocks
        super().__init__(num_blocks, block_size, **kwargs)
        self.pool = CachingBlockPool(num_blocks, block_size, self)
        if self.trace is not None and self.trace.snapshots:
            self.trace.snapshots[0] = self.snapshot(caption=self.trace.snapshots[0].caption)

    # ---- admission with a prefix lookup ------------------------------------------
    def match(self, tokens) -> list[int]:
        """The cached blocks that hold `tokens`' longest prefix of full blocks (no side effects)."""
        return self._match(_as_tuple(tokens))[0]

    def add_sequence(self, seq_id, num_tokens: int, tokens=None) -> list[int]:
        if tokens is None:
            return super().add_sequence(seq_id, num_tokens)
        tokens = _as_tuple(tokens)
        if len(tokens) != num_tokens:
            raise ValueError(f"tokens has {len(tokens)} entries but num_tokens is {num_tokens}")
        if seq_id in self._tables:
            return super().add_sequence(seq_id, num_tokens)  # raises the usual error
        bs = self.block_size
        hits, _ = self._match(tokens)
        need = blocks_needed(num_tokens, bs) - sum(1 for b in hits if self.pool._ref[b])
        self._reserve(need, seq_id, f"add_sequence({num_tokens} tokens, cached)")
        hits, floor = self._match(tokens)  # an evictor may have changed the pool
        full = num_tokens // bs
        self.stats.hits += len(hits)
        self.stats.misses += full - len(hits)
        self.stats.block_floor += floor
        table = BlockTable(bs)
        self._tables[seq_id] = table
        self._emit(tr.SequenceAdded(self.step + 1, seq_id, num_tokens))
        for logical, b in enumerate(hits):
            if self.pool._ref[b]:
                count = self.pool.incref(b)
                self._emit(tr.BlockShared(self.step + 1, seq_id, b, count))
            else:
                self.pool.take(b)
                self._emit(tr.BlockAllocated(self.step + 1, seq_id, b, logical))
            self._hits[b] += 1
            table.blocks.append(b)
        for logical in range(len(hits), blocks_needed(num_tokens, bs)):
            self._grow(seq_id, table, logical)
        table.num_tokens = num_tokens
        parent = ROOT if not hits else (hits[-1], self._gen[hits[-1]])
        h = self._key[hits[-1]][0] if hits else 0
        for logical in range(len(hits), full):  # newly computed full blocks join the cache
            b = table.blocks[logical]
            block_tokens = tokens[logical * bs:(logical + 1) * bs]
            h = self.hash_fn(h, block_tokens)
            self._remember(b, h, block_tokens, parent)
            parent = (b, self._gen[b])
        self._end_step()
        return table.slot_mapping()

    def _match(self, tokens: tuple) -> tuple[list[int], int]:
        bs, hits, h, parent = self.block_size, [], 0, ROOT
        for logical in range(len(tokens) // bs):
            block_tokens = tokens[logical * bs:(logical + 1) * bs]
            h = self.hash_fn(h, block_tokens)
            found = next((b for b in self._by_hash.get(h, ())
                          if self._key[b][1] == block_tokens and self._key[b][2] == parent), None)
            if found is None:
                break
            hits.append(found)
            parent = (found, self._gen[found])
        rest = tokens[len(hits) * bs:(len(hits) + 1) * bs]
        floor = max((_common(self._key[c][1], rest) for c in self._children.get(parent, ())),
                    default=0)
        return hits, floor

    # ---- cache bookkeeping ---------------------------------------------------------
    def _remember(self, b: int, h: int, block_tokens: tuple, parent: tuple) -> None:
        self._key[b] = (h, block_tokens, parent)
        self._by_hash.setdefault(h, []).append(b)
        self._children.setdefault(parent, []).append(b)
        self._born[b] = next(self._clock)
        self._hits[b] = 0

    def _forget(self, b: int) -> None:
        h, _, parent = self._key.pop(b)
        self._by_hash[h].remove(b)
        if not self._by_hash[h]:
            del self._by_hash[h]
        self._children[parent].remove(b)
        if not self._children[parent]:
            del self._children[parent]
        self._gen[b] += 1  # children naming (b, old gen) can no longer match
        self._stamp[b] += 1

    def _became_free(self, b: int) -> None:
        self._stamp[b] += 1
        now = next(self._clock)
        key = {"lru": (now,), "lfu": (self._hits[b], now), "fifo": (self._born[b],)}[self.eviction]
        heapq.heappush(self._heap, (key, self._stamp[b], b))

    def _pick_victim(self) -> int:
        ref, key = self.pool._ref, self._key
        while True:
            _, stamp, b = heapq.heappop(self._heap)
            if stamp == self._stamp[b] and not ref[b] and b in key:
                return b

    def cached_free_blocks(self) -> list[int]:
        return [b for b in self.pool.free_list() if b in self._key]

    def snapshot(self, events=(), caption=None) -> tr.Snapshot:
        snap = super().snapshot(events, caption)
        if not isinstance(self.pool, CachingBlockPool):  # called from the base __init__
            return snap
        from dataclasses import replace
        return replace(snap, cached_blocks=tuple(self.cached_free_blocks()))

    def check_invariants(self) -> None:
        super().check_invariants()
        free = self.pool.free_list()
        flags = [b in self._key for b in free]
        assert flags == sorted(flags), "a cached free block sits ahead of an uncached one"
        for b, (h, block_tokens, parent) in self._key.items():
            assert b in self._by_hash[h] and b in self._children[parent], f"block {b} index drift"
            assert len(block_tokens) == self.block_size, f"cached block {b} is not full"


def _as_tuple(tokens) -> tuple:
    """Token ids as a tuple of Python ints (hashable; fast to slice and compare)."""
    if type(tokens) is tuple:
        return tokens
    return tuple(np.asarray(tokens, dtype=np.int64).tolist())


def _common(a: tuple, b: tuple) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
