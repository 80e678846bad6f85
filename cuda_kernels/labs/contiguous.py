"""The paging-overhead baseline: the same decode kernel over contiguous K/V, with no table.

    cache[S, 2, H_kv, L, D]    sequence s's keys at [s, 0], values at [s, 1], L >= its length

`CONTIGUOUS` are vector loaders (`layout.Loaders` contract, 16-byte loads): the row of
token `offset` of sequence `seq` is cache[seq, 0 or 1, kv_head, offset, :]. Built with
`paged=False` and block_size = L, the factory never reads a block table (the `block`
it passes is pos // L = 0), so the only difference from the paged kernel is where a
token's row starts: the price of paging, measured by `benchmarks/gpu_attention.py`
(vLLM and FlashInfer compare their paged kernels with FlashAttention on contiguous KV
the same way). `contiguous_cache` rewrites a paged cache into this layout.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from cuda_kernels.layout import Loaders, k_row, v_row


@cuda.jit(device=True)
def contig_k_row(cache, seq, block, kv_head, offset):
    """Element index of cache[seq, 0, kv_head, offset, 0]: the fused cache's row with
    the sequence in place of the block (`layout.k_row`)."""
    return k_row(cache, seq, seq, kv_head, offset)


@cuda.jit(device=True)
def contig_v_row(cache, seq, block, kv_head, offset):
    """Element index of cache[seq, 1, kv_head, offset, 0] (`layout.v_row`)."""
    return v_row(cache, seq, seq, kv_head, offset)


CONTIGUOUS = Loaders("contiguous cache[S,2,H,L,D]", contig_k_row, contig_v_row, vector=True)


def contiguous_cache(
    paged: np.ndarray, tables: np.ndarray, lens, length: int | None = None
) -> np.ndarray:
    """[S, 2, H_kv, L, D] holding the same K/V as the paged cache [N, 2, H_kv, B, D] read
    through `tables`; L = `length` (default: the longest length), the rest zero-padded."""
    lens = np.asarray(lens)
    _, _, heads, bs, dim = paged.shape
    length = int(lens.max()) if length is None else length
    if length < int(lens.max()):
        raise ValueError(f"length {length} is shorter than the longest sequence {int(lens.max())}")
    out = np.zeros((len(lens), 2, heads, length, dim), paged.dtype)
    for s, n in enumerate(lens):
        blocks = paged[tables[s, : -(-int(n) // bs)]]  # [nb, 2, H, B, D]
        out[s, :, :, :n] = blocks.transpose(1, 2, 0, 3, 4).reshape(2, heads, -1, dim)[:, :, :n]
    return out
