"""Rung 3, online softmax: one pass over K/V instead of two.

What changed: rung 2 read every K row twice (once for the max, once for the sum). Here
the thread block keeps a running max m, a running sum l and the accumulator, and when a
score beats m it rescales what it has: alpha = exp(m_old - m_new), l = l * alpha + p,
acc = acc * alpha + p * v (Milakov & Gimelshein 2018, "Online normalizer calculation
for softmax"; FlashAttention's inner loop).
Why: decode is bound by reading K/V from memory; the second pass read K again.
What it buys: K/V bytes read per token fall from 3 rows (K, K, V) to 2 (K, V).
"""

from __future__ import annotations

import math

from numba import cuda, float32

from .launch import decoder, pow2_at_least
from .rung2_cta import MAX_THREADS

NAME = "online_softmax"
READS = 1.0  # K/V bytes loaded per cache byte, per query head
IDEA = "one pass: a running max and sum, the accumulator rescaled when the max moves"
PREDICTED_PCT = (0.1, 0.8)  # % of the read roofline at the ladder's case (README: Little's law)


@cuda.jit
def online_decode(kv_cache, query, block_tables, context_lens, scale, out):
    """Grid (H, S), NT = blockDim.x threads (a power of two >= head_dim); thread d owns
    head dimension d. One pass: score by a shared-memory tree, then the online update."""
    head, seq = cuda.blockIdx.x, cuda.blockIdx.y
    d = cuda.threadIdx.x
    nt = cuda.blockDim.x
    num_heads = query.shape[1]
    kv_head = head // (num_heads // kv_cache.shape[2])
    block_size, head_dim = kv_cache.shape[3], kv_cache.shape[4]
    red = cuda.shared.array(MAX_THREADS, float32)  # one partial product per thread
    mine = d < head_dim
    q = float32(query[seq, head, d]) if mine else float32(0)
    m = float32(-math.inf)  # running max of the scores
    l = float32(0)  # running sum of exp(score - m)  # noqa: E741
    acc = float32(0)  # running sum of exp(score - m) * v[d]
    for t in range(context_lens[seq]):
        block, slot = block_tables[seq, t // block_size], t % block_size
        red[d] = q * float32(kv_cache[block, 0, kv_head, slot, d]) if mine else float32(0)
        cuda.syncthreads()  # every product written before the tree reads them
        half = nt >> 1
        while half > 0:
            if d < half:
                red[d] += red[d + half]
            cuda.syncthreads()  # this level's sums are in place before the next reads
            half >>= 1
        score = red[0] * scale
        cuda.syncthreads()  # everyone read red[0] before the next token overwrites it
        m_new = max(m, score)
        alpha = math.exp(m - m_new)  # exp(-inf) = 0 on the first token
        p = math.exp(score - m_new)
        l = l * alpha + p  # noqa: E741
        if mine:
            acc = acc * alpha + p * float32(kv_cache[block, 1, kv_head, slot, d])
        m = m_new
    if mine:
        out[seq, head, d] = acc / l


kernel = online_decode


def launch(case):
    if case.head_dim > MAX_THREADS:
        raise ValueError(f"kv_cache: {NAME} needs head_dim <= {MAX_THREADS}, got {case.head_dim}")
    threads = max(32, pow2_at_least(case.head_dim))
    return case.run(online_decode, (case.num_heads, case.num_seqs), threads)


decode = decoder(launch)


def ptx_spec(sig):
    return online_decode.py_func, sig(), 128
