"""Rung 8, split-K (FlashDecoding): a long context is cut into partitions that run as
separate warps, then merged by log-sum-exp.

What changed: rung 7 gave a (sequence, KV head) one warp however long its context, so a
batch of a few long sequences keeps most SMs idle (8 sequences x 8 KV heads = 64 warps
on a GPU with 132 SMs). Here the grid gains a third dimension, the partition: warp p
reads only tokens [p * P, p * P + P) and writes its normalised partial output
o_p = acc / l, its max m_p and its sum l_p. A second small kernel (`merge_decode`, below;
vLLM's paged_attention_v2_reduce_kernel, production's `merge.merge_partitions`) then
combines them with rung 6's (m, l, acc) merge, now across warps:
M = max_p m_p, w_p = l_p exp(m_p - M), out = sum_p w_p o_p / sum_p w_p.
Why: the work of one sequence spreads over ceil(len / P) warps, so few long sequences
fill the GPU too (Dao et al. 2023, "Flash-Decoding for long-context inference"; vLLM
v0's paged_attention_v2 with 512-token partitions).
What it buys: parallelism independent of the batch size, for one extra small kernel and
the partials' traffic. The loop per byte is rung 7's (`report --ladder` shows it).
"""

from __future__ import annotations

import functools
import math
from collections import namedtuple

from numba import cuda, float32

from .launch import REPORT_GROUP, decoder
from .rung5_vector import lane_sum, load16, unpack16
from .rung7_gqa import require_group

NAME = "split_k"
READS = 1.0  # K/V bytes loaded per cache byte, per group of query heads (GQA)
PER_GROUP = True
IDEA = "partitions of P tokens run as separate warps; a log-sum-exp merge combines them"
PREDICTED_PCT = (4.0, 20.0)  # % of the read roofline at the ladder's case (README: Little's law)
PARTITION = 512  # tokens per partition, vLLM v0's paged_attention_v2 default


# One lane's place in the warp (rung 6): its token row, its 16-byte chunk of the head, the
# lanes per row, and its head's offset in a K row and V's offset from K, in elements.
Lane = namedtuple("Lane", "row chunk width at_head v_off")
# One lane's online-softmax state for the group's G heads (local arrays): q times scale and
# acc as [G, 8] flat, the running max m and sum l, this step's scores s, one K/V chunk kv.
Heads = namedtuple("Heads", "q acc m l s kv")


