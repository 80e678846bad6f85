"""The prefix cache's counters and its default hash (v1 PrefixCacheStats, hash_block_tokens)."""

from __future__ import annotations

from dataclasses import dataclass


def chained_hash(parent_hash: int, tokens: tuple[int, ...]) -> int:
    """v1's hash_block_tokens without extra keys: the block's tokens after its parent's hash."""
    return hash((parent_hash, tokens))


@dataclass
class CacheStats:
    """Counted once per admission. A preempted request admitted again is counted apart, in
    the preempted_* fields, and stays out of `hit_rate`, as v1's PrefixCacheStats.record(...,
    preempted=True) does. The block counts (hits, misses, block_floor) count every one."""

    requests: int = 0  # new admissions that looked the cache up (v1: PrefixCacheStats.requests)
    prompt_tokens: int = 0  # tokens they looked up (v1: PrefixCacheStats.queries)
    hit_tokens: int = 0  # of those, served by cached blocks (v1: PrefixCacheStats.hits)
    preempted_requests: int = 0  # admissions of preempted requests (v1: preempted_requests)
    preempted_prompt_tokens: int = 0  # tokens they looked up (v1: preempted_queries)
    preempted_hit_tokens: int = 0  # of those, served by cached blocks (v1: preempted_hits)
    hits: int = 0  # the same hits, in full blocks
    misses: int = 0  # full prompt blocks that were computed
    evictions: int = 0  # cached blocks whose contents were overwritten
    block_floor: int = 0  # prompt tokens matching a cached block that did not fill a block

    def record(self, num_tokens: int, num_hit_tokens: int, preempted: bool) -> None:
        """One admission's lookup: `num_tokens` looked up, `num_hit_tokens` of them hit."""
        if preempted:
            self.preempted_requests += 1
            self.preempted_prompt_tokens += num_tokens
            self.preempted_hit_tokens += num_hit_tokens
        else:
            self.requests += 1
            self.prompt_tokens += num_tokens
            self.hit_tokens += num_hit_tokens

    @property
    def hit_rate(self) -> float:
        """Fraction of prompt tokens served from the cache (v1's prefix-cache hit rate)."""
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
