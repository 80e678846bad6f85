"""Automatic prefix caching with vLLM v1's rules (v1).

References: v1 kv_cache_manager.py and single_type_kv_cache_manager.py.

Every *full* block whose tokens are known is named by a chained hash of (parent
block's hash, its own tokens) and stays findable until its block is handed out again
(`cache_pool.py`). That includes blocks filled by *generated* tokens: the ids reach
the manager through `append_tokens(..., token_ids=...)`, `decode_step(...,
token_ids=...)` or `allocate_slots(..., new_token_ids=...)`, and a block is hashed
as soon as it fills. A sampled token whose KV has not been computed has no slot, so
it never counts.

Looking up a prompt of n tokens (v1's `get_computed_blocks`):

    hit = the longest run of cached full blocks from the start, capped at n - 1 tokens

The cap is v1's `max_cache_hit_length = num_tokens - 1`: the last token must be
computed to get its logits, so a block-aligned, fully cached prompt recomputes its
last block. Stats are in tokens (`hit_tokens` of `prompt_tokens`), block counts
beside them.

Two ways in:
    v1 shape   `get_computed_blocks(token_ids)` (a pure lookup), then
               `allocate_slots(seq, num_new_tokens, num_lookahead_tokens, new_token_ids,
               computed=...)`: new blocks, or None when short with nothing changed.
               It never preempts: the v1 scheduler does that and retries
               (allocate_slots.py).
    v0 shape   `add_sequence(seq, n, tokens)`: lookup and allocation in one call. A
               reclaimer may run when short; the whole request is then planned again,
               because a reclaimer can free the very sequence holding the hits.

Extra keys (v1's `generate_block_hash_extra_keys`): a `cache_salt` (one tenant's
secret) or a `lora_id` (the adapter the KV was computed with) makes a prompt's chain
start from its own root, so two tenants or two adapters with the same prompt never
share a block. Also v1's: `reset_prefix_cache()` (refused, False, while a block is in
use), KV cache events (`enable_kv_cache_events=True`, then `take_events()`, see
kv_events.py) and `get_num_common_prefix_blocks` (manager_state.py). A swapped-in
sequence is hashed again from its tokens (prefix_restore.py).
"""

from __future__ import annotations

from dataclasses import replace

from .. import trace as tr
from ..block_table import NULL_BLOCK, BlockTable, blocks_needed
from ..errors import count_arg, token_ids_arg
from ..kv_events import BlockStored
from ..manager import KVCacheManager
from .allocate_slots import ComputedBlocks, V1Slots
from .cache_pool import (
    EVICTION_KEYS,
    EVICTION_POLICIES,
    CacheStats,
    CachingBlockPool,
    chained_hash,
)
from .prefix_restore import RestoresPrefixState


