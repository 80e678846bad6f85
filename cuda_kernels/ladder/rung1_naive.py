"""Rung 1, naive: one thread per (sequence, head), scalar loads, two passes.

What it is: the float64 reference (`cuda_kernels.reference.paged_attention`) written as
a kernel. A thread owns one output row out[seq, head]; it walks its sequence's tokens
through the block table (token t lives in block block_tables[seq, t // B] at slot
t % B), once to find the largest score, once to add up exp(score - max) and the
weighted V rows, straight into `out` in global memory.
Why start here: every later rung keeps this meaning and changes one thing.
What it costs: a thread reads every K element and every V element one scalar at a
time, computes a 5-D index for each, and keeps its accumulator in global memory; 32
neighbouring threads read 32 different heads' rows (no coalescing), and a (seq, head)
pair gets one thread however long its context is. `report --ladder` counts it.
"""

from __future__ import annotations

import math

from numba import cuda, float32

from .launch import decoder

NAME = "naive"
READS = 1.5  # K/V bytes loaded per cache byte, per query head: K twice, V once
IDEA = "one thread per (sequence, head), scalar loads through the block table, two passes"
PREDICTED_PCT = (0.0, 0.1)  # % of the read roofline at the ladder's case (README: Little's law)
THREADS = 64


@cuda.jit
def naive_decode(kv_cache, query, block_tables, context_lens, scale, out):
    """Grid: ceil(S * H / THREADS) blocks of THREADS threads; thread i owns (seq, head) =
    divmod(i, H). Pass 1: max of scale * q.k over the tokens. Pass 2: out = sum of
    exp(score - max) v, then out /= sum of exp(score - max)."""
    i = cuda.grid(1)
    num_heads = query.shape[1]
    if i >= query.shape[0] * num_heads:
        return
    seq, head = i // num_heads, i % num_heads
    kv_head = head // (num_heads // kv_cache.shape[2])
    block_size, head_dim = kv_cache.shape[3], kv_cache.shape[4]
    top = float32(-math.inf)
    for t in range(context_lens[seq]):  # pass 1: the largest score
        block, slot = block_tables[seq, t // block_size], t % block_size
        dot = float32(0)
        for d in range(head_dim):
            dot += float32(query[seq, head, d]) * float32(kv_cache[block, 0, kv_head, slot, d])
        top = max(top, dot * scale)
    for d in range(head_dim):
        out[seq, head, d] = 0
    total = float32(0)
    for t in range(context_lens[seq]):  # pass 2: exp(score - max), weighted V
        block, slot = block_tables[seq, t // block_size], t % block_size
        dot = float32(0)
        for d in range(head_dim):
            dot += float32(query[seq, head, d]) * float32(kv_cache[block, 0, kv_head, slot, d])
        p = math.exp(dot * scale - top)
        total += p
        for d in range(head_dim):
            out[seq, head, d] += p * float32(kv_cache[block, 1, kv_head, slot, d])
    for d in range(head_dim):
        out[seq, head, d] /= total


kernel = naive_decode


def launch(case):
    rows = case.num_seqs * case.num_heads
    return case.run(naive_decode, -(-rows // THREADS), THREADS)


decode = decoder(launch)


def ptx_spec(sig):
    """(python function, signature, threads) for `report --ladder`."""
    return naive_decode.py_func, sig(), THREADS