def token_steps(G: int, fp16: bool):
    """(token_at, score, update): one token's step of rung 7's loop, for groups of G heads;
    rung 9 reuses them."""
    VPL = 8 if fp16 else 4  # elements per 16-byte load (rung 5)
    ES = 2 if fp16 else 4  # bytes per element

    @cuda.jit(device=True)
    def token_at(kv_cache, block_tables, seq, t, lane):
        """Where the lane's chunk of token t's K row starts in kv_cache, in elements."""
        block_size = kv_cache.shape[3]
        block = block_tables[seq, t // block_size]
        return (
            block * (kv_cache.strides[0] // ES)
            + (t % block_size) * (kv_cache.strides[3] // ES)
            + lane.at_head
        )

    @cuda.jit(device=True)
    def score(live, lane, st):
        """s[h] += q_h . k for the K chunk in kv (if live), then summed over the row's lanes.
        The caller zeroes s before it loads K (zeroed here, rung 9 took 136 registers, not 126)."""
        if live:
            for h in range(G):
                for i in range(VPL):
                    st.s[h] += st.q[h * 8 + i] * st.kv[i]
        for h in range(G):
            st.s[h] = lane_sum(st.s[h], lane.width)

    @cuda.jit(device=True)
    def update(st):
        """The online softmax takes the token scored last, its V chunk in kv (rung 3)."""
        for h in range(G):
            m_new = max(st.m[h], st.s[h])
            alpha = math.exp(st.m[h] - m_new)
            p = math.exp(st.s[h] - m_new)
            st.l[h] = st.l[h] * alpha + p
            for i in range(VPL):
                st.acc[h * 8 + i] = st.acc[h * 8 + i] * alpha + p * st.kv[i]
            st.m[h] = m_new

    return token_at, score, update


def warp_steps(G: int, fp16: bool):
    """(start, merge_rows, finish): the lane's state for G heads set up, merged across the
    warp's rows and written as partition p's partials; rung 9 reuses them."""
    VPL = 8 if fp16 else 4  # elements per 16-byte load (rung 5)

    @cuda.jit(device=True)
    def start(query, seq, kv_head, scale, lane, st):
        """q <- the lane's chunk of each head's query, times scale; acc = 0, m = -inf, l = 0."""
        for h in range(G):
            for i in range(VPL):
                at = lane.chunk * VPL + i
                st.q[h * 8 + i] = float32(query[seq, kv_head * G + h, at]) * scale
                st.acc[h * 8 + i] = 0
            st.m[h] = -math.inf
            st.l[h] = 0

    @cuda.jit(device=True)
    def merge_rows(lane, st):
        """The warp's row groups merged, head by head (rung 6): row 0 holds the result."""
        off = lane.width
        while off < 32:
            for h in range(G):
                m_b = cuda.shfl_xor_sync(0xFFFFFFFF, st.m[h], off)
                l_b = cuda.shfl_xor_sync(0xFFFFFFFF, st.l[h], off)
                m_new = max(st.m[h], m_b)
                w_a = math.exp(st.m[h] - m_new) if st.l[h] > 0 else float32(0)
                w_b = math.exp(m_b - m_new) if l_b > 0 else float32(0)
                for i in range(VPL):
                    other = cuda.shfl_xor_sync(0xFFFFFFFF, st.acc[h * 8 + i], off)
                    st.acc[h * 8 + i] = st.acc[h * 8 + i] * w_a + other * w_b
                st.l[h] = st.l[h] * w_a + l_b * w_b
                st.m[h] = m_new
            off <<= 1

    @cuda.jit(device=True)
    def finish(partial, max_logits, exp_sums, seq, kv_head, part, lane, st):
        """Row 0 writes partition `part`'s o_p = acc / l, m_p and l_p (o_p = 0 if empty)."""
        if lane.row == 0:
            for h in range(G):
                head = kv_head * G + h
                norm = float32(1) / st.l[h] if st.l[h] > 0 else float32(0)
                for i in range(VPL):
                    partial[seq, head, part, lane.chunk * VPL + i] = st.acc[h * 8 + i] * norm
                if lane.chunk == 0:
                    max_logits[seq, head, part] = st.m[h]
                    exp_sums[seq, head, part] = st.l[h]

    return start, merge_rows, finish


def make_split_kernel(G: int, fp16: bool = True):
    """Rung 7's kernel for groups of G heads, reading one partition per warp."""

    GV = G * 8  # [G, 8] per-head arrays, flat (a local array's size must be a constant)
    VPL = 8 if fp16 else 4  # elements per 16-byte load (rung 5)
    ES = 2 if fp16 else 4  # bytes per element
    start, merge_rows, finish = warp_steps(G, fp16)
    token_at, score, update = token_steps(G, fp16)

    @cuda.jit
    def split_decode(
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
        """Grid (H_kv, S, P), 32 threads. Writes partial[seq, head, p] = o_p, and
        max_logits / exp_sums [seq, head, p] = m_p / l_p (0 for an empty partition)."""
        kv_head, seq, part = cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z
        row, chunk = cuda.threadIdx.x // lanes_per_row, cuda.threadIdx.x % lanes_per_row
        at_head = kv_head * (kv_cache.strides[2] // ES) + chunk * VPL
        lane = Lane(row, chunk, lanes_per_row, at_head, kv_cache.strides[1] // ES)
        q, acc = cuda.local.array(GV, float32), cuda.local.array(GV, float32)
        m, s = cuda.local.array(G, float32), cuda.local.array(G, float32)
        l = cuda.local.array(G, float32)  # noqa: E741
        kv = cuda.local.array(8, float32)
        st = Heads(q, acc, m, l, s, kv)
        start(query, seq, kv_head, scale, lane, st)
        first = part * partition_size  # this warp's tokens: [first, end)
        end = min(context_lens[seq], first + partition_size)
        for t0 in range(first, end, 32 // lanes_per_row):
            t = t0 + row
            at = 0
            for h in range(G):
                s[h] = 0
            if t < end:
                at = token_at(kv_cache, block_tables, seq, t, lane)
                unpack16(load16(kv_cache, at), kv, fp16)  # K
            score(t < end, lane, st)
            if t < end:
                unpack16(load16(kv_cache, at + lane.v_off), kv, fp16)  # V
                update(st)
        merge_rows(lane, st)
        finish(partial, max_logits, exp_sums, seq, kv_head, part, lane, st)

    return split_decode


@functools.cache
def kernel_for(group: int, fp16: bool = True):
    return make_split_kernel(group, fp16)


kernel = kernel_for(REPORT_GROUP)


@cuda.jit
def merge_decode(partial, max_logits, exp_sums, out):
    """Grid (H, S), a thread per head element d (strided by blockDim.x): rung 6's merge of
    the P partition states, here over memory instead of shuffles."""
    head, seq = cuda.blockIdx.x, cuda.blockIdx.y
    parts = partial.shape[2]
    top = float32(-math.inf)  # M: the largest partition max (an empty partition has l = 0)
    for p in range(parts):
        if exp_sums[seq, head, p] > 0:
            top = max(top, max_logits[seq, head, p])
    total = float32(0)  # sum of w_p = l_p exp(m_p - M)
    for p in range(parts):
        if exp_sums[seq, head, p] > 0:
            total += exp_sums[seq, head, p] * math.exp(max_logits[seq, head, p] - top)
    for d in range(cuda.threadIdx.x, out.shape[2], cuda.blockDim.x):
        acc = float32(0)
        for p in range(parts):
            if exp_sums[seq, head, p] > 0:
                w = exp_sums[seq, head, p] * math.exp(max_logits[seq, head, p] - top)
                acc += w * partial[seq, head, p, d]
        out[seq, head, d] = acc / total


def launch(case, partition_size=PARTITION, kernels=None, name=NAME):
    """`kernels` and `name` (rung 9's): another factory of the
    same kernel signature, (group, fp16) -> kernel, and the rung a refusal names."""
    lanes = case.require_vector_rows(name)
    group = require_group(case, name)
    part, grid, partial, max_logits, exp_sums = case.split(partition_size, name)
    (kernels or kernel_for)(group, case.dtype.itemsize == 2)[grid, 32](
        case.cache,
        case.query,
        case.tables,
        case.lens,
        float32(case.scale),
        partial,
        lanes,
        max_logits,
        exp_sums,
        part,
    )
    out = case.output()
    merge_decode[(case.num_heads, case.num_seqs), 32](partial, max_logits, exp_sums, out)
    return case.result(out)


decode = decoder(launch)


def ptx_spec(sig):
    from numba import types as t

    f32 = t.Array(t.float32, 3, "C")
    base = sig(t.int32, f32, f32, t.int32)
    return kernel_for(REPORT_GROUP).py_func, (*base[:5], t.Array(t.float32, 4, "C"), *base[6:]), 32
