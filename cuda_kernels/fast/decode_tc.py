"""The tensor-core decode kernel: a GQA group's heads are the M rows of mma.m16n8k16.

FlashInfer's decode with `use_tensor_cores` (and vLLM v1's FlashInfer backend for GQA):
the G query heads that share a KV head form the rows of the A operand, so every K/V
byte read feeds G rows of an mma instead of G scalar dot products. Grid and outputs are
those of `decode.make_decode_kernel` (split-K partials merged by `merge.py`):
    grid (num_kv_heads * chunks, num_seqs, num_partitions), NW warps per CTA;
    chunks = ceil(G / 16): a CTA serves HPC <= 16 heads (rows HPC..15 are zero padding).

Each warp walks 16-token slabs of its partition (warp w takes slabs w, w + NW, ...):
  * copy: lane l copies half of token l // 2's K and V rows (D / 16 chunks of 16 bytes
    each) with cp.async into the warp's shared stage (two stages: slab s + 1 is in flight
    while slab s computes); rows are XOR-swizzled (`primitives.swizzled`) so that the
    8 rows an ldmatrix reads hit distinct banks; a masked token copies zeros (src-size 0);
  * S = Q K^T: Q (as fp16, unscaled) stays in registers as A fragments; per 16 dims,
    one ldmatrix.x4 of K rows gives the B fragments of both 8-token halves: 2 x D / 16
    mma per slab; each lane then holds 8 of the 16 x 16 scores, rows g, g + 8, and
    multiplies them by scale * log2 e in float32 (8 FMUL per slab): q * scale packed to
    fp16 overflowed to inf for |q| * |scale| * 1.44 > 65504 (scale <= 2^16 is accepted)
    and lost bits to fp16 subnormals for tiny scales;
  * online softmax on the fragments, base 2, lazy (FlashAttention-3): a warp vote asks
    whether any score beats its row's max by more than SLACK; if not (the common case)
    p = 2^(s - m) for the lane's own 8 scores, no shuffle; if so, the warp leaves the hot
    loop, takes the row max over the quad (2 shuffles), rescales l and the accumulators,
    and resumes. NaN propagates (`primitives.exp2_or_zero`);
  * O += P V: the score fragments packed to f16x2 are P's A fragments (FlashAttention-2);
    ldmatrix.x4.trans of V rows gives the B fragments of two 8-dim tiles: D / 8 mma.
At the end the quad sums l; with NW > 1 the warps' states (m, l, O) meet in shared
memory and are merged by log-sum-exp; with one warp each lane writes its own rows.

It serves (`tc_supported`) float16 K/V, vector loaders, head_dim a multiple of 16 up to
256, any group size and block size.
"""

from __future__ import annotations

import math
from collections import namedtuple
from types import SimpleNamespace

import numpy as np
from numba import cuda, float32, int32
from numba.cuda.types import float16, uint32

from .._checks import fp16_mma_refusal
from ..primitives import (
    FULL_MASK,
    cp_async16,
    cp_async_commit,
    cp_async_wait,
    exp2_or_zero,
    ldmatrix_x4,
    ldmatrix_x4_trans,
    mma_f16,
    pack_f16x2,
    softmax_rescale,
    swizzle_shape,
    swizzled,
)
from .decode import LOG2E, SLACK, Src, make_merge, window_bounds
from .decode_loads import make_locate

M, TOK = 16, 16  # mma rows (heads) and tokens per warp per slab
SHARED_LIMIT = 48 * 1024


def tc_supported(dtype, head_dim: int) -> str | None:
    """None when the tensor-core kernel serves this shape, else the reason it does not."""
    return fp16_mma_refusal("tensor-core", head_dim, dtype, 256)


