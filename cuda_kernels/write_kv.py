"""Scatter new tokens' K and V into their cache slots (vLLM's reshape_and_cache).

slot = block * block_size + offset, from `KVCacheManager.slot_mapping` /
`append_tokens`. A negative slot is padding and is skipped.
Grid: one thread block per token; its threads stride over the H_kv x D elements of
that token, so consecutive threads write consecutive head_dim elements.
  * vector path (`write_kv_vec`): when a head's row is a whole number of 16-byte chunks
    (head_dim * itemsize % 16 == 0) and cache, key and value are 16-byte aligned
    (`primitives.aligned16`), each step of a thread moves one 16-byte chunk of K and of V
    (`load16` / `store16`). Its (head, chunk) advances by a fixed (dh, dc) per step, so
    the loop has no division;
  * scalar path (`write_kv_kernel`): otherwise, one element per step.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from . import _backend
from . import _checks as ck
from .layout import check_kv_cache
from .primitives import aligned16, itemsize, load16, store16


@cuda.jit
def write_kv_kernel(kv_cache, key, value, slot_mapping):
    token = cuda.blockIdx.x
    slot = slot_mapping[token]
    if slot < 0:  # padding token
        return
    block_size = kv_cache.shape[3]
    head_dim = kv_cache.shape[4]
    block = slot // block_size
    offset = slot - block * block_size
    for i in range(cuda.threadIdx.x, key.shape[1] * head_dim, cuda.blockDim.x):
        head = i // head_dim
        d = i - head * head_dim
        kv_cache[block, 0, head, offset, d] = key[token, head, d]
        kv_cache[block, 1, head, offset, d] = value[token, head, d]


@cuda.jit
def write_kv_vec(kv_cache, key, value, slot_mapping):
    token = cuda.blockIdx.x
    slot = slot_mapping[token]
    if slot < 0:  # padding token
        return
    item = itemsize(kv_cache)  # a compile-time constant: the divisions below are shifts
    vec = 16 // item  # elements per 16-byte chunk
    per_head = kv_cache.shape[4] // vec  # chunks per head row
    heads = key.shape[1]
    block = slot // kv_cache.shape[3]
    offset = slot - block * kv_cache.shape[3]
    # element indices from each array's data pointer: [block, 0, 0, offset, 0] and [token, 0, 0]
    dst0 = block * (kv_cache.strides[0] // item) + offset * (kv_cache.strides[3] // item)
    v_off = kv_cache.strides[1] // item  # K -> V
    dst_head = kv_cache.strides[2] // item
    src0 = token * (key.strides[0] // item)
    src_head = key.strides[1] // item
    nt = cuda.blockDim.x
    dh = nt // per_head
    dc = nt - dh * per_head
    h = cuda.threadIdx.x // per_head
    c = cuda.threadIdx.x - h * per_head
    while h < heads:
        src = src0 + h * src_head + c * vec
        dst = dst0 + h * dst_head + c * vec
        k = load16(key, src)
        v = load16(value, src)
        store16(kv_cache, dst, k)
        store16(kv_cache, dst + v_off, v)
        h += dh
        c += dc
        if c >= per_head:
            c -= per_head
            h += 1


def use_vector_path(kv_cache, key, value) -> bool:
    row_bytes = int(kv_cache.shape[4]) * np.dtype(kv_cache.dtype).itemsize
    return row_bytes % 16 == 0 and all(aligned16(a) for a in (kv_cache, key, value))


def write_kv(kv_cache, key, value, slot_mapping) -> None:
    """kv_cache [N, 2, H_kv, B, D]; key, value [T, H_kv, D] (same dtype as the cache);
    slot_mapping int32/int64 [T], each slot < N * B or negative (skipped)."""
    num_blocks, num_kv_heads, block_size, head_dim = check_kv_cache("kv_cache", kv_cache)
    slots = ck.host_ints("slot_mapping", slot_mapping, 1)
    num_tokens = len(slots)
    for name, a in (("key", key), ("value", value)):
        ck.require_array(name, a, 3, (kv_cache.dtype,))
        ck.require_shape(name, a, (num_tokens, num_kv_heads, head_dim))
        ck.require_contiguous(name, a)
    why = f" (the cache has {num_blocks} blocks of {block_size} slots)"
    ck.require_range("slot_mapping", slots, -(2**62), num_blocks * block_size, why)
    real = np.sort(slots[slots >= 0])
    twice = real[1:][real[1:] == real[:-1]]
    if len(twice):
        raise ValueError(f"slot_mapping names slot {int(twice[0])} twice")
    if num_tokens == 0:
        return
    cache, d_key, d_value = ck.to_device(kv_cache), ck.to_device(key), ck.to_device(value)
    kernel = write_kv_vec if use_vector_path(cache, d_key, d_value) else write_kv_kernel
    ck.require_grid("write_kv", (num_tokens, 1, 1), ("tokens", "", ""))
    d_slots = slot_mapping if ck.is_device(slot_mapping) else ck.to_device(slots)
    kernel[num_tokens, _backend.block_threads()](cache, d_key, d_value, d_slots)
    ck.write_back(kv_cache, cache)
