"""Rung 10, tensor cores: the group's G query heads are the M rows of one mma.m16n8k16.

What changed: rungs 7-9 compute a group's G scores per token with CUDA-core FMAs, one
multiply-add per K element per head. Here one warp (per sequence, KV head and partition,
rung 8's grid and merge) takes 16 tokens per step and lets the tensor cores multiply:
  * Q: the G heads are the M = 16 rows of the A operand (rows G..15 zero: the padding),
    held in registers as fragments for the whole loop;
  * K, V: the step's 16 rows of each are copied to a plain row-major shared tile [token,
    head_dim] (rung 9's cp.async, one stage, then `syncwarp`), from which `ldmatrix`
    hands each lane its B fragments: x4 from K rows gives K^T for two 8-token tiles,
    x2.trans from V rows gives V for one 8-column tile;
  * S = Q K^T: per 8 tokens, one mma.m16n8k16 per 16 head elements;
  * online softmax on the S fragments in registers: lane (g, t) = (lane // 4, lane % 4)
    holds rows g and g + 8, tokens 2t, 2t + 1 of each tile, so a row's max and sum are
    two shuffles within the quad (xor 1, xor 2);
  * O += P V: P's fragments, packed to float16, are exactly the A operand of the next
    mma (FlashAttention-2's trick: P never leaves registers), one mma per 8 columns.
Fragment layouts: `primitives.py`'s docstring (PTX ISA, "Matrix Fragments for
mma.m16n8k16"). mma_f16, ldmatrix_x4 / x2_trans and pack_f16x2 are one PTX instruction
each (`gpu/intrinsics.py`; the simulator's stand-ins in `sim/tensor_sim.py`).
Why: one HMMA does 16 x 8 x 16 multiply-adds in one issue slot; at G >= 4 the CUDA-core
rungs spend more issue slots on FMAs than the memory system needs to deliver the bytes.
What it buys: the leanest loop per K/V byte of the ladder (`report --ladder`).
Refuses: K/V not float16, head_dim not a multiple of 16 in [16, 256] (ValueError naming
kv_cache), more than 16 query heads per KV head (naming query).
"""

from __future__ import annotations

import functools
import math

from numba import cuda, float32, uint32

from ..primitives import (
    cp_async16,
    cp_async_commit,
    cp_async_wait,
    ldmatrix_x2_trans,
    ldmatrix_x4,
    mma_f16,
    pack_f16x2,
)
from .launch import REPORT_HEAD_DIM, decoder
from .rung8_split import PARTITION, merge_decode

NAME = "tensor_cores"
READS = 1.0  # K/V bytes loaded per cache byte, per group of query heads (GQA)
PER_GROUP = True
IDEA = "one warp, the group's heads as the M rows of mma.m16n8k16, ldmatrix from shared"
PREDICTED_PCT = (40.0, 95.0)  # % of the read roofline at the ladder's case (README: Little's law)


