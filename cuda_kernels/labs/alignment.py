"""The alignment lab: the chapter's decode kernel over a pool whose blocks start off a
128-byte boundary.

Chapter 3.7 advises starting every block on a 128-byte boundary (a cache line).
`offset_pool` carves the pool out of a flat byte buffer so that its first byte sits
`offset` bytes past one; with blocks a multiple of 128 bytes, every block starts that far
off. The view keeps the kernel's array type ([N, 2, H_kv, B, D], C-contiguous), so the
unchanged `cuda_kernels.paged_attention` runs on it. A 4-byte offset suits scalar loads
(the kernel's) but would fault a 16-byte vector load.
`pagedsim.labs.sectors.alignment_table` gives the theory; `benchmarks/gpu_labs.py` measures.

Reference: CUDA C++ Best Practices Guide, "Misaligned Accesses".
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from cuda_kernels import paged_attention
from cuda_kernels.layout import check_kv_cache
from cuda_kernels.primitives import device_address

OFFSETS = (0, 4, 16, 64, 128)  # bytes past a 128-byte boundary
LINE = 128


def offset_pool(shape, dtype, offset: int):
    """A zeroed C-contiguous device array of `shape`/`dtype` starting `offset` bytes past
    a 128-B boundary.
    """
    dtype = np.dtype(dtype)
    if not isinstance(offset, (int, np.integer)) or offset < 0:
        raise ValueError(f"offset must be a non-negative int of bytes, got {offset!r}")
    if offset % dtype.itemsize:
        raise ValueError(
            f"offset {offset} is not a multiple of the {dtype.name} size {dtype.itemsize}"
        )
    nbytes = int(np.prod(shape)) * dtype.itemsize
    flat = cuda.to_device(np.zeros(nbytes + offset + 2 * LINE, np.uint8))  # room to slide the start
    start = (-device_address(flat)) % LINE + offset
    view = flat[start : start + nbytes].view(dtype).reshape(tuple(shape))
    return view  # a view keeps its parent allocation alive


def decode_at_offset(offset: int, query, kv_cache: np.ndarray, block_tables, context_lens, **kw):
    """Copy kv_cache [N, 2, H, B, D] into an offset pool and run the chapter's decode kernel on it.

    Returns (out float32 [S, H, D], the pool's first-byte address modulo 128)."""
    check_kv_cache("kv_cache", kv_cache)
    pool = offset_pool(kv_cache.shape, kv_cache.dtype, offset)
    pool.copy_to_device(np.ascontiguousarray(kv_cache))
    out = paged_attention(query, pool, block_tables, context_lens, **kw)
    return out, device_address(pool) % LINE
