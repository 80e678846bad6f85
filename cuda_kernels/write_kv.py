"""Scatter new tokens' K and V into their cache slots (vLLM's reshape_and_cache).

slot = block * block_size + offset, from `KVCacheManager.slot_mapping` /
`append_tokens`. A negative slot is padding and is skipped.
Grid: one thread block per token; its threads stride over the H_kv x D elements of
that token, so consecutive threads write consecutive head_dim elements.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from . import _backend
from . import _checks as ck
from .layout import check_kv_cache


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


def write_kv(kv_cache, key, value, slot_mapping) -> None:
    """kv_cache [N, 2, H_kv, B, D]; key, value [T, H_kv, D] (same dtype as the cache);
    slot_mapping int32/int64 [T], each slot < N * B or negative (skipped)."""
    num_blocks, num_kv_heads, block_size, head_dim = check_kv_cache("kv_cache", kv_cache)
    slots = ck.host_ints("slot_mapping", slot_mapping, 1)
    num_tokens = len(slots)
    for name, a in (("key", key), ("value", value)):
        ck.require_array(name, a, 3, (kv_cache.dtype,))
        ck.require_shape(name, a, (num_tokens, num_kv_heads, head_dim))
        ck.require_c_contiguous(name, a)
    ck.require_range("slot_mapping", slots, -(2**62), num_blocks * block_size,
                     f" (the cache has {num_blocks} blocks of {block_size} slots)")
    real = np.sort(slots[slots >= 0])
    twice = real[1:][real[1:] == real[:-1]]
    if len(twice):
        raise ValueError(f"slot_mapping names slot {int(twice[0])} twice")
    if num_tokens == 0:
        return
    cache = ck.to_device(kv_cache)
    write_kv_kernel[num_tokens, _backend.block_threads()](
        cache, ck.to_device(key), ck.to_device(value),
        ck.to_device(slots) if not ck.is_device(slot_mapping) else slot_mapping)
    ck.write_back(kv_cache, cache)
