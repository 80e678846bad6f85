"""The K/V tile copies of `prefill_wgmma`: cp.async into 128-byte-swizzled panels, by the
map of each tile that `prefill_work.make_map_tile` writes.

A CTA reads the span [0, kept_hi) then [gap, len_hi) of its sequence's positions (the
window's seam skipped, `prefill_work.position`) in tiles of T tokens. A tile in shared
memory is ceil(D / 64) panels of T rows x 64 fp16 (128 bytes); the 16-byte chunk c of row
r sits at chunk (c % 8) ^ (r % 8) of row r in panel c // 8 (wgmma's 128-byte swizzle, the
tile 1024-byte aligned by the caller). Invariants the kernel relies on:

  * `map_tile` (prefill_work) writes tok_s[b, t] for t < T, -1 past the span;
  * `issue_any` copies every row, writing zeros for rows past the span (so a tail tile's
    P V adds 0 x 0, never garbage); `issue_whole` assumes a whole tile (no select): the
    tiles `prefill_work.tile_order` puts in the run every row sees whole.
"""

from __future__ import annotations

from numba import cuda, int64

from ..primitives import cp_async16, cp_async_commit


def make_tile_io(head_dim: int, tile: int, threads: int):
    """(issue_any, issue_whole) for D, T and the CTA's threads."""
    D, T, NT = int(head_dim), int(tile), int(threads)
    NCH = D // 8  # 16-byte chunks of a K/V row
    PANEL = T * 64  # fp16 elements of one panel
    COPIES = (T * NCH + NT - 1) // NT  # 16-byte copies per thread per tile
    EVEN = NT % NCH == 0  # then a thread's chunk is the same in every copy
    ROWS_PER_PASS = NT // NCH if EVEN else 0

    def make_issue(zero_fill: bool):
        @cuda.jit(device=True)
        def issue(cache, offset, tok_s, b, kv_s, at, tid):
            """cp.async the rows mapped in tok_s[b] (+ offset: 0 for K, V's for V) into
            the tile at kv_s[at:]; one commit group."""
            for n in range(COPIES):
                if EVEN:  # row tid // NCH + n rows-per-pass, chunk tid % NCH: one swizzle
                    t = tid // NCH + n * ROWS_PER_PASS
                    c = tid % NCH
                else:
                    e = tid + n * NT
                    t = e // NCH
                    c = e - t * NCH
                if t < T:
                    row = tok_s[b, t]
                    size = 16
                    if zero_fill:
                        size = 16 if row >= 0 else 0
                        row = max(row, int64(0))
                    dst = at + (c >> 3) * PANEL + t * 64 + ((c & 7) ^ (t & 7)) * 8
                    cp_async16(kv_s, dst, cache, row + offset + 8 * c, size)
            cp_async_commit()

        return issue

    return make_issue(True), make_issue(False)
