"""The layout lab: one decode kernel, every registered KV-cache layout, the same logical cache.

The layouts (axis orders, shapes, index arithmetic, `convert`) are the registry
`pagedsim.labs.kv_layouts.LAYOUTS`. This module attaches to each name its device loaders
(`LOADERS`), the address functions handed to the kernels' factory
(`cuda_kernels.fast.decode.make_decode_kernel`), so every layout runs the same kernel body:

    fused   the chapter's BLOCK_MAJOR: 16-byte loads, scalar fallback
    split   row index into [N, H, B, D] pools: 16-byte loads, fallback SPLIT_SCALAR
    nhd     row index into [N, B, H, D] pools: 16-byte loads, fallback NHD_SCALAR
    vllm    scalar loads (its key rows are split into x-element pieces B*x apart)

A new layout needs its `Loaders` here (or `register_loaders`); an import-time check refuses
a registry and a loader table that disagree.

Reference: vLLM csrc/attention/attention_kernels.cuh (key cache [.., D/x, B, x]); the
PagedAttention paper (footnote: K and V together or apart made no difference);
FlashInfer docs, "KV-Cache Layout".
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32, int32

from cuda_kernels import _checks as ck
from cuda_kernels.attention import DecodeOptions, decode_with
from cuda_kernels.layout import BLOCK_MAJOR, CacheShape, Loaders, check_kv_cache
from cuda_kernels.mask import CAUSAL, ScoreMask
from cuda_kernels.primitives import itemsize
from pagedsim.labs.kv_layouts import LAYOUTS, vec_width
from pagedsim.labs.kv_layouts import layout as registered


@cuda.jit(device=True)
def load_split(pool, block, kv_head, offset, d):
    return float32(pool[block, kv_head, offset, d])  # pool: [N, H_kv, B, D]


@cuda.jit(device=True)
def split_row(pool, seq, block, kv_head, offset):
    """Element index of pool[block, kv_head, offset, 0], pool [N, H_kv, B, D]."""
    item = itemsize(pool)
    inner = int32(kv_head * (pool.strides[1] // item) + offset * (pool.strides[2] // item))
    return block * (pool.strides[0] // item) + inner


@cuda.jit(device=True)
def nhd_row(pool, seq, block, kv_head, offset):
    """Element index of pool[block, offset, kv_head, 0], pool [N, B, H_kv, D]."""
    return split_row(pool, seq, block, offset, kv_head)


@cuda.jit(device=True)
def load_k_nhd(k_pool, block, kv_head, offset, d):
    return float32(k_pool[block, offset, kv_head, d])  # k_pool: [N, B, H_kv, D]


@cuda.jit(device=True)
def load_v_nhd(v_pool, block, kv_head, offset, d):
    return float32(v_pool[block, offset, kv_head, d])  # v_pool: [N, B, H_kv, D]


@cuda.jit(device=True)
def load_k_vllm(key, block, kv_head, offset, d):
    x = key.shape[4]
    c = d // x
    return float32(key[block, kv_head, c, offset, d - c * x])  # key: [N, H_kv, D/x, B, x]


@cuda.jit(device=True)
def load_v_vllm(value, block, kv_head, offset, d):
    return float32(value[block, kv_head, d, offset])  # value: [N, H_kv, D, B]


# Layouts whose token rows are contiguous in d get the vector contract (16-byte loads,
# one row index per token), with the scalar loaders as the fallback, exactly as the
# chapter's fused cache does: the lab then compares layouts, not load widths. vLLM's
# key rows are split into x-element pieces B*x apart, so it stays scalar.
SPLIT_SCALAR = Loaders("split k/v pools [N,H,B,D] scalar", load_split, load_split)
NHD_SCALAR = Loaders("split k/v pools [N,B,H,D]", load_k_nhd, load_v_nhd)
LOADERS = {
    "fused": BLOCK_MAJOR,
    "split": Loaders(
        "split k/v pools [N,H,B,D]", split_row, split_row, vector=True, fallback=SPLIT_SCALAR
    ),
    "nhd": Loaders(
        "split k/v pools [N,B,H,D] (NHD)", nhd_row, nhd_row, vector=True, fallback=NHD_SCALAR
    ),
    "vllm": Loaders("vllm key [N,H,D/x,B,x], value [N,H,D,B]", load_k_vllm, load_v_vllm),
}
if set(LOADERS) != set(LAYOUTS):
    raise ImportError(
        f"layouts with no loaders or loaders with no layout: {set(LOADERS) ^ set(LAYOUTS)}"
    )


def loaders(layout: str) -> Loaders:
    """The device loaders of a registered layout; ValueError if it has none."""
    registered(layout)
    if layout not in LOADERS:
        raise ValueError(f"layout {layout!r} has no device loaders: call register_loaders first")
    return LOADERS[layout]


def register_loaders(layout: str, pair: Loaders) -> None:
    """Attach device loaders to a layout registered with `kv_layouts.register`."""
    registered(layout)
    if not isinstance(pair, Loaders):
        raise TypeError(f"pair must be a Loaders, got {type(pair).__name__}")
    if layout in LOADERS:
        raise ValueError(f"layout {layout!r} already has loaders")
    LOADERS[layout] = pair


def unregister_loaders(layout: str) -> None:
    LOADERS.pop(layout, None)


def convert(layout: str, kv_cache: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(k_src, v_src) in `layout` holding the same numbers as the fused kv_cache [N, 2, H, B, D]."""
    spec = registered(layout)
    check_kv_cache("kv_cache", kv_cache)
    return spec.convert(kv_cache)


def geometry(layout: str, k_src, v_src) -> tuple[int, int, int, int]:
    """(num_blocks, H_kv, block_size, head_dim) of a (k_src, v_src) pair valid for `layout`."""
    spec = registered(layout)
    if spec.same_array:
        if k_src is not v_src:
            raise ValueError(f"{layout} layout: pass the same kv_cache as k_src and v_src")
        return check_kv_cache("k_src", k_src)
    ck.require_array("k_src", k_src, len(spec.k_axes), ck.FLOAT_DTYPES)
    ck.require_array("v_src", v_src, len(spec.v_axes), ck.FLOAT_DTYPES)
    if np.dtype(k_src.dtype) != np.dtype(v_src.dtype):
        raise ValueError(f"k_src and v_src dtypes differ: {k_src.dtype} vs {v_src.dtype}")
    ck.require_contiguous("k_src", k_src)
    ck.require_contiguous("v_src", v_src)
    ks, x = ck.shape_of(k_src), vec_width(k_src.dtype)
    n, h, b, d = spec.dims(ks, x)
    ck.require_shape("v_src", v_src, spec.array_shape("v", n, h, b, d, x))
    if min(n, h, b, d) < 1:
        raise ValueError(f"k_src has an empty dimension: shape {ks}")
    return n, h, b, d


def decode(
    layout: str, query, k_src, v_src, block_tables, context_lens, mask: ScoreMask = CAUSAL, **kw
):
    """Decode attention -> float32 [S, H, D] over a cache in `layout` (see the module docstring)."""
    n, h, b, d = geometry(layout, k_src, v_src)
    k_dev = ck.to_device(k_src)
    v_dev = k_dev if LAYOUTS[layout].same_array else ck.to_device(v_src)
    options = DecodeOptions(mask, **kw)
    shape = CacheShape(n, h, b, d)
    return decode_with(
        loaders(layout), k_dev, v_dev, query, block_tables, context_lens, shape, options
    )
