"""The KV tiles of the tensor-core prefill (`prefill_tc`), one step each: S = Q K^T on
mma.sync, the mask where needed, the online softmax on the accumulator fragments, O += P V.

A step's state travels as five named tuples built once by the kernel (`KvSpan`, `Rows`,
`Tiles`, `Lane`, `Acc`); its pieces are `make_scores` (S), `prefill_work.make_mask`,
`make_rescale` (the online softmax) and `make_values` (P V, and `masked_pv`).

  * S: per k-step of 16 dims (`qk_step`), one ldmatrix_x4 of K rows gives the B fragments
    of two 8-token n-tiles; Q's A fragments come from registers (k < QR) or from qs
    through one ldmatrix_x4.
  * The masks (causal, window, tile tail) exist only in `step_masked`: the kernel runs
    the masked tiles first, then the run of whole tiles through `step_full`, whose loop
    holds no mask code (`prefill_work.tile_at` / `run_tile` order them).
  * Softmax: a lane holds 2 rows x 2T/8 scores; the row max is two quad shuffles; the row
    sums run on the tensor cores as P times a B fragment of ones (`ONES`), on exactly the
    fp16 P that P V uses. P's S fragments, packed to f16x2, are P V's A fragments.
  * NaN and inf follow IEEE as the float64 reference does: a masked tile whose V holds a
    NaN or inf (one `syncthreads_or`) computes P V on CUDA cores over the tokens each row
    attends (`masked_pv`), since the mma would add 0 x NaN to rows that mask the token.
Pipeline (FlashAttention-2's): V of tile j streams in while S_j and the softmax run, K of
tile j + 1 while P_j V_j runs; two barriers per tile.
"""

from __future__ import annotations

import math
from collections import namedtuple
from types import SimpleNamespace

from numba import cuda, float32, int32

from ..primitives import (
    cp_async_wait,
    fast_exp2,
    ldmatrix_x2_trans,
    ldmatrix_x4,
    ldmatrix_x4_trans,
    mma_f16,
    pack_f16x2,
    swizzled,
)
from .prefill_work import make_mask, make_row_max, position, run_tile, seen_by, tile_at

# shared memory: the tile maps [2, T], the K and V tiles [T rows][SC chunks] (swizzled), P
# [ROWS, T] (for `masked_pv`), Q's k-steps QR.. [ROWS][QSC chunks]
Tiles = namedtuple("Tiles", "tok_s k_s v_s p_sh q_s")
# the thread: its index, its warp's first n-tile of O, its rows r_lo and r_lo + 8, and its
# slot bases (K's ldmatrix rows, V's, the copies', qs's; `prefill_tc_tiles.chunk_bases`)
Lane = namedtuple("Lane", "tid n0 r_lo kb vb db qb")
# the running state: S fragments [n-tile][c0..c3], O fragments then the row sums', and
# the running max of the two rows (log2 units)
Acc = namedtuple("Acc", "s o st")


def make_scores(shape):
    """scores(tiles, lane, qf, s): S = Q K^T for the tile in tiles.k_s."""
    NS, QR, KS, SC = shape.NS, shape.QR, shape.KS, shape.SC

    @cuda.jit(device=True)
    def qk_step(k_s, kb, k, a0, a1, a2, a3, s):
        """S += Q K^T over k-step k (dims 16k .. 16k + 15), Q's A fragment a0..a3: one
        ldmatrix_x4 of K rows gives the B fragments of two 8-token n-tiles."""
        for n in range(0, NS, 2):  # lane: row 8n + (lane & 7) + 8 (lane >> 4),
            slot = kb[k & 3] + 8 * n * SC + 8 * (k >> 2)  # chunk 2k + (lane >> 3) & 1
            b0, b1, b2, b3 = ldmatrix_x4(k_s, slot * 8)
            c = 4 * n
            s[c], s[c + 1], s[c + 2], s[c + 3] = mma_f16(
                a0, a1, a2, a3, b0, b1, s[c], s[c + 1], s[c + 2], s[c + 3]
            )
            c = 4 * n + 4
            s[c], s[c + 1], s[c + 2], s[c + 3] = mma_f16(
                a0, a1, a2, a3, b2, b3, s[c], s[c + 1], s[c + 2], s[c + 3]
            )

    @cuda.jit(device=True)
    def scores(tiles, lane, qf, s):
        for k in range(4 * NS):
            s[k] = float32(0)
        for k in range(QR):  # k-steps with Q's A fragments in registers
            qk_step(
                tiles.k_s, lane.kb, k, qf[4 * k], qf[4 * k + 1], qf[4 * k + 2], qf[4 * k + 3], s
            )
        for k in range(QR, KS):  # and from qs: lane's row 16 warp + (lane & 15), chunk
            a0, a1, a2, a3 = ldmatrix_x4(  # 2 (k - QR) + (lane >> 4)
                tiles.q_s, (lane.qb[(k - QR) & 3] + 8 * ((k - QR) >> 2)) * 8
            )
            qk_step(tiles.k_s, lane.kb, k, a0, a1, a2, a3, s)

    return scores


