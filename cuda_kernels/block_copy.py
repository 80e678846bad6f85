"""Whole-block copies: copy-on-write inside the cache, and swapping to/from a host pool.

`copy_blocks(kv_cache, pairs)` consumes `KVCacheManager.drain_copies()`: for each
(src, dst) it copies K and V of every head of block src into block dst (vLLM's
copy_blocks kernel). `swap_out` / `swap_in` move blocks between the device cache and
a host pool of the same layout (vLLM's swap_blocks; PagedAttention 4.5, swapping),
staged through one contiguous device buffer so the host side is a single transfer.

One kernel does all three: dst[pairs[i, 1]] = src[pairs[i, 0]], bit for bit.
A block's [2, H_kv, B, D] elements are contiguous (the launchers check it), so a block
is one run of `block_bytes` bytes and the copy is a flat one:
  * vector path (`copy_blocks_vec`): when the run is a whole number of 16-byte chunks and
    both pools' data pointers and block strides are 16-byte aligned, every thread moves
    UNROLL chunks per loop trip with `primitives.load16` / `store16`
    (ld.global.nc.v4.u32 / st.global.v4.u32), all UNROLL loads issued before the first
    store, so 64 bytes per thread are in flight. Grid: (num_pairs, spans), spans CTAs per
    pair (enough for ~8 CTAs per SM of the device in all, at most one per UNROLL x threads
    chunks), a grid-stride loop over the block, no division in it;
  * scalar path (`copy_blocks_kernel`): otherwise, one element per thread and step.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from . import _backend
from . import _checks as ck
from .attention import sm_count
from .layout import check_kv_cache
from .primitives import device_address, itemsize, load16, store16

UNROLL = 4  # 16-byte chunks in flight per thread
CTAS_PER_SM = 8  # CTAs to aim for per SM (the SM count is the device's: attention.sm_count)


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


@cuda.jit
def copy_blocks_vec(src, dst, pairs, chunks):
    """dst block pairs[p, 1] = src block pairs[p, 0], `chunks` 16-byte chunks per block:
    CTA (p, y) strides over the block, UNROLL loads issued before the first store."""
    vec = 16 // itemsize(src)  # elements per chunk (a compile-time constant)
    a = pairs[cuda.blockIdx.x, 0]
    b = pairs[cuda.blockIdx.x, 1]
    nt = cuda.blockDim.x
    c = cuda.blockIdx.y * (nt * UNROLL) + cuda.threadIdx.x
    stride = cuda.gridDim.y * (nt * UNROLL)
    s0 = a * (src.strides[0] // itemsize(src))  # element index of block a
    d0 = b * (dst.strides[0] // itemsize(dst))
    step = nt * vec
    while c + (UNROLL - 1) * nt < chunks:  # the steady case: four loads in flight, then four stores
        at = c * vec
        w0 = load16(src, s0 + at)
        w1 = load16(src, s0 + at + step)
        w2 = load16(src, s0 + at + 2 * step)
        w3 = load16(src, s0 + at + 3 * step)
        store16(dst, d0 + at, w0)
        store16(dst, d0 + at + step, w1)
        store16(dst, d0 + at + 2 * step, w2)
        store16(dst, d0 + at + 3 * step, w3)
        c += stride
    for k in range(UNROLL):  # the last, partial group of this thread
        if c + k * nt < chunks:
            at = (c + k * nt) * vec
            store16(dst, d0 + at, load16(src, s0 + at))


def check_pairs(pairs, num_src: int, num_dst: int, same_pool: bool) -> np.ndarray:
    """(src, dst) pairs as int32 [n, 2]: ints, ids in range, no dst twice, and in one pool
    no block both written and read (the copies run in parallel)."""
    arr = ck.index_array("pairs", pairs, 2)
    if isinstance(arr, np.ndarray) and arr.size == 0:
        arr = np.zeros((0, 2), np.int64)
    if not isinstance(arr, np.ndarray):
        raise ck.ArgumentTypeError(
            f"pairs must be a list of (src, dst) int pairs or an int array, "
            f"got {type(pairs).__name__}"
        )
    ck.require_array("pairs", arr, 2, (np.int32, np.int64))
    if arr.shape[1] != 2:
        raise ValueError(f"pairs must be (src, dst) pairs, got an array of shape {arr.shape}")
    arr = arr.astype(np.int64)
    for col, role, limit in ((0, "src", num_src), (1, "dst", num_dst)):
        at = ck.first_bad((arr[:, col] < 0) | (arr[:, col] >= limit))
        if at is not None:
            raise ValueError(
                f"pairs[{at[0]}] {role} = {int(arr[at[0], col])} is out of range [0, {limit})"
            )
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


def vector_chunks(src, dst) -> int:
    """16-byte chunks per block, or 0 unless both pools' blocks start 16-byte aligned."""
    block_bytes = int(np.prod(src.shape[1:])) * np.dtype(src.dtype).itemsize
    aligned = (
        device_address(a) % 16 == 0 and (a.shape[0] < 2 or a.strides[0] % 16 == 0)
        for a in (src, dst)
    )
    return block_bytes // 16 if block_bytes % 16 == 0 and all(aligned) else 0


def _launch(src, dst, pairs: np.ndarray, num_kv_heads: int) -> None:
    if len(pairs):
        launch_pairs(src, dst, cuda.to_device(pairs), len(pairs), num_kv_heads)


def launch_pairs(src, dst, d_pairs, num_pairs: int, num_kv_heads: int) -> None:
    """Launch the copy for checked pairs already on the device (the benchmark times this)."""
    threads = _backend.block_threads()
    chunks = vector_chunks(src, dst)
    if chunks:  # enough CTAs per pair to fill the GPU, each looping over its share
        wave = CTAS_PER_SM * sm_count()
        spans = min(-(-chunks // (threads * UNROLL)), max(1, wave // num_pairs))
        grid = ck.require_grid(
            "copy_blocks", (num_pairs, spans, 1), ("block pairs", "spans per block", "")
        )
        copy_blocks_vec[grid, threads](src, dst, d_pairs, chunks)
    else:
        grid = ck.require_grid(
            "copy_blocks", (num_pairs, 2, num_kv_heads), ("block pairs", "K/V", "KV heads")
        )
        copy_blocks_kernel[grid, threads](src, dst, d_pairs)


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
        raise ck.ArgumentTypeError(
            f"host_cache must be a NumPy array, got {type(host_cache).__name__}"
        )
    num_host = check_kv_cache("host_cache", host_cache)[0]
    if host_cache.shape[1:] != tuple(kv_cache.shape[1:]) or host_cache.dtype != kv_cache.dtype:
        raise ValueError(
            f"host_cache {host_cache.shape[1:]} {host_cache.dtype} must match "
            f"kv_cache {tuple(kv_cache.shape[1:])} {np.dtype(kv_cache.dtype)}"
        )
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
