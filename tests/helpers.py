"""Helpers several test folders share (import as `from helpers import ...`; tests/conftest.py
puts this folder on sys.path).

    pool_state(pool)      everything observable about a BlockPool, its free list's storage
                          included (two stacks, or a LinkedBlockPool's links)
    manager_state(m)      a manager's blocks, tables, copies, step counter, trace lengths,
                          pool and sliding-window state; `.without_history()` drops the step
                          counter and trace lengths (a refused allocation is still a step)
    random_cache(...)     a fresh standard-normal per-layer cache [N, 2, H_kv, B, D]

A refusal must leave the state exactly as it was: tests take `before = ..._state(x)`,
make the bad call, and compare.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pagedsim.linked_pool import LinkedBlockPool


def pool_state(pool) -> tuple:
    """Free list (head first), counts, free and shared totals, and how the list is stored:
    a LinkedBlockPool's prev/next links, a BlockPool's two stacks."""
    if isinstance(pool, LinkedBlockPool):
        storage = (list(pool._prev), list(pool._next))
    else:
        storage = (list(pool._free), list(pool._back))
    return (pool.free_list(), pool.ref_counts(), pool.num_free_blocks, pool.num_shared, *storage)


class ManagerState(NamedTuple):
    free_list: tuple
    ref_counts: tuple
    sequences: tuple  # SeqState per live sequence: its table and length
    pending_copies: tuple
    step: int
    events: int | None  # trace lengths (None: tracing off)
    snapshots: int | None
    pool: tuple  # pool_state(m.pool)
    window: dict  # a sliding window's next drop per sequence ({} without a window)
    dropped: object  # a sliding window's dropped-block count (None without one)
    block_fill: tuple

    def without_history(self) -> tuple:
        """Everything but the step counter and the trace lengths."""
        return (
            self.free_list,
            self.ref_counts,
            self.sequences,
            self.pending_copies,
            self.pool,
            self.window,
            self.dropped,
            self.block_fill,
        )


def manager_state(m) -> ManagerState:
    """Everything a caller can observe, the step counter and the trace included."""
    snap = m.snapshot()
    tracing = m.trace is not None
    return ManagerState(
        snap.free_list,
        snap.ref_counts,
        snap.sequences,
        snap.pending_copies,
        m.step,
        len(m.trace.events) if tracing else None,
        len(m.trace.snapshots) if tracing else None,
        pool_state(m.pool),
        dict(getattr(m, "_next_drop", {})),
        getattr(m, "dropped_blocks", None),
        snap.block_fill,
    )


def random_cache(rng, num_blocks, num_kv_heads, block_size, head_dim, dtype=np.float32):
    """Standard-normal K/V, [num_blocks, 2, num_kv_heads, block_size, head_dim]: never zeros."""
    shape = (num_blocks, 2, num_kv_heads, block_size, head_dim)
    return rng.standard_normal(shape).astype(dtype)
