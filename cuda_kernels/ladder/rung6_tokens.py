"""Rung 6, several tokens per warp step: every lane busy, and the (m, l, acc) merge.

What changed: in rung 5 a K/V row took LPR = head_dim / VPL lanes (16 at head_dim 128,
float16) and the other 32 - LPR lanes repeated their work. Here the warp is RW = 32 / LPR
row groups: lane = (row, chunk) = divmod(lane, LPR), and group `row` reads tokens row,
row + RW, row + 2 RW, ... Each group runs rung 3's online softmax over its own tokens,
so it ends with its own state: m (its max score), l (its sum of exp(score - m)) and acc
(its sum of exp(score - m) v). At the end the RW states are merged, pairwise, by a
butterfly over the groups (lane ^ LPR, ^ 2 LPR, ...): for two states a and b,
    m = max(m_a, m_b),  w_a = exp(m_a - m),  w_b = exp(m_b - m),
    l = l_a w_a + l_b w_b,  acc = acc_a w_a + acc_b w_b
(a state with no token, l = 0, gets weight 0). This merge is exact: it is how
FlashAttention combines blocks, and rung 8 reuses it across warps.
Why: the warp issues one 16-byte load per lane per step either way; with RW tokens per
step every lane's load fetches new bytes, so twice the bytes are in flight per warp at
head_dim 128 (four times at 64).
What it buys: RW tokens per loop trip instead of one: fewer trips, fewer loop and
shuffle instructions per K/V byte, for one merge at the end.
Refuses: what rung 5 refuses.
"""

from __future__ import annotations

import math

from numba import cuda, float32

from .launch import decoder
from .rung5_vector import lane_sum, load16, unpack16
from .rung5_vector import launch as vector_launch

NAME = "tokens_per_step"
READS = 1.0  # K/V bytes loaded per cache byte, per query head
IDEA = "RW = 32 / LPR tokens per warp step, one (m, l, acc) per row group, merged at the end"
PREDICTED_PCT = (1.0, 6.0)  # % of the read roofline at the ladder's case (README: Little's law)


def make_tokens_kernel(fp16: bool):
    """Rung 5's kernel with RW row groups (VPL compile-time, as there)."""
    VPL = 8 if fp16 else 4
    ES = 2 if fp16 else 4

    @cuda.jit
    def tokens_decode(kv_cache, query, block_tables, context_lens, scale, out, lanes_per_row):
        """Grid (H, S), 32 threads; lane = (row, chunk): tokens row, row + RW, ... and
        head elements [chunk * VPL, chunk * VPL + VPL)."""
        head, seq = cuda.blockIdx.x, cuda.blockIdx.y
        lane = cuda.threadIdx.x
        rows = 32 // lanes_per_row  # RW: tokens the warp reads per step
        row, chunk = lane // lanes_per_row, lane % lanes_per_row
        kv_head = head // (query.shape[1] // kv_cache.shape[2])
        block_size = kv_cache.shape[3]
        at_head = kv_head * (kv_cache.strides[2] // ES) + chunk * VPL
        v_off = kv_cache.strides[1] // ES
        q = cuda.local.array(8, float32)
        acc = cuda.local.array(8, float32)
        kv = cuda.local.array(8, float32)
        for i in range(VPL):
            q[i] = float32(query[seq, head, chunk * VPL + i]) * scale
            acc[i] = 0
        m = float32(-math.inf)
        l = float32(0)  # noqa: E741
        n = context_lens[seq]
        for t0 in range(0, n, rows):
            t = t0 + row  # this row group's token; past the end on the last step
            score = float32(0)
            at = 0
            if t < n:
                block = block_tables[seq, t // block_size]
                at = block * (kv_cache.strides[0] // ES) + (t % block_size) * (
                    kv_cache.strides[3] // ES
                )
                at += at_head
                unpack16(load16(kv_cache, at), kv, fp16)
                for i in range(VPL):
                    score += q[i] * kv[i]
            score = lane_sum(score, lanes_per_row)  # every lane calls it: no divergence
            if t < n:
                m_new = max(m, score)
                alpha = math.exp(m - m_new)
                p = math.exp(score - m_new)
                l = l * alpha + p  # noqa: E741
                unpack16(load16(kv_cache, at + v_off), kv, fp16)
                for i in range(VPL):
                    acc[i] = acc[i] * alpha + p * kv[i]
                m = m_new
        off = lanes_per_row  # the merge: lane and lane ^ off hold the same chunk
        while off < 32:
            m_b = cuda.shfl_xor_sync(0xFFFFFFFF, m, off)
            l_b = cuda.shfl_xor_sync(0xFFFFFFFF, l, off)
            m_new = max(m, m_b)
            w_a = math.exp(m - m_new) if l > 0 else float32(0)
            w_b = math.exp(m_b - m_new) if l_b > 0 else float32(0)
            for i in range(VPL):
                acc[i] = acc[i] * w_a + cuda.shfl_xor_sync(0xFFFFFFFF, acc[i], off) * w_b
            l = l * w_a + l_b * w_b  # noqa: E741
            m = m_new
            off <<= 1
        if row == 0:
            for i in range(VPL):
                out[seq, head, chunk * VPL + i] = acc[i] / l

    return tokens_decode


_kernels = {fp16: make_tokens_kernel(fp16) for fp16 in (True, False)}
kernel = _kernels[True]  # the instance `report --ladder` compiles (float16)


def launch(case):
    """Rung 5's launcher (grid (H, S), one warp) with this rung's kernels."""
    return vector_launch(case, kernels=_kernels, name=NAME)


decode = decoder(launch)


def ptx_spec(sig):
    from numba import types as t

    return kernel.py_func, sig(t.int32), 32
