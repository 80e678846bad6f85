"""The K/V tile loader of the tensor-core prefill (`prefill_tc`): the page table, cp.async
and the swizzled shared-memory layout.

  * `map_tile`: `prefill_work.make_map_tile`'s, one block-table read per token per tile.
  * `issue_any` / `issue_whole`: two threads per row copy every other 16-byte chunk into
    swizzled shared rows, one commit group per call; `issue_any` zero-fills rows past the
    span, `issue_whole` serves tiles known to be whole.
  * `chunk_bases` / `q_chunk_bases`: 4 per-lane slot registers from which every ldmatrix
    and cp.async address of the tile loop is a constant offset (the K/V layout, and qs's).
  * `not_finite`: does a V value this thread copied fail to be finite (the masked tiles'
    NaN guard, see `prefill_tc_step.masked_pv`).
Invariant: a tile's map is written one step ahead (tok_s[1 - b]) and read only after the
barrier that follows it; copies land only after cp_async_wait and the next barrier.
"""

from __future__ import annotations

from types import SimpleNamespace

from numba import cuda, float32, int64

from ..primitives import cp_async16, cp_async_commit, swizzled
from .prefill_work import make_map_tile


def make_tile_loader(shape) -> SimpleNamespace:
    """The loader's device functions for one kernel shape (constants: T, B, NT, chunks)."""
    T, NT, NCH, PASSES = shape.T, shape.NT, shape.NCH, shape.PASSES
    SC, SH, SM = shape.swizzle
    QSC, QSH, QSM = shape.q_swizzle

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
    def q_chunk_bases(row, h, out):
        """`chunk_bases` for qs's layout (QSC, QSH, QSM): the slot of chunk 8c + 2q + h
        of `row` is out[q] + 8c."""
        x = (row >> QSH) & QSM
        for q in range(4):
            out[q] = row * QSC + ((2 * q + h) ^ x)

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

    return SimpleNamespace(
        map_tile=make_map_tile(T, shape.B),
        issue_any=issue_any,
        issue_whole=issue_whole,
        chunk_bases=chunk_bases,
        q_chunk_bases=q_chunk_bases,
        not_finite=not_finite,
    )