def tc_geometry(head_dim: int, group_size: int, warps: int | None = None) -> dict:
    """Heads per CTA, chunks, warps (the most of 4, 2, 1 that fits SHARED_LIMIT, unless
    given) and the shared bytes."""
    chunks = -(-group_size // M)
    hpc = -(-group_size // chunks)
    stride = swizzle_shape(head_dim // 8)[0]

    def shared(nw):
        stages = 2 * nw * 2 * TOK * stride * 8 * 2  # K and V, two stages, fp16
        merge = 4 * (nw * hpc * head_dim + 2 * nw * M) if nw > 1 else 0
        return stages + merge

    nw = warps or next((n for n in (4, 2, 1) if shared(n) <= SHARED_LIMIT), 1)
    return dict(hpc=hpc, chunks=chunks, warps=nw, shared=shared(nw), stride=stride)


# the warp's view of shared memory: the K and V stage arrays, the warp and its lane
Warp = namedtuple("Warp", "k_sh v_sh warp lane")
# the lane's rows g and g + 8: the slab's scores (then p), running max, its part of the
# sums, and O's C fragments
Acc = namedtuple("Acc", "s m lsum o")


def make_tc_decode_kernel(
    loaders,
    head_dim: int,
    group_size: int,
    block_size: int,
    warps: int | None = None,
    paged: bool = True,
):
    """The tensor-core decode kernel: `make_decode_kernel`'s launch contract with
    `tc_geometry(...)["warps"] * 32` threads. Needs vector loaders and float16 K/V."""
    if not loaders.vector:
        raise ValueError("the tensor-core decode needs vector (row-index) loaders")
    reason = tc_supported(np.float16, int(head_dim))
    if reason:
        raise ValueError(reason)
    c = tc_shape(int(head_dim), int(group_size), warps)
    return tc_kernel(c, loaders, make_locate(int(block_size), paged))


def tc_shape(D: int, G: int, warps: int | None) -> SimpleNamespace:
    geo = tc_geometry(D, G, warps)
    NW, CH = geo["warps"], D // 8
    STRIDE, SWZ_SHIFT, SWZ_MASK = swizzle_shape(CH)
    return SimpleNamespace(
        D=D,
        G=G,
        HPC=geo["hpc"],
        CHUNKS=geo["chunks"],
        NW=NW,
        KD=D // 16,  # k-steps of QK^T
        ND=D // 8,  # 8-dim tiles of O
        CPL=CH // 2,  # chunks each lane copies per row (two lanes per token)
        STRIDE=STRIDE,
        SWZ_SHIFT=SWZ_SHIFT,
        SWZ_MASK=SWZ_MASK,
        STAGE_E=NW * 2 * TOK * STRIDE * 8,  # one array holds every warp's two stages
        MERGE=NW * geo["hpc"] * D if NW > 1 else 1,
    )


def make_slot(c):
    """slot(warp, stage, token, chunk): element index of `token`'s 16-byte `chunk`."""
    STRIDE, SWZ_SHIFT, SWZ_MASK = c.STRIDE, c.SWZ_SHIFT, c.SWZ_MASK

    @cuda.jit(device=True)
    def slot(warp, stage, token, chunk):
        return swizzled((warp * 2 + stage) * TOK + token, chunk, STRIDE, SWZ_SHIFT, SWZ_MASK) * 8

    return slot


def make_slab(c, loaders, locate):
    """(copy_slab, scores, accumulate): a slab into a warp's stage, S = Q K^T, O += P V."""
    KD, ND, CPL = c.KD, c.ND, c.CPL
    load_k, load_v = loaders.load_k, loaders.load_v
    slot = make_slot(c)

    @cuda.jit(device=True)
    def copy_slab(src, wp, stage, first):
        """cp.async this warp's slab [first, first + 16) into `stage`, then commit."""
        token = wp.lane >> 1
        seq, kv_head = src.seq, src.kv_head
        block, off, valid = locate(
            first + token, src.hi, src.kept, src.start, seq, src.block_tables
        )
        nbytes = 16 if valid else 0  # a masked token lands as zeros
        k_row = load_k(src.k_src, seq, block, kv_head, off)
        v_row = load_v(src.v_src, seq, block, kv_head, off)
        for i in range(CPL):
            ch = (wp.lane & 1) + 2 * i
            at = slot(wp.warp, stage, token, ch)
            cp_async16(wp.k_sh, at, src.k_src, k_row + ch * 8, nbytes)
            cp_async16(wp.v_sh, at, src.v_src, v_row + ch * 8, nbytes)
        cp_async_commit()

    @cuda.jit(device=True)
    def scores(wp, stage, qa, acc, first, hi, scale2):
        """s[0:8] <- this lane's scores times scale2 (-inf where masked); returns the warp
        vote "a score beats its row's max by more than SLACK"."""
        s, lane = acc.s, wp.lane
        for i in range(8):
            s[i] = float32(0)
        mi = lane >> 3
        token = 8 * (mi >> 1) + (lane & 7)  # ldmatrix row address: matrices (half, chunk)
        for kk in range(KD):
            at = slot(wp.warp, stage, token, 2 * kk + (mi & 1))
            b0, b1, b2, b3 = ldmatrix_x4(wp.k_sh, at)
            a0, a1, a2, a3 = qa[4 * kk], qa[4 * kk + 1], qa[4 * kk + 2], qa[4 * kk + 3]
            s[0], s[1], s[2], s[3] = mma_f16(a0, a1, a2, a3, b0, b1, s[0], s[1], s[2], s[3])
            s[4], s[5], s[6], s[7] = mma_f16(a0, a1, a2, a3, b2, b3, s[4], s[5], s[6], s[7])
        t = lane & 3
        grow = False
        for i in range(8):  # element i: row g (+8 when i & 2), token 8 (i >> 2) + 2t + (i & 1)
            if first + 8 * (i >> 2) + 2 * t + (i & 1) >= hi:
                s[i] = -math.inf
            else:
                s[i] *= scale2
            grow = grow or s[i] > acc.m[(i >> 1) & 1] + SLACK
        return cuda.any_sync(FULL_MASK, grow)

    @cuda.jit(device=True)
    def accumulate(wp, stage, acc):
        """O += P V over the slab: P's A fragments are the score fragments, packed."""
        s, o, lane = acc.s, acc.o, wp.lane
        a0 = pack_f16x2(s[0], s[1])
        a1 = pack_f16x2(s[2], s[3])
        a2 = pack_f16x2(s[4], s[5])
        a3 = pack_f16x2(s[6], s[7])
        mi = lane >> 3
        token = 8 * (mi & 1) + (lane & 7)  # matrices (tokens 0-7 | 8-15) x (chunk, chunk + 1)
        for nd2 in range(ND // 2):
            at = slot(wp.warp, stage, token, 2 * nd2 + (mi >> 1))
            b0, b1, b2, b3 = ldmatrix_x4_trans(wp.v_sh, at)
            x = 8 * nd2
            o[x], o[x + 1], o[x + 2], o[x + 3] = mma_f16(
                a0, a1, a2, a3, b0, b1, o[x], o[x + 1], o[x + 2], o[x + 3]
            )
            o[x + 4], o[x + 5], o[x + 6], o[x + 7] = mma_f16(
                a0, a1, a2, a3, b2, b3, o[x + 4], o[x + 5], o[x + 6], o[x + 7]
            )

    return copy_slab, scores, accumulate


def make_walk(c, loaders, locate):
    """walk: the warp's slabs mine, mine + NW * 16, ..., slab s + 1 in flight."""
    ND, PER_STEP = c.ND, c.NW * TOK
    copy_slab, scores, accumulate = make_slab(c, loaders, locate)

    @cuda.jit(device=True)
    def settle(acc):
        """Common case: p = 2^(s - m) for the lane's scores; l += p (the lane's part)."""
        s, m, lsum = acc.s, acc.m, acc.lsum
        for i in range(8):
            s[i] = exp2_or_zero(s[i], m[(i >> 1) & 1])
            lsum[(i >> 1) & 1] += s[i]

    @cuda.jit(device=True)
    def regrow(acc):
        """Rare case (warp-uniform): move the rows' maxima, rescale, then settle."""
        s, m, lsum, o = acc.s, acc.m, acc.lsum, acc.o
        for r in range(2):
            top = max(max(s[2 * r], s[2 * r + 1]), max(s[2 * r + 4], s[2 * r + 5]))
            top = max(top, cuda.shfl_xor_sync(FULL_MASK, top, 1))  # the quad holds the row
            top = max(top, cuda.shfl_xor_sync(FULL_MASK, top, 2))
            m_new, alpha = softmax_rescale(m[r], top, SLACK)
            m[r] = m_new
            lsum[r] *= alpha
            for nd in range(ND):
                o[4 * nd + 2 * r] *= alpha
                o[4 * nd + 2 * r + 1] *= alpha
        settle(acc)

    @cuda.jit(device=True)
    def walk(src, wp, qa, acc, mine, steps, scale2):
        copy_slab(src, wp, 0, mine)
        step = int32(0)
        while step < steps:
            while step < steps:  # the hot loop
                stage = step & 1
                first = int32(mine + step * PER_STEP)
                cuda.syncwarp(FULL_MASK)  # every lane is done reading the other stage
                copy_slab(src, wp, stage ^ 1, first + PER_STEP)
                cp_async_wait(1)  # this lane's copies of the slab have landed ...
                cuda.syncwarp(FULL_MASK)  # ... and so have every other lane's
                if scores(wp, stage, qa, acc, first, src.hi, scale2):
                    break  # warp-uniform: leave to move a max
                settle(acc)
                accumulate(wp, stage, acc)
                step = int32(step + 1)
            if step < steps:  # finish the slab whose scores moved a max (rare)
                regrow(acc)
                accumulate(wp, step & 1, acc)
                step = int32(step + 1)
        cp_async_wait(0)  # no copy may land after the CTA's shared memory is reused

    return walk


def make_begin(c):
    """begin: qa <- Q's A fragments (fp16, unscaled; rows past `heads` zero); O = 0, l = 0,
    m = -inf."""
    KD, ND = c.KD, c.ND

    @cuda.jit(device=True)
    def begin(query, seq, head0, heads, lane, qa, acc):
        g, t = lane >> 2, lane & 3
        for kk in range(KD):
            for w in range(4):
                r = g + 8 * (w & 1)
                d = 16 * kk + 2 * t + 8 * (w >> 1)
                lo = float32(query[seq, head0 + r, d]) if r < heads else float32(0)
                hi2 = float32(query[seq, head0 + r, d + 1]) if r < heads else float32(0)
                qa[4 * kk + w] = pack_f16x2(lo, hi2)
        for i in range(4 * ND):
            acc.o[i] = float32(0)
        for r in range(2):
            acc.m[r] = -math.inf
            acc.lsum[r] = float32(0)

    return begin


def make_finish(c):
    """finish: the rows' sums over the quad, then the partial outputs (`decode.make_ends`),
    merged across the warps in shared memory when NW > 1."""
    D, NW, ND, NT, MERGE, HPC = c.D, c.NW, c.ND, 32 * c.NW, c.MERGE, c.HPC
    merge_states = make_merge(NW, HPC, D, D, NT)

    @cuda.jit(device=True)
    def write_own(outs, where, lane, acc):
        """One warp: each lane normalises and writes its own rows."""
        out, max_logits, exp_sums = outs
        seq, head0, heads, part = where
        g, t = lane >> 2, lane & 3
        for r in range(2):
            row = g + 8 * r
            if row < heads:
                total = acc.lsum[r]
                for nd in range(ND):
                    for e in range(2):
                        val = acc.o[4 * nd + 2 * r + e] / total if total != 0 else float32(0)
                        out[seq, head0 + row, part, 8 * nd + 2 * t + e] = val
                if t == 0:
                    max_logits[seq, head0 + row, part] = acc.m[r] / LOG2E
                    exp_sums[seq, head0 + row, part] = total

    @cuda.jit(device=True)
    def merge(outs, where, wp, acc, tid):
        """NW warps: their states (m, l, O) meet in shared memory, merged by log-sum-exp."""
        heads = where[2]
        o_sh = cuda.shared.array(MERGE, float32)  # [NW, HPC, D]: the warps' O, to merge
        m_sh = cuda.shared.array((NW, M), float32)  # row maxima, then the warps' weights
        l_sh = cuda.shared.array((NW, M), float32)
        g, t, warp = wp.lane >> 2, wp.lane & 3, wp.warp
        for r in range(2):
            row = g + 8 * r
            if t == 0:
                m_sh[warp, row] = acc.m[r]
                l_sh[warp, row] = acc.lsum[r]
            if row < heads:
                for nd in range(ND):
                    for e in range(2):
                        at = (warp * HPC + row) * D + 8 * nd + 2 * t + e
                        o_sh[at] = acc.o[4 * nd + 2 * r + e]
        merge_states(outs, where, o_sh, m_sh, l_sh, tid)

    @cuda.jit(device=True)
    def finish(outs, where, wp, acc, tid):
        for r in range(2):  # the row sums over the quad
            acc.lsum[r] += cuda.shfl_xor_sync(FULL_MASK, acc.lsum[r], 1)
            acc.lsum[r] += cuda.shfl_xor_sync(FULL_MASK, acc.lsum[r], 2)
        if NW == 1:
            write_own(outs, where, wp.lane, acc)
        else:
            merge(outs, where, wp, acc, tid)

    return finish


def tc_kernel(c, loaders, locate):
    G, HPC, CHUNKS, NW, STAGE_E = c.G, c.HPC, c.CHUNKS, c.NW, c.STAGE_E
    QA_N, O_N = 4 * c.KD, 4 * c.ND  # registers of Q's A fragments and O's accumulators
    walk = make_walk(c, loaders, locate)
    begin, finish = make_begin(c), make_finish(c)

    @cuda.jit
    def paged_decode_tc(
        k_src,
        v_src,
        query,
        block_tables,
        context_lens,
        scale,
        sinks,
        window,
        partition_size,
        out,
        max_logits,
        exp_sums,
    ):
        kv_head = cuda.blockIdx.x // CHUNKS
        head0 = kv_head * G + (cuda.blockIdx.x - kv_head * CHUNKS) * HPC
        heads = min(HPC, kv_head * G + G - head0)
        seq = cuda.blockIdx.y
        part = cuda.blockIdx.z
        tid = cuda.threadIdx.x
        k_sh = cuda.shared.array(STAGE_E, float16, alignment=16)  # [NW, 2 stages, 16, ROWE]
        v_sh = cuda.shared.array(STAGE_E, float16, alignment=16)
        qa = cuda.local.array(QA_N, uint32)  # Q's A fragments
        o = cuda.local.array(O_N, float32)  # O's C fragments: rows g, g + 8
        s = cuda.local.array(8, float32)  # the slab's scores, then p
        m = cuda.local.array(2, float32)  # running max of rows g, g + 8
        lsum = cuda.local.array(2, float32)  # this lane's part of their sums
        wp = Warp(k_sh, v_sh, tid >> 5, tid & 31)
        acc = Acc(s, m, lsum, o)
        begin(query, seq, head0, heads, wp.lane, qa, acc)

        kept, start, lo_j, hi = window_bounds(
            context_lens[seq], window, sinks, part, partition_size
        )
        per_step = int32(NW * TOK)
        steps = int32((max(hi - lo_j, 0) + per_step - 1) // per_step)  # the same in every warp
        mine = int32(lo_j + wp.warp * TOK)  # this warp's first slab
        src = Src(k_src, v_src, block_tables, seq, kv_head, hi, kept, start)
        walk(src, wp, qa, acc, mine, steps, float32(scale * LOG2E))
        finish((out, max_logits, exp_sums), (seq, head0, heads, part), wp, acc, tid)

    return paged_decode_tc
