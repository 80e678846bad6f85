"""Whole-block copies: copy-on-write inside the cache, and swapping to/from a host pool.

`copy_blocks(kv_cache, pairs)` consumes `KVCacheManager.drain_copies()`: for each
(src, dst) it copies K and V of every head of block src into block dst (vLLM's
copy_blocks kernel). `swap_out` / `swap_in` move blocks between the device cache and
a host pool of the same layout (vLLM's swap_blocks; PagedAttention 4.5, swapping),
staged through one contiguous device buffer so the host side is a single transfer.

One kernel does all three: dst[pairs[i, 1]] = src[pairs[i, 0]], bit for bit.
Grid: (num_pairs, 2, num_kv_heads), one thread block per (pair, K or V, head); its
threads stride over the block_size x head_dim elements, which are contiguous.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from . import _backend
from . import _checks as ck
from .layout import check_kv_cache


@cuda.jit
def copy_blocks_kernel(src, dst, pairs):
    pair = cuda.blockIdx.x
    kv = cuda.blockIdx.y
    head = cuda.blockIdx.z
    a = pairs[pair, 0]
    b = pairs[pair, 1]
    head_dim = src.shape[4]
    for i in range(cuda.threadIdx.x, src.shape[3] * head_dim, cuda.blockDim.x):
        offset = i // head_dim
        d = i - offset * head_dim
        dst[b, kv, head, offset, d] = src[a, kv, head, offset, d]


def check_pairs(pairs, num_src: int, num_dst: int, same_pool: bool) -> np.ndarray:
    """(src, dst) pairs as int32 [n, 2]: ids in range, no dst twice, and (in one pool)
    no block both written and read, since the copies run in parallel."""
    arr = np.asarray(pairs, dtype=np.int64) if len(pairs) else np.zeros((0, 2), np.int64)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"pairs must be (src, dst) pairs, got an array of shape {arr.shape}")
    for col, role, limit in ((0, "src", num_src), (1, "dst", num_dst)):
        at = ck.first_bad((arr[:, col] < 0) | (arr[:, col] >= limit))
        if at is not None:
            raise ValueError(f"pairs[{at[0]}] {role} = {int(arr[at[0], col])} is out of range "
                             f"[0, {limit})")
    dst, first = np.unique(arr[:, 1], return_index=True)
    if len(dst) != len(arr):
        again = next(i for i in range(len(arr)) if i not in set(first.tolist()))
        raise ValueError(f"pairs[{again}] writes block {int(arr[again, 1])}, already a dst")
    if same_pool:
        read = set(arr[:, 0].tolist())
        for i, (a, b) in enumerate(arr.tolist()):
            if b in read and a != b:
                raise ValueError(f"pairs[{i}] writes block {b}, which another pair reads")
    return arr.astype(np.int32)


def _launch(src, dst, pairs: np.ndarray, num_kv_heads: int) -> None:
    if len(pairs):
        copy_blocks_kernel[(len(pairs), 2, num_kv_heads), _backend.block_threads()](
            src, dst, cuda.to_device(pairs))


def copy_blocks(kv_cache, pairs) -> None:
    """Copy whole blocks inside kv_cache [N, 2, H_kv, B, D] for each (src, dst)."""
    num_blocks, num_kv_heads, _, _ = check_kv_cache("kv_cache", kv_cache)
    arr = check_pairs(pairs, num_blocks, num_blocks, same_pool=True)
    cache = ck.to_device(kv_cache)
    _launch(cache, cache, arr, num_kv_heads)
    ck.write_back(kv_cache, cache)


def _check_host(host_cache, kv_cache):
    num_blocks, num_kv_heads, block_size, head_dim = check_kv_cache("kv_cache", kv_cache)
    if not isinstance(host_cache, np.ndarray):
        raise ValueError(f"host_cache must be a NumPy array, got {type(host_cache).__name__}")
    num_host = check_kv_cache("host_cache", host_cache)[0]
    if host_cache.shape[1:] != tuple(kv_cache.shape[1:]) or host_cache.dtype != kv_cache.dtype:
        raise ValueError(f"host_cache {host_cache.shape[1:]} {host_cache.dtype} must match "
                         f"kv_cache {tuple(kv_cache.shape[1:])} {np.dtype(kv_cache.dtype)}")
    return num_blocks, num_host, num_kv_heads


def swap_out(kv_cache, host_cache: np.ndarray, pairs) -> None:
    """Copy device blocks to the host pool: host_cache[dst] = kv_cache[src]."""
    num_dev, num_host, num_kv_heads = _check_host(host_cache, kv_cache)
    arr = check_pairs(pairs, num_dev, num_host, same_pool=False)
    if not len(arr):
        return
    staging = cuda.device_array((len(arr),) + tuple(kv_cache.shape[1:]), kv_cache.dtype)
    gather = np.stack([arr[:, 0], np.arange(len(arr), dtype=np.int32)], axis=1)
    _launch(ck.to_device(kv_cache), staging, gather, num_kv_heads)
    host_cache[arr[:, 1]] = staging.copy_to_host()


def swap_in(host_cache: np.ndarray, kv_cache, pairs) -> None:
    """Copy host-pool blocks to the device: kv_cache[dst] = host_cache[src]."""
    num_dev, num_host, num_kv_heads = _check_host(host_cache, kv_cache)
    arr = check_pairs(pairs, num_host, num_dev, same_pool=False)
    if not len(arr):
        return
    staging = cuda.to_device(np.ascontiguousarray(host_cache[arr[:, 0]]))
    scatter = np.stack([np.arange(len(arr), dtype=np.int32), arr[:, 1]], axis=1)
    cache = ck.to_device(kv_cache)
    _launch(staging, cache, scatter, num_kv_heads)
    ck.write_back(kv_cache, cache)
