"""A swapped-in sequence keeps its prefix-cache hashes (the prefix cache's side of a swap).

A swap frees a sequence's GPU blocks and later restores it into fresh ones
(`KVCacheManager.restore_sequences`, policies/preemption.py's `HostPool`). Fresh blocks
carry no hash, so without this the restored full blocks could never be hit and the
sequence's next blocks would never be named. vLLM v0's block manager re-hashes every
swapped-in full block by its tokens (PrefixCachingBlockAllocator.swap_in allocates an
immutable block for each), and v1 has no swap at all (a preempted request recomputes).
So the pool does as v0: `prefix_state(seq)` is taken before the sequence is freed, and
`restore_sequences(..., prefix_state)` chains the restored blocks from the prompt's root
again and goes on hashing. One difference: v0 reuses a cached block of the same content
instead of the restored one; this pool keeps both under the hash, as v1's index allows.

Invariant (checked by tests/cache/test_prefix_cache.py's machine): after a swap-in, every
full block of the sequence is cached under the chained hash of its token prefix.
"""

from __future__ import annotations

from ..errors import token_ids_arg


class RestoresPrefixState:
    """Mixed into PrefixCachingManager: the hooks `restore_sequences` calls."""

    def prefix_state(self, seq_id):
        """(token ids, extra keys) of a sequence whose every token id is known, else None."""
        table = self._table(seq_id)
        known = self._known.get(seq_id)
        if known is None or self._ahead.get(seq_id, 0) or len(known) != table.num_tokens:
            return None
        return tuple(known), self._extra.get(seq_id, ())

    def _check_prefix_state(self, seq_id, num_tokens: int, state) -> None:
        if not isinstance(state, tuple) or len(state) != 2 or not isinstance(state[1], tuple):
            raise TypeError(f"seq {seq_id!r}: prefix_state must be (token ids, extra keys) "
                            f"as prefix_state() returns it, got {state!r}")
        if len(token_ids_arg("token_ids", state[0])) != num_tokens:
            raise ValueError(f"seq {seq_id!r}: prefix_state holds {len(state[0])} token ids "
                             f"for {num_tokens} tokens")
        if state[1][:len(self._group_keys)] != self._group_keys:
            raise ValueError(f"seq {seq_id!r}: prefix_state's extra keys are another KV "
                             f"cache group's")

    def _restore_prefix_state(self, seq_id, state) -> None:
        """Chain the restored blocks from the prompt's root again, as at admission (v0's
        swap-in re-hashes every full block by its tokens; this pool keeps a duplicate
        beside a cached block of the same content, as v1's index does, instead of
        reusing it)."""
        tokens, keys = state
        self._known[seq_id] = list(tokens)
        self._extra[seq_id] = keys
        self._ahead[seq_id] = 0
        self._set_chain(seq_id, (0, self._root_hash(keys), self.pool.intern_root(keys)))
        self._cache_full_blocks(seq_id)
