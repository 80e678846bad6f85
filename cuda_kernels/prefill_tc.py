"""Paged prefill on tensor cores, FlashAttention-2 style (Dao 2023, Algorithm 1).

The same computation as `prefill.make_prefill_kernel` (the ragged batch, the causal and
window rules, the work list of query tiles; see prefill.py), with the math on mma.sync:
S = Q K^T and O += P V are `primitives.mma_f16` (m16n8k16, fp16 in, f32 accumulate).
It serves an fp16 cache with head_dim a multiple of 16 (16..256); everything else takes
the CUDA-core kernel (`prefill.paged_prefill(path=...)` chooses).

Grid: (num_work, num_kv_heads), NW warps per CTA. A CTA serves one query tile of one
sequence and one KV head: M = 16 NW rows, row r = (query token r // G, head r % G), so a
GQA group's heads x query tokens share every K/V tile (FlashInfer packs them the same
way). Warp w owns rows 16w .. 16w+15; lane l's rows are 16w + g and 16w + g + 8
(g = l >> 2, t = l % 4, the mma fragment layout in primitives.py).

  * Q: read once into A fragments in registers (qf[k-step][4], u32 f16x2), unscaled;
    S is scaled in f32 (scale * log2 e folded into the exp2's FFMA).
  * K/V tiles of T tokens: thread t < T maps token t through the block table once per
    tile (`tok_s`, the row's element index in the cache, -1 past the span); then two
    threads per row issue 16-byte `cp_async16` copies into swizzled shared rows
    (`primitives.swizzled`: the 8 rows of one ldmatrix hit 8 distinct bank groups).
    The pipeline is FlashAttention-2's: V of tile j streams in while S_j = Q K_j^T and
    the softmax run, K of tile j+1 while P_j V_j runs; two barriers per tile. (A second
    K and V buffer would let a whole tile run ahead, but at D=128, T=64 the four tiles
    need 64 KiB, beyond the 48 KiB of static shared memory; two CTAs per SM, bounded by
    registers, hide the rest.) `chunk_bases` makes every ldmatrix and cp.async address
    one of 4 registers plus a constant.
  * S: for each k-step of 16 dims and pair of 8-token n-tiles, one ldmatrix_x4 of K rows
    gives both B fragments, two mma.
  * Online softmax on the accumulator fragments: a lane holds 2 rows x 2T/8 scores; the
    row max takes two quad shuffles (warp_max over 4 lanes). The row sums run on the
    tensor cores too: P times a B fragment of ones (an extra n-tile of O, `ONES`), which
    sums each row over the quad and uses exactly the fp16 P that P V uses.
  * Masks (causal, window, tile tail) are applied only on the tiles that need them: the
    CTA finds once which tiles every row sees whole (one contiguous run, `full_tile`),
    runs the others first through `step_masked` and the run through `step_full`, two
    loops, so the steady loop holds no mask code.
  * P V: the S fragments, exponentiated and packed to f16x2, are the A fragments of the
    next mma (no shared-memory round trip); ldmatrix_x4_trans of V rows gives B.
  * NaN and inf follow IEEE as the float64 reference does: a NaN in q or in an attended K
    reaches its rows through S; a masked score is -inf whatever K holds. A masked tile
    whose V holds a NaN or inf (found with one `syncthreads_or`) computes P V on CUDA
    cores over the tokens each row attends (`masked_pv`), because the mma would add
    0 x NaN = NaN to rows that mask the token.
  * The end divides by the row sums and writes float32 rows.

Toward Hopper (issue 24 section 6): the tiling is a warpgroup's: with NW = 4 the CTA's 64
rows are exactly one wgmma m64nNk16 A operand (4 warps x 16 rows), and K/V tiles already
sit in shared memory as wgmma's B operand would; only the fragment layout of S/O and the
swizzle mode (128-byte, for its shared-memory descriptor) would change.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, int32, int64

from . import _backend
from .decode import LOG2E
from .layout import k_row
from .prefill import window_span
from .primitives import (
    cp_async16,
    cp_async_commit,
    cp_async_wait,
    fast_exp2,
    ldmatrix_x4,
    ldmatrix_x4_trans,
    mma_f16,
    pack_f16x2,
    swizzle_shape,
    swizzled,
    warp_max,
)

SHARED_BUDGET = 40 * 1024  # the K and V tiles, under the 48 KiB static limit
MAX_HEAD_DIM = 256
_kernels: dict = {}


def unservable(head_dim: int, cache_dtype) -> str | None:
    """Why the tensor-core kernel cannot serve this shape, or None when it can."""
    if np.dtype(cache_dtype) != np.float16:
        return f"the tensor-core path needs a float16 cache, got {np.dtype(cache_dtype).name}"
    if head_dim % 16 or not 16 <= head_dim <= MAX_HEAD_DIM:
        return (f"the tensor-core path needs head_dim a multiple of 16 in [16, "
                f"{MAX_HEAD_DIM}], got {head_dim}")
    return None


def launch_config(head_dim: int) -> tuple[int, int]:
    """(warps, kv tile). On a GPU: 4 warps (64 rows, one warpgroup) and the largest tile of
    64/32/16 tokens whose K and V tiles fit SHARED_BUDGET. Under the simulator, whose
    threads are Python threads: 1 warp and 16-token tiles."""
    if _backend.backend() != "gpu":
        return 1, 16
    stride = swizzle_shape(head_dim // 8)[0]
    tile = next(t for t in (64, 32, 16) if 2 * t * stride * 16 <= SHARED_BUDGET)
    return 4, tile


def make_prefill_tc_kernel(head_dim: int, group_size: int, warps: int, tile: int,
                           block_size: int):
    """Build the kernel; D, G, NW (warps), T (KV tile, a multiple of 16) and the cache's
    block size B are constants (B is a template parameter in vLLM's kernels too: the
    block-table division becomes a shift or a multiply).

    Launched as kernel[(num_work, num_kv_heads), 32 * NW](cache, query, block_tables,
    context_lens, query_start_loc, work_seq, work_first, block_size, scale, causal, window,
    sinks, out) with the arguments of `prefill.make_prefill_kernel` (cache float16;
    block_size must equal B)."""
    D, G, NW, T, B = int(head_dim), int(group_size), int(warps), int(tile), int(block_size)
    if D % 16 or T % 16 or T > 32 * NW:
        raise ValueError(f"head_dim and tile must be multiples of 16 and the tile at most "
                         f"the CTA's threads, got {D}, {T} and {32 * NW}")
    BSH = B.bit_length() - 1 if B & (B - 1) == 0 else -1  # log2(B) when B is 2^k
    NT = 32 * NW
    ROWS = 16 * NW  # M: query rows per CTA
    QT = max(1, 16 * NW // G)  # query tokens per CTA
    R = QT * G  # rows in use (of 16 NW)
    KS = D // 16  # k-steps of S = Q K^T
    NCH = D // 8  # 16-byte chunks per K/V row
    SC, SH, SM = swizzle_shape(NCH)
    BUF = T * SC * 8  # fp16 elements of one K (or V) tile
    NS = T // 8  # 8-token n-tiles of S
    ND = D // 8  # 8-dim n-tiles of O
    QF, SF, OF = 4 * KS, 4 * NS, 4 * ND  # fragment registers of Q, S and O per lane
    OL = OF + 4  # O, then the row sums' fragment (l of rows g and g + 8 in c0 and c2)
    ONES = np.uint32(0x3C003C00)  # two fp16 1.0: a B fragment of ones
    PASSES = (2 * T + NT - 1) // NT  # rows per thread per tile: two threads share a row

    @cuda.jit(device=True)
    def position(j, kept_hi, gap):
        """The context position of span index j (the window's seam skipped)."""
        return j if j < kept_hi else gap + (j - kept_hi)

    @cuda.jit(device=True)
    def map_tile(cache, block_tables, seq, kv_head, base, span, kept_hi, gap, tok_s, b, tid):
        """tok_s[b, t] <- the cache element index of K's row for token t of the tile at
        span index `base`, -1 past the span: one block-table read per token per tile."""
        if tid < T:  # T <= NT: one token per thread
            row = int64(-1)
            j = int32(base + tid)
            if j < span:
                pos = int32(position(j, kept_hi, gap))  # positions are int32, >= 0
                logical = int32(pos >> BSH) if BSH >= 0 else int32(pos // B)
                row = k_row(cache, seq, block_tables[seq, logical], kv_head,
                            int32(pos - logical * B))
            tok_s[b, tid] = row

    def make_issue(zero_fill: bool):
        """issue(cache, offset, tok_s, b, dst, tid): cp.async the rows mapped in tok_s[b]
        (+ offset: 0 for K, V's offset for V) into the tile `dst`, swizzled; one commit
        group. Two threads per row, each taking every other chunk: one 32-byte sector per
        pair per copy, and one row address per thread with the chunks as immediate
        offsets. With zero_fill, rows past the span (tok_s -1) are written as zeros."""

        @cuda.jit(device=True)
        def issue(cache, offset, tok_s, b, dst, tid, db):
            for n in range(PASSES):
                t = (tid >> 1) + n * (NT // 2)
                if t < T:
                    row = tok_s[b, t]
                    size = 16
                    if zero_fill:
                        size = 16 if row >= 0 else 0
                        row = max(row, int64(0))
                    src = row + offset + (tid & 1) * 8  # + 16 m: chunk (tid & 1) + 2 m
                    for m in range(NCH // 2):
                        slot = db[m & 3] + n * (NT // 2) * SC + 8 * (m >> 2)
                        cp_async16(dst, slot * 8, cache, src + 16 * m, size)
            cp_async_commit()

        return issue

    issue_any, issue_whole = make_issue(True), make_issue(False)

    @cuda.jit(device=True)
    def chunk_bases(row, h, out):
        """out[q] <- the slot of chunk 2q + h of `row`, q < 4. For any row' = row + 8j
        (the rows a lane or thread visits) the slot of chunk 8c + 2q + h is
        out[q] + 8j * SC + 8c: the XOR swizzle depends on row' only through row (its low
        bits) and changes only the low 3 bits of a chunk. So every ldmatrix and cp.async
        address in the tile loop is one of these 4 registers plus a constant."""
        x = (row >> SH) & SM
        for q in range(4):
            out[q] = row * SC + ((2 * q + h) ^ x)

    @cuda.jit(device=True)
    def not_finite(v_s, tid):
        """True when a V value this thread copied into the tile is NaN or infinite."""
        odd = False
        for n in range(PASSES):
            t = (tid >> 1) + n * (NT // 2)
            if t < T:
                for m in range(NCH // 2):
                    at = swizzled(t, (tid & 1) + 2 * m, SC, SH, SM) * 8
                    for i in range(8):
                        v = float32(v_s[at + i])
                        odd = odd or v - v != 0
        return odd

    @cuda.jit(device=True)
    def seen_by(h, pos, rows_seen):
        """Does this lane's row h (0: row g, 1: row g + 8) attend position `pos`?"""
        return pos < rows_seen[3 * h] and (pos < rows_seen[3 * h + 1]
                                           or pos >= rows_seen[3 * h + 2])

    @cuda.jit(device=True)
    def masked_pv(v_s, p_sh, s, o, tid, base, span, kept_hi, gap, rows_seen):
        """O += P V for a masked tile holding a NaN or inf value, on CUDA cores: a token
        a row does not attend adds nothing to it (with mma it would add 0 x NaN). P goes
        through shared memory in fp16, the precision the mma path gives it."""
        lane = tid & 31
        row0 = (tid >> 5) * 16 + (lane >> 2)  # this lane's rows: row0, row0 + 8
        for k in range(SF):
            p_sh[row0 + 8 * ((k >> 1) & 1), 8 * (k >> 2) + 2 * (lane & 3) + (k & 1)] = s[k]
        cuda.syncthreads()  # every lane's P is in p_sh before its quad reads it
        for tok in range(min(T, span - base)):
            pos = position(base + tok, kept_hi, gap)
            seen_lo = seen_by(0, pos, rows_seen)
            seen_hi = seen_by(1, pos, rows_seen)
            p_lo = float32(p_sh[row0, tok])
            p_hi = float32(p_sh[row0 + 8, tok])
            for n in range(ND):
                at = swizzled(tok, n, SC, SH, SM) * 8 + 2 * (lane & 3)
                for i in range(2):
                    v = float32(v_s[at + i])
                    if seen_lo:
                        o[4 * n + i] += p_lo * v
                    if seen_hi:
                        o[4 * n + 2 + i] += p_hi * v

    def make_step(masked: bool):
        """One KV tile: S = Q K^T, (the mask), the online softmax, O += P V."""

        @cuda.jit(device=True)
        def step(cache, block_tables, seq, kv_head, e, tiles, order, span, kept_hi, gap,
                 v_offset, tok_s, k_s, v_s, p_sh, tid, qf, s, o, st, rows_seen, scale2,
                 kb, vb, db):
            lane = tid & 31
            t4 = lane & 3
            b = e & 1  # this step's map in tok_s[b], the next one's in tok_s[1 - b]
            # the tile of step e, and of step e + 1 (a full step's next tile is full too)
            tile = order[0] + e - order[2] if not masked else tile_at(e, order)
            after = tile + 1 if not masked else tile_at(e + 1, order)
            base = tile * T
            cp_async_wait(0)
            # K of this step's tile is visible; every warp is done with the last P V, so
            # the V tile may be overwritten
            cuda.syncthreads()
            if masked:
                issue_any(cache, v_offset, tok_s, b, v_s, tid, db)
            else:
                issue_whole(cache, v_offset, tok_s, b, v_s, tid, db)
            if e + 1 < tiles:
                map_tile(cache, block_tables, seq, kv_head, after * T, span,
                         kept_hi, gap, tok_s, 1 - b, tid)
            for k in range(SF):
                s[k] = float32(0)
            for k in range(KS):  # S = Q K^T: one ldmatrix_x4 feeds two 8-token n-tiles
                for n in range(0, NS, 2):  # lane: row 8n + (lane & 7) + 8 (lane >> 4),
                    slot = kb[k & 3] + 8 * n * SC + 8 * (k >> 2)  # chunk 2k + (lane >> 3) & 1
                    b0, b1, b2, b3 = ldmatrix_x4(k_s, slot * 8)
                    a0, a1, a2, a3 = qf[4 * k], qf[4 * k + 1], qf[4 * k + 2], qf[4 * k + 3]
                    c = 4 * n
                    s[c], s[c + 1], s[c + 2], s[c + 3] = mma_f16(
                        a0, a1, a2, a3, b0, b1, s[c], s[c + 1], s[c + 2], s[c + 3])
                    c = 4 * n + 4
                    s[c], s[c + 1], s[c + 2], s[c + 3] = mma_f16(
                        a0, a1, a2, a3, b2, b3, s[c], s[c + 1], s[c + 2], s[c + 3])
            if masked:  # causal diagonal, window edge or tile tail: -inf where not seen
                for k in range(SF):
                    col = base + 8 * (k >> 2) + 2 * t4 + (k & 1)
                    pos = position(col, kept_hi, gap)
                    if col >= span or not seen_by((k >> 1) & 1, pos, rows_seen):
                        s[k] = -math.inf
            top_lo = float32(-math.inf)
            top_hi = float32(-math.inf)
            for n in range(NS):
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
            for k in range(SF):
                s[k] = fast_exp2(s[k] * scale2 - (base_lo if k & 2 == 0 else base_hi))
            for n in range(ND + 1):  # O and the row sums (the extra n-tile)
                o[4 * n] *= alpha_lo
                o[4 * n + 1] *= alpha_lo
                o[4 * n + 2] *= alpha_hi
                o[4 * n + 3] *= alpha_hi
            cp_async_wait(0)
            if masked:
                # as below, and: does any V value of the tile (this thread's copies) fail
                # to be finite? Then the mma's 0 x NaN would leak it into rows that mask it
                odd = cuda.syncthreads_or(int32(not_finite(v_s, tid))) != 0
            else:
                # V is visible; every warp is done with S = Q K^T, so the K tile may be
                # overwritten; the next step's map is visible
                cuda.syncthreads()
            if e + 1 < tiles:  # the full steps come last: theirs is always a whole tile
                if masked:
                    issue_any(cache, 0, tok_s, 1 - b, k_s, tid, db)
                else:
                    issue_whole(cache, 0, tok_s, 1 - b, k_s, tid, db)
            if masked and odd:  # rare: P V on CUDA cores, only over the tokens each row sees
                masked_pv(v_s, p_sh, s, o, tid, base, span, kept_hi, gap, rows_seen)
            for k in range(NS // 2):  # O += P V over 16 tokens; P's S fragments become A
                p0 = pack_f16x2(s[8 * k], s[8 * k + 1])
                p1 = pack_f16x2(s[8 * k + 2], s[8 * k + 3])
                p2 = pack_f16x2(s[8 * k + 4], s[8 * k + 5])
                p3 = pack_f16x2(s[8 * k + 6], s[8 * k + 7])
                c = OF  # row sums on the tensor cores too: P times a B of ones
                o[c], o[c + 1], o[c + 2], o[c + 3] = mma_f16(
                    p0, p1, p2, p3, ONES, ONES, o[c], o[c + 1], o[c + 2], o[c + 3])
                if masked and odd:
                    continue
                for n in range(0, ND, 2):  # lane: row 16k + (lane & 7) + 8 ((lane >> 3) & 1)
                    slot = vb[(n & 7) >> 1] + 16 * k * SC + 8 * (n >> 3)  # chunk n + lane >> 4
                    b0, b1, b2, b3 = ldmatrix_x4_trans(v_s, slot * 8)
                    c = 4 * n
                    o[c], o[c + 1], o[c + 2], o[c + 3] = mma_f16(
                        p0, p1, p2, p3, b0, b1, o[c], o[c + 1], o[c + 2], o[c + 3])
                    c = 4 * n + 4
                    o[c], o[c + 1], o[c + 2], o[c + 3] = mma_f16(
                        p0, p1, p2, p3, b2, b3, o[c], o[c + 1], o[c + 2], o[c + 3])

        return step

    step_masked, step_full = make_step(True), make_step(False)

    @cuda.jit(device=True)
    def tile_at(e, order):
        """The tile run at step e, order = (first_full, end_full, masked_tiles): the
        masked tiles first (before, then after the full ones), then the full tiles, which
        form one run [first_full, end_full)."""
        first_full, end_full, masked_tiles = order
        if e >= masked_tiles:
            return first_full + e - masked_tiles
        return e if e < first_full else e + end_full - first_full

    @cuda.jit(device=True)
    def full_tile(j, span, kept_hi, gap, len_lo, start_hi, window):
        """True when every row of the CTA sees every token of tile j (no mask needed):
        the tile is whole, before the first row's causal end and past the last row's
        window start. Tiles of the attention sinks count as masked: then the full tiles
        are one contiguous run."""
        base = j * T
        return base + T <= span and position(base + T - 1, kept_hi, gap) < len_lo and (
            window <= 0 or position(base, kept_hi, gap) >= start_hi)

    @cuda.jit
    def paged_prefill_tc(cache, query, block_tables, context_lens, query_start_loc,
                         work_seq, work_first, block_size, scale, causal, window, sinks, out):
        work = cuda.blockIdx.x
        kv_head = cuda.blockIdx.y
        tid = cuda.threadIdx.x
        lane = tid & 31
        g = lane >> 2
        t4 = lane & 3
        k_s = cuda.shared.array(BUF, np.float16)  # K tile: [T rows][SC chunks of 8]
        v_s = cuda.shared.array(BUF, np.float16)  # V tile, the same layout
        tok_s = cuda.shared.array((2, T), int64)  # K row of each tile token, per buffer
        p_sh = cuda.shared.array((ROWS, T), np.float16)  # P, only for `masked_pv`
        qf = cuda.local.array(QF, np.uint32)  # Q's A fragments, [k-step][a0..a3]
        s = cuda.local.array(SF, float32)  # S fragments, [n-tile][c0..c3]
        o = cuda.local.array(OL, float32)  # O fragments, [n-tile][c0..c3], then l
        st = cuda.local.array(2, float32)  # running max of rows g and g+8
        rows_seen = cuda.local.array(6, int32)  # (length, kept, start) of rows g, g+8
        kb = cuda.local.array(4, int32)  # slot bases: K's ldmatrix rows, V's, the copies'
        vb = cuda.local.array(4, int32)
        db = cuda.local.array(4, int32)
        chunk_bases((lane & 7) + 8 * (lane >> 4), (lane >> 3) & 1, kb)
        chunk_bases((lane & 7) + 8 * ((lane >> 3) & 1), lane >> 4, vb)
        chunk_bases(tid >> 1, tid & 1, db)

        seq = work_seq[work]
        first = work_first[work]
        q0 = query_start_loc[seq]
        q_len = query_start_loc[seq + 1] - q0
        ctx = context_lens[seq]
        rows = min(QT, q_len - first)  # valid query tokens in this CTA
        head0 = kv_head * G
        past = ctx - q_len + first  # position of the CTA's first query token
        len_lo = ctx
        len_hi = ctx
        if causal:
            len_lo = past + 1
            len_hi = past + rows
        kept_hi, start_hi = window_span(len_hi, window, sinks)
        _, start_lo = window_span(len_lo, window, sinks)
        gap = int32(max(start_lo, kept_hi))  # the CTA reads span [0, kept_hi), [gap, len_hi)
        span = int32(kept_hi + len_hi - gap)
        kept_hi = int32(kept_hi)  # positions fit int32 (context_lens are int32)
        v_offset = int64(cache.strides[1] // 2)  # V's row = K's row + this (fp16 elements)

        r_lo = (tid >> 5) * 16 + g  # this lane's two rows: r_lo and r_lo + 8
        for h in range(2):
            i = min((r_lo + 8 * h) // G, rows - 1)  # its query token (padded rows: unused)
            length = past + i + 1 if causal else ctx
            kept, start = window_span(length, window, sinks)
            rows_seen[3 * h] = length
            rows_seen[3 * h + 1] = kept
            rows_seen[3 * h + 2] = start
        live_lo = r_lo < R and r_lo // G < rows
        live_hi = r_lo + 8 < R and (r_lo + 8) // G < rows
        for k in range(KS):  # Q fragments: a0 (row g), a1 (g + 8), a2, a3 (+8 columns)
            for half in range(4):
                r = r_lo + 8 * (half & 1)
                live = live_lo if half & 1 == 0 else live_hi
                d = 16 * k + 2 * t4 + 8 * (half >> 1)
                lo = float32(0)
                hi = float32(0)
                if live:
                    at = q0 + first + r // G
                    lo = float32(query[at, head0 + r % G, d])
                    hi = float32(query[at, head0 + r % G, d + 1])
                qf[4 * k + half] = pack_f16x2(lo, hi)
        for k in range(OL):
            o[k] = float32(0)
        st[0] = -math.inf  # running max of each row, log2 units
        st[1] = -math.inf
        scale2 = float32(scale * LOG2E)

        tiles = (span + T - 1) // T
        first_full = tiles
        end_full = tiles
        for j in range(tiles):
            if full_tile(j, span, kept_hi, gap, len_lo, start_hi, window):
                first_full = min(first_full, j)
                end_full = j + 1
        order = (first_full, end_full, tiles - (end_full - first_full))
        map_tile(cache, block_tables, seq, kv_head, tile_at(0, order) * T, span, kept_hi,
                 gap, tok_s, 0, tid)
        cuda.syncthreads()  # the first map is visible before any thread copies by it
        issue_any(cache, 0, tok_s, 0, k_s, tid, db)
        for e in range(order[2]):  # the masked tiles, then the full ones: two loops
            step_masked(cache, block_tables, seq, kv_head, e, tiles, order, span, kept_hi,
                        gap, v_offset, tok_s, k_s, v_s, p_sh, tid, qf, s, o, st, rows_seen,
                        scale2, kb, vb, db)
        for e in range(order[2], tiles):
            step_full(cache, block_tables, seq, kv_head, e, tiles, order, span, kept_hi,
                      gap, v_offset, tok_s, k_s, v_s, p_sh, tid, qf, s, o, st, rows_seen,
                      scale2, kb, vb, db)

        l_lo = o[OF]  # the mma summed each row over all its columns: nothing to reduce
        l_hi = o[OF + 2]
        at_lo = q0 + first + r_lo // G
        at_hi = q0 + first + (r_lo + 8) // G
        for n in range(ND):
            d = 8 * n + 2 * t4
            if live_lo:
                out[at_lo, head0 + r_lo % G, d] = o[4 * n] / l_lo
                out[at_lo, head0 + r_lo % G, d + 1] = o[4 * n + 1] / l_lo
            if live_hi:
                out[at_hi, head0 + (r_lo + 8) % G, d] = o[4 * n + 2] / l_hi
                out[at_hi, head0 + (r_lo + 8) % G, d + 1] = o[4 * n + 3] / l_hi

    return paged_prefill_tc


def kernel_for(head_dim: int, group: int, block_size: int):
    """(kernel, threads, query tile) for this shape, compiled once."""
    warps, tile = launch_config(head_dim)
    key = (head_dim, group, warps, tile, block_size)
    if key not in _kernels:
        _kernels[key] = make_prefill_tc_kernel(head_dim, group, warps, tile, block_size)
    return _kernels[key], 32 * warps, max(1, 16 * warps // group)
