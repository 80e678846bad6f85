"""Automatic prefix caching with vLLM v1's rules (v1 kv_cache_manager.py,
single_type_kv_cache_manager.py).

Every full block whose token ids are known is named by a chained hash of (parent's hash,
its tokens) as it fills, and stays findable until handed out again (`cache_pool.py`). A
lookup's hit is the longest run of cached full blocks from the start, capped at n - 1
tokens (v1's `max_cache_hit_length`: the last token is computed for its logits). v1's
calls are `get_computed_blocks` then `allocate_slots`; v0's `add_sequence` does both.
A `cache_salt` or `lora_id` (v1's extra keys) starts a prompt's chain from its own root.

Invariant (tests/cache/test_prefix_cache.py's machine): after a swap-in
(`restore_sequences` given `prefix_state(seq)`), every full block of the sequence is
cached under the chained hash of its token prefix, as v0's swap_in re-hashes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .. import trace as tr
from ..block_table import NULL_BLOCK, BlockTable, blocks_needed
from ..errors import bool_arg, count_arg, token_ids_arg
from ..kv_events import BlockStored
from ..manager import KVCacheManager, SeqId
from .cache_pool import CachingBlockPool
from .cache_stats import CacheStats, chained_hash

Tokens = tuple[int, ...]  # token ids
Keys = tuple[tuple[str, Any], ...]  # extra keys: (("cache_salt", "s"), ("lora_id", 3)) ...
Chain = tuple[int, int, int]  # (blocks hashed, last hash, last content id)


@dataclass(frozen=True)
class ComputedBlocks:
    """What `get_computed_blocks` found (v1 returns KVCacheBlocks and num_computed_tokens)."""

    token_ids: Tokens  # the lookup's token ids
    blocks: tuple[int, ...]  # cached blocks holding its first len(blocks) * block_size tokens
    num_tokens: int  # tokens served by them (v1: num_new_computed_tokens)
    extra_keys: Keys = ()  # the lookup's (cache_salt, lora_id) keys, normalised


class PrefixCachingManager(KVCacheManager):
    """vLLM v1's prefix cache over a CachingBlockPool, in the v1 and v0 shapes."""

    pool: CachingBlockPool  # the pool's hash index is what the cache looks blocks up in

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        *,
        eviction: str = "lru",
        hash_fn: Callable[[int, Tokens], int] = chained_hash,
        enable_kv_cache_events: bool = False,
        pool: CachingBlockPool | None = None,
        group_idx: int = 0,
        **kwargs: Any,
    ) -> None:
        if not callable(hash_fn):
            raise TypeError(
                f"hash_fn must be callable (parent_hash, tokens) -> int, got "
                f"{type(hash_fn).__name__}"
            )
        self.group_idx = count_arg("group_idx", group_idx)  # KV cache group (hybrid: 0, 1)
        # off: nothing hashed or found (v1's KVCacheManager(enable_caching=False))
        self.enable_caching = True
        # a group's blocks chain from their own root (v1: BlockHashWithGroupId)
        self._group_keys = (("kv_cache_group", group_idx),) if group_idx else ()
        if pool is None:
            self.stats = CacheStats()
            pool = CachingBlockPool(
                num_gpu_blocks, block_size, eviction, self.stats, enable_kv_cache_events
            )
        elif not isinstance(pool, CachingBlockPool):
            raise TypeError(f"pool must be a CachingBlockPool, got {type(pool).__name__}")
        else:  # one pool shared by the groups of a hybrid manager
            self.stats = pool.stats
            self.shares_pool = True
        self.eviction = eviction  # a key of EVICTION_KEYS
        self.hash_fn = hash_fn  # (parent_hash, tokens) -> int; collisions are tolerated
        # seq -> token ids known so far (None: stopped knowing)
        self._known: dict[SeqId, list[int] | None] = {}
        self._chain: dict[SeqId, Chain] = {}  # seq -> (blocks hashed, last hash, last parent key)
        self._ahead: dict[SeqId, int] = {}  # seq -> lookahead slots past the computed tokens
        self._extra: dict[SeqId, Keys] = {}  # seq -> its extra keys, normalised
        # (parent hash, block tokens) -> hash, called ahead of a change
        self._hashes: dict[tuple[int, Tokens], int] = {}
        super().__init__(num_gpu_blocks, block_size, pool=pool, **kwargs)

    def extra_keys(self, cache_salt: Any = None, lora_id: Any = None) -> Keys:
        """The keys a prompt's hashes depend on: KV cache group (not 0), cache_salt, LoRA."""
        keys: tuple[tuple[str, Any], ...] = self._group_keys
        if cache_salt is not None:
            if not isinstance(cache_salt, str):
                raise TypeError(f"cache_salt must be a str, got {type(cache_salt).__name__}")
            keys += (("cache_salt", cache_salt),)
        if lora_id is not None:
            keys += (("lora_id", count_arg("lora_id", lora_id, 1)),)
        return keys

    def _root_hash(self, keys: Keys) -> int:
        """The hash a prompt's first block chains from: 0, or its extra keys' (not its KV
        cache group's: as in v1, only the index keeps the groups apart)."""
        keys = keys[len(self._group_keys) :]
        return 0 if not keys else hash(("extra keys", keys))

    # ---- lookups (no side effects) -------------------------------------------------
    def match(self, tokens: Any, *, cache_salt: Any = None, lora_id: Any = None) -> list[int]:
        """The cached blocks holding `tokens`' longest prefix of full blocks (no cap)."""
        tokens = token_ids_arg("token_ids", tokens)
        keys = self.extra_keys(cache_salt, lora_id)
        return self._match(tokens, len(tokens) // self.block_size, keys)

    def cached_free_blocks(self) -> list[int]:
        return self.pool.cached_free_blocks()

    def num_computed_tokens(self, seq_id: SeqId) -> int:
        return self._table(seq_id).num_tokens - self._ahead.get(seq_id, 0)

    # ---- v1 shape: look up, then allocate slots (v1 kv_cache_manager.py) -------------
    def get_computed_blocks(
        self, token_ids: Any, *, cache_salt: Any = None, lora_id: Any = None
    ) -> ComputedBlocks:
        """v1's lookup: cached full blocks for the prompt, at most len - 1 tokens' worth."""
        tokens = token_ids_arg("token_ids", token_ids)
        keys = self.extra_keys(cache_salt, lora_id)
        hits = self._match(tokens, max(len(tokens) - 1, 0) // self.block_size, keys)
        return ComputedBlocks(tokens, tuple(hits), len(hits) * self.block_size, keys)

    def allocate_slots(
        self,
        seq_id: SeqId,
        num_new_tokens: int,
        num_lookahead_tokens: int = 0,
        new_token_ids: Any = None,
        computed: ComputedBlocks | None = None,
        *,
        cache_salt: Any = None,
        lora_id: Any = None,
        preempted: bool = False,
    ) -> list[int] | None:
        """Slots for `num_new_tokens` more computed tokens (+ lookahead), as v1 does: the new
        blocks, or None, with nothing changed, when the free blocks are too few. A new
        sequence needs `new_token_ids` (its prompt, and output after a preemption) and may
        bring `computed`; a running one, the ids sampled since its last call."""
        n = count_arg("num_new_tokens", num_new_tokens)
        ahead = count_arg("num_lookahead_tokens", num_lookahead_tokens)
        bool_arg("preempted", preempted)
        if seq_id in self._tables:
            if preempted:
                raise ValueError(f"sequence {seq_id!r} is running; preempted is for new ones")
            if cache_salt is not None or lora_id is not None:
                raise ValueError(f"sequence {seq_id!r} is running; extra keys are for new ones")
            return self._extend(seq_id, n, ahead, new_token_ids, computed)
        self._check_new(seq_id)
        keys = self.extra_keys(cache_salt, lora_id)
        if new_token_ids is None:
            raise ValueError(f"new sequence {seq_id!r} needs new_token_ids (its prompt)")
        hits: list[int] = []
        if computed is not None:
            if not isinstance(computed, ComputedBlocks):
                raise TypeError(f"computed must come from get_computed_blocks, got {computed!r}")
            hits = list(computed.blocks)
            # the ids get_computed_blocks already checked need no second pass
            same = new_token_ids is computed.token_ids
            tokens = computed.token_ids if same else token_ids_arg("new_token_ids", new_token_ids)
            self._check_computed(computed, tokens, hits, same, keys)
        else:
            tokens = token_ids_arg("new_token_ids", new_token_ids)
        done = len(hits) * self.block_size
        if done + n > len(tokens):
            raise ValueError(f"{done} cached + {n} new tokens exceed the {len(tokens)} known")
        if self._blocks_to_take(hits, done + n + ahead) > self.pool.num_free_blocks:
            return None
        before = set(hits)
        self._admit(seq_id, tokens, hits, done + n, ahead, keys, preempted)
        # the blocks this step's KV goes to, taken before a sliding window drops any of them
        new = [b for b in self._tables[seq_id].blocks if b not in before]
        self._end_step()
        return new

    def _check_computed(
        self, computed: ComputedBlocks, tokens: Tokens, hits: list[int], same: bool, keys: Keys
    ) -> None:
        """What get_computed_blocks returned, checked again: a forged one is a ValueError."""
        bs = self.block_size
        if computed.num_tokens != len(hits) * bs:
            raise ValueError(
                f"computed.num_tokens is {computed.num_tokens!r} but its "
                f"{len(hits)} blocks hold {len(hits) * bs} tokens"
            )
        if len(hits) * bs > max(len(tokens) - 1, 0):  # v1: max_cache_hit_length
            raise ValueError(
                f"computed blocks cover {len(hits) * bs} of {len(tokens)} tokens; "
                f"a hit is capped at num_tokens - 1 (the last token is computed)"
            )
        if computed.extra_keys != keys:
            raise ValueError(
                "computed blocks were looked up with other extra keys (cache_salt / lora_id)"
            )
        if (not same and computed.token_ids != tokens) or self._match(
            tokens, len(hits), keys
        ) != hits:
            raise ValueError("computed blocks are stale or belong to other token ids")

    def blocks_to_extend(
        self, seq_id: SeqId, num_new_tokens: int, num_lookahead_tokens: int = 0
    ) -> int:
        """Free blocks allocate_slots would take (v1: get_num_blocks_to_allocate)."""
        table = self._table(seq_id)
        n = count_arg("num_new_tokens", num_new_tokens)
        ahead = count_arg("num_lookahead_tokens", num_lookahead_tokens)
        done = table.num_tokens - self._ahead.get(seq_id, 0)
        return self._extend_plan(table, done + n + ahead, n)[3]

    def _extend_plan(self, table: BlockTable, target: int, n: int) -> tuple[int, int, bool, int]:
        """(target, tokens to grow, copy-on-write?, free blocks needed) for an extension."""
        grow = max(0, target - table.num_tokens)
        # a slot handed out in a shared, partly filled last block (a new token or a lookahead
        # slot) needs a private copy first; v0 fork only: v1 never shares a partial block
        cow = bool(
            (n or grow)
            and table.num_tokens % self.block_size
            and self.pool.is_shared(table.blocks[-1])
        )
        need = blocks_needed(table.num_tokens + grow, self.block_size) - len(table.blocks) + cow
        return target, grow, cow, need

    def _check_extend(self, seq_id: SeqId, n: int, new_token_ids: Any, computed: Any) -> Tokens:
        """allocate_slots' arguments for a running sequence, checked: the new token ids."""
        if computed is not None:
            raise ValueError(f"sequence {seq_id!r} is running; computed blocks are for new ones")
        known = self._known.get(seq_id)
        new = () if new_token_ids is None else token_ids_arg("new_token_ids", new_token_ids)
        if new and known is None:
            raise ValueError(f"sequence {seq_id!r} has unknown token ids; cannot append to them")
        done = self.num_computed_tokens(seq_id)
        if known is not None and done + n > len(known) + len(new):
            raise ValueError(
                f"{done} computed + {n} new tokens exceed the "
                f"{len(known) + len(new)} known for {seq_id!r}"
            )
        return new

    def _before_extend(self, seq_id: SeqId) -> None:
        """Before a running sequence's slots are counted (a sliding window frees here)."""

    def _extend(
        self, seq_id: SeqId, n: int, ahead: int, new_token_ids: Any, computed: Any
    ) -> list[int] | None:
        new = self._check_extend(seq_id, n, new_token_ids, computed)
        self._before_extend(seq_id)
        table = self._tables[seq_id]
        known = self._known.get(seq_id)
        done = table.num_tokens - self._ahead.get(seq_id, 0)
        target, grow, cow, need = self._extend_plan(table, done + n + ahead, n)
        if need > self.pool.num_free_blocks:
            return None
        if known is not None:
            self._hash_ahead([self._chain_ahead(seq_id, new, done + n)])
            known.extend(new)
        count = len(table.blocks)
        if need:
            self._make_room(seq_id, table, grow)  # fits: the reclaimer is never asked
        first = table.num_tokens
        table.num_tokens = max(first, target)
        self._ahead[seq_id] = table.num_tokens - done - n
        if self._tracing and table.num_tokens > first:
            self._emit(
                tr.TokensAppended,
                seq_id,
                first,
                tuple(table.slot(p) for p in range(first, table.num_tokens)),
            )
        self._cache_full_blocks(seq_id)
        got = table.blocks[count - cow :]  # a copy-on-write replaced the last block too
        self._end_step()  # (a sliding window may free some of them now, as v1 does next step)
        return got

    # ---- v0 shape: lookup and allocate in one call -----------------------------------
    def add_sequence(
        self,
        seq_id: Any,
        num_tokens: int,
        tokens: Any = None,
        *,
        with_slots: bool = True,
        cache_salt: Any = None,
        lora_id: Any = None,
    ) -> Any:
        keys = self.extra_keys(cache_salt, lora_id)
        if tokens is None:
            if cache_salt is not None or lora_id is not None:
                raise ValueError("extra keys (cache_salt, lora_id) need the prompt's tokens")
            return super().add_sequence(seq_id, num_tokens, with_slots=with_slots)
        bool_arg("with_slots", with_slots)
        self._check_new(seq_id)
        num_tokens = count_arg("num_tokens", num_tokens)
        tokens = token_ids_arg("token_ids", tokens)
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
        return self._table(seq_id).slot_mapping() if with_slots else None

    # ---- shared by both shapes -------------------------------------------------------
    def _blocks_to_take(self, hits: list[int], num_tokens: int) -> int:
        """Free blocks an admission uses: new blocks, plus cached hits now on the free list."""
        fresh = blocks_needed(num_tokens, self.block_size) - len(hits)
        waking = sum(1 for b in hits if b != NULL_BLOCK and not self.pool.ref_count(b))
        return max(fresh, 0) + waking

    def _admit(
        self,
        seq_id: SeqId,
        tokens: Tokens,
        hits: list[int],
        computed: int,
        ahead: int,
        keys: Keys = (),
        preempted: bool = False,
    ) -> None:
        """Touch the hits, allocate the rest, record stats and hash the full blocks."""
        bs, pool, st = self.block_size, self.pool, self.stats
        h = pool.hash_of(hits[-1]) if hits else self._root_hash(keys)
        full = min(computed, len(tokens)) // bs  # the blocks _cache_full_blocks names below
        self._hash_ahead([(h, tokens[len(hits) * bs :], full - len(hits))])
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

    def _cache_full_blocks(self, seq_id: SeqId) -> None:
        """Hash every block that is full of computed, known tokens (v1: cache_blocks)."""
        known = self._known.get(seq_id)
        if known is None or not self.enable_caching:
            return
        bs, pool, table = self.block_size, self.pool, self._tables[seq_id]
        done, h, parent = self._chain[seq_id]
        full = min(table.num_tokens - self._ahead.get(seq_id, 0), len(known)) // bs
        # (logical, hash) of the blocks cached now, for a BlockStored event
        stored: list[tuple[int, int, int | None, Tokens]] = []
        for logical in range(done, full):
            b = table.blocks[logical]
            if b == NULL_BLOCK:  # dropped before it could be hashed: the chain ends here
                self._known[seq_id] = None
                break
            block_tokens = tuple(known[logical * bs : (logical + 1) * bs])
            if pool.is_cached(b):  # a hit, or a block shared by fork: already named
                h = pool.hash_of(b)
            else:
                key = (h, block_tokens)
                prev, h = h, self._hashes.pop(key) if key in self._hashes else self.hash_fn(*key)
                pool.cache(b, h, block_tokens, parent, self.group_idx)
                stored.append((logical, h, None if logical == 0 else prev, block_tokens))
            parent = pool.parent_key(b)
        else:
            if full > done:
                self._set_chain(seq_id, (full, h, parent))
        if stored and pool.kv_event_queue is not None:
            self._publish_stored(seq_id, stored)

    def _hash_ahead(self, chains: Iterable[tuple[int, Sequence[int], int]]) -> None:
        """Call hash_fn *before* anything changes (one that raises leaves the manager as it
        was); `chains`: (parent hash, token ids from a block boundary, blocks to hash)."""
        bs, hashes = self.block_size, {}
        for h, run, to_hash in chains:
            for i in range(to_hash):
                key = (h, tuple(run[i * bs : (i + 1) * bs]))
                h = hashes[key] = self.hash_fn(*key)
        self._hashes = hashes

    def _chain_ahead(
        self, seq_id: SeqId, new: Tokens, computed: int
    ) -> tuple[int, Sequence[int], int]:
        """(parent hash, tokens, blocks) to hash once `new` ids and `computed` are known."""
        known, chain = self._known.get(seq_id), self._chain.get(seq_id)
        if known is None or chain is None:
            return 0, (), 0
        done, h, _ = chain
        full = min(computed, len(known) + len(new)) // self.block_size
        if full <= done:
            return h, (), 0
        return h, known[done * self.block_size :] + list(new), full - done

    def _before_tokens_appended(self, appends: list[tuple[SeqId, Tokens]]) -> None:
        """Hash ahead what `_on_tokens_appended` will cache (see `_hash_ahead`)."""
        # seq -> ids appended by this call, while its ids stay known
        extra: dict[SeqId, list[int]] = {}
        for seq_id, ids in appends:
            known = self._known.get(seq_id)
            if known is None:
                continue
            if seq_id not in extra:
                if self._tables[seq_id].num_tokens != len(known):  # hashing stops there
                    continue
                extra[seq_id] = []
            extra[seq_id] += ids
        self._hash_ahead(
            [
                self._chain_ahead(s, tuple(ids), self.num_computed_tokens(s) + len(ids))
                for s, ids in extra.items()
            ]
        )

    def _restore_states(
        self, plan: dict[SeqId, tuple[Tokens, int]], prefix_state: Any
    ) -> dict[SeqId, Any]:
        states = super()._restore_states(plan, prefix_state)
        self._hash_ahead(
            [
                (self._root_hash(keys), tokens, len(tokens) // self.block_size)
                for tokens, keys in states.values()
            ]
        )
        return states

    def _publish_stored(
        self, seq_id: SeqId, stored: list[tuple[int, int, int | None, Tokens]]
    ) -> None:
        """One BlockStored per run of consecutive newly cached blocks (v1: cache_full_blocks);
        `stored`: (logical, hash, parent hash or None, tokens)."""
        lora = dict(self._extra.get(seq_id, ())).get("lora_id")
        window = getattr(self, "sliding_window", None)  # a sliding-window group names its window
        spec: dict[str, Any] = dict(
            group_idx=self.group_idx,
            kv_cache_spec_sliding_window=window,
            kv_cache_spec_kind="full_attention" if window is None else "sliding_window",
        )
        runs: list[list[tuple[int, int, int | None, Tokens]]] = []
        for entry in stored:
            if runs and runs[-1][-1][0] == entry[0] - 1:
                runs[-1].append(entry)
            else:
                runs.append([entry])
        queue = self.pool.kv_event_queue
        assert queue is not None, "stored blocks are published only with events on"
        for run in runs:
            queue.append(
                BlockStored(
                    [h for _, h, _, _ in run],
                    run[0][2],
                    [t for *_, tokens in run for t in tokens],
                    self.block_size,
                    lora_id=lora,
                    **spec,
                )
            )

    # ---- v1 extras: reset, events ---------------------------------------------------
    def reset_prefix_cache(self) -> bool:
        """Forget every cached block (v1); False, with nothing changed, while any is in use."""
        forgotten = len(self.pool.cached_free_blocks())
        if not self.pool.reset():
            return False
        self._emit(tr.PrefixCacheReset, forgotten)
        self._end_step()
        return True

    def take_events(self) -> list[Any]:
        """The KV cache events since the last call, oldest first."""
        return self.pool.take_events()

    def _set_chain(self, seq_id: SeqId, chain: Chain) -> None:
        """(blocks hashed, last hash, last content id); the content id is pinned meanwhile."""
        self.pool.pin(chain[2])
        old = self._chain.get(seq_id)
        self._chain[seq_id] = chain
        if old is not None:
            self.pool.unpin(old[2])

    def _on_tokens_appended(self, seq_id: SeqId, first_position: int, token_ids: Tokens) -> None:
        known = self._known.get(seq_id)
        if known is None:
            return
        if first_position != len(known):  # tokens were appended without ids: stop hashing
            self._known[seq_id] = None
            return
        known.extend(token_ids)
        self._cache_full_blocks(seq_id)

    def _match(self, tokens: Tokens, max_blocks: int, keys: Keys = ()) -> list[int]:
        bs, pool = self.block_size, self.pool
        hits: list[int] = []
        h, parent = self._root_hash(keys), pool.root_of(keys)
        if parent is None or not self.enable_caching:  # nothing cached from these keys
            return hits
        for logical in range(max_blocks):
            block_tokens = tokens[logical * bs : (logical + 1) * bs]
            h = self.hash_fn(h, block_tokens)
            found = pool.lookup(h, block_tokens, parent)
            if found is None:
                break
            hits.append(found)
            parent = pool.parent_key(found)
        return hits

    def _floor(self, tokens: Tokens, hits: list[int], keys: Keys = ()) -> int:
        """Tokens after the hits that agree with a cached child but do not fill a block."""
        bs, pool = self.block_size, self.pool
        parent = pool.parent_key(hits[-1]) if hits else pool.root_of(keys)
        if parent is None:  # nothing cached ever started from these extra keys
            return 0
        rest = tokens[len(hits) * bs : (len(hits) + 1) * bs]
        return max(
            (
                _common(pool.tokens_of(c), rest)
                for c in pool.children_of(parent)
                if pool.tokens_of(c) != rest
            ),
            default=0,
        )

    # ---- a swap: the prefix state a restored sequence goes on hashing from (v0) -------
    def prefix_state(self, seq_id: SeqId) -> tuple[Tokens, Keys] | None:
        """(token ids, extra keys) of a sequence whose every token id is known, else None."""
        table = self._table(seq_id)
        known = self._known.get(seq_id)
        if known is None or self._ahead.get(seq_id, 0) or len(known) != table.num_tokens:
            return None
        return tuple(known), self._extra.get(seq_id, ())

    def _check_prefix_state(self, seq_id: SeqId, num_tokens: int, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) != 2 or not isinstance(state[1], tuple):
            raise TypeError(
                f"seq {seq_id!r}: prefix_state must be (token ids, extra keys) "
                f"as prefix_state() returns it, got {state!r}"
            )
        if len(token_ids_arg("token_ids", state[0])) != num_tokens:
            raise ValueError(
                f"seq {seq_id!r}: prefix_state holds {len(state[0])} token ids "
                f"for {num_tokens} tokens"
            )
        if state[1][: len(self._group_keys)] != self._group_keys:
            raise ValueError(
                f"seq {seq_id!r}: prefix_state's extra keys are another KV cache group's"
            )

    def _restore_prefix_state(self, seq_id: SeqId, state: Any) -> None:
        """Chain the restored blocks from the prompt's root again (v0's swap-in re-hashes)."""
        tokens, keys = state
        self._known[seq_id] = list(tokens)
        self._extra[seq_id] = keys
        self._ahead[seq_id] = 0
        self._set_chain(seq_id, (0, self._root_hash(keys), self.pool.intern_root(keys)))
        self._cache_full_blocks(seq_id)

    # ---- per-sequence state follows the base operations --------------------------------
    def fork(self, parent_id: SeqId, child_id: SeqId) -> None:
        super().fork(parent_id, child_id)
        known = self._known.get(parent_id)
        self._known[child_id] = None if known is None else list(known)
        self._extra[child_id] = self._extra.get(parent_id, ())
        if parent_id in self._chain:
            self._set_chain(child_id, self._chain[parent_id])
        self._ahead[child_id] = self._ahead.get(parent_id, 0)

    def free_sequence(self, seq_id: SeqId) -> None:
        super().free_sequence(seq_id)  # reversed order: the tail block is evicted first (v1)
        chain = self._chain.pop(seq_id, None)
        if chain is not None:
            self.pool.unpin(chain[2])
        for d in (self._known, self._ahead, self._extra):
            d.pop(seq_id, None)

    def snapshot(self, events: Iterable[tr.Event] = (), caption: str | None = None) -> tr.Snapshot:
        return replace(
            super().snapshot(events, caption), cached_blocks=tuple(self.pool.cached_free_blocks())
        )

    def check_invariants(self) -> None:
        super().check_invariants()
        for seq_id, (done, _, _) in self._chain.items():
            assert done <= len(self._tables[seq_id].blocks), f"seq {seq_id!r} hashed too far"
        assert set(self._extra) <= set(self._tables), "extra keys kept for a finished sequence"
        for seq_id, keys in self._extra.items():  # every live prompt chains from its own root
            assert keys[: len(self._group_keys)] == self._group_keys, (
                f"seq {seq_id!r} lost its KV cache group's key"
            )
        for seq_id in self._tables:
            ahead = self._ahead.get(seq_id, 0)
            assert 0 <= ahead <= self._tables[seq_id].num_tokens, (
                f"seq {seq_id!r} has {ahead} lookahead slots for {self._tables[seq_id].num_tokens}"
            )


def _common(a: Tokens, b: Tokens) -> int:
    """The length of the common prefix of two token runs."""
    unequal = (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    return next(unequal, min(len(a), len(b)))


__all__ = ["PrefixCachingManager", "ComputedBlocks"]
