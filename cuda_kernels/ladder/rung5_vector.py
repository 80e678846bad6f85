"""Rung 5, 16-byte vector loads: one warp per (sequence, head), each lane reading 16
bytes of a K/V row at once.

What changed: rungs 2-4 gave each thread one element, so one K row of 128 float16 was
128 two-byte loads by 4 warps. Here a lane loads 16 bytes (`primitives.load16`, one
`LDG.E.128`): VPL = 16 / itemsize elements (8 float16 or 4 float32). A row is then
LPR = head_dim / VPL lanes (16 at head_dim 128, float16), so one warp covers
RW = 32 / LPR rows (tokens) per step. Each group of LPR lanes runs rung 3's online
softmax over its own tokens, its score summed with `warp_sum(.., LPR)`; at the end the
RW groups' (m, l, acc) are merged with shuffles: m = max(m_a, m_b) and each side
weighted by exp(m_side - m).
Why: memory moves in 32-byte sectors and a load instruction costs the same issue slot
whatever its width, so a wide load fetches 8x the bytes per instruction; a single warp
needs no barrier at all.
What it buys: fewer load, index and loop instructions per K/V byte (the report's
sass_per_kv_byte), and no shared memory.
Refuses: a head_dim whose 16-byte pieces do not divide a warp (ValueError naming
kv_cache), a cache not 16-byte aligned.
"""

from __future__ import annotations

import math

from numba import cuda, float32

from ..primitives import FULL_MASK, itemsize, load16, unpack16, warp_sum
from .launch import prepare

NAME = "vector_loads"
READS = 1.0  # K/V bytes loaded per cache byte, per query head
IDEA = "one warp per (sequence, head); each lane loads 16 bytes, LPR lanes per K/V row"


@cuda.jit
def vector_decode(kv_cache, query, block_tables, context_lens, scale, out, lanes_per_row):
    """Grid (H, S), 32 threads. Lane = (row, chunk) = divmod(lane, LPR): it handles
    tokens row, row + RW, ... and head elements [chunk * VPL, chunk * VPL + VPL)."""
    head, seq = cuda.blockIdx.x, cuda.blockIdx.y
    lane = cuda.threadIdx.x
    vpl = 16 // itemsize(kv_cache)  # VPL: elements per 16-byte load
    fp16 = itemsize(kv_cache) == 2
    rows = 32 // lanes_per_row  # RW: tokens the warp reads per step
    row, chunk = lane // lanes_per_row, lane % lanes_per_row
    num_heads = query.shape[1]
    kv_head = head // (num_heads // kv_cache.shape[2])
    block_size = kv_cache.shape[3]
    es = itemsize(kv_cache)  # strides in elements, as load16 counts
    at_head = kv_head * (kv_cache.strides[2] // es) + chunk * vpl
    v_off = kv_cache.strides[1] // es
    q = cuda.local.array(8, float32)  # q[chunk * VPL + i] * scale
    acc = cuda.local.array(8, float32)
    kv = cuda.local.array(8, float32)  # one unpacked 16-byte piece of K or V
    for i in range(vpl):
        q[i] = float32(query[seq, head, chunk * vpl + i]) * scale
        acc[i] = 0
    m = float32(-math.inf)
    l = float32(0)  # noqa: E741
    n = context_lens[seq]
    for t0 in range(0, n, rows):
        t = t0 + row
        score = float32(0)
        at = 0
        if t < n:
            block = block_tables[seq, t // block_size]
            at = (
                block * (kv_cache.strides[0] // es)
                + (t % block_size) * (kv_cache.strides[3] // es)
                + at_head
            )
            unpack16(load16(kv_cache, at), kv, fp16)
            for i in range(vpl):
                score += q[i] * kv[i]
        score = warp_sum(score, lanes_per_row)  # every lane calls it: no divergence
        if t < n:
            m_new = max(m, score)
            alpha = math.exp(m - m_new)
            p = math.exp(score - m_new)
            l = l * alpha + p  # noqa: E741
            unpack16(load16(kv_cache, at + v_off), kv, fp16)
            for i in range(vpl):
                acc[i] = acc[i] * alpha + p * kv[i]
            m = m_new
    off = lanes_per_row  # merge the RW row groups: lane and lane ^ off hold the same chunk
    while off < 32:
        m_b = cuda.shfl_xor_sync(FULL_MASK, m, off)
        l_b = cuda.shfl_xor_sync(FULL_MASK, l, off)
        m_new = max(m, m_b)
        w_a = math.exp(m - m_new) if l > 0 else float32(0)
        w_b = math.exp(m_b - m_new) if l_b > 0 else float32(0)
        for i in range(vpl):
            acc[i] = acc[i] * w_a + cuda.shfl_xor_sync(FULL_MASK, acc[i], off) * w_b
        l = l * w_a + l_b * w_b  # noqa: E741
        m = m_new
        off <<= 1
    if row == 0:
        for i in range(vpl):
            out[seq, head, chunk * vpl + i] = acc[i] / l


kernel = vector_decode


def decode(query, kv_cache, block_tables, context_lens, scale=None):
    """float32 [S, H, D], as `paged_attention`."""
    return launch(prepare(query, kv_cache, block_tables, context_lens, scale))


def launch(case):
    """Launch on a validated case (`launch.prepare`): the result, on the device when the
    query was a device array."""
    lanes = case.require_vector_rows(NAME)
    out = case.output()
    vector_decode[(case.num_heads, case.num_seqs), 32](
        case.cache, case.query, case.tables, case.lens, float32(case.scale), out, lanes
    )
    return case.result(out)


def ptx_spec(sig):
    from numba import types as t

    return vector_decode.py_func, sig(t.int32), 32
