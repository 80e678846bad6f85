"""`DevicePool`: a block pool whose free stack and ref counts live in device memory.

The host side of `kernels.py` and `prefix.py`. Every launcher checks its arguments
(shape, dtype, id range, enough free blocks, no over-free) before any launch and
raises ValueError (or `OutOfBlocks`) naming the argument; on error nothing is launched
and the pool is unchanged.

    pool = DevicePool(num_blocks)
    table, granted = pool.allocate(counts, method="cas")  # table: [n, max(counts)] int32, -1 padded
    pool.incref(table[table >= 0])                        # share (fork)
    released = pool.free(table[table >= 0])               # True where the count reached 0

Reference: vLLM v1 `BlockPool` (the host pool); SGLang `TokenToKVPoolAllocator`.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from pagedsim.errors import OutOfBlocks

from . import kernels as K
from . import prefix as P

METHODS = ("cas", "atomic_add", "prefix_sum", "racy")
THREADS = 128  # threads per block for the one-thread-per-request kernels


def _grid(n: int) -> int:
    return max(1, (n + THREADS - 1) // THREADS)


def _as_ids(name: str, values, limit: int | None = None) -> np.ndarray:
    a = np.asarray(values)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got dtype {a.dtype}")
    a = a.astype(np.int32)
    if a.size and a.min() < 0:
        raise ValueError(f"{name} must be non-negative, got {int(a.min())}")
    if limit is not None and a.size and a.max() >= limit:
        raise ValueError(f"{name} holds block id {int(a.max())}, pool has {limit} blocks")
    return a


class DevicePool:
    """A free stack of block ids plus ref counts, all in device memory."""

    def __init__(self, num_blocks: int):
        if not isinstance(num_blocks, (int, np.integer)) or num_blocks < 1:
            raise ValueError(f"num_blocks must be a positive int, got {num_blocks!r}")
        self.num_blocks = int(num_blocks)
        # reversed so that block 0 is popped first, like the host pool's LIFO order
        # [num_blocks]
        self.free_ids = cuda.to_device(np.arange(num_blocks - 1, -1, -1, dtype=np.int32))
        self.top = cuda.to_device(np.array([num_blocks], dtype=np.int32))  # [1]
        self.ref = cuda.to_device(np.zeros(num_blocks, dtype=np.int32))  # [num_blocks]

    @property
    def num_free(self) -> int:
        return int(self.top.copy_to_host()[0])

    def free_list(self) -> np.ndarray:
        """Free ids, bottom of the stack first (the last one is popped next)."""
        return self.free_ids.copy_to_host()[: self.num_free]

    def ref_counts(self) -> np.ndarray:
        return self.ref.copy_to_host()

    def allocate(self, counts, method: str = "cas") -> tuple[np.ndarray, np.ndarray]:
        """Request i takes counts[i] blocks: (table [n, max k] int32 padded -1, granted bool[n]).
        "cas" may refuse single requests when the pool runs short (granted False, nothing
        taken for them); the others need the whole batch to fit, else OutOfBlocks."""
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        c = _as_ids("counts", counts)
        n, width, total, free = c.size, int(c.max(initial=0)), int(c.sum()), self.num_free
        if method != "cas" and total > free:
            raise OutOfBlocks(total, free, f"a batch of {n} requests")
        table = np.full((n, max(width, 1)), -1, dtype=np.int32)
        granted = np.zeros(n, dtype=np.int32)
        if n == 0:
            return table[:, :width], granted.astype(bool)
        d_counts, d_granted = cuda.to_device(c), cuda.to_device(granted)
        d_table = cuda.to_device(table)
        args = (self.free_ids, self.top, self.ref, d_table, d_granted)
        if method == "prefix_sum":
            d_offsets = P.exclusive_scan(d_counts)
            base = free - total
            P.take_slices_kernel[_grid(n), THREADS](
                d_counts, d_offsets, base, self.free_ids, self.ref, d_table, d_granted
            )
            self.top.copy_to_device(np.array([base], dtype=np.int32))
        else:
            kernel = getattr(K, f"alloc_{method}_kernel")  # alloc_cas_kernel, ...
            kernel[_grid(n), THREADS](d_counts, *args)
        return d_table.copy_to_host()[:, :width], d_granted.copy_to_host().astype(bool)

    def incref(self, blocks) -> None:
        """One more owner for every id in `blocks` (an id may repeat); each must be in use."""
        b = _as_ids("blocks", blocks, self.num_blocks)
        free = self.ref_counts()[b] == 0
        if free.any():
            raise ValueError(f"blocks holds free block id(s) {sorted(set(b[free].tolist()))}")
        if b.size:
            K.incref_kernel[_grid(b.size), THREADS](cuda.to_device(b), self.ref)

    def free(self, blocks) -> np.ndarray:
        """Drop one owner per entry; released: bool[len(blocks)], True where a count hit 0."""
        b = _as_ids("blocks", blocks, self.num_blocks)
        ref = self.ref_counts()
        drops = np.bincount(b, minlength=self.num_blocks)
        if (drops > ref).any():
            bad = np.flatnonzero(drops > ref)
            raise ValueError(
                f"blocks frees block id(s) {bad.tolist()} more often than they are owned"
            )
        released = np.zeros(b.size, dtype=np.int32)
        if b.size:
            d_released = cuda.to_device(released)
            K.free_kernel[_grid(b.size), THREADS](
                cuda.to_device(b), self.free_ids, self.top, self.ref, d_released
            )
            released = d_released.copy_to_host()
        return released.astype(bool)

    def check_invariants(self) -> None:
        """Free ids are distinct and have count 0; every block is either free or owned."""
        free, ref = self.free_list(), self.ref_counts()
        assert len(set(free.tolist())) == free.size, (
            f"an id is on the free stack twice: {sorted(free)}"
        )
        assert (ref[free] == 0).all(), "a block on the free stack has owners"
        assert (ref >= 0).all(), "a negative ref count"
        owned = int((ref > 0).sum())
        assert owned + free.size == self.num_blocks, (
            f"{self.num_blocks - owned - free.size} block(s) lost"
        )
