"""Reference points for benchmarks/gpu_attention.py: what reading the bytes costs, and
what a contiguous cache costs, with the decode kernel itself unchanged.

    read_roofline    a read-only kernel streaming the same K/V bytes with 16-byte loads
                     (`primitives.load16`), xor-folding them into one word per thread so
                     nothing is optimised away: the most a decode kernel could achieve;
    contiguous_case  the SAME decode kernel (same factory, same loaders) over a cache in
                     which every sequence owns one block as long as its context, so its
                     K/V are contiguous per head and its table is one entry that every
                     tile reads from L1: the paging-overhead baseline (vLLM/FlashInfer
                     compare against FlashAttention on contiguous KV the same way);
    rotated          buffers cycled between launches, so that the working set is at least
                     4x the L2 (60 MB on an H100/H200) and no launch reads from L2.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, uint32

from cuda_kernels.primitives import load16

L2_BYTES = 60 * 2**20
WORKING_SET = 4 * L2_BYTES


@cuda.jit
def read_all(src, chunks, sink):
    """xor of every 16-byte chunk of `src` (flat, 16-byte aligned), one word per thread."""
    vec = 16 // src.itemsize
    acc = uint32(0)
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < chunks:
        w = load16(src, i * vec)
        acc ^= w[0] ^ w[1] ^ w[2] ^ w[3]
        i += stride
    sink[cuda.grid(1)] = acc


def read_roofline_launch(flat, blocks: int, threads: int):
    """A launch closure reading all of `flat` (a contiguous device array) once."""
    chunks = flat.size * flat.dtype.itemsize // 16
    sink = cuda.device_array(blocks * threads, np.uint32)
    return lambda: read_all[blocks, threads](flat, chunks, sink)


def contiguous_cache(paged_host: np.ndarray, tables: np.ndarray, lens: np.ndarray):
    """[S, 2, H_kv, L, D] cache + table [[0], [1], ...]: each sequence one block of L tokens,
    holding the same K/V as the paged cache (L = the longest context)."""
    num_seqs, longest = len(lens), int(lens.max())
    _, _, heads, bs, dim = paged_host.shape
    out = np.zeros((num_seqs, 2, heads, longest, dim), paged_host.dtype)
    for s, n in enumerate(lens):
        blocks = paged_host[tables[s, :-(-n // bs)]]  # [nb, 2, H, B, D]
        out[s, :, :, :n] = blocks.transpose(1, 2, 0, 3, 4).reshape(2, heads, -1, dim)[:, :, :n]
    return out, np.arange(num_seqs, dtype=np.int32)[:, None], longest


def rotation(nbytes: int) -> int:
    """Copies of a buffer of `nbytes` to cycle through so the working set reaches 4x L2."""
    return max(1, -(-WORKING_SET // max(nbytes, 1)))