def make_rescale(shape):
    """rescale(acc, scale2): the online softmax after a tile's scores."""
    SF, NDW = shape.SF, shape.NDW
    row_max = make_row_max(SF)

    @cuda.jit(device=True)
    def rescale(acc, scale2):
        """The running max from this tile's scores, S exponentiated in place, O and the
        row sums (the extra n-tile) rescaled."""
        s, o = acc.s, acc.o
        base_lo, base_hi, alpha_lo, alpha_hi = row_max(s, acc.st, scale2)
        for k in range(SF):
            s[k] = fast_exp2(s[k] * scale2 - (base_lo if k & 2 == 0 else base_hi))
        for n in range(NDW + 1):  # O and the row sums (the extra n-tile)
            o[4 * n] *= alpha_lo
            o[4 * n + 1] *= alpha_lo
            o[4 * n + 2] *= alpha_hi
            o[4 * n + 3] *= alpha_hi

    return rescale


def make_values(shape):
    """(values, masked_pv): O += P V on the tensor cores, and on CUDA cores."""
    T, RW, SF, NS = shape.T, shape.RW, shape.SF, shape.NS
    NDW, OF, SC, ONES = shape.NDW, shape.OF, shape.SC, shape.ONES
    _, SH, SM = shape.swizzle

    @cuda.jit(device=True)
    def masked_pv(kv, tiles, lane, rows_seen, acc, base):
        """O += P V for a masked tile holding a NaN or inf value, on CUDA cores: a token
        a row does not attend adds nothing to it (with mma it would add 0 x NaN). P goes
        through shared memory in fp16, the precision the mma path gives it."""
        s, o, p_sh, n0 = acc.s, acc.o, tiles.p_sh, lane.n0
        lane_ = lane.tid & 31
        row0 = ((lane.tid >> 5) & (RW - 1)) * 16 + (lane_ >> 2)  # rows row0, row0 + 8
        for k in range(SF):
            if n0 == 0:  # (with o_split, the warps of a row block hold the same P)
                p_sh[row0 + 8 * ((k >> 1) & 1), 8 * (k >> 2) + 2 * (lane_ & 3) + (k & 1)] = s[k]
        cuda.syncthreads()  # every lane's P is in p_sh before its quad reads it
        for tok in range(min(T, kv.span - base)):
            pos = position(base + tok, kv.kept_hi, kv.gap)
            seen_lo = seen_by(0, pos, rows_seen)
            seen_hi = seen_by(1, pos, rows_seen)
            p_lo = float32(p_sh[row0, tok])
            p_hi = float32(p_sh[row0 + 8, tok])
            for n in range(NDW):
                at = swizzled(tok, n0 + n, SC, SH, SM) * 8 + 2 * (lane_ & 3)
                for i in range(2):
                    v = float32(tiles.v_s[at + i])
                    if seen_lo:
                        o[4 * n + i] += p_lo * v
                    if seen_hi:
                        o[4 * n + 2 + i] += p_hi * v

    @cuda.jit(device=True)
    def values(tiles, lane, acc, sums_only):
        """O += P V over the tile, 16 tokens a k-step, and the row sums on the tensor cores
        too (P times a B of ones), on exactly the fp16 P that P V uses; with sums_only
        (`masked_pv` did P V) only the sums. P's S fragments become A fragments."""
        s, o, v_s, vb = acc.s, acc.o, tiles.v_s, lane.vb
        for k in range(NS // 2):
            p0 = pack_f16x2(s[8 * k], s[8 * k + 1])
            p1 = pack_f16x2(s[8 * k + 2], s[8 * k + 3])
            p2 = pack_f16x2(s[8 * k + 4], s[8 * k + 5])
            p3 = pack_f16x2(s[8 * k + 6], s[8 * k + 7])
            c = OF
            o[c], o[c + 1], o[c + 2], o[c + 3] = mma_f16(
                p0, p1, p2, p3, ONES, ONES, o[c], o[c + 1], o[c + 2], o[c + 3]
            )
            if sums_only:
                continue
            for n in range(0, NDW - 1, 2):  # lane: row 16k + (lane & 7) + 8 ((lane >> 3)
                slot = vb[(n & 7) >> 1] + 16 * k * SC + 8 * (n >> 3)  # & 1), chunk
                b0, b1, b2, b3 = ldmatrix_x4_trans(v_s, slot * 8)  # n0 + n + (lane >> 4)
                c = 4 * n
                o[c], o[c + 1], o[c + 2], o[c + 3] = mma_f16(
                    p0, p1, p2, p3, b0, b1, o[c], o[c + 1], o[c + 2], o[c + 3]
                )
                c = 4 * n + 4
                o[c], o[c + 1], o[c + 2], o[c + 3] = mma_f16(
                    p0, p1, p2, p3, b2, b3, o[c], o[c + 1], o[c + 2], o[c + 3]
                )
            if NDW & 1:  # an odd share of O (o_split 2): its last n-tile alone
                c = 4 * (NDW - 1)  # chunk n0 + NDW - 1 (lanes >= 16: ignored by x2)
                slot = vb[((NDW - 1) & 7) >> 1] + 16 * k * SC + 8 * ((NDW - 1) >> 3)
                b0, b1 = ldmatrix_x2_trans(v_s, slot * 8)
                o[c], o[c + 1], o[c + 2], o[c + 3] = mma_f16(
                    p0, p1, p2, p3, b0, b1, o[c], o[c + 1], o[c + 2], o[c + 3]
                )

    return values, masked_pv


def make_step(shape, loader, parts, masked: bool):
    """step(kv, tiles, lane, rows, acc, e, last, order): step e of last + 1, one KV tile:
    S = Q K^T, (the mask), the online softmax, O += P V. parts: the pieces `make_walk`
    built once (scores, mask, rescale, values, masked_pv) for both kinds of step."""
    T = shape.T
    map_tile, not_finite = loader.map_tile, loader.not_finite
    issue = loader.issue_any if masked else loader.issue_whole
    scores, mask, rescale = parts.scores, parts.mask, parts.rescale
    values, masked_pv = parts.values, parts.masked_pv

    @cuda.jit(device=True)
    def step(kv, tiles, lane, rows, acc, e, last, order):
        tid, tok_s = lane.tid, tiles.tok_s
        b = e & 1  # this step's map in tok_s[b], the next one's in tok_s[1 - b]
        # the tile of step e, and of step e + 1 (a full step's next tile is full too)
        tile = run_tile(e, order) if not masked else tile_at(e, order)
        after = int32(tile + 1) if not masked else tile_at(int32(e + 1), order)
        base = int32(tile * T)
        cp_async_wait(0)
        # K of this step's tile is visible; every warp is done with the last P V, so
        # the V tile may be overwritten
        cuda.syncthreads()
        issue(kv.cache, kv.v_offset, tok_s, b, tiles.v_s, tid, lane.db)
        if e < last:  # (int32 throughout: 64-bit loop state costs registers)
            map_tile(kv, int32(after * T), tok_s, 1 - b, tid)
        scores(tiles, lane, rows.qf, acc.s)
        if masked:  # causal diagonal, window edge or tile tail
            mask(acc.s, base, kv, rows.rows_seen, tid & 3)
        rescale(acc, rows.scale2)
        cp_async_wait(0)
        odd = False
        if masked:
            # as below, and: does any V value of the tile (this thread's copies) fail
            # to be finite? Then the mma's 0 x NaN would leak it into rows that mask it
            odd = cuda.syncthreads_or(int32(not_finite(tiles.v_s, tid))) != 0
        else:
            # V is visible; every warp is done with S = Q K^T, so the K tile may be
            # overwritten; the next step's map is visible
            cuda.syncthreads()
        if e < last:  # the full steps come last: theirs is always a whole tile
            issue(kv.cache, 0, tok_s, 1 - b, tiles.k_s, tid, lane.db)
        if odd:  # rare: P V on CUDA cores, only over the tokens each row sees
            masked_pv(kv, tiles, lane, rows.rows_seen, acc, base)
        values(tiles, lane, acc, odd)

    return step


def make_walk(shape, loader, tile_order):
    """walk(kv, tiles, lane, rows, acc, len_lo, start_hi, window): the CTA's KV tiles in
    `tile_order`'s order (`prefill_work.make_work`'s): the masked steps, then the full
    ones, two loops (the second holds no mask code). acc starts empty (O = 0, max -inf)."""
    T, OL = shape.T, shape.OL
    map_tile, issue_any = loader.map_tile, loader.issue_any
    values, masked_pv = make_values(shape)
    parts = SimpleNamespace(
        scores=make_scores(shape),
        mask=make_mask(shape.SF),
        rescale=make_rescale(shape),
        values=values,
        masked_pv=masked_pv,
    )
    step_masked = make_step(shape, loader, parts, True)
    step_full = make_step(shape, loader, parts, False)

    @cuda.jit(device=True)
    def walk(kv, tiles, lane, rows, acc, len_lo, start_hi, window):
        for k in range(OL):
            acc.o[k] = float32(0)
        acc.st[0] = -math.inf  # running max of each row, log2 units
        acc.st[1] = -math.inf
        num_tiles, order = tile_order(kv.span, kv.kept_hi, kv.gap, len_lo, start_hi, window)
        last = int32(num_tiles - 1)  # the last step's index
        map_tile(kv, int32(tile_at(int32(0), order) * T), tiles.tok_s, 0, lane.tid)
        cuda.syncthreads()  # the first map, and qs, are visible before any thread reads them
        issue_any(kv.cache, 0, tiles.tok_s, 0, tiles.k_s, lane.tid, lane.db)
        for e in range(order[2]):  # the masked tiles, then the full ones: two loops
            step_masked(kv, tiles, lane, rows, acc, e, last, order)
        for e in range(order[2], num_tiles):
            step_full(kv, tiles, lane, rows, acc, e, last, order)

    return walk
