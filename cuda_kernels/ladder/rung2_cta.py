"""Rung 2, a thread block per (sequence, head): threads across head_dim, a shared-memory
reduction.

What changed: rung 1 gave a (seq, head) pair one thread that did head_dim multiply-adds
per token alone. Here a thread block of NT threads (head_dim rounded up to a power of
two, at least a warp) takes the pair; thread d owns dimension d: it keeps q[d] and its
output element acc[d] in registers and, per token, multiplies q[d] by k[d]. The score is
the sum of those NT products, added up as a tree in shared memory (log2(NT) halvings,
a barrier after each). Still two passes (max, then sum).
Why: neighbouring threads now read neighbouring elements of one K/V row, so a warp's
loads coalesce into whole 32-byte sectors, and the accumulator lives in registers
instead of global memory.
What it buys: coalesced loads and far fewer index computations per byte; what it costs:
log2(NT) + 1 barriers per token, which rung 4 removes.
"""

from __future__ import annotations

import math

from numba import cuda, float32

from .launch import decoder, pow2_at_least

NAME = "cta_shared"
READS = 1.5  # K/V bytes loaded per cache byte, per query head: K twice, V once
IDEA = "one thread block per (sequence, head), a thread per head_dim element, shared-memory sum"
PREDICTED_PCT = (0.05, 0.5)  # % of the read roofline at the ladder's case (README: Little's law)
MAX_THREADS = 256  # head_dim <= 256


@cuda.jit
def cta_decode(kv_cache, query, block_tables, context_lens, scale, out):
    """Grid (H, S), NT = blockDim.x threads (a power of two >= head_dim). Thread d owns
    head dimension d (d >= head_dim contribute 0)."""
    head, seq = cuda.blockIdx.x, cuda.blockIdx.y
    d = cuda.threadIdx.x
    nt = cuda.blockDim.x
    num_heads = query.shape[1]
    kv_head = head // (num_heads // kv_cache.shape[2])
    block_size, head_dim = kv_cache.shape[3], kv_cache.shape[4]
    red = cuda.shared.array(MAX_THREADS, float32)  # one partial product per thread
    mine = d < head_dim
    q = float32(query[seq, head, d]) if mine else float32(0)
    top = float32(-math.inf)
    acc = float32(0)
    total = float32(0)
    for rep in range(2):  # pass 0: the max score; pass 1: exp(score - max) and weighted V
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
            if rep == 0:
                top = max(top, score)
            else:
                p = math.exp(score - top)
                total += p
                if mine:
                    acc += p * float32(kv_cache[block, 1, kv_head, slot, d])
    if mine:
        out[seq, head, d] = acc / total


kernel = cta_decode


def launch(case):
    if case.head_dim > MAX_THREADS:
        raise ValueError(f"kv_cache: {NAME} needs head_dim <= {MAX_THREADS}, got {case.head_dim}")
    threads = max(32, pow2_at_least(case.head_dim))
    return case.run(cta_decode, (case.num_heads, case.num_seqs), threads)


decode = decoder(launch)


def ptx_spec(sig):
    return cta_decode.py_func, sig(), 128
