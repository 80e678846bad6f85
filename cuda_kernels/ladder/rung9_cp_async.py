"""Rung 9, cp.async: the next step's K/V rows are in flight while this step computes.

What changed: in rung 8 a lane issues its 16-byte K load, then waits for it (~600 cycles
from HBM) before the dot product can start, and the same for V: each warp has one step
of K/V in flight, and only other warps can hide the wait. Here the warp keeps a 2-stage
ring in shared memory: before computing step j it issues step j + 1's copies with
`cp.async` (Ampere's asynchronous copy, SASS LDGSTS: global -> shared without passing
through registers, so nothing waits for it), commits them as one group, then
`cp.async.wait_group 1` waits until at most one group (step j + 1's) is still in flight:
step j's rows have landed. Each lane copies its own 16-byte pieces (K and V) into its
own slots and reads back only those, so no barrier is needed (a copy is visible to the
thread that issued it once its group retired). A token past the end copies 0 bytes
(`nbytes` 0: zeros, no read). Nothing else changes: the loop body is rung 8's, reading
shared memory instead of global.
Why: Little's law: bytes in flight = bandwidth x latency. A warp that waits for every
load has 1 KiB in flight (32 lanes x 16 bytes x K and V); with the ring it has 2.
What it buys: twice the bytes in flight per warp at the same occupancy, for 2 KiB of
shared memory per warp (`cuda_kernels/README.md` works out what that does to the
roofline share). The instructions: cp.async.cg.shared.global [dst], [src], 16, nbytes;
cp.async.commit_group; cp.async.wait_group N (`primitives`: the GPU's inline PTX in
`gpu/intrinsics.py`, the simulator's stand-ins in `sim/tensor_sim.py`).
"""

from __future__ import annotations

import math

from numba import cuda, float32, uint32

from ..primitives import cp_async16, cp_async_commit, cp_async_wait
from .launch import REPORT_GROUP, prepare
from .rung5_vector import lane_sum, unpack16
from .rung8_split import PARTITION
from .rung8_split import launch as split_launch

NAME = "cp_async"
READS = 1.0  # K/V bytes loaded per cache byte, per group of query heads (GQA)
PER_GROUP = True
IDEA = "a 2-stage cp.async ring: step j + 1's K/V rows in flight while step j computes"
PREDICTED_PCT = (15.0, 60.0)  # % of the read roofline at the ladder's case (README: Little's law)
_kernels: dict = {}


def make_ring_kernel(G: int, fp16: bool = True):
    """Rung 8's kernel for groups of G heads, its loads through a 2-stage cp.async ring."""
    GV, VPL, ES = G * 8, (8 if fp16 else 4), (2 if fp16 else 4)

    @cuda.jit
    def ring_decode(
        kv_cache,
        query,
        block_tables,
        context_lens,
        scale,
        partial,
        lanes_per_row,
        max_logits,
        exp_sums,
        partition_size,
    ):
        """Rung 8's grid and outputs. ring[stage, k_or_v, lane] holds a lane's 16 bytes."""
        kv_head, seq, part = cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z
        lane = cuda.threadIdx.x
        rows = 32 // lanes_per_row
        row, chunk = lane // lanes_per_row, lane % lanes_per_row
        block_size = kv_cache.shape[3]
        at_head = kv_head * (kv_cache.strides[2] // ES) + chunk * VPL
        v_off = kv_cache.strides[1] // ES
        ring = cuda.shared.array((2, 2, 32, 4), uint32)  # 2 stages x (K, V) x 32 lanes x 16 B
        q, acc = cuda.local.array(GV, float32), cuda.local.array(GV, float32)
        m, s = cuda.local.array(G, float32), cuda.local.array(G, float32)
        l = cuda.local.array(G, float32)  # noqa: E741
        kv = cuda.local.array(8, float32)
        for h in range(G):
            for i in range(VPL):
                q[h * 8 + i] = float32(query[seq, kv_head * G + h, chunk * VPL + i]) * scale
                acc[h * 8 + i] = 0
            m[h] = -math.inf
            l[h] = 0
        first = part * partition_size
        end = min(context_lens[seq], first + partition_size)
        for t0 in range(first, end + rows, rows):  # one extra trip: it issues step 0
            t = t0 + row  # the token of the step issued now (computed next trip)
            at, nbytes = 0, 0
            if t < end:
                block = block_tables[seq, t // block_size]
                at = block * (kv_cache.strides[0] // ES) + (t % block_size) * (
                    kv_cache.strides[3] // ES
                )
                at, nbytes = at + at_head, 16
            stage = ((t0 - first) // rows) % 2
            cp_async16(ring, ((stage * 2) * 32 + lane) * 4, kv_cache, at, nbytes)  # K
            cp_async16(ring, ((stage * 2 + 1) * 32 + lane) * 4, kv_cache, at + v_off, nbytes)
            cp_async_commit()
            if t0 == first:
                continue  # nothing to compute yet
            cp_async_wait(1)  # the previous trip's group (this step's rows) has landed
            t, stage = t - rows, 1 - stage
            for h in range(G):
                s[h] = 0
            if t < end:
                k = ring[stage, 0, lane]
                unpack16((k[0], k[1], k[2], k[3]), kv, fp16)
                for h in range(G):
                    for i in range(VPL):
                        s[h] += q[h * 8 + i] * kv[i]
            for h in range(G):
                s[h] = lane_sum(s[h], lanes_per_row)
            if t < end:
                v = ring[stage, 1, lane]
                unpack16((v[0], v[1], v[2], v[3]), kv, fp16)
                for h in range(G):
                    m_new = max(m[h], s[h])
                    alpha = math.exp(m[h] - m_new)
                    p = math.exp(s[h] - m_new)
                    l[h] = l[h] * alpha + p
                    for i in range(VPL):
                        acc[h * 8 + i] = acc[h * 8 + i] * alpha + p * kv[i]
                    m[h] = m_new
        cp_async_wait(0)  # the last (empty) group, before the warp exits
        off = lanes_per_row  # from here on: rung 8
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
                head = kv_head * G + h
                norm = float32(1) / l[h] if l[h] > 0 else float32(0)
                for i in range(VPL):
                    partial[seq, head, part, chunk * VPL + i] = acc[h * 8 + i] * norm
                if chunk == 0:
                    max_logits[seq, head, part] = m[h]
                    exp_sums[seq, head, part] = l[h]

    return ring_decode


def kernel_for(group: int, fp16: bool = True):
    if (group, fp16) not in _kernels:
        _kernels[group, fp16] = make_ring_kernel(group, fp16)
    return _kernels[group, fp16]


kernel = kernel_for(REPORT_GROUP)


def decode(query, kv_cache, block_tables, context_lens, scale=None, *, partition_size=PARTITION):
    """float32 [S, H, D], as `paged_attention`; partition_size tokens per warp."""
    return launch(prepare(query, kv_cache, block_tables, context_lens, scale), partition_size)


def launch(case, partition_size=PARTITION):
    """Rung 8's launcher (partials, then its merge kernel) with this rung's kernel."""
    return split_launch(case, partition_size, kernels=kernel_for, name=NAME)


def ptx_spec(sig):
    from numba import types as t

    f32 = t.Array(t.float32, 3, "C")
    base = sig(t.int32, f32, f32, t.int32)
    return kernel_for(REPORT_GROUP).py_func, (*base[:5], t.Array(t.float32, 4, "C"), *base[6:]), 32
