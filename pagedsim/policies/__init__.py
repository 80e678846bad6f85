"""What the block manager does under pressure and with repetition: one module per policy.

    preemption.py      recompute / swap a victim group when the pool runs dry (v0)
    cache_pool.py      the caching pool: hash index, free order, eviction keys (v1)
    prefix_cache.py    reuse every full computed block, prompt and generated, across
                       requests (vLLM v1 prefix caching; lru / lfu / fifo eviction)
    sliding_window.py  return blocks that fell out of the attention window (with sinks)
    sliding_window_cache.py  sliding window + prefix caching, v1's hit rule (v1)
    hybrid.py          two KV cache groups (full attention + sliding window) over one
                       pool, hits aligned across groups (v1 HybridKVCacheCoordinator)

Selectable by name: `make_policy("recompute" | "swap", ...)` and
`PrefixCachingManager(..., eviction="lru" | "lfu" | "fifo")`; a new policy is one entry in
`PREEMPTION` or `EVICTION_KEYS` (tests/core/test_registries.py keeps the prose in step).
"""

from .cache_pool import EVICTION_KEYS, EVICTION_POLICIES, CachingBlockPool
from .cache_stats import CacheStats, chained_hash
from .preemption import (
    PREEMPTION,
    PREEMPTION_POLICIES,
    Group,
    HostPool,
    RecomputePolicy,
    SwapPolicy,
    make_policy,
    preemption_class,
)
from .prefix_cache import ComputedBlocks, PrefixCachingManager
from .sliding_window import SlidingWindowManager
from .sliding_window_cache import SlidingWindowPrefixCachingManager

__all__ = [
    "PREEMPTION",
    "PREEMPTION_POLICIES",
    "HostPool",
    "preemption_class",
    "EVICTION_POLICIES",
    "EVICTION_KEYS",
    "Group",
    "RecomputePolicy",
    "SwapPolicy",
    "make_policy",
    "PrefixCachingManager",
    "SlidingWindowPrefixCachingManager",
    "ComputedBlocks",
    "CachingBlockPool",
    "CacheStats",
    "chained_hash",
    "SlidingWindowManager",
]
