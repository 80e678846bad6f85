"""Sliding window + prefix caching, as vLLM v1 combines them (v1 single_type_kv_cache_manager.py).

Two rules of v1's `SlidingWindowManager`:

1. Blocks that fall out of the window are freed (`remove_skipped_blocks`) and their
   table entries become the null block. A freed block keeps its hash, so it joins
   the tail of the free queue as an eviction candidate: a later request can still
   hit it. Here they are dropped at the end of each step (v1: when allocating).
2. A hit need not start at block 0 (`find_longest_cache_hit`): a query only reads
   the last W tokens, so it is enough that the ceil((W - 1) / B) blocks just before
   the tokens to compute are cached. The search runs from the right; the earliest
   such run of cached blocks ends the hit, and every block before it is null. If no
   full run exists, the hit is the cached blocks from block 0 on, as for full
   attention. The `num_tokens - 1` cap applies as before.

With attention sinks (ours, not v1's) the first blocks are read too, so rule 2 is
used only when `sinks == 0`; otherwise a hit must start at block 0.
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
