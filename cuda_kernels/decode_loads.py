"""How the decode kernels reach their K/V: table lookups and the CUDA-core loads.

    make_locate(block_size, paged)   device fn: attended index j -> (block, offset, valid),
                                     shared by `decode.py` and `decode_tc.py`
    fetcher(row_fn, vector, ...)     device fn: a lane's vectors of one K or V row into
                                     registers (16-byte loads, or scalar loads)
    unpacker(vector, ...)            device fn: those raw registers -> float32

The sliding window maps attended index j to position j (j < kept) or start + j - kept
(`decode.py`'s docstring); a power-of-two block size divides by a shift, and unsigned
indices skip numba's negative-index wraparound.
"""

from __future__ import annotations

from numba import cuda, float32, int32, uint32

from .primitives import load16, unpack16


def make_locate(block_size: int, paged: bool = True):
    """Device function locate(j, hi, kept, start, seq, block_tables) -> (block, offset,
    valid) for attended index j (< hi: valid); with paged=False the block is the logical
    one (a contiguous cache, no table)."""
    B = int(block_size)
    SHIFT = B.bit_length() - 1 if B & (B - 1) == 0 else -1  # log2(B) for a power of two

    @cuda.jit(device=True)
    def locate(j, hi, kept, start, seq, block_tables):
        j = int32(j)
        valid = j < hi
        pos = uint32(j if j < kept else start + (j - kept))
        if SHIFT >= 0:
            logical = pos >> SHIFT
        else:
            logical = pos // uint32(B)
        block = int32(0)
        if valid:
            block = block_tables[uint32(seq), logical] if paged else int32(logical)
        return block, int32(pos - logical * uint32(B)), valid

    return locate


def fetcher(row_fn, vector, VPL, LPR, VEC, NVEC, D):
    """Device function: raw[at : at + VPL * words] <- this lane's vectors of one K or V
    row (zeros where the token is masked or the vector lies past head_dim)."""
    if vector:
        @cuda.jit(device=True)
        def fetch(src, seq, block, kv_head, offset, valid, col, raw, at):
            start = row_fn(src, seq, block, kv_head, offset)  # unconditional: invariants hoist
            for jv in range(VPL):
                c = col + jv * LPR
                if valid and c < NVEC:
                    word = load16(src, start + c * VEC)  # 16 bytes, one ld.global.nc.v4
                    for w in range(4):
                        raw[at + jv * 4 + w] = word[w]
                else:
                    for w in range(4):
                        raw[at + jv * 4 + w] = 0
    else:
        @cuda.jit(device=True)
        def fetch(src, seq, block, kv_head, offset, valid, col, raw, at):
            for jv in range(VPL):
                for e in range(VEC):
                    d = (col + jv * LPR) * VEC + e
                    value = float32(0)
                    if valid and d < D:
                        value = row_fn(src, block, kv_head, offset, d)
                    raw[at + jv * VEC + e] = value
    return fetch


def unpacker(vector, VPL, VEC, FP16):
    """Device function: dst[0 : VPL * VEC] <- float32 of the raw vectors at raw[at:]."""
    if vector:
        @cuda.jit(device=True)
        def to_float(raw, at, dst):
            for jv in range(VPL):
                unpack16(raw[at + jv * 4: at + jv * 4 + 4], dst[jv * VEC: jv * VEC + VEC], FP16)
    else:
        @cuda.jit(device=True)
        def to_float(raw, at, dst):
            for i in range(VPL * VEC):
                dst[i] = raw[at + i]
    return to_float
