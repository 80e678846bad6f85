"""The chapter's cache layout (3.2) and the device functions that read it.

Per layer:   kv_cache[num_blocks, 2, num_kv_heads, block_size, head_dim]  (K at [:, 0], V at [:, 1])
Whole model: kv_pool[num_blocks, num_layers, 2, num_kv_heads, block_size, head_dim]

K and V of one block sit next to each other, so one block id names both. A layer's
view `kv_pool[:, layer]` has the same inner layout with a larger outer stride; every
launcher accepts it in place. Within a (block, head), the block_size x head_dim
elements are contiguous: consecutive threads reading consecutive `d` coalesce.

A layout is just its `Loaders` (the 3.7 layout labs supply their own); `BLOCK_MAJOR`'s
fallback, `BLOCK_MAJOR_SCALAR`, serves unaligned caches and odd head_dims.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
from numba import cuda, float32, int32

from . import _checks as ck
from .primitives import itemsize


@cuda.jit(device=True)
def k_row(cache, seq, block, kv_head, offset):
    """Element index of cache[block, 0, kv_head, offset, 0] from the data pointer: a
    64-bit block term plus one 32-bit in-block offset per token."""
    item = itemsize(cache)  # a constant: the divisions are shifts, hoisted out of loops
    inner = int32(kv_head * (cache.strides[2] // item) + offset * (cache.strides[3] // item))
    return block * (cache.strides[0] // item) + inner


@cuda.jit(device=True)
def v_row(cache, seq, block, kv_head, offset):
    """Element index of cache[block, 1, kv_head, offset, 0]."""
    item = itemsize(cache)
    inner = int32(
        cache.strides[1] // item
        + kv_head * (cache.strides[2] // item)
        + offset * (cache.strides[3] // item)
    )
    return block * (cache.strides[0] // item) + inner


@cuda.jit(device=True)
def load_k(cache, block, kv_head, offset, d):
    return float32(cache[block, 0, kv_head, offset, d])


@cuda.jit(device=True)
def load_v(cache, block, kv_head, offset, d):
    return float32(cache[block, 1, kv_head, offset, d])


class Loaders(NamedTuple):
    """How a decode kernel reads K and V (`@cuda.jit(device=True)` functions): vector
    loaders give load_k(k_src, seq, block, kv_head, offset) -> the element index of d = 0 of
    the token's key row (contiguous, 16-byte aligned); scalar ones load_k(k_src, block,
    kv_head, offset, d) -> float32; load_v likewise. name keys the compiled-kernel cache;
    fallback: the scalar Loaders when 16-byte loads are impossible (else a refusal)."""

    name: str
    load_k: Callable
    load_v: Callable
    vector: bool = False
    fallback: "Loaders | None" = None


BLOCK_MAJOR_SCALAR = Loaders("kv_cache[N,2,H,B,D] scalar", load_k, load_v)
BLOCK_MAJOR = Loaders("kv_cache[N,2,H,B,D]", k_row, v_row, vector=True, fallback=BLOCK_MAJOR_SCALAR)


class CacheShape(NamedTuple):
    """A cache's geometry, as the launchers check block ids and positions against it."""

    num_blocks: int
    num_kv_heads: int
    block_size: int
    head_dim: int


def check_kv_cache(name: str, kv_cache) -> CacheShape:
    """Validate a per-layer cache; returns its (num_blocks, num_kv_heads, block_size, head_dim)."""
    ck.require_array(name, kv_cache, 5, ck.FLOAT_DTYPES)
    num_blocks, two, num_kv_heads, block_size, head_dim = ck.shape_of(kv_cache)
    if two != 2:
        raise ValueError(
            f"{name} must be [num_blocks, 2, num_kv_heads, block_size, head_dim]; "
            f"dimension 1 is {two}, not 2"
        )
    if min(num_blocks, num_kv_heads, block_size, head_dim) < 1:
        raise ValueError(f"{name} has an empty dimension: shape {ck.shape_of(kv_cache)}")
    ck.require_contiguous(name, kv_cache, skip=1)
    return CacheShape(num_blocks, num_kv_heads, block_size, head_dim)


def new_kv_cache(num_blocks, num_kv_heads, block_size, head_dim, dtype=np.float32):
    """A zeroed NumPy cache in the per-layer layout."""
    # [N, 2, H_kv, B, D]
    return np.zeros((num_blocks, 2, num_kv_heads, block_size, head_dim), dtype)
