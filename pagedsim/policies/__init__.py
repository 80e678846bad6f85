"""What the block manager does under pressure and with repetition: one module per policy.

    preemption.py      recompute / swap a victim group when the pool runs dry
    prefix_cache.py    reuse full prompt blocks across requests (lru / lfu / fifo eviction)
    sliding_window.py  return blocks that fell out of the attention window (with sinks)

Everything is selectable by name: `make_policy("recompute" | "swap", ...)` and
`PrefixCachingManager(..., eviction="lru" | "lfu" | "fifo")`.
"""

from .preemption import PREEMPTION_POLICIES, Group, RecomputePolicy, SwapPolicy, make_policy
from .prefix_cache import EVICTION_POLICIES, CacheStats, PrefixCachingManager, chained_hash
from .sliding_window import SlidingWindowManager

__all__ = [
    "PREEMPTION_POLICIES", "EVICTION_POLICIES", "Group", "RecomputePolicy", "SwapPolicy",
    "make_policy", "PrefixCachingManager", "CacheStats", "chained_hash", "SlidingWindowManager",
]
