"""Puzzle 3.k3: a naive paged decode, one thread per head (chapter 3.3; vLLM's
paged_attention_v1 without its tricks).

Solved; the spec is the docstring of exercises/ex3_k3_paged_decode.py.
"""

from __future__ import annotations

import math

from course.ch03_kv_block._cuda import cuda


@cuda.jit
def paged_decode_kernel(q, k_cache, v_cache, block_table, context_len, out):
    """out[h, :] = softmax(scale * q[h] . K) V over the sequence's first context_len tokens."""
    h = cuda.threadIdx.x
    if h < q.shape[0]:
        B, D, L = k_cache.shape[1], q.shape[1], context_len[0]
        scale = 1.0 / math.sqrt(D)
        top = -1e30
        for p in range(L):
            blk, off = block_table[p // B], p % B
            s = 0.0
            for d in range(D):
                s += q[h, d] * k_cache[blk, off, h, d]
            top = max(top, s * scale)
        total = 0.0
        for p in range(L):
            blk, off = block_table[p // B], p % B
            s = 0.0
            for d in range(D):
                s += q[h, d] * k_cache[blk, off, h, d]
            total += math.exp(s * scale - top)
        for d in range(D):
            out[h, d] = 0.0
        for p in range(L):
            blk, off = block_table[p // B], p % B
            s = 0.0
            for e in range(D):
                s += q[h, e] * k_cache[blk, off, h, e]
            w = math.exp(s * scale - top) / total
            for d in range(D):
                out[h, d] += w * v_cache[blk, off, h, d]