class PrefixCachingManager(RestoresPrefixState, V1Slots, KVCacheManager):
    def __init__(self, num_blocks: int, block_size: int, *, eviction: str = "lru",
                 hash_fn=chained_hash, enable_kv_cache_events: bool = False,
                 pool: CachingBlockPool | None = None, group_idx: int = 0, **kwargs):
        if not callable(hash_fn):
            raise TypeError(f"hash_fn must be callable (parent_hash, tokens) -> int, got "
                            f"{type(hash_fn).__name__}")
        self.group_idx = count_arg("group_idx", group_idx)  # KV cache group (hybrid: 0, 1)
        # a group's blocks chain from their own root, as v1's BlockHashWithGroupId keeps
        # the groups' hashes apart in one index
        self._group_keys = (("kv_cache_group", group_idx),) if group_idx else ()
        if pool is None:
            self.stats = CacheStats()
            pool = CachingBlockPool(num_blocks, block_size, eviction, self.stats,
                                    enable_kv_cache_events)
        elif not isinstance(pool, CachingBlockPool):
            raise TypeError(f"pool must be a CachingBlockPool, got {type(pool).__name__}")
        else:  # one pool shared by the groups of a hybrid manager
            self.stats = pool.stats
            self.shares_pool = True
        self.eviction = eviction  # a key of EVICTION_KEYS
        self.hash_fn = hash_fn  # (parent_hash, tokens) -> int; collisions are tolerated
        self._known: dict = {}  # seq -> token ids known so far (None: stopped knowing)
        self._chain: dict = {}  # seq -> (blocks hashed, last hash, last parent key)
        self._ahead: dict = {}  # seq -> lookahead slots allocated past the computed tokens
        self._extra: dict = {}  # seq -> its extra keys (cache_salt, lora_id), normalised
        super().__init__(num_blocks, block_size, pool=pool, **kwargs)

    def extra_keys(self, cache_salt=None, lora_id=None) -> tuple:
        """The extra keys a prompt's hashes depend on, as a tuple (empty: none): its KV
        cache group (when not the first), its cache_salt, its LoRA adapter."""
        keys = self._group_keys
        if cache_salt is not None:
            if not isinstance(cache_salt, str):
                raise TypeError(f"cache_salt must be a str, got {type(cache_salt).__name__}")
            keys += (("cache_salt", cache_salt),)
        if lora_id is not None:
            keys += (("lora_id", count_arg("lora_id", lora_id, 1)),)
        return keys

    def _root_hash(self, keys: tuple) -> int:
        """The hash a prompt's first block chains from: 0, or one of its extra keys."""
        return 0 if not keys else hash(("extra keys", keys))

    # ---- lookups (no side effects) -------------------------------------------------
    def match(self, tokens, *, cache_salt=None, lora_id=None) -> list[int]:
        """The cached blocks holding `tokens`' longest prefix of full blocks (no cap)."""
        tokens = _ids(tokens)
        keys = self.extra_keys(cache_salt, lora_id)
        return self._match(tokens, len(tokens) // self.block_size, keys)

    def cached_free_blocks(self) -> list[int]:
        return self.pool.cached_free_blocks()

    def num_computed_tokens(self, seq_id) -> int:
        return self._table(seq_id).num_tokens - self._ahead.get(seq_id, 0)

    # ---- v0 shape: lookup and allocate in one call -----------------------------------
    def add_sequence(self, seq_id, num_tokens: int, tokens=None, *, cache_salt=None,
                     lora_id=None):
        keys = self.extra_keys(cache_salt, lora_id)
        if tokens is None:
            if cache_salt is not None or lora_id is not None:
                raise ValueError("extra keys (cache_salt, lora_id) need the prompt's tokens")
            return super().add_sequence(seq_id, num_tokens)
        self._check_new(seq_id)
        num_tokens = count_arg("num_tokens", num_tokens)
        tokens = _ids(tokens)
        if len(tokens) != num_tokens:
            raise ValueError(f"tokens has {len(tokens)} entries but num_tokens is {num_tokens}")
        cap = max(num_tokens - 1, 0) // self.block_size

        def plan() -> int:  # blocks this admission takes off the free list, planned afresh
            hits = self._match(tokens, cap, keys)
            return self._blocks_to_take(hits, num_tokens)

        self._reserve(plan, {seq_id}, f"add_sequence({num_tokens} tokens, cached)")
        hits = self._match(tokens, cap, keys)  # the reclaimer may have changed what is cached
        self._admit(seq_id, tokens, hits, num_tokens, 0, keys)
        self._end_step()
        return self._table(seq_id).slot_mapping()

    # ---- shared by both shapes -------------------------------------------------------
    def _blocks_to_take(self, hits, num_tokens: int) -> int:
        """Free blocks an admission uses: new blocks, plus cached hits now on the free list."""
        fresh = blocks_needed(num_tokens, self.block_size) - len(hits)
        waking = sum(1 for b in hits if b != NULL_BLOCK and not self.pool.ref_count(b))
        return max(fresh, 0) + waking

    def _admit(self, seq_id, tokens: tuple, hits: list, computed: int, ahead: int,
               keys: tuple = (), preempted: bool = False) -> None:
        """Touch the hits, allocate the rest, record stats and hash the full blocks."""
        bs, pool, st = self.block_size, self.pool, self.stats
        st.record(len(tokens), len(hits) * bs, preempted)
        st.hits += len(hits)
        st.misses += len(tokens) // bs - len(hits)
        st.block_floor += self._floor(tokens, hits, keys)
        table = BlockTable(bs)
        self._tables[seq_id] = table
        self._emit(tr.SequenceAdded, seq_id, computed + ahead)
        for logical, b in enumerate(hits):
            if b == NULL_BLOCK:  # a sliding window's hit may start past blocks it never reads
                table.blocks.append(b)
                continue
            shared = pool.ref_count(b) > 0
            pool.touch(b)
            table.blocks.append(b)
            if shared:
                self._emit(tr.BlockShared, seq_id, b, pool.ref_count(b))
            else:
                self._emit(tr.BlockAllocated, seq_id, b, logical)
        for logical in range(len(hits), blocks_needed(computed + ahead, bs)):
            self._grow(seq_id, table, logical)
        table.num_tokens = computed + ahead
        self._known[seq_id] = list(tokens)
        self._ahead[seq_id] = ahead
        self._extra[seq_id] = keys
        if hits:
            self._set_chain(seq_id, (len(hits), pool.hash_of(hits[-1]), pool.parent_key(hits[-1])))
        else:
            self._set_chain(seq_id, (0, self._root_hash(keys), pool.intern_root(keys)))
        self._cache_full_blocks(seq_id)

    def _cache_full_blocks(self, seq_id) -> None:
        """Hash every block that is full of computed, known tokens (v1: cache_blocks)."""
        known = self._known.get(seq_id)
        if known is None:
            return
        bs, pool, table = self.block_size, self.pool, self._tables[seq_id]
        done, h, parent = self._chain[seq_id]
        full = min(table.num_tokens - self._ahead.get(seq_id, 0), len(known)) // bs
        stored: list = []  # (logical, hash) of the blocks cached now, for a BlockStored event
        for logical in range(done, full):
            b = table.blocks[logical]
            if b == NULL_BLOCK:  # dropped before it could be hashed: the chain ends here
                self._known[seq_id] = None
                break
            block_tokens = tuple(known[logical * bs:(logical + 1) * bs])
            if pool.is_cached(b):  # a hit, or a block shared by fork: already named
                h = pool.hash_of(b)
            else:
                prev, h = h, self.hash_fn(h, block_tokens)
                pool.cache(b, h, block_tokens, parent, self.group_idx)
                stored.append((logical, h, None if logical == 0 else prev, block_tokens))
            parent = pool.parent_key(b)
        else:
            if full > done:
                self._set_chain(seq_id, (full, h, parent))
        if stored and pool.kv_event_queue is not None:
            self._publish_stored(seq_id, stored)

    def _publish_stored(self, seq_id, stored: list) -> None:
        """One BlockStored per run of consecutive newly cached blocks (v1: cache_full_blocks).

        `stored` holds (logical, hash, parent hash or None at the prompt start, tokens)."""
        lora = dict(self._extra.get(seq_id, ())).get("lora_id")
        window = getattr(self, "window", None)  # a sliding-window group names its window
        spec = dict(group_idx=self.group_idx, kv_cache_spec_sliding_window=window,
                    kv_cache_spec_kind="full_attention" if window is None else "sliding_window")
        runs: list = []
        for entry in stored:
            if runs and runs[-1][-1][0] == entry[0] - 1:
                runs[-1].append(entry)
            else:
                runs.append([entry])
        for run in runs:
            self.pool.kv_event_queue.append(BlockStored(
                [h for _, h, _, _ in run], run[0][2], [t for *_, tokens in run for t in tokens],
                self.block_size, lora_id=lora, **spec))

    # ---- v1 extras: reset, events ---------------------------------------------------
    def reset_prefix_cache(self) -> bool:
        """Forget every cached block (v1's name); False, with nothing changed, while any
        block is in use. One step when it succeeds."""
        forgotten = len(self.pool.cached_free_blocks())
        if not self.pool.reset():
            return False
        self._emit(tr.PrefixCacheReset, forgotten)
        self._end_step()
        return True

    def take_events(self) -> list:
        """The KV cache events since the last call, oldest first (empty when events are off)."""
        return self.pool.take_events()

    def _set_chain(self, seq_id, chain: tuple) -> None:
        """(blocks hashed, last hash, last content id); the content id is pinned meanwhile."""
        self.pool.pin(chain[2])
        old = self._chain.get(seq_id)
        self._chain[seq_id] = chain
        if old is not None:
            self.pool.unpin(old[2])

    def _on_tokens_appended(self, seq_id, first_position: int, token_ids: tuple) -> None:
        known = self._known.get(seq_id)
        if known is None:
            return
        if first_position != len(known):  # tokens were appended without ids: stop hashing
            self._known[seq_id] = None
            return
        known.extend(token_ids)
        self._cache_full_blocks(seq_id)

    def _match(self, tokens: tuple, max_blocks: int, keys: tuple = ()) -> list[int]:
        bs, pool, hits = self.block_size, self.pool, []
        h, parent = self._root_hash(keys), pool.root_of(keys)
        if parent is None:  # nothing cached ever started from these extra keys
            return hits
        for logical in range(max_blocks):
            block_tokens = tokens[logical * bs:(logical + 1) * bs]
            h = self.hash_fn(h, block_tokens)
            found = pool.lookup(h, block_tokens, parent)
            if found is None:
                break
            hits.append(found)
            parent = pool.parent_key(found)
        return hits

    def _floor(self, tokens: tuple, hits: list, keys: tuple = ()) -> int:
        """Tokens after the hits that agree with a cached child but do not fill a block."""
        bs, pool = self.block_size, self.pool
        parent = pool.parent_key(hits[-1]) if hits else pool.root_of(keys)
        rest = tokens[len(hits) * bs:(len(hits) + 1) * bs]
        return max((_common(pool.tokens_of(c), rest) for c in pool.children_of(parent)
                    if pool.tokens_of(c) != rest), default=0)

    # ---- per-sequence state follows the base operations --------------------------------
    def fork(self, parent_id, child_id) -> None:
        super().fork(parent_id, child_id)
        known = self._known.get(parent_id)
        self._known[child_id] = None if known is None else list(known)
        self._extra[child_id] = self._extra.get(parent_id, ())
        if parent_id in self._chain:
            self._set_chain(child_id, self._chain[parent_id])
        self._ahead[child_id] = self._ahead.get(parent_id, 0)

    def free_sequence(self, seq_id) -> None:
        super().free_sequence(seq_id)  # reversed order: the tail block is evicted first (v1)
        chain = self._chain.pop(seq_id, None)
        if chain is not None:
            self.pool.unpin(chain[2])
        for d in (self._known, self._ahead, self._extra):
            d.pop(seq_id, None)

    def snapshot(self, events=(), caption=None) -> tr.Snapshot:
        return replace(super().snapshot(events, caption),
                       cached_blocks=tuple(self.pool.cached_free_blocks()))

    def check_invariants(self) -> None:
        super().check_invariants()
        for seq_id, (done, _, _) in self._chain.items():
            assert done <= len(self._tables[seq_id].blocks), f"seq {seq_id!r} hashed too far"
        assert set(self._extra) <= set(self._tables), "extra keys kept for a finished sequence"
        for seq_id, keys in self._extra.items():  # every live prompt chains from its own root
            assert keys[:len(self._group_keys)] == self._group_keys, (
                f"seq {seq_id!r} lost its KV cache group's key")
        for seq_id in self._tables:
            ahead = self._ahead.get(seq_id, 0)
            assert 0 <= ahead <= self._tables[seq_id].num_tokens, (
                f"seq {seq_id!r} has {ahead} lookahead slots for {self._tables[seq_id].num_tokens}")


def _ids(tokens) -> tuple:
    """Token ids as a tuple of Python ints in [0, 2**63) (TypeError / ValueError otherwise)."""
    return token_ids_arg("token_ids", tokens)


def _common(a: tuple, b: tuple) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):  # the common prefix of two lengths
        if x != y:
            break
        n += 1
    return n


__all__ = ["PrefixCachingManager", "ComputedBlocks",
           "CacheStats", "CachingBlockPool", "EVICTION_KEYS", "EVICTION_POLICIES", "chained_hash"]
