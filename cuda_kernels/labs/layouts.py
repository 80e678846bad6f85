"""The layout lab: one decode kernel, four KV-cache layouts, the same logical cache.

    fused   kv_cache[N, 2, H_kv, B, D]                   the chapter's block (3.2); K, V adjacent
    split   k_pool[N, H_kv, B, D], v_pool[N, H_kv, B, D]  K and V in separate pools
    nhd     k_pool[N, B, H_kv, D], v_pool[N, B, H_kv, D]  token-major (FlashInfer's NHD)
    vllm    key[N, H_kv, D/x, B, x], value[N, H_kv, D, B] vLLM v0's cache, x = 16 B / elem size

Each layout is a pair of address functions handed to the kernels helper's factory
(`cuda_kernels.decode.make_decode_kernel`, launched by `attention.decode_with`), so
every variant runs the same kernel body and differs only in index arithmetic: fused,
split and nhd with 16-byte loads (scalar fallback when misaligned), vllm with scalar
loads (its key rows are not contiguous in d); `nhd`'s fallback is
`cuda_kernels.layout_demo.SPLIT_NHD`. The layout names, array ranks and index
formulas come from the one registry, `pagedsim.labs.sectors.LAYOUTS`; this module only
attaches a loader pair to each name (an import-time check keeps the two in step). `convert` rewrites a fused cache into
any layout, so all four hold the same numbers and must give the same attention.
`pagedsim.labs.sectors` predicts what each layout costs per warp load; the GPU script measures.

Reference: vLLM csrc/attention/attention_kernels.cuh (key cache [.., D/x, B, x]) and the
PagedAttention paper (footnote: K and V together or apart made no difference);
FlashInfer docs, "KV-Cache Layout".
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32, int32

from cuda_kernels import _checks as ck
from cuda_kernels.attention import decode_with
from cuda_kernels.layout import BLOCK_MAJOR, Loaders, check_kv_cache
from cuda_kernels.layout_demo import SPLIT_NHD
from cuda_kernels.primitives import itemsize
from pagedsim.labs.sectors import LAYOUTS
from pagedsim.labs.sectors import layout as registered


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
    """Element index of pool[block, offset, kv_head, 0], pool [N, B, H_kv, D]: `split_row`
    with the two inner indices swapped."""
    return split_row(pool, seq, block, offset, kv_head)


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
LOADERS = {
    "fused": BLOCK_MAJOR,
    "split": Loaders("split k/v pools [N,H,B,D]", split_row, split_row, vector=True, fallback=SPLIT_SCALAR),
    "nhd": Loaders("split k/v pools [N,B,H,D] (NHD)", nhd_row, nhd_row, vector=True, fallback=SPLIT_NHD),
    "vllm": Loaders("vllm key [N,H,D/x,B,x], value [N,H,D,B]", load_k_vllm, load_v_vllm),
}
if set(LOADERS) != set(LAYOUTS):
    raise ImportError(f"layouts with no loaders or loaders with no layout: {set(LOADERS) ^ set(LAYOUTS)}")


def vec_width(dtype) -> int:
    """x: elements per 16-byte vector (4 for float32, 8 for float16)."""
    return 16 // np.dtype(dtype).itemsize


def convert(layout: str, kv_cache: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(k_src, v_src) in `layout` holding the same numbers as the fused kv_cache [N, 2, H, B, D]."""
    registered(layout)
    check_kv_cache("kv_cache", kv_cache)
    c = np.asarray(kv_cache)
    k, v = c[:, 0], c[:, 1]  # [N, H, B, D]
    if layout == "fused":
        return c, c
    if layout == "split":
        return np.ascontiguousarray(k), np.ascontiguousarray(v)
    if layout == "nhd":
        return np.ascontiguousarray(k.transpose(0, 2, 1, 3)), np.ascontiguousarray(v.transpose(0, 2, 1, 3))
    n, h, b, d = k.shape
    x = vec_width(c.dtype)
    if d % x:
        raise ValueError(f"vllm layout needs head_dim divisible by x={x}, got {d}")
    key = k.reshape(n, h, b, d // x, x).transpose(0, 1, 3, 2, 4)  # [N, H, D/x, B, x]
    return np.ascontiguousarray(key), np.ascontiguousarray(v.transpose(0, 1, 3, 2))  # value [N, H, D, B]


def geometry(layout: str, k_src, v_src) -> tuple[int, int, int, int]:
    """Validate a (k_src, v_src) pair for `layout`; return (num_blocks, H_kv, block_size, head_dim)."""
    spec = registered(layout)
    if spec.same_array:
        if k_src is not v_src:
            raise ValueError("fused layout: pass the same kv_cache as k_src and v_src")
        return check_kv_cache("k_src", k_src)
    ck.require_array("k_src", k_src, spec.k_ndim, ck.FLOAT_DTYPES)
    ck.require_array("v_src", v_src, spec.v_ndim, ck.FLOAT_DTYPES)
    if np.dtype(k_src.dtype) != np.dtype(v_src.dtype):
        raise ValueError(f"k_src and v_src dtypes differ: {k_src.dtype} vs {v_src.dtype}")
    ck.require_c_contiguous("k_src", k_src)
    ck.require_c_contiguous("v_src", v_src)
    ks = ck.shape_of(k_src)
    if layout == "split":
        n, h, b, d = ks
        expect_v = ks
    elif layout == "nhd":
        n, b, h, d = ks
        expect_v = ks
    else:
        n, h, dx, b, x = ks
        if x != vec_width(k_src.dtype):
            raise ValueError(f"k_src last dimension must be x={vec_width(k_src.dtype)} "
                             f"(16 bytes of {np.dtype(k_src.dtype).name}), got {x}")
        d = dx * x
        expect_v = (n, h, d, b)
    ck.require_shape("v_src", v_src, expect_v)
    if min(n, h, b, d) < 1:
        raise ValueError(f"k_src has an empty dimension: shape {ks}")
    return n, h, b, d


def decode(layout: str, query, k_src, v_src, block_tables, context_lens, scale=None, **kw):
    """Decode attention -> float32 [S, H, D] over a cache in `layout` (see the module docstring)."""
    n, h, b, d = geometry(layout, k_src, v_src)
    k_dev = ck.to_device(k_src)
    v_dev = k_dev if LAYOUTS[layout].same_array else ck.to_device(v_src)
    return decode_with(LOADERS[layout], k_dev, v_dev, query, block_tables, context_lens,
                       num_blocks=n, num_kv_heads=h, block_size=b, head_dim=d, scale=scale, **kw)
