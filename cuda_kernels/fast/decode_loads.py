"""How the decode kernels reach their K/V: table lookups and the CUDA-core loads.

    make_locate(block_size, paged)   device fn: attended index j -> (block, offset, valid),
                                     shared by `decode.py` and `decode_tc.py`
    fetcher(row_fn, kind, ...)       device fn: a lane's vectors of one K or V row, either
                                     copied by cp.async into its shared-memory stage
                                     ("staged") or loaded into registers ("vector": 16-byte
                                     loads, "scalar": one element at a time)
    unpacker(kind, ...)              device fn: those raw words (shared or registers) -> float32

Every fetch and unpack takes (buf, ring, at): the raw words sit in the local array `buf`
(register kinds) or in the shared array `ring` (staged), from element `at` on, a lane's
vector jv of the row at `at + jv * stride`. A staged lane reads back only the 16-byte
chunks it copied itself, so its own cp.async.wait_group is all the ordering it needs.

A power-of-two block size divides by a shift; unsigned indices skip numba's
negative-index wraparound.
"""

from __future__ import annotations

from numba import cuda, float32, int32, uint32

from ..primitives import bits_to_float, cp_async16, half2_to_float2, load16, unpack16


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


def fetcher(row_fn, kind, VPL, LPR, VEC, NVEC, D, stride):
    """Device function fetch(src, seq, kv_head, token, col, buf, ring, at): this lane's
    vectors col, col + LPR, ... of one K or V row into its words, token = (block, offset,
    valid) as `locate` gives it (zeros where the token is masked or the vector lies past
    head_dim). "staged" issues one 16-byte
    cp.async per vector (src-size 0 writes the zeros) and leaves the commit to the caller."""
    if kind == "staged":
        FULL = VPL * LPR == NVEC  # every lane's every vector lies inside head_dim

        @cuda.jit(device=True)
        def fetch(src, seq, kv_head, token, col, buf, ring, at):
            block, offset, valid = token
            start = row_fn(src, seq, block, kv_head, offset)  # unconditional: invariants hoist
            for jv in range(VPL):
                c = col + jv * LPR
                inside = FULL or c < NVEC
                nbytes = 16 if valid and inside else 0
                cp_async16(ring, at + jv * stride, src, start + (c * VEC if inside else 0), nbytes)
    elif kind == "vector":

        @cuda.jit(device=True)
        def fetch(src, seq, kv_head, token, col, buf, ring, at):
            block, offset, valid = token
            start = row_fn(src, seq, block, kv_head, offset)  # unconditional: invariants hoist
            for jv in range(VPL):
                c = col + jv * LPR
                if valid and c < NVEC:
                    word = load16(src, start + c * VEC)  # 16 bytes, one ld.global.nc.v4
                    for w in range(4):
                        buf[at + jv * stride + w] = word[w]
                else:
                    for w in range(4):
                        buf[at + jv * stride + w] = 0
    else:

        @cuda.jit(device=True)
        def fetch(src, seq, kv_head, token, col, buf, ring, at):
            block, offset, valid = token
            for jv in range(VPL):
                for e in range(VEC):
                    d = (col + jv * LPR) * VEC + e
                    value = float32(0)
                    if valid and d < D:
                        value = row_fn(src, block, kv_head, offset, d)
                    buf[at + jv * stride + e] = value

    return fetch


def unpacker(kind, VPL, VEC, FP16, stride):
    """Device function to_float(buf, ring, at, dst): dst[0 : VPL * VEC] <- float32 of the
    lane's raw vectors (staged: four consecutive u32 of the 16-byte aligned ring, which
    LLVM merges into one ld.shared.v4, LDS.128)."""
    if kind == "staged":

        @cuda.jit(device=True)
        def to_float(buf, ring, at, dst):
            for jv in range(VPL):
                i = at + jv * stride
                for w in range(4):
                    word = ring[i + w]
                    if FP16:
                        lo, hi = half2_to_float2(word)
                        dst[jv * VEC + 2 * w] = lo
                        dst[jv * VEC + 2 * w + 1] = hi
                    else:
                        dst[jv * VEC + w] = bits_to_float(word)
    elif kind == "vector":

        @cuda.jit(device=True)
        def to_float(buf, ring, at, dst):
            for jv in range(VPL):
                i = at + jv * stride
                unpack16(buf[i : i + 4], dst[jv * VEC : jv * VEC + VEC], FP16)
    else:

        @cuda.jit(device=True)
        def to_float(buf, ring, at, dst):
            for i in range(VPL * VEC):
                dst[i] = buf[at + i]

    return to_float
