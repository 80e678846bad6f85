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
  * The mask is applied only on the tiles that need it (`prefill_work`, shared with
    prefill_tc: the masked tiles run first, then the run of tiles every row sees whole,
    two loops), and each wgmma batch is waited for at once (no overlap of softmax and
    wgmma yet, as FlashAttention-3's ping-pong schedules have). A NaN in a V row that a row masks
    inside a partly masked tile reaches that row (0 x NaN), which prefill_tc avoids
    with its CUDA-core `masked_pv`: left for a GPU session.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, int32, int64

from .. import _backend
from .._checks import fp16_mma_refusal
from ..primitives import (
    cp_async_wait,
    fast_exp2,
    pack_f16x2,
    split_scale,
    warp_max,
    warp_sum,
)
from .decode import LOG2E
from .prefill_work import make_work, position, run_tile, seen_by, tile_at
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
_kernels: dict = {}


def unservable(head_dim: int, cache_dtype) -> str | None:
    """Why the wgmma kernel cannot serve this shape, or None when it can."""
    return fp16_mma_refusal("wgmma", head_dim, cache_dtype, MAX_HEAD_DIM)


def kv_tile() -> int:
    """Tokens per K/V tile: 64 on a GPU (S is one m64n64 per k-step), 16 under the
    simulator (its threads are Python threads)."""
    return 64 if _backend.backend() == "gpu" else 16


def make_prefill_wgmma_kernel(head_dim: int, group_size: int, tile: int, block_size: int):
    """Build the kernel for D, G, T (tokens per tile, a multiple of 16 up to 64) and the
    cache's block size B; launched like `prefill_tc.make_prefill_tc_kernel`'s with
    THREADS threads: kernel[(num_work, num_kv_heads), 128](cache, query, block_tables,
    context_lens, query_start_loc, work_seq, work_first, block_size, scale, causal,
    window, sinks, out)."""
    D, G, T, B = int(head_dim), int(group_size), int(tile), int(block_size)
    if D % 16 or not 16 <= D <= MAX_HEAD_DIM or T % 16 or not 16 <= T <= 64:
        raise ValueError(
            f"head_dim must be a multiple of 16 in [16, {MAX_HEAD_DIM}] and the "
            f"tile one in [16, 64], got {D} and {T}"
        )
    QT = max(1, 64 // G)  # query tokens per CTA
    R = QT * G  # rows in use (of 64)
    KS = D // 16  # k-steps of S
    PANELS = (D + 63) // 64
    LAST_N = D - 64 * (PANELS - 1)  # width of the last 64-dim panel
    PANEL = T * 64  # fp16 elements of one panel: T rows of 128 bytes
    BUF = PANELS * PANEL  # one K (or V) tile
    SMEM = 2 * BUF + 512  # the K and V tiles, and up to 1024 bytes to align them
    SF, OF = T // 2, D // 2  # accumulator registers of S and O per lane
    QF = 4 * KS  # Q's A words per lane
    PW = T // 4  # P's A words per lane
    mma_s = mma_for(T, False)  # B = K^T, K-major
    mma_o = mma_for(64, True)  # B = V, MN-major
    mma_o_last = mma_for(LAST_N, True)

    map_tile, issue_any, issue_whole = make_tile_io(D, T, B, THREADS)
    cta_span, row_spans, tile_order = make_work(QT, G, R, T)

    @cuda.jit(device=True)
    def scores(kv_s, k_at, qf, s):
        """S = Q K^T for this tile: KS wgmmas chained on s, the first with accumulate 0."""
        wgmma_fence()
        for k in range(KS):
            desc = smem_desc(kv_s, k_at + (k >> 2) * PANEL + (k & 3) * 16, 16, 1024, SWIZZLE_128B)
            mma_s(desc, qf[4 * k], qf[4 * k + 1], qf[4 * k + 2], qf[4 * k + 3], s, 0, int32(k > 0))
        wgmma_commit()
        wgmma_wait(0)

    @cuda.jit(device=True)
    def values(kv_s, v_at, s, pw, o):
        """O += P V: P's S fragments packed to f16x2 (pw) are the A words, 16 tokens a
        step. All packed before the fence: wgmma_fence must separate every register write
        from the wgmma that reads it (PTX ISA, wgmma.fence)."""
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

    @cuda.jit(device=True)
    def mask(s, base, span, kept_hi, gap, rows_seen, t4):
        """-inf where a row does not see the column (causal, window, tile tail)."""
        for k in range(SF):
            col = base + 8 * (k >> 2) + 2 * t4 + (k & 1)
            if col >= span or not seen_by((k >> 1) & 1, position(col, kept_hi, gap), rows_seen):
                s[k] = -math.inf

    @cuda.jit(device=True)
    def softmax(s, o, st, scale2):
        """Update the running max and sums from this tile's scores, rescale O."""
        top_lo = float32(-math.inf)
        top_hi = float32(-math.inf)
        for n in range(SF // 4):  # loops over 4-register blocks: unrolled, s stays in registers
            top_lo = max(top_lo, max(s[4 * n], s[4 * n + 1]))
            top_hi = max(top_hi, max(s[4 * n + 2], s[4 * n + 3]))
        new_lo = max(st[0], warp_max(top_lo, 4) * scale2)  # the quad holds the row
        new_hi = max(st[1], warp_max(top_hi, 4) * scale2)
        base_lo = new_lo if new_lo > -math.inf else float32(0)  # nothing seen yet
        base_hi = new_hi if new_hi > -math.inf else float32(0)
        alpha_lo = fast_exp2(st[0] - base_lo)
        alpha_hi = fast_exp2(st[1] - base_hi)
        st[0] = new_lo
        st[1] = new_hi
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

    def make_step(masked: bool):
        """One KV tile: S = Q K^T, (the mask), the online softmax, O += P V."""

        @cuda.jit(device=True)
        def step(
            cache,
            block_tables,
            seq,
            kv_head,
            e,
            tiles,
            order,
            span,
            kept_hi,
            gap,
            v_offset,
            tok_s,
            kv_s,
            k_at,
            v_at,
            tid,
            qf,
            s,
            pw,
            o,
            st,
            rows_seen,
            scale2,
            t4,
        ):
            b = e & 1  # this step's map in tok_s[b], the next one's in tok_s[1 - b]
            # the tile of step e, and of step e + 1 (a full step's next tile is full too)
            tile = run_tile(e, order) if not masked else tile_at(e, order)
            after = int32(tile + 1) if not masked else tile_at(int32(e + 1), order)
            cp_async_wait(0)
            fence_proxy_async()
            # K of this tile is visible to the warpgroup's wgmma; every warp is done with
            # the last P V, so the V tile may be overwritten
            cuda.syncthreads()
            if masked:
                issue_any(cache, v_offset, tok_s, b, kv_s, v_at, tid)
            else:
                issue_whole(cache, v_offset, tok_s, b, kv_s, v_at, tid)
            if e + 1 < tiles:
                map_tile(
                    cache,
                    block_tables,
                    seq,
                    kv_head,
                    after * T,
                    span,
                    kept_hi,
                    gap,
                    tok_s,
                    1 - b,
                    tid,
                )
            scores(kv_s, k_at, qf, s)
            if masked:
                mask(s, tile * T, span, kept_hi, gap, rows_seen, t4)
            softmax(s, o, st, scale2)
            cp_async_wait(0)
            fence_proxy_async()
            # V is visible to wgmma; every warp is done with S = Q K^T, so the K tile may
            # be overwritten; the next tile's map is visible
            cuda.syncthreads()
            if e + 1 < tiles:  # the full steps come last: theirs is always a whole tile
                if masked:
                    issue_any(cache, 0, tok_s, 1 - b, kv_s, k_at, tid)
                else:
                    issue_whole(cache, 0, tok_s, 1 - b, kv_s, k_at, tid)
            values(kv_s, v_at, s, pw, o)

        return step

    step_masked, step_full = make_step(True), make_step(False)

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
        work = cuda.blockIdx.x
        kv_head = cuda.blockIdx.y
        tid = cuda.threadIdx.x
        lane = tid & 31
        g = lane >> 2
        t4 = lane & 3
        kv_s = cuda.shared.array(SMEM, np.float16)  # [pad][K tile][V tile]
        tok_s = cuda.shared.array((2, T), int64)  # K row of each tile token, per buffer
        qf = cuda.local.array(QF, np.uint32)  # Q's A words, [k-step][a0..a3]
        s = cuda.local.array(SF, float32)  # S accumulator, m64nT layout
        pw = cuda.local.array(PW, np.uint32)  # P as f16x2: the A words of P V
        o = cuda.local.array(OF, float32)  # O accumulator, panel p at o[32p:]
        st = cuda.local.array(4, float32)  # running max of rows g, g+8; their partial sums
        rows_seen = cuda.local.array(6, int32)  # (length, kept, start) of rows g, g+8
        k_at = align_pad(kv_s)  # the K tile starts on a 1024-byte boundary, V after it
        v_at = k_at + BUF

        (seq, first, q0, rows, past, ctx, len_lo, len_hi, kept_hi, start_hi, gap, span) = cta_span(
            work_seq, work_first, query_start_loc, context_lens, work, causal, window, sinks
        )
        head0 = kv_head * G
        v_offset = int64(cache.strides[1] // 2)  # V's row = K's row + this (fp16 elements)
        r_lo = (tid >> 5) * 16 + g  # this lane's rows: r_lo and r_lo + 8
        live_lo, live_hi = row_spans(r_lo, rows, past, ctx, causal, window, sinks, rows_seen)
        # scale's sign on Q (exact in fp16), its magnitude on the fp32 scores
        sign, scale2 = split_scale(float32(scale * LOG2E))
        for k in range(KS):  # Q's A words: a0 (row g), a1 (g + 8), a2, a3 (+8 columns)
            for half in range(4):
                r = r_lo + 8 * (half & 1)
                live = live_lo if half & 1 == 0 else live_hi
                d = 16 * k + 2 * t4 + 8 * (half >> 1)
                lo = float32(0)
                hi = float32(0)
                if live:
                    at = q0 + first + r // G
                    lo = float32(query[at, head0 + r % G, d]) * sign
                    hi = float32(query[at, head0 + r % G, d + 1]) * sign
                qf[4 * k + half] = pack_f16x2(lo, hi)
        for n in range(OF // 4):
            for i in range(4):
                o[4 * n + i] = float32(0)
        st[0] = -math.inf
        st[1] = -math.inf
        st[2] = float32(0)
        st[3] = float32(0)

        tiles, order = tile_order(span, kept_hi, gap, len_lo, start_hi, window)
        map_tile(
            cache,
            block_tables,
            seq,
            kv_head,
            int32(tile_at(int32(0), order) * T),
            span,
            kept_hi,
            gap,
            tok_s,
            0,
            tid,
        )
        cuda.syncthreads()  # the first map is visible before any thread copies by it
        issue_any(cache, 0, tok_s, 0, kv_s, k_at, tid)
        for e in range(order[2]):  # the masked tiles, then the full ones: two loops
            step_masked(
                cache,
                block_tables,
                seq,
                kv_head,
                e,
                tiles,
                order,
                span,
                kept_hi,
                gap,
                v_offset,
                tok_s,
                kv_s,
                k_at,
                v_at,
                tid,
                qf,
                s,
                pw,
                o,
                st,
                rows_seen,
                scale2,
                t4,
            )
        for e in range(order[2], tiles):
            step_full(
                cache,
                block_tables,
                seq,
                kv_head,
                e,
                tiles,
                order,
                span,
                kept_hi,
                gap,
                v_offset,
                tok_s,
                kv_s,
                k_at,
                v_at,
                tid,
                qf,
                s,
                pw,
                o,
                st,
                rows_seen,
                scale2,
                t4,
            )

        l_lo = warp_sum(st[2], 4)  # the quad's partial sums: each row's total
        l_hi = warp_sum(st[3], 4)
        at_lo = q0 + first + r_lo // G
        at_hi = q0 + first + (r_lo + 8) // G
        for n in range(OF // 4):
            d = 8 * n + 2 * t4
            if live_lo:
                out[at_lo, head0 + r_lo % G, d] = o[4 * n] / l_lo
                out[at_lo, head0 + r_lo % G, d + 1] = o[4 * n + 1] / l_lo
            if live_hi:
                out[at_hi, head0 + (r_lo + 8) % G, d] = o[4 * n + 2] / l_hi
                out[at_hi, head0 + (r_lo + 8) % G, d + 1] = o[4 * n + 3] / l_hi

    return paged_prefill_wgmma


def kernel_for(head_dim: int, group: int, block_size: int, tile: int | None = None):
    """(kernel, threads, query tile) for this shape, compiled once."""
    tile = tile or kv_tile()
    key = (head_dim, group, tile, block_size)
    if key not in _kernels:
        _kernels[key] = make_prefill_wgmma_kernel(head_dim, group, tile, block_size)
    return _kernels[key], THREADS, max(1, 64 // group)