def tile_steps(D: int):
    """(load_q, fill, store): the Q fragments, one step's K/V rows into the shared tiles, and
    the partials written, for head_dim D; the loop between them is this rung's idea."""
    KD, ND, W = D // 16, D // 8, D // 2  # k-steps of 16, n-tiles of 8, u32 words per row

    @cuda.jit(device=True)
    def load_q(query, seq, kv_head, G, lane, qa):
        """qa <- the A fragments of the group's Q: heads as rows, rows G..15 zero."""
        g, t = lane >> 2, lane & 3
        for k in range(KD):
            for j in range(4):  # a0..a3: rows g, g + 8; columns 2t (+8)
                r, c = g + 8 * (j & 1), 16 * k + 2 * t + 8 * (j >> 1)
                h = kv_head * G + r
                lo = float32(query[seq, h, c]) if r < G else float32(0)
                hi = float32(query[seq, h, c + 1]) if r < G else float32(0)
                qa[4 * k + j] = pack_f16x2(lo, hi)

    @cuda.jit(device=True)
    def fill(kv_cache, block_tables, seq, kv_head, t0, end, lane, k_tile, v_tile):
        """cp.async the K and V rows of tokens t0..t0 + 15 into the tiles (zeros past end)."""
        bs = kv_cache.shape[3]
        for c in range(lane, 16 * ND, 32):
            tok, ch = c // ND, c % ND
            at, nbytes = 0, 0
            if t0 + tok < end:
                block = block_tables[seq, (t0 + tok) // bs]
                at = (((block * 2) * kv_cache.shape[2] + kv_head) * bs + (t0 + tok) % bs) * D
                at, nbytes = at + 8 * ch, 16
            cp_async16(k_tile, tok * W + 4 * ch, kv_cache, at, nbytes)
            v_at = at + kv_cache.shape[2] * bs * D  # V: one [H_kv, B, D] plane further
            cp_async16(v_tile, tok * W + 4 * ch, kv_cache, v_at, nbytes)

    @cuda.jit(device=True)
    def store(partial, m_out, l_out, seq, kv_head, part, G, lane, o, m0, l0, m1, l1):
        """Rows g (half 0) and g + 8: rung 8's partial outputs o / l, m and l."""
        g, t = lane >> 2, lane & 3
        for half in range(2):
            r = g + 8 * half
            if r < G:
                h = kv_head * G + r
                total, top = (l0, m0) if half == 0 else (l1, m1)
                norm = float32(1) / total if total > 0 else float32(0)
                for n in range(ND):
                    partial[seq, h, part, 8 * n + 2 * t] = o[4 * n + 2 * half] * norm
                    partial[seq, h, part, 8 * n + 2 * t + 1] = o[4 * n + 2 * half + 1] * norm
                if t == 0:
                    m_out[seq, h, part], l_out[seq, h, part] = top, total

    return load_q, fill, store


def make_tensor_kernel(D: int):
    """The kernel for head_dim D (a multiple of 16): fragment arrays of compile-time size."""
    KD, ND, W = D // 16, D // 8, D // 2  # k-steps of 16, n-tiles of 8, u32 words per row
    QA, OC = 4 * KD, 4 * ND  # fragment words of Q, of O (local array sizes: constants)
    load_q, fill, store = tile_steps(D)

    @cuda.jit
    def tensor_decode(
        kv_cache, query, block_tables, context_lens, scale, partial, m_out, l_out, size
    ):
        """Grid (H_kv, S, P), 32 threads: rung 8's partials for partition P of `size`."""
        kv_head, seq, part = cuda.blockIdx.x, cuda.blockIdx.y, cuda.blockIdx.z
        lane = cuda.threadIdx.x
        t = lane & 3  # lane (g, t) = (lane // 4, lane % 4): t is its column pair
        G = query.shape[1] // kv_cache.shape[2]
        k_tile = cuda.shared.array((16, W), uint32)  # 16 tokens x D float16, row-major
        v_tile = cuda.shared.array((16, W), uint32)
        qa = cuda.local.array(QA, uint32)  # A fragments of Q, per 16 head elements
        o = cuda.local.array(OC, float32)  # C fragments of O, per 8 columns
        s = cuda.local.array(8, float32)  # S, then P: tokens 0-7 (s[0:4]) and 8-15 (s[4:8])
        load_q(query, seq, kv_head, G, lane, qa)
        for j in range(OC):
            o[j] = 0
        m0, m1 = float32(-math.inf), float32(-math.inf)  # rows g and g + 8
        l0, l1 = float32(0), float32(0)
        first = part * size
        end = min(context_lens[seq], first + size)
        for t0 in range(first, end, 16):
            fill(kv_cache, block_tables, seq, kv_head, t0, end, lane, k_tile, v_tile)
            cp_async_commit()
            cp_async_wait(0)
            cuda.syncwarp()  # every lane's copies landed before ldmatrix reads them
            for j in range(8):
                s[j] = 0
            for k in range(KD):  # S = Q K^T, 16 head elements at a time
                row = (lane >> 4) * 8 + (lane & 7)  # lanes 0-15: tokens 0-7, 16-31: 8-15
                b0, b1, b2, b3 = ldmatrix_x4(k_tile, row * W + 8 * k + 4 * ((lane >> 3) & 1))
                a0, a1, a2, a3 = qa[4 * k], qa[4 * k + 1], qa[4 * k + 2], qa[4 * k + 3]
                s[0], s[1], s[2], s[3] = mma_f16(a0, a1, a2, a3, b0, b1, s[0], s[1], s[2], s[3])
                s[4], s[5], s[6], s[7] = mma_f16(a0, a1, a2, a3, b2, b3, s[4], s[5], s[6], s[7])
            for j in range(8):  # scale; a token past the end scores -inf
                tok = 2 * t + (j & 1) + 8 * (j >> 2)
                s[j] = s[j] * scale if t0 + tok < end else float32(-math.inf)
            top0 = max(max(s[0], s[1]), max(s[4], s[5]))  # row g's max over this lane
            top1 = max(max(s[2], s[3]), max(s[6], s[7]))  # row g + 8's
            for x in (1, 2):  # ... over the quad: the row's 16 tokens
                top0 = max(top0, cuda.shfl_xor_sync(0xFFFFFFFF, top0, x))
                top1 = max(top1, cuda.shfl_xor_sync(0xFFFFFFFF, top1, x))
            new0, new1 = max(m0, top0), max(m1, top1)
            alpha0, alpha1 = math.exp(m0 - new0), math.exp(m1 - new1)
            for j in range(8):
                s[j] = math.exp(s[j] - (new0 if (j & 2) == 0 else new1))  # P
            sum0, sum1 = s[0] + s[1] + s[4] + s[5], s[2] + s[3] + s[6] + s[7]
            for x in (1, 2):
                sum0 += cuda.shfl_xor_sync(0xFFFFFFFF, sum0, x)
                sum1 += cuda.shfl_xor_sync(0xFFFFFFFF, sum1, x)
            l0, l1 = l0 * alpha0 + sum0, l1 * alpha1 + sum1
            m0, m1 = new0, new1
            a0, a1 = pack_f16x2(s[0], s[1]), pack_f16x2(s[2], s[3])  # P as the A operand
            a2, a3 = pack_f16x2(s[4], s[5]), pack_f16x2(s[6], s[7])
            for n in range(ND):  # O = O * alpha + P V, 8 columns at a time
                b0, b1 = ldmatrix_x2_trans(v_tile, (lane & 15) * W + 4 * n)
                c0, c1 = o[4 * n] * alpha0, o[4 * n + 1] * alpha0
                c2, c3 = o[4 * n + 2] * alpha1, o[4 * n + 3] * alpha1
                o[4 * n], o[4 * n + 1], o[4 * n + 2], o[4 * n + 3] = mma_f16(
                    a0, a1, a2, a3, b0, b1, c0, c1, c2, c3
                )
            cuda.syncwarp()  # every lane read the tiles before the next step refills them
        store(partial, m_out, l_out, seq, kv_head, part, G, lane, o, m0, l0, m1, l1)

    return tensor_decode


@functools.cache
def kernel_for(head_dim: int):
    return make_tensor_kernel(head_dim)


kernel = kernel_for(REPORT_HEAD_DIM)


def launch(case, partition_size=PARTITION):
    """Rung 8's grid and merge with this rung's kernel (the cache must be contiguous:
    the kernel computes its element offsets from the shape)."""
    if case.dtype.itemsize != 2 or case.dtype.kind != "f":
        raise ValueError(f"kv_cache: {NAME} needs float16 K/V, got {case.dtype.name}")
    if case.head_dim % 16 or not 16 <= case.head_dim <= 256:
        raise ValueError(f"kv_cache: {NAME} needs head_dim a multiple of 16 in [16, 256]")
    if case.group > 16:
        raise ValueError(f"query: {NAME} serves at most 16 query heads per KV head")
    if not case.cache.is_c_contiguous():
        raise ValueError(f"kv_cache: {NAME} needs a contiguous cache")
    part, grid, partial, m, l = case.split(partition_size, NAME)  # noqa: E741
    kernel_for(case.head_dim)[grid, 32](
        case.cache, case.query, case.tables, case.lens, float32(case.scale), partial, m, l, part
    )
    out = case.output()
    merge_decode[(case.num_heads, case.num_seqs), 32](partial, m, l, out)
    return case.result(out)


decode = decoder(launch)


def ptx_spec(sig):
    from numba import types as t

    f32 = t.Array(t.float32, 3, "C")
    base = sig(f32, f32, t.int32)
    return kernel.py_func, (*base[:5], t.Array(t.float32, 4, "C"), *base[6:]), 32
