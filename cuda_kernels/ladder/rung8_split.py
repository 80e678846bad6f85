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

import math

from numba import cuda, float32

from .. import _checks as ck
from .launch import REPORT_GROUP, prepare
from .rung5_vector import lane_sum, load16, unpack16
from .rung7_gqa import require_group

NAME = "split_k"
READS = 1.0  # K/V bytes loaded per cache byte, per group of query heads (GQA)
PER_GROUP = True
IDEA = "partitions of P tokens run as separate warps; a log-sum-exp merge combines them"
PREDICTED_PCT = (4.0, 20.0)  # % of the read roofline at the ladder's case (README: Little's law)
PARTITION = 512  # tokens per partition, vLLM v0's paged_attention_v2 default
_kernels: dict = {}


def make_split_kernel(G: int, fp16: bool = True):
    """Rung 7's kernel for groups of G heads, reading one partition per warp."""

    GV = G * 8  # [G, 8] per-head arrays, flat (a local array's size must be a constant)
    VPL = 8 if fp16 else 4  # elements per 16-byte load (rung 5)
    ES = 2 if fp16 else 4  # bytes per element

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
        lane = cuda.threadIdx.x
        rows = 32 // lanes_per_row
        row, chunk = lane // lanes_per_row, lane % lanes_per_row
        block_size = kv_cache.shape[3]
        at_head = kv_head * (kv_cache.strides[2] // ES) + chunk * VPL
        v_off = kv_cache.strides[1] // ES
        q = cuda.local.array(GV, float32)
        acc = cuda.local.array(GV, float32)
        m = cuda.local.array(G, float32)
        l = cuda.local.array(G, float32)  # noqa: E741
        s = cuda.local.array(G, float32)
        kv = cuda.local.array(8, float32)
        for h in range(G):
            for i in range(VPL):
                q[h * 8 + i] = float32(query[seq, kv_head * G + h, chunk * VPL + i]) * scale
                acc[h * 8 + i] = 0
            m[h] = -math.inf
            l[h] = 0
        first = part * partition_size  # this warp's tokens: [first, end)
        end = min(context_lens[seq], first + partition_size)
        for t0 in range(first, end, rows):
            t = t0 + row
            at = 0
            for h in range(G):
                s[h] = 0
            if t < end:
                block = block_tables[seq, t // block_size]
                at = (
                    block * (kv_cache.strides[0] // ES)
                    + (t % block_size) * (kv_cache.strides[3] // ES)
                    + at_head
                )
                unpack16(load16(kv_cache, at), kv, fp16)
                for h in range(G):
                    for i in range(VPL):
                        s[h] += q[h * 8 + i] * kv[i]
            for h in range(G):
                s[h] = lane_sum(s[h], lanes_per_row)
            if t < end:
                unpack16(load16(kv_cache, at + v_off), kv, fp16)
                for h in range(G):
                    m_new = max(m[h], s[h])
                    alpha = math.exp(m[h] - m_new)
                    p = math.exp(s[h] - m_new)
                    l[h] = l[h] * alpha + p
                    for i in range(VPL):
                        acc[h * 8 + i] = acc[h * 8 + i] * alpha + p * kv[i]
                    m[h] = m_new
        off = lanes_per_row
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
                norm = float32(1) / l[h] if l[h] > 0 else float32(0)  # empty: o_p = 0
                for i in range(VPL):
                    partial[seq, head, part, chunk * VPL + i] = acc[h * 8 + i] * norm
                if chunk == 0:
                    max_logits[seq, head, part] = m[h]
                    exp_sums[seq, head, part] = l[h]

    return split_decode


def kernel_for(group: int, fp16: bool = True):
    if (group, fp16) not in _kernels:
        _kernels[group, fp16] = make_split_kernel(group, fp16)
    return _kernels[group, fp16]


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


def decode(query, kv_cache, block_tables, context_lens, scale=None, *, partition_size=PARTITION):
    """float32 [S, H, D], as `paged_attention`; partition_size tokens per warp."""
    return launch(prepare(query, kv_cache, block_tables, context_lens, scale), partition_size)


def launch(case, partition_size=PARTITION, kernels=None, name=NAME):
    """Launch on a validated case (`launch.prepare`): the result, on the device when the
    query was a device array. `kernels` and `name` (rung 9's): another factory of the
    same kernel signature, (group, fp16) -> kernel, and the rung a refusal names."""
    lanes = case.require_vector_rows(name)
    group = require_group(case, name)
    part = ck.require_int("partition_size", partition_size, 1)
    num_parts = -(-int(case.host_lens.max()) // part)
    grid = ck.require_grid(
        name, (case.num_kv_heads, case.num_seqs, num_parts), ("KV heads", "sequences", "partitions")
    )
    shape = (case.num_seqs, case.num_heads)
    partial = case.output(*shape, num_parts, case.head_dim)  # [S, H, P, D]
    max_logits, exp_sums = case.output(*shape, num_parts), case.output(*shape, num_parts)
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


def ptx_spec(sig):
    from numba import types as t

    f32 = t.Array(t.float32, 3, "C")
    base = sig(t.int32, f32, f32, t.int32)
    return kernel_for(REPORT_GROUP).py_func, (*base[:5], t.Array(t.float32, 4, "C"), *base[6:]), 32
