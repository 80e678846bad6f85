"""The work of one tensor-core prefill CTA, set up and walked the same way by `prefill_tc`
and `prefill_wgmma` (one copy of it, here): which query rows it serves, which positions
its rows see, and the order its K/V tiles run in.

A CTA serves query tokens [first, first + rows) of sequence seq (the launcher's work list:
work_seq / work_first, QT tokens per CTA) for the G heads of one KV head. Token i of the
sequence sits at position past + i of its context (past = ctx - q_len + first) and, when
causal, sees the first past + i + 1 positions. The CTA reads the union of its rows'
windows (`primitives.window_span`): positions [0, kept_hi) and [gap, len_hi), span of
them in all, in tiles of T span indices.

`make_work(QT, G, R, T)` builds, for one kernel's shape, `cta_span` (the CTA's sequence,
rows and span), `row_spans` (the lane's rows r_lo and r_lo + 8: what they see, whether
real) and `tile_order` (which tiles need the mask); `make_map_tile` and `make_mask` build
a tile's block-table map and mask in both kernels' fragment layout.

Loop state is int32 throughout (64-bit loop state costs registers). The kernels run
steps [0, masked_tiles) with the mask and [masked_tiles, tiles) without, in two loops
(the second holds no mask code and no compares), and a whole step's next tile is whole.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
from numba import cuda, float32, int32, int64

from ..layout import k_row
from ..primitives import fast_exp2, warp_max, window_span

# The K/V one CTA reads, passed whole to the tile loaders and steps: the cache
# [num_blocks, 2, num_kv_heads, block_size, head_dim], block_tables [num_seqs,
# max_blocks], the sequence and KV head, the span (positions [0, kept_hi) then
# [gap, ...), span of them) and v_offset (V's row = K's row + this, in elements).
KvSpan = namedtuple("KvSpan", "cache block_tables seq kv_head span kept_hi gap v_offset")
# The lane's rows r_lo and r_lo + 8, as the steps read them: Q's A fragments (the words in
# registers), (length, kept, start) of each row (`row_spans`), and the scale's magnitude
# times log2(e) (`primitives.split_scale`).
Rows = namedtuple("Rows", "qf rows_seen scale2")


@cuda.jit(device=True)
def position(j, kept_hi, gap):
    """The context position of span index j (the window's seam skipped)."""
    return j if j < kept_hi else gap + (j - kept_hi)


@cuda.jit(device=True)
def seen_by(h, pos, rows_seen):
    """Does this lane's row h (0: row r_lo, 1: row r_lo + 8) attend position `pos`?"""
    return pos < rows_seen[3 * h] and (pos < rows_seen[3 * h + 1] or pos >= rows_seen[3 * h + 2])


@cuda.jit(device=True)
def run_tile(e, order):
    """The tile of step e of the whole-tile run (e >= masked_tiles): no compare."""
    return int32(order[0] + e - order[2])


@cuda.jit(device=True)
def tile_at(e, order):
    """The tile run at step e, order = (first_full, end_full, masked_tiles): the masked
    tiles first (before, then after the full ones), then the full tiles, which form one
    run [first_full, end_full)."""
    first_full, end_full, masked_tiles = order
    if e >= masked_tiles:
        return run_tile(e, order)
    return e if e < first_full else int32(e + end_full - first_full)


def make_map_tile(T: int, B: int):
    """map_tile(kv, base, tok_s, b, tid) for tiles of T tokens and a cache of block size B
    (a constant: the division is a shift when B = 2^k)."""
    BSH = B.bit_length() - 1 if B & (B - 1) == 0 else -1  # log2(B) when B is 2^k

    @cuda.jit(device=True)
    def map_tile(kv, base, tok_s, b, tid):
        """tok_s[b, t] <- the cache element index of K's row for token t of the tile at
        span index `base`, -1 past the span: one block-table read per token per tile."""
        if tid < T:  # T <= threads: one token per thread
            row = int64(-1)
            j = int32(base + tid)
            if j < kv.span:
                pos = int32(position(j, kv.kept_hi, kv.gap))  # positions are int32, >= 0
                logical = int32(pos >> BSH) if BSH >= 0 else int32(pos // B)
                block = kv.block_tables[kv.seq, logical]
                row = k_row(kv.cache, kv.seq, block, kv.kv_head, int32(pos - logical * B))
            tok_s[b, tid] = row

    return map_tile


def make_mask(SF: int):
    """mask(s, base, kv, rows_seen, t4): S's SF fragment registers of a lane (8-column
    n-tiles of 4: rows g, g + 8 x columns 2 t4, 2 t4 + 1, the mma.sync and wgmma layout
    alike) of the tile at span index base <- -inf where the row does not see the column
    (causal diagonal, window edge, sinks or the tile's tail past the span)."""

    @cuda.jit(device=True)
    def mask(s, base, kv, rows_seen, t4):
        for k in range(SF):
            col = base + 8 * (k >> 2) + 2 * t4 + (k & 1)
            pos = position(col, kv.kept_hi, kv.gap)
            if col >= kv.span or not seen_by((k >> 1) & 1, pos, rows_seen):
                s[k] = -math.inf

    return mask


def make_row_max(SF):
    """row_max(s, st, scale2) -> (base_lo, base_hi, alpha_lo, alpha_hi): the online softmax's
    new running max of the lane's rows g, g + 8 (st[0], st[1], log2 units) from its SF score
    registers times scale2, the base each exponent subtracts (0 while nothing is seen) and
    the factor that rescales what came before (both kernels' fragment layout)."""

    @cuda.jit(device=True)
    def row_max(s, st, scale2):
        top_lo = float32(-math.inf)
        top_hi = float32(-math.inf)
        for n in range(SF // 4):  # unrolled: s stays in registers
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
        return base_lo, base_hi, alpha_lo, alpha_hi

    return row_max


def make_work(QT: int, G: int, R: int, T: int):
    """(cta_span, row_spans, tile_order) for QT query tokens, G heads and R rows per CTA
    and tiles of T span indices."""

    @cuda.jit(device=True)
    def cta_span(work_seq, work_first, query_start_loc, context_lens, work, causal, window, sinks):
        seq = np.uint32(work_seq[work])  # unsigned: no 64-bit sign-extension kept live
        first = work_first[work]
        q0 = query_start_loc[seq]
        q_len = query_start_loc[seq + 1] - q0
        ctx = context_lens[seq]
        rows = min(QT, q_len - first)  # valid query tokens in this CTA
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
        return (
            seq,
            first,
            q0,
            rows,
            past,
            ctx,
            len_lo,
            len_hi,
            int32(kept_hi),
            start_hi,
            gap,
            span,
        )  # positions fit int32 (int32 lengths)

    @cuda.jit(device=True)
    def row_spans(r_lo, rows, past, ctx, causal, window, sinks, rows_seen):
        for h in range(2):
            i = min((r_lo + 8 * h) // G, rows - 1)  # its query token (padded rows: unused)
            length = past + i + 1 if causal else ctx
            kept, start = window_span(length, window, sinks)
            rows_seen[3 * h] = length
            rows_seen[3 * h + 1] = kept
            rows_seen[3 * h + 2] = start
        return r_lo < R and r_lo // G < rows, r_lo + 8 < R and (r_lo + 8) // G < rows

    @cuda.jit(device=True)
    def full_tile(j, span, kept_hi, gap, len_lo, start_hi, window):
        """True when every row of the CTA sees every token of tile j (no mask needed):
        the tile is whole, before the first row's causal end and past the last row's
        window start. Tiles of the attention sinks count as masked: then the full tiles
        are one contiguous run."""
        base = j * T
        return (
            base + T <= span
            and position(base + T - 1, kept_hi, gap) < len_lo
            and (window <= 0 or position(base, kept_hi, gap) >= start_hi)
        )

    @cuda.jit(device=True)
    def tile_order(span, kept_hi, gap, len_lo, start_hi, window):
        """(tiles, order): the CTA's tile count, and order for `tile_at` / `run_tile`."""
        tiles = int32((span + T - 1) // T)
        first_full = tiles
        end_full = tiles
        for j in range(tiles):
            if full_tile(j, span, kept_hi, gap, len_lo, start_hi, window):
                first_full = min(first_full, j)
                end_full = int32(j + 1)
        return tiles, (first_full, end_full, int32(tiles - (end_full - first_full)))

    return cta_span, row_spans, tile_order
