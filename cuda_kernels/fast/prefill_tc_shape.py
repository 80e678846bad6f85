"""The compile-time shape of one tensor-core prefill kernel (`prefill_tc`), stated once.

Every constant the kernel's pieces (`prefill_tc_tiles`, `prefill_tc_step`, the kernel in
`prefill_tc`) are built from, derived from (D, G, NW, T, B, q_regs, o_split) and checked:

  * D (head_dim) and T (KV tile) are multiples of 16 and T <= 32 NW: one token per thread
    when a tile is mapped through the block table.
  * The CTA's rows: RW = NW / OS row blocks of 16 rows (M = 16 RW, a power-of-two number
    of blocks); with o_split OS = 2 the two warps of a row block hold the same Q, S and P,
    and each holds NDW = ND / 2 of O's 8-dim n-tiles (the lower half for warps < RW).
  * Q: k-steps 0 .. QR - 1 in registers (A fragments), QR .. KS - 1 in the shared tile qs
    (read back through ldmatrix_x4 each tile), whose rows are QC 16-byte chunks.
  * K/V rows are NCH 16-byte chunks, laid out by `primitives.swizzle_shape` (SC, SH, SM):
    an O share must start on a whole 8-chunk swizzle group where the layout XORs (SM > 0).

Like CUTLASS's kernel traits, the numbers live in one place (closure constants).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..primitives import swizzle_shape


@dataclass(frozen=True)
class TileShape:
    D: int  # head_dim
    G: int  # query heads per KV head
    NW: int  # warps per CTA
    T: int  # KV tokens per tile
    B: int  # the cache's block size
    QR: int  # k-steps of Q held in registers
    OS: int  # warps sharing a row block (1 or 2), splitting O's columns

    @classmethod
    def build(cls, head_dim, group_size, warps, tile, block_size, q_regs=None, o_split=1):
        D, G, NW, T, B = (int(v) for v in (head_dim, group_size, warps, tile, block_size))
        if D % 16 or T % 16 or T > 32 * NW:
            raise ValueError(
                f"head_dim and tile must be multiples of 16 and the tile at most "
                f"the CTA's threads, got {D}, {T} and {32 * NW}"
            )
        QR = D // 16 if q_regs is None else int(q_regs)
        if not 0 <= QR <= D // 16:
            raise ValueError(f"q_regs must be in [0, {D // 16}], got {q_regs}")
        OS = int(o_split)
        rw = NW // max(OS, 1)
        if OS not in (1, 2) or NW % OS or rw & (rw - 1):
            raise ValueError(
                f"o_split must be 1 or 2, dividing warps into a power of two, "
                f"got {o_split} and {NW}"
            )
        shape = cls(D, G, NW, T, B, QR, OS)
        if shape.ND % OS or (OS > 1 and shape.SM and shape.NDW % 8):
            raise ValueError(f"o_split {OS} must split head_dim {D} into whole swizzle groups")
        return shape

    NT = property(lambda s: 32 * s.NW)  # threads per CTA
    RW = property(lambda s: s.NW // s.OS)  # row blocks of 16 rows
    RSH = property(lambda s: s.RW.bit_length() - 1)  # log2(RW): warp >> RSH = its O share
    ROWS = property(lambda s: 16 * s.RW)  # M: query rows per CTA
    QT = property(lambda s: max(1, s.ROWS // s.G))  # query tokens per CTA
    R = property(lambda s: s.QT * s.G)  # rows in use (of ROWS)
    KS = property(lambda s: s.D // 16)  # k-steps of S = Q K^T
    QC = property(lambda s: 2 * (s.KS - s.QR))  # 16-byte chunks per row of qs
    q_swizzle = property(lambda s: swizzle_shape(max(s.QC, 1)))  # (QSC, QSH, QSM)
    QBUF = property(lambda s: s.ROWS * s.q_swizzle[0] * 8)  # fp16 elements of qs
    NCH = property(lambda s: s.D // 8)  # 16-byte chunks per K/V row
    swizzle = property(lambda s: swizzle_shape(s.NCH))  # (SC, SH, SM) of K/V rows
    SC = property(lambda s: s.swizzle[0])
    SM = property(lambda s: s.swizzle[2])
    BUF = property(lambda s: s.T * s.SC * 8)  # fp16 elements of one K (or V) tile
    NS = property(lambda s: s.T // 8)  # 8-token n-tiles of S
    ND = property(lambda s: s.D // 8)  # 8-dim n-tiles of O
    NDW = property(lambda s: s.ND // s.OS)  # a warp's n-tiles of O
    QF = property(lambda s: 4 * max(s.QR, 1))  # Q fragment registers per lane
    SF = property(lambda s: 4 * s.NS)  # S fragment registers per lane
    OF = property(lambda s: 4 * s.NDW)  # O fragment registers per lane
    OL = property(lambda s: s.OF + 4)  # O, then the row sums' fragment (c0: row g, c2: g + 8)
    PASSES = property(lambda s: (2 * s.T + s.NT - 1) // s.NT)  # rows per thread per tile
    ONES = np.uint32(0x3C003C00)  # two fp16 1.0: a B fragment of ones

    def shared_bytes(self) -> int:
        """Static shared memory of the kernel: K and V tiles, qs, P (`masked_pv`), maps."""
        return (
            2 * self.BUF * 2
            + self.QBUF * 2 * (self.QR < self.KS)
            + self.ROWS * self.T * 2
            + 2 * self.T * 8
        )
