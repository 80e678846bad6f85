"""Paged prefill on Hopper's warpgroup MMA (wgmma, sm_90a), FlashAttention-3's first step.

The computation of `prefill_tc` (ragged batch behind cached prefixes, causal, window
and sinks, GQA rows packed into M; see prefill.py for the rules) with the math on
`wgmma`: one warpgroup per CTA, M = 64 rows, row r = (query token r // G, head r % G).
It serves an fp16 cache with head_dim a multiple of 16 up to 128. Opt-in only
(`paged_prefill(path="wgmma")`): it has not yet run on a GPU.

Grid: (num_work, num_kv_heads), 128 threads (4 warps = one warpgroup). Warp w owns rows
16w .. 16w+15; lane l's rows are 16w + g and 16w + g + 8 (g = l >> 2, t = l % 4).

  * Shared tiles (`wgmma` docstring): a K or V tile of T tokens is ceil(D / 64) panels of
    T rows x 64 fp16 (128 bytes), the 16-byte chunk c of row r at chunk c ^ (r % 8)
    (the 128-byte swizzle), panels and tiles on 1024-byte boundaries (`align_pad`
    skips to the first one: a static shared array has no such alignment). Dims past D
    in a panel are never written nor read.
  * S = Q K^T: per k-step of 16 dims one wgmma m64nTk16, A = Q's fragments (registers,
    loaded once), B = K^T read K-major through a descriptor: start = the k-step's 32
    bytes in its panel's rows, SBO = 1024 (8 rows), the hardware XOR on the address.
  * The mask (causal, window, sinks, tile tail) and the online softmax run on the S
    accumulator in registers: a lane holds 2 rows x T/4 scores; the row max is two quad
    shuffles (`warp_max` over 4 lanes); each lane keeps partial row sums, summed over
    the quad once at the end.
  * O += P V: the exponentiated S fragments packed to f16x2 are the A words of the next
    wgmma (the C layout of 16 columns is the A layout: no shared-memory round trip);
    B = V read MN-major (imm-trans-b 1) through a descriptor: start = the k-step's 16
    tokens (2048 bytes) in the panel, SBO = 1024 (8 tokens), LBO = a panel; one wgmma
    m64nNk16 per panel, N = 64 (the last: what is left of D).
  * K/V tiles by cp.async (zero-filled past the span): thread t < T maps token t of the
    next tile through the block table once per tile; V of tile j streams in while S_j
    and the softmax run, K of tile j+1 while P_j V_j runs (prefill_tc's pipeline); after
    each wait, fence.proxy.async makes the copies visible to wgmma, then a barrier.
  * The mask runs only on the tiles that need it; each wgmma batch is waited for at once
    (no softmax/wgmma overlap yet, FlashAttention-3's ping-pong). Known gap: a NaN in a V
    row masked inside a partly masked tile reaches the row (0 x NaN; prefill_tc's
    `masked_pv` avoids it): left for a GPU session.
"""

from __future__ import annotations

import functools
import math
from collections import namedtuple
from types import SimpleNamespace

import numpy as np
from numba import cuda, float32, int32, int64

from .. import _backend
from .._checks import fp16_mma_refusal
from ..primitives import (
    cp_async_wait,
    fast_exp2,
    pack_f16x2,
    split_scale,
    warp_sum,
)
from .decode import LOG2E
from .prefill_work import (
    KvSpan,
    Rows,
    make_map_tile,
    make_mask,
    make_row_max,
    make_work,
    run_tile,
    tile_at,
)
from .wgmma import (
    SWIZZLE_128B,
    align_pad,
    fence_proxy_async,
    mma_for,
    smem_desc,
    wgmma_commit,
    wgmma_fence,
    wgmma_wait,
)
from .wgmma_tiles import make_tile_io

MAX_HEAD_DIM = 128
THREADS = 128  # one warpgroup


def unservable(head_dim: int, cache_dtype) -> str | None:
    """Why the wgmma kernel cannot serve this shape, or None when it can."""
    return fp16_mma_refusal("wgmma", head_dim, cache_dtype, MAX_HEAD_DIM)


def kv_tile() -> int:
    """Tokens per K/V tile: 64 on a GPU (one m64n64 per k-step), 16 under the simulator."""
    return 64 if _backend.backend() == "gpu" else 16


# shared memory: the tile maps [2, T], and the K and V tiles at kv_s[k_at:], kv_s[v_at:]
Tiles = namedtuple("Tiles", "tok_s kv_s k_at v_at")
# the running state: S (m64nT accumulator), P as f16x2 (the A words of P V), O (panel p
# at o[32p:]), and the running max of rows g, g + 8, then their partial sums
Acc = namedtuple("Acc", "s pw o st")


