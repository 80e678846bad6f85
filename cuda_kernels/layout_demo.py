"""A second layout for the decode-kernel factory: separate K and V pools, token-major.

    k_pool, v_pool: [num_blocks, block_size, num_kv_heads, head_dim]   (NHD inside a block)

This is what FlashInfer and vLLM's FlashAttention backend store. It exists to show
(and to test) that `make_decode_kernel` is layout-agnostic: only these two address
functions differ from `layout.load_k`/`load_v`. Launch it with
`attention.decode_with(SPLIT_NHD, k_pool, v_pool, ...)`.
"""

from __future__ import annotations

from numba import cuda, float32

from .layout import Loaders


@cuda.jit(device=True)
def load_k_nhd(k_pool, block, kv_head, offset, d):
    return float32(k_pool[block, offset, kv_head, d])


@cuda.jit(device=True)
def load_v_nhd(v_pool, block, kv_head, offset, d):
    return float32(v_pool[block, offset, kv_head, d])


SPLIT_NHD = Loaders("split k/v pools [N,B,H,D]", load_k_nhd, load_v_nhd)
