"""Paged prefill on tensor cores, FlashAttention-2 style (Dao 2023, Algorithm 1).

The same computation as `prefill.make_prefill_kernel` (the ragged batch, the causal and
window rules, the work list of query tiles; see prefill.py), with the math on mma.sync:
S = Q K^T and O += P V are `primitives.mma_f16` (m16n8k16, fp16 in, f32 accumulate).
It serves an fp16 cache with head_dim a multiple of 16 (16..256); everything else takes
the CUDA-core kernel (`prefill.paged_prefill(path=...)` chooses).

Grid: (num_work, num_kv_heads), NW warps per CTA. A CTA serves one query tile of one
sequence and one KV head: M = 16 RW rows (RW = NW / o_split row blocks), row r = (query
token r // G, head r % G), so a GQA group's heads x query tokens share every K/V tile
(FlashInfer packs them the same way). A warp owns 16 rows, lane l rows 16w + g and
16w + g + 8 (g = l >> 2, t = l % 4, the mma fragment layout in primitives.py).

Its pieces: `prefill_tc_shape` (the constants), `prefill_work` (the CTA's rows and tile
order, shared with `prefill_wgmma`), `prefill_tc_tiles` (page table, cp.async, swizzle),
`prefill_tc_step` (one KV tile). Here: the kernel (Q in, the tile loops, O out), its
launch configuration and cache.

Registers (the limit that shapes large head_dims): a lane holds O (D/2 / o_split floats),
S (T/4 floats) and Q (2 QR words, QR = k-steps kept in registers; the rest sit in shared
memory as qs and come back through ldmatrix). `launch_config` picks per head_dim a shape
that ptxas compiles without spills on sm_80 and sm_90. The CTA's 64 rows are exactly one
wgmma m64nNk16 A operand (4 warps x 16 rows): `prefill_wgmma` is this kernel on Hopper.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, float32, int32, int64

from .. import _backend
from .._checks import fp16_mma_refusal
from ..primitives import pack_f16x2, split_scale, swizzle_shape, swizzled
from .decode import LOG2E
from .prefill_tc_shape import TileShape
from .prefill_tc_step import Acc, Lane, Tiles, make_walk
from .prefill_tc_tiles import make_tile_loader
from .prefill_work import KvSpan, Rows, make_work

SHARED_BUDGET = 40 * 1024  # the K and V tiles, under the 48 KiB static limit
MAX_HEAD_DIM = 256
SPLIT_O_ABOVE = 176  # larger head_dims split O over two warps per row block


def unservable(head_dim: int, cache_dtype) -> str | None:
    """Why the tensor-core kernel cannot serve this shape, or None when it can."""
    return fp16_mma_refusal("tensor-core", head_dim, cache_dtype, MAX_HEAD_DIM)


def launch_config(head_dim: int) -> tuple[int, int, int, int]:
    """(warps, kv tile, q_regs, o_split) for head_dim, chosen from ptxas's figures
    (tests/kernels/test_tensor_core_ptx.py). On a GPU: D <= SPLIT_O_ABOVE: 4 warps, the
    largest tile of 64/32/16 tokens that fits SHARED_BUDGET; larger D: 8 warps, two per
    row block with half of O each, 32-token tiles; D = 256: 4 warps, 16-token tiles, all
    of Q in shared memory (any k-step of Q in registers spills at G > 1). Under the
    simulator: 1 warp (2 with o_split), 16-token tiles, the GPU's q_regs and o_split."""
    k_steps, split = head_dim // 16, 2 if head_dim > SPLIT_O_ABOVE else 1
    q_regs = 0 if head_dim == 256 else k_steps
    if _backend.backend() != "gpu":
        return split, 16, q_regs, split
    if head_dim == 256:
        return 4, 16, q_regs, 2
    if split == 2:
        return 8, 32, q_regs, 2
    stride = swizzle_shape(head_dim // 8)[0]
    tile = next(t for t in (64, 32, 16) if 2 * t * stride * 16 <= SHARED_BUDGET)
    return 4, tile, q_regs, 1


def make_cta_io(shape, loader):
    """(lane_of, load_q, write_out): where a thread sits in the CTA, Q into its A fragments
    (registers, then qs), and O out, divided by the row sums."""
    G, R, QR, KS, OS = shape.G, shape.R, shape.QR, shape.KS, shape.OS
    RW, RSH, NDW, OF = shape.RW, shape.RSH, shape.NDW, shape.OF
    QSC, QSH, QSM = shape.q_swizzle
    chunk_bases, q_chunk_bases = loader.chunk_bases, loader.q_chunk_bases

    @cuda.jit(device=True)
    def lane_of(tid, kb, vb, db, qb):
        """The thread's `Lane`: its warp's first n-tile of O, its rows r_lo and r_lo + 8,
        and its slot bases (kb..qb filled)."""
        lane, warp = tid & 31, tid >> 5
        n0 = (warp >> RSH) * NDW if OS > 1 else 0  # this warp's first n-tile of O
        r_lo = ((warp & (RW - 1)) if OS > 1 else warp) * 16 + (lane >> 2)
        chunk_bases((lane & 7) + 8 * (lane >> 4), (lane >> 3) & 1, kb)
        chunk_bases((lane & 7) + 8 * ((lane >> 3) & 1), lane >> 4, vb)
        chunk_bases(tid >> 1, tid & 1, db)
        q_chunk_bases(r_lo - (lane >> 2) + (lane & 15), lane >> 4, qb)
        for q in range(4):
            vb[q] += n0  # n0 is a multiple of 8 where the layout is swizzled
        return Lane(tid, n0, r_lo, kb, vb, db, qb)

    @cuda.jit(device=True)
    def q_pair(query, q_at, head0, rows, r, d, sign):
        """(sign q[row r, dim d], sign q[r, d + 1]); 0 on a padded row."""
        lo = float32(0)
        hi = float32(0)
        if r < R and r // G < rows:
            lo = float32(query[q_at + r // G, head0 + r % G, d]) * sign
            hi = float32(query[q_at + r // G, head0 + r % G, d + 1]) * sign
        return lo, hi

    @cuda.jit(device=True)
    def load_q(query, q_at, head0, rows, sign, lane, qf, q_s):
        """Q's A fragments: k-steps < QR in qf, the rest in qs (element (r, d) in chunk
        (d - 16 QR) / 8). Register `half` of a k-step: a0 (row g), a1 (g + 8), a2, a3
        (+8 dims)."""
        r_lo, t4 = lane.r_lo, lane.tid & 3
        for k in range(QR):
            for half in range(4):
                r, d = r_lo + 8 * (half & 1), 16 * k + 2 * t4 + 8 * (half >> 1)
                lo, hi = q_pair(query, q_at, head0, rows, r, d, sign)
                qf[4 * k + half] = pack_f16x2(lo, hi)
        for k in range(QR, KS):
            for half in range(4):
                r, d = r_lo + 8 * (half & 1), 16 * k + 2 * t4 + 8 * (half >> 1)
                lo, hi = q_pair(query, q_at, head0, rows, r, d, sign)
                at = swizzled(r, (d - 16 * QR) >> 3, QSC, QSH, QSM) * 8 + (d & 7)
                if lane.n0 == 0:  # (the warps of a row block hold the same Q)
                    q_s[at] = lo
                    q_s[at + 1] = hi

    @cuda.jit(device=True)
    def write_out(out, o, q_at, head0, lane, live_lo, live_hi):
        """out's rows r_lo and r_lo + 8 <- O / l (the mma summed each row over all its
        columns: nothing to reduce)."""
        r_lo, l_lo, l_hi = lane.r_lo, o[OF], o[OF + 2]
        at_lo = q_at + r_lo // G
        at_hi = q_at + (r_lo + 8) // G
        for n in range(NDW):
            d = 8 * (lane.n0 + n) + 2 * (lane.tid & 3)
            if live_lo:
                out[at_lo, head0 + r_lo % G, d] = o[4 * n] / l_lo
                out[at_lo, head0 + r_lo % G, d + 1] = o[4 * n + 1] / l_lo
            if live_hi:
                out[at_hi, head0 + (r_lo + 8) % G, d] = o[4 * n + 2] / l_hi
                out[at_hi, head0 + (r_lo + 8) % G, d + 1] = o[4 * n + 3] / l_hi

    return lane_of, load_q, write_out


def make_prefill_tc_kernel(
    head_dim: int,
    group_size: int,
    warps: int,
    tile: int,
    block_size: int,
    q_regs: int | None = None,
    o_split: int = 1,
):
    """The kernel for constants D, G, NW (warps), T (KV tile), the cache's block size B
    (a template parameter in vLLM's too), q_regs and o_split (`TileShape`). Launched as
    kernel[(num_work, num_kv_heads), 32 * NW] with `prefill.make_prefill_kernel`'s
    arguments (cache float16; block_size must equal B)."""
    shape = TileShape.build(head_dim, group_size, warps, tile, block_size, q_regs, o_split)
    G, T, ROWS, OL = shape.G, shape.T, shape.ROWS, shape.OL
    BUF, QBUF, QF, SF = shape.BUF, shape.QBUF, shape.QF, shape.SF
    loader = make_tile_loader(shape)
    cta_span, row_spans, tile_order = make_work(shape.QT, G, shape.R, T)
    walk = make_walk(shape, loader, tile_order)
    lane_of, load_q, write_out = make_cta_io(shape, loader)

    @cuda.jit
    def paged_prefill_tc(
        cache,
        query,
        block_tables,
        context_lens,
        query_start_loc,
        work_seq,
        work_first,
        block_size,
        scale,
        causal,
        window,
        sinks,
        out,
    ):
        k_s = cuda.shared.array(BUF, np.float16, alignment=16)  # K tile: [T rows][SC chunks]
        v_s = cuda.shared.array(BUF, np.float16, alignment=16)  # V tile, the same layout
        tok_s = cuda.shared.array((2, T), int64)  # K row of each tile token, per buffer
        p_sh = cuda.shared.array((ROWS, T), np.float16, alignment=16)  # P, for `masked_pv`
        q_s = cuda.shared.array(QBUF, np.float16, alignment=16)  # Q's k-steps QR..: [row][chunk]
        qf = cuda.local.array(QF, np.uint32)  # Q's A fragments of k-steps < QR, [k][a0..a3]
        s = cuda.local.array(SF, float32)  # S fragments, [n-tile][c0..c3]
        o = cuda.local.array(OL, float32)  # O fragments, [n-tile][c0..c3], then l
        st = cuda.local.array(2, float32)  # running max of rows g and g+8
        rows_seen = cuda.local.array(6, int32)  # (length, kept, start) of rows g, g+8
        kb = cuda.local.array(4, int32)  # slot bases: K's ldmatrix rows, V's, the copies'
        vb = cuda.local.array(4, int32)
        db = cuda.local.array(4, int32)
        qb = cuda.local.array(4, int32)  # q_s's ldmatrix rows
        lane = lane_of(cuda.threadIdx.x, kb, vb, db, qb)
        tiles = Tiles(tok_s, k_s, v_s, p_sh, q_s)
        work = cuda.blockIdx.x
        (seq, first, q0, rows, past, ctx, len_lo, len_hi, kept_hi, start_hi, gap, span) = cta_span(
            work_seq, work_first, query_start_loc, context_lens, work, causal, window, sinks
        )
        v_offset = int64(cache.strides[1] // 2)  # V's row = K's row + this (fp16 elements)
        kv = KvSpan(cache, block_tables, seq, cuda.blockIdx.y, span, kept_hi, gap, v_offset)
        live_lo, live_hi = row_spans(lane.r_lo, rows, past, ctx, causal, window, sinks, rows_seen)
        # scale's sign on Q (exact in fp16), its magnitude on the fp32 scores
        sign, scale2 = split_scale(float32(scale * LOG2E))
        load_q(query, q0 + first, kv.kv_head * G, rows, sign, lane, qf, q_s)
        walk(kv, tiles, lane, Rows(qf, rows_seen, scale2), Acc(s, o, st), len_lo, start_hi, window)
        write_out(out, o, q0 + first, kv.kv_head * G, lane, live_lo, live_hi)

    return paged_prefill_tc


def kernel_for(head_dim: int, group: int, block_size: int):
    """(kernel, threads, query tile) for this shape, compiled once."""
    warps, tile, q_regs, o_split = launch_config(head_dim)
    kernel = _compiled(head_dim, group, warps, tile, block_size, q_regs, o_split)
    return kernel, 32 * warps, max(1, 16 * (warps // o_split) // group)


_compiled = functools.cache(make_prefill_tc_kernel)
