"""Sliding window + prefix caching, as vLLM v1 combines them (v1 single_type_kv_cache_manager.py).

1. Blocks out of the window are freed (`remove_skipped_blocks`), their entries null; a
   freed block keeps its hash at the free queue's tail, so a later request can hit it.
   Here they drop at the end of each step (v1: when allocating).
2. A hit need not start at block 0 (`find_longest_cache_hit`): the ceil((W - 1) / B)
   blocks just before the tokens to compute suffice. The search runs from the right; the
   earliest such run ends the hit, null blocks before it; with no full run, the hit is
   the cached blocks from block 0, as for full attention (capped at num_tokens - 1).

With attention sinks (ours) the first blocks are read too, so a hit then starts at 0.
"""

from __future__ import annotations

from typing import Any

from ..block_table import NULL_BLOCK
from .cache_pool import CachingBlockPool
from .prefix_cache import PrefixCachingManager
from .sliding_window import SlidingWindowManager


class SlidingWindowPrefixCachingManager(SlidingWindowManager, PrefixCachingManager):
    pool: CachingBlockPool

    def _match(
        self, tokens: tuple[int, ...], max_blocks: int, keys: tuple[tuple[str, Any], ...] = ()
    ) -> list[int]:
        if self.sinks:
            return super()._match(tokens, max_blocks, keys)
        bs, pool = self.block_size, self.pool
        # v1: sliding_window_contiguous_blocks
        run_needed = max(1, -(-(self.sliding_window - 1) // bs))
        cid = pool.root_of(keys)  # where the prompt's chain starts (its extra keys)
        if cid is None:
            return []
        cached: list[int | None] = []  # cached[i]: a block holding logical block i, or None
        for i in range(max_blocks):
            cid = pool.content_id(cid, tokens[i * bs : (i + 1) * bs])
            if cid is None:  # no cached block holds this prefix or anything after it
                break
            cached.append(pool.block_with(cid))
        run = 0
        for i in range(len(cached) - 1, -1, -1):
            if cached[i] is None:
                run = 0
                continue
            run += 1
            if run == run_needed:
                return [NULL_BLOCK] * i + [b for b in cached[i : i + run] if b is not None]
        lead = next((i for i, b in enumerate(cached) if b is None), len(cached))
        return [b for b in cached[:lead] if b is not None]
