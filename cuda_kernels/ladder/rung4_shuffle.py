"""Rung 4, warp shuffles: the score's sum inside a warp without shared memory.

What changed: rung 3 added the NT products up as a tree in shared memory with a barrier
per level (8 barriers per token at NT = 128). Here each warp adds its 32 products with
five `shfl_xor` steps, written out in the kernel: a register-to-register butterfly (lane
i adds lane i ^ 16's value, then i ^ 8's, ... i ^ 1's; after five steps every lane holds
the warp's sum), no memory, no barrier. Only the NT / 32 warp totals go through shared
memory, with two barriers per token. (Under the simulator `cuda.shfl_xor_sync` is
`sim/simulator.py`'s stand-in, which `primitives` installs.)
Why: a barrier stalls the whole thread block until its slowest warp arrives, and every
tree level also paid a shared-memory store and load.
What it buys: per token, 2 barriers instead of log2(NT) + 1, and 5 shuffles instead of
log2(NT) shared-memory round trips.
"""

from __future__ import annotations

import math

from numba import cuda, float32

from .launch import decoder
from .rung2_cta import MAX_THREADS

NAME = "warp_shuffles"
READS = 1.0  # K/V bytes loaded per cache byte, per query head
IDEA = "each warp sums its products with shfl_xor; only warp totals go through shared memory"
PREDICTED_PCT = (0.1, 0.9)  # % of the read roofline at the ladder's case (README: Little's law)
MAX_WARPS = MAX_THREADS // 32


@cuda.jit
def shuffle_decode(kv_cache, query, block_tables, context_lens, scale, out):
    """Grid (H, S), NT = blockDim.x threads (a multiple of 32 >= head_dim); thread d owns
    head dimension d. Score: a shuffle butterfly in each warp, then the warps' totals."""
    head, seq = cuda.blockIdx.x, cuda.blockIdx.y
    d = cuda.threadIdx.x
    warps = cuda.blockDim.x // 32
    num_heads = query.shape[1]
    kv_head = head // (num_heads // kv_cache.shape[2])
    block_size, head_dim = kv_cache.shape[3], kv_cache.shape[4]
    totals = cuda.shared.array(MAX_WARPS, float32)  # one partial score per warp
    mine = d < head_dim
    q = float32(query[seq, head, d]) if mine else float32(0)
    m = float32(-math.inf)
    l = float32(0)  # noqa: E741
    acc = float32(0)
    for t in range(context_lens[seq]):
        block, slot = block_tables[seq, t // block_size], t % block_size
        part = q * float32(kv_cache[block, 0, kv_head, slot, d]) if mine else float32(0)
        off = 16  # the butterfly: five shuffles, every lane ends with the warp's sum
        while off > 0:
            part += cuda.shfl_xor_sync(0xFFFFFFFF, part, off)
            off >>= 1
        if d % 32 == 0:
            totals[d // 32] = part
        cuda.syncthreads()  # every warp's total written before anyone adds them up
        score = float32(0)
        for w in range(warps):
            score += totals[w]
        score *= scale
        cuda.syncthreads()  # everyone read the totals before the next token overwrites them
        m_new = max(m, score)
        alpha = math.exp(m - m_new)
        p = math.exp(score - m_new)
        l = l * alpha + p  # noqa: E741
        if mine:
            acc = acc * alpha + p * float32(kv_cache[block, 1, kv_head, slot, d])
        m = m_new
    if mine:
        out[seq, head, d] = acc / l


kernel = shuffle_decode


def launch(case):
    if case.head_dim > MAX_THREADS:
        raise ValueError(f"kv_cache: {NAME} needs head_dim <= {MAX_THREADS}, got {case.head_dim}")
    threads = 32 * -(-case.head_dim // 32)
    return case.run(shuffle_decode, (case.num_heads, case.num_seqs), threads)


decode = decoder(launch)


def ptx_spec(sig):
    return shuffle_decode.py_func, sig(), 128
