"""The prefix cache's v1-shaped calls: look up, then allocate slots (v1 kv_cache_manager.py).

vLLM v1's scheduler talks to its KV cache manager in two calls per request:

    get_computed_blocks(request)   a pure lookup: the cached full blocks of the prompt,
                                   capped at num_tokens - 1 tokens (the last token is
                                   computed to get its logits)
    allocate_slots(request, num_new_tokens, ..., num_lookahead_tokens)
                                   blocks for the new tokens (and lookahead slots, v1's
                                   speculative tokens), or None with nothing changed

`V1Slots` adds both to `PrefixCachingManager` (prefix_cache.py), which supplies the
hashing, matching and admission they use. A `ComputedBlocks` is checked again when it
comes back, so a stale or forged one (a different prompt, a hit past the cap, a
token count its blocks do not hold, other extra keys) is a ValueError, never a
silent over-long hit. Extra keys (`cache_salt`, `lora_id`) go with the lookup and
the admission, as v1's `Request.cache_salt` and `lora_request` do.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import trace as tr
from ..block_table import blocks_needed
from ..errors import count_arg, token_ids_arg


@dataclass(frozen=True)
class ComputedBlocks:
    """What `get_computed_blocks` found (v1 returns KVCacheBlocks and num_computed_tokens)."""

    token_ids: tuple  # the lookup's token ids
    blocks: tuple  # cached blocks holding its first len(blocks) * block_size tokens
    num_tokens: int  # tokens served by them (v1: num_new_computed_tokens)
    extra_keys: tuple = ()  # the lookup's (cache_salt, lora_id) keys, normalised


class V1Slots:
    """get_computed_blocks / allocate_slots for a PrefixCachingManager (see module doc)."""

    def get_computed_blocks(self, token_ids, *, cache_salt=None,
                            lora_id=None) -> ComputedBlocks:
        """v1's lookup: cached full blocks for the prompt, at most len - 1 tokens' worth."""
        tokens = token_ids_arg("token_ids", token_ids)
        keys = self.extra_keys(cache_salt, lora_id)
        hits = self._match(tokens, max(len(tokens) - 1, 0) // self.block_size, keys)
        return ComputedBlocks(tokens, tuple(hits), len(hits) * self.block_size, keys)

    def allocate_slots(self, seq_id, num_new_tokens: int, num_lookahead_tokens: int = 0,
                       new_token_ids=None, computed: ComputedBlocks | None = None, *,
                       cache_salt=None, lora_id=None, preempted: bool = False):
        """Slots for `num_new_tokens` more computed tokens (+ lookahead), as v1 does.

        A new sequence needs `new_token_ids` (its prompt, or prompt + output after a
        preemption) and may bring `computed` from `get_computed_blocks` for those ids
        and the same extra keys. A running one may bring `new_token_ids` sampled since
        its last call. Returns the newly allocated blocks, or None -- with nothing
        changed -- when the free blocks (counting cached free hits, which leave the free
        list) are too few. `preempted` says a new sequence is a preempted request coming
        back: its lookup is counted apart (CacheStats.record).
        """
        n = count_arg("num_new_tokens", num_new_tokens)
        ahead = count_arg("num_lookahead_tokens", num_lookahead_tokens)
        if not isinstance(preempted, bool):
            raise TypeError(f"preempted must be a bool, got {type(preempted).__name__}")
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
        hits: list = []
        if computed is not None:
            if not isinstance(computed, ComputedBlocks):
                raise TypeError(f"computed must come from get_computed_blocks, got {computed!r}")
            hits = list(computed.blocks)
        # the ids get_computed_blocks already checked need no second pass
        same = computed is not None and new_token_ids is computed.token_ids
        tokens = computed.token_ids if same else token_ids_arg("new_token_ids", new_token_ids)
        if computed is not None:
            self._check_computed(computed, tokens, hits, same, keys)
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

    def _check_computed(self, computed: ComputedBlocks, tokens: tuple, hits: list,
                        same: bool, keys: tuple) -> None:
        """What get_computed_blocks returned, checked again: a forged one is a ValueError."""
        bs = self.block_size
        if computed.num_tokens != len(hits) * bs:
            raise ValueError(f"computed.num_tokens is {computed.num_tokens!r} but its "
                             f"{len(hits)} blocks hold {len(hits) * bs} tokens")
        if len(hits) * bs > max(len(tokens) - 1, 0):  # v1: max_cache_hit_length
            raise ValueError(f"computed blocks cover {len(hits) * bs} of {len(tokens)} tokens; "
                             f"a hit is capped at num_tokens - 1 (the last token is computed)")
        if computed.extra_keys != keys:
            raise ValueError("computed blocks were looked up with other extra keys "
                             "(cache_salt / lora_id)")
        if (not same and computed.token_ids != tokens) or \
                self._match(tokens, len(hits), keys) != hits:
            raise ValueError("computed blocks are stale or belong to other token ids")

    def blocks_to_extend(self, seq_id, num_new_tokens: int, num_lookahead_tokens: int = 0) -> int:
        """Free blocks `allocate_slots(seq_id, num_new_tokens, num_lookahead_tokens)` takes
        from a running sequence (v1: get_num_blocks_to_allocate); changes nothing."""
        table = self._table(seq_id)
        n = count_arg("num_new_tokens", num_new_tokens)
        ahead = count_arg("num_lookahead_tokens", num_lookahead_tokens)
        done = table.num_tokens - self._ahead.get(seq_id, 0)
        return self._extend_plan(table, done + n + ahead, n)[3]

    def _extend_plan(self, table, target: int, n: int) -> tuple:
        """(target, tokens to grow, copy-on-write?, free blocks needed) for an extension."""
        grow = max(0, target - table.num_tokens)
        # a slot handed out in a shared, partly filled last block (a new token or a lookahead
        # slot) needs a private copy first; v0 fork only: v1 never shares a partial block
        cow = bool((n or grow) and table.num_tokens % self.block_size
                   and self.pool.is_shared(table.blocks[-1]))
        need = blocks_needed(table.num_tokens + grow, self.block_size) - len(table.blocks) + cow
        return target, grow, cow, need

    def _extend(self, seq_id, n, ahead, new_token_ids, computed):
        if computed is not None:
            raise ValueError(f"sequence {seq_id!r} is running; computed blocks are for new ones")
        table = self._tables[seq_id]
        known = self._known.get(seq_id)
        new = () if new_token_ids is None else token_ids_arg("new_token_ids", new_token_ids)
        if new and known is None:
            raise ValueError(f"sequence {seq_id!r} has unknown token ids; cannot append to them")
        done = table.num_tokens - self._ahead.get(seq_id, 0)
        if known is not None and done + n > len(known) + len(new):
            raise ValueError(f"{done} computed + {n} new tokens exceed the "
                             f"{len(known) + len(new)} known for {seq_id!r}")
        target, grow, cow, need = self._extend_plan(table, done + n + ahead, n)
        if need > self.pool.num_free_blocks:
            return None
        if known is not None:
            known.extend(new)
        count = len(table.blocks)
        if need:
            self._make_room(seq_id, table, grow)  # fits: the reclaimer is never asked
        first = table.num_tokens
        table.num_tokens = max(first, target)
        self._ahead[seq_id] = table.num_tokens - done - n
        if self._tracing and table.num_tokens > first:
            self._emit(tr.TokensAppended, seq_id, first,
                       tuple(table.slot(p) for p in range(first, table.num_tokens)))
        self._cache_full_blocks(seq_id)
        new = table.blocks[count - cow:]  # a copy-on-write replaced the last block too
        self._end_step()  # (a sliding window may free some of them now, as v1 does next step)
        return new