def wgmma_shape(head_dim: int, group_size: int, tile: int, block_size: int) -> SimpleNamespace:
    """The kernel's constants for D, G, T and B, checked."""
    D, G, T, B = int(head_dim), int(group_size), int(tile), int(block_size)
    if D % 16 or not 16 <= D <= MAX_HEAD_DIM or T % 16 or not 16 <= T <= 64:
        raise ValueError(
            f"head_dim must be a multiple of 16 in [16, {MAX_HEAD_DIM}] and the "
            f"tile one in [16, 64], got {D} and {T}"
        )
    panels = (D + 63) // 64
    return SimpleNamespace(
        D=D,
        G=G,
        T=T,
        B=B,
        QT=max(1, 64 // G),  # query tokens per CTA
        R=max(1, 64 // G) * G,  # rows in use (of 64)
        KS=D // 16,  # k-steps of S
        PANELS=panels,
        LAST_N=D - 64 * (panels - 1),  # width of the last 64-dim panel
        PANEL=T * 64,  # fp16 elements of one panel: T rows of 128 bytes
        BUF=panels * T * 64,  # one K (or V) tile
        SMEM=2 * panels * T * 64 + 512,  # the K and V tiles, and up to 1024 bytes to align
        SF=T // 2,  # S accumulator registers per lane
        OF=D // 2,  # O accumulator registers per lane
        QF=4 * (D // 16),  # Q's A words per lane
        PW=T // 4,  # P's A words per lane
    )


def make_products(c):
    """(scores, values): S = Q K^T and O += P V, each a batch of wgmmas waited for."""
    T, KS, PANELS, PANEL, SF = c.T, c.KS, c.PANELS, c.PANEL, c.SF
    mma_s = mma_for(T, False)  # B = K^T, K-major
    mma_o = mma_for(64, True)  # B = V, MN-major
    mma_o_last = mma_for(c.LAST_N, True)

    @cuda.jit(device=True)
    def scores(tiles, qf, s):
        """S = Q K^T for this tile: KS wgmmas chained on s, the first with accumulate 0."""
        kv_s, k_at = tiles.kv_s, tiles.k_at
        wgmma_fence()
        for k in range(KS):
            desc = smem_desc(kv_s, k_at + (k >> 2) * PANEL + (k & 3) * 16, 16, 1024, SWIZZLE_128B)
            mma_s(desc, qf[4 * k], qf[4 * k + 1], qf[4 * k + 2], qf[4 * k + 3], s, 0, int32(k > 0))
        wgmma_commit()
        wgmma_wait(0)

    @cuda.jit(device=True)
    def values(tiles, acc):
        """O += P V: P's S fragments packed to f16x2 (pw) are the A words, 16 tokens a
        step. All packed before the fence: wgmma_fence must separate every register write
        from the wgmma that reads it (PTX ISA, wgmma.fence)."""
        s, pw, o, kv_s, v_at = acc.s, acc.pw, acc.o, tiles.kv_s, tiles.v_at
        for k in range(SF // 2):
            pw[k] = pack_f16x2(s[2 * k], s[2 * k + 1])
        wgmma_fence()
        for k in range(T // 16):
            for p in range(PANELS):
                desc = smem_desc(
                    kv_s, v_at + p * PANEL + k * 16 * 64, PANEL * 2, 1024, SWIZZLE_128B
                )
                if p < PANELS - 1:
                    mma_o(
                        desc, pw[4 * k], pw[4 * k + 1], pw[4 * k + 2], pw[4 * k + 3], o, 32 * p, 1
                    )
                else:
                    mma_o_last(
                        desc, pw[4 * k], pw[4 * k + 1], pw[4 * k + 2], pw[4 * k + 3], o, 32 * p, 1
                    )
        wgmma_commit()
        wgmma_wait(0)

    return scores, values


def make_softmax(c):
    """softmax(acc, scale2): the online softmax after a tile's scores."""
    SF, OF = c.SF, c.OF
    row_max = make_row_max(SF)

    @cuda.jit(device=True)
    def softmax(acc, scale2):
        """Update the running max and sums from this tile's scores, rescale O."""
        s, o, st = acc.s, acc.o, acc.st
        base_lo, base_hi, alpha_lo, alpha_hi = row_max(s, st, scale2)
        sum_lo = float32(0)
        sum_hi = float32(0)
        for n in range(SF // 4):
            for i in range(2):
                s[4 * n + i] = fast_exp2(s[4 * n + i] * scale2 - base_lo)
                s[4 * n + 2 + i] = fast_exp2(s[4 * n + 2 + i] * scale2 - base_hi)
                sum_lo += s[4 * n + i]
                sum_hi += s[4 * n + 2 + i]
        st[2] = st[2] * alpha_lo + sum_lo  # this lane's part of the row sums
        st[3] = st[3] * alpha_hi + sum_hi
        for n in range(OF // 4):
            o[4 * n] *= alpha_lo
            o[4 * n + 1] *= alpha_lo
            o[4 * n + 2] *= alpha_hi
            o[4 * n + 3] *= alpha_hi

    return softmax


def make_walk(c, tile_order):
    """walk(kv, tiles, tid, rows, acc, len_lo, start_hi, window): every KV tile of the CTA,
    the masked steps first, then the full ones (two loops; `prefill_work`'s order), from
    an empty acc (O = 0, max -inf, sums 0)."""
    T, OF = c.T, c.OF
    map_tile = make_map_tile(T, c.B)
    issue_any, issue_whole = make_tile_io(c.D, T, THREADS)
    scores, values = make_products(c)
    mask, softmax = make_mask(c.SF), make_softmax(c)

    def make_step(masked: bool):
        """One KV tile: S = Q K^T, (the mask), the online softmax, O += P V."""
        issue = issue_any if masked else issue_whole

        @cuda.jit(device=True)
        def step(kv, tiles, tid, rows, acc, e, num_tiles, order):
            tok_s, kv_s = tiles.tok_s, tiles.kv_s
            b = e & 1  # this step's map in tok_s[b], the next one's in tok_s[1 - b]
            # the tile of step e, and of step e + 1 (a full step's next tile is full too)
            tile = run_tile(e, order) if not masked else tile_at(e, order)
            after = int32(tile + 1) if not masked else tile_at(int32(e + 1), order)
            cp_async_wait(0)
            fence_proxy_async()
            # K of this tile is visible to the warpgroup's wgmma; every warp is done with
            # the last P V, so the V tile may be overwritten
            cuda.syncthreads()
            issue(kv.cache, kv.v_offset, tok_s, b, kv_s, tiles.v_at, tid)
            if e + 1 < num_tiles:
                map_tile(kv, after * T, tok_s, 1 - b, tid)
            scores(tiles, rows.qf, acc.s)
            if masked:
                mask(acc.s, tile * T, kv, rows.rows_seen, tid & 3)
            softmax(acc, rows.scale2)
            cp_async_wait(0)
            fence_proxy_async()
            # V is visible to wgmma; every warp is done with S = Q K^T, so the K tile may
            # be overwritten; the next tile's map is visible
            cuda.syncthreads()
            if e + 1 < num_tiles:  # the full steps come last: theirs is always a whole tile
                issue(kv.cache, 0, tok_s, 1 - b, kv_s, tiles.k_at, tid)
            values(tiles, acc)

        return step

    step_masked, step_full = make_step(True), make_step(False)

    @cuda.jit(device=True)
    def walk(kv, tiles, tid, rows, acc, len_lo, start_hi, window):
        for k in range(OF):
            acc.o[k] = float32(0)
        acc.st[0] = -math.inf
        acc.st[1] = -math.inf
        acc.st[2] = float32(0)
        acc.st[3] = float32(0)
        num_tiles, order = tile_order(kv.span, kv.kept_hi, kv.gap, len_lo, start_hi, window)
        map_tile(kv, int32(tile_at(int32(0), order) * T), tiles.tok_s, 0, tid)
        cuda.syncthreads()  # the first map is visible before any thread copies by it
        issue_any(kv.cache, 0, tiles.tok_s, 0, tiles.kv_s, tiles.k_at, tid)
        for e in range(order[2]):  # the masked tiles, then the full ones: two loops
            step_masked(kv, tiles, tid, rows, acc, e, num_tiles, order)
        for e in range(order[2], num_tiles):
            step_full(kv, tiles, tid, rows, acc, e, num_tiles, order)

    return walk


def make_cta_io(c):
    """(load_q, write_out): Q into the lane's A words, O / l out. The lane's rows are
    r_lo = 16 warp + g and r_lo + 8; live = (live_lo, live_hi) says which are real."""
    G, KS, OF = c.G, c.KS, c.OF

    @cuda.jit(device=True)
    def load_q(query, q_at, head0, tid, live, sign, qf):
        """Q's A words: a0 (row g), a1 (g + 8), a2, a3 (+8 columns), sign q (0: padding)."""
        r_lo, t4 = (tid >> 5) * 16 + ((tid & 31) >> 2), tid & 3
        live_lo, live_hi = live
        for k in range(KS):
            for half in range(4):
                r = r_lo + 8 * (half & 1)
                d = 16 * k + 2 * t4 + 8 * (half >> 1)
                lo = float32(0)
                hi = float32(0)
                if live_lo if half & 1 == 0 else live_hi:
                    at = q_at + r // G
                    lo = float32(query[at, head0 + r % G, d]) * sign
                    hi = float32(query[at, head0 + r % G, d + 1]) * sign
                qf[4 * k + half] = pack_f16x2(lo, hi)

    @cuda.jit(device=True)
    def write_out(out, acc, q_at, head0, tid, live):
        """out's rows <- O / l, l the quad's partial sums added up."""
        r_lo, t4, o = (tid >> 5) * 16 + ((tid & 31) >> 2), tid & 3, acc.o
        live_lo, live_hi = live
        l_lo = warp_sum(acc.st[2], 4)  # the quad's partial sums: each row's total
        l_hi = warp_sum(acc.st[3], 4)
        at_lo = q_at + r_lo // G
        at_hi = q_at + (r_lo + 8) // G
        for n in range(OF // 4):
            d = 8 * n + 2 * t4
            if live_lo:
                out[at_lo, head0 + r_lo % G, d] = o[4 * n] / l_lo
                out[at_lo, head0 + r_lo % G, d + 1] = o[4 * n + 1] / l_lo
            if live_hi:
                out[at_hi, head0 + (r_lo + 8) % G, d] = o[4 * n + 2] / l_hi
                out[at_hi, head0 + (r_lo + 8) % G, d + 1] = o[4 * n + 3] / l_hi

    return load_q, write_out


def make_prefill_wgmma_kernel(head_dim: int, group_size: int, tile: int, block_size: int):
    """The kernel for D, G, T (a multiple of 16 up to 64) and block size B, launched as
    `prefill_tc.make_prefill_tc_kernel`'s with THREADS threads."""
    c = wgmma_shape(head_dim, group_size, tile, block_size)
    G, T, BUF, SMEM, SF, OF, QF, PW = c.G, c.T, c.BUF, c.SMEM, c.SF, c.OF, c.QF, c.PW
    cta_span, row_spans, tile_order = make_work(c.QT, G, c.R, T)
    walk = make_walk(c, tile_order)
    load_q, write_out = make_cta_io(c)

    @cuda.jit
    def paged_prefill_wgmma(
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
        tid = cuda.threadIdx.x
        kv_s = cuda.shared.array(SMEM, np.float16)  # [pad][K tile][V tile]
        tok_s = cuda.shared.array((2, T), int64)  # K row of each tile token, per buffer
        qf = cuda.local.array(QF, np.uint32)  # Q's A words, [k-step][a0..a3]
        s = cuda.local.array(SF, float32)  # S accumulator, m64nT layout
        pw = cuda.local.array(PW, np.uint32)  # P as f16x2: the A words of P V
        o = cuda.local.array(OF, float32)  # O accumulator, panel p at o[32p:]
        st = cuda.local.array(4, float32)  # running max of rows g, g+8; their partial sums
        rows_seen = cuda.local.array(6, int32)  # (length, kept, start) of rows g, g+8
        k_at = align_pad(kv_s)  # the K tile starts on a 1024-byte boundary, V after it
        tiles = Tiles(tok_s, kv_s, k_at, k_at + BUF)

        work = cuda.blockIdx.x
        (seq, first, q0, rows, past, ctx, len_lo, len_hi, kept_hi, start_hi, gap, span) = cta_span(
            work_seq, work_first, query_start_loc, context_lens, work, causal, window, sinks
        )
        v_offset = int64(cache.strides[1] // 2)  # V's row = K's row + this (fp16 elements)
        kv = KvSpan(cache, block_tables, seq, cuda.blockIdx.y, span, kept_hi, gap, v_offset)
        r_lo = (tid >> 5) * 16 + ((tid & 31) >> 2)  # this lane's rows: r_lo and r_lo + 8
        live = row_spans(r_lo, rows, past, ctx, causal, window, sinks, rows_seen)
        # scale's sign on Q (exact in fp16), its magnitude on the fp32 scores
        sign, scale2 = split_scale(float32(scale * LOG2E))
        load_q(query, q0 + first, kv.kv_head * G, tid, live, sign, qf)
        acc = Acc(s, pw, o, st)
        walk(kv, tiles, tid, Rows(qf, rows_seen, scale2), acc, len_lo, start_hi, window)
        write_out(out, acc, q0 + first, kv.kv_head * G, tid, live)

    return paged_prefill_wgmma


def kernel_for(head_dim: int, group: int, block_size: int, tile: int | None = None):
    """(kernel, threads, query tile) for this shape, compiled once."""
    tile = tile or kv_tile()
    return _compiled(head_dim, group, tile, block_size), THREADS, max(1, 64 // group)


_compiled = functools.cache(make_prefill_wgmma_kernel)
