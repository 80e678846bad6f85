"""Rung 7, GQA: one warp per (sequence, KV head) serves the whole group of G query heads,
so each K/V byte is read once per group instead of once per query head.

What changed: rung 6 launched a warp per query head; with grouped-query attention the G
heads of a group (G = H / H_kv: 4 in Llama-3-8B, 8 in Llama-3-70B) read the same K/V
rows, G times over. Here a warp takes a KV head and keeps G query vectors and G
accumulators in registers: each 16-byte piece of K it loads feeds G dot products, each
piece of V G accumulator updates. G is a compile-time constant (`make_gqa_kernel(G)`,
one compiled kernel per group size), so the per-head arrays stay in registers.
Why: decode reads every K/V byte of every sequence once per step and does about one
multiply-add per byte per head; reading each byte once per group divides the memory
traffic by G (vLLM v0's paged_attention_v1 kernel read K per query head; FlashInfer's
decode and vLLM v1's backends read it once per group).
What it buys: G times the arithmetic per K/V byte loaded (report: sass_per_kv_byte).
Refuses: groups larger than MAX_GROUP (ValueError naming query), and the shapes rung 6
refuses.
"""

from __future__ import annotations

import functools
import math

from numba import cuda, float32

from .launch import REPORT_GROUP, decoder
from .rung5_vector import lane_sum, load16, unpack16

NAME = "gqa"
READS = 1.0  # K/V bytes loaded per cache byte, per group of query heads (GQA)
PER_GROUP = True
IDEA = "one warp per (sequence, KV head): each K/V load feeds the G query heads of its group"
PREDICTED_PCT = (1.0, 5.0)  # % of the read roofline at the ladder's case (README: Little's law)
MAX_GROUP = 8  # G query vectors + G accumulators of 8 floats per lane: 128 registers


def make_gqa_kernel(G: int, fp16: bool = True):
    """The kernel for groups of G query heads per KV head (G compile-time)."""

    GV = G * 8  # [G, 8] per-head arrays, flat (a local array's size must be a constant)
    VPL = 8 if fp16 else 4  # elements per 16-byte load (rung 5)
    ES = 2 if fp16 else 4  # bytes per element

    @cuda.jit
    def gqa_decode(kv_cache, query, block_tables, context_lens, scale, out, lanes_per_row):
        """Grid (H_kv, S), 32 threads; lane = (row, chunk) as in rung 6, for heads
        kv_head * G .. kv_head * G + G - 1."""
        kv_head, seq = cuda.blockIdx.x, cuda.blockIdx.y
        lane = cuda.threadIdx.x
        rows = 32 // lanes_per_row
        row, chunk = lane // lanes_per_row, lane % lanes_per_row
        block_size = kv_cache.shape[3]
        at_head = kv_head * (kv_cache.strides[2] // ES) + chunk * VPL
        v_off = kv_cache.strides[1] // ES
        q = cuda.local.array(GV, float32)  # [G, 8]: head h's q piece, times scale
        acc = cuda.local.array(GV, float32)  # [G, 8]
        m = cuda.local.array(G, float32)  # per head: running max
        l = cuda.local.array(G, float32)  # noqa: E741  per head: running sum
        s = cuda.local.array(G, float32)  # per head: this step's score
        kv = cuda.local.array(8, float32)
        for h in range(G):
            for i in range(VPL):
                q[h * 8 + i] = float32(query[seq, kv_head * G + h, chunk * VPL + i]) * scale
                acc[h * 8 + i] = 0
            m[h] = -math.inf
            l[h] = 0
        n = context_lens[seq]
        for t0 in range(0, n, rows):
            t = t0 + row
            at = 0
            for h in range(G):
                s[h] = 0
            if t < n:
                block = block_tables[seq, t // block_size]
                at = (
                    block * (kv_cache.strides[0] // ES)
                    + (t % block_size) * (kv_cache.strides[3] // ES)
                    + at_head
                )
                unpack16(load16(kv_cache, at), kv, fp16)  # one K load for the G heads
                for h in range(G):
                    for i in range(VPL):
                        s[h] += q[h * 8 + i] * kv[i]
            for h in range(G):
                s[h] = lane_sum(s[h], lanes_per_row)
            if t < n:
                unpack16(load16(kv_cache, at + v_off), kv, fp16)  # one V load for the G heads
                for h in range(G):
                    m_new = max(m[h], s[h])
                    alpha = math.exp(m[h] - m_new)
                    p = math.exp(s[h] - m_new)
                    l[h] = l[h] * alpha + p
                    for i in range(VPL):
                        acc[h * 8 + i] = acc[h * 8 + i] * alpha + p * kv[i]
                    m[h] = m_new
        off = lanes_per_row  # merge the row groups, head by head (rung 6)
        while off < 32:
            for h in range(G):
                m_b = cuda.shfl_xor_sync(0xFFFFFFFF, m[h], off)
                l_b = cuda.shfl_xor_sync(0xFFFFFFFF, l[h], off)
                m_new = max(m[h], m_b)
                w_a = math.exp(m[h] - m_new) if l[h] > 0 else float32(0)
                w_b = math.exp(m_b - m_new) if l_b > 0 else float32(0)
                for i in range(VPL):
                    other = cuda.shfl_xor_sync(0xFFFFFFFF, acc[h * 8 + i], off)
                    acc[h * 8 + i] = acc[h * 8 + i] * w_a + other * w_b
                l[h] = l[h] * w_a + l_b * w_b
                m[h] = m_new
            off <<= 1
        if row == 0:
            for h in range(G):
                for i in range(VPL):
                    out[seq, kv_head * G + h, chunk * VPL + i] = acc[h * 8 + i] / l[h]

    return gqa_decode


@functools.cache
def kernel_for(group: int, fp16: bool = True):
    return make_gqa_kernel(group, fp16)


kernel = kernel_for(REPORT_GROUP)  # the instance `report --ladder` compiles


def require_group(case, rung: str) -> int:
    if case.group > MAX_GROUP:
        raise ValueError(
            f"query: {rung} serves at most {MAX_GROUP} query heads per KV head, got {case.group}"
        )
    return case.group


def launch(case):
    lanes = case.require_vector_rows(NAME)
    kern = kernel_for(require_group(case, NAME), case.dtype.itemsize == 2)
    return case.run(kern, (case.num_kv_heads, case.num_seqs), 32, lanes)


decode = decoder(launch)


def ptx_spec(sig):
    from numba import types as t

    return kernel_for(REPORT_GROUP).py_func, sig(t.int32), 32
