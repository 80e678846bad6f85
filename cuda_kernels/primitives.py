"""The small named pieces every kernel is built from (FlashInfer's style: vec_t, warp
reductions, online-softmax state (Milakov & Gimelshein 2018) and its merge), so that a
kernel body reads as its algorithm. Imported from `gpu/intrinsics` on a GPU or `sim/`
under the simulator:
    load16(array, index)         -> (u32, u32, u32, u32)  one 16-byte global load
    store16(array, index, words)                          its partner: one 16-byte store
    itemsize(array)              -> int                   element bytes, a compile-time constant
    fast_exp2(x)                 -> float32               2^x, one MUFU.EX2 (ex2.approx.ftz)
    half2_to_float2(word)        -> (float32, float32)    unpack two float16 from a u32
    bits_to_float(word)          -> float32               reinterpret a u32 as float32
Tensor cores (sm_80+):
    mma_f16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3) -> (d0, d1, d2, d3)
                                 mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
    mma_bf16(...)                the same with bf16 A/B words
    ldmatrix_x1/_x2/_x4(smem, index) -> u32 | (u32,)*2 | (u32,)*4   ldmatrix ... .shared.b16
    ldmatrix_x1_trans/_x2_trans/_x4_trans(smem, index)              the same with .trans
    cp_async16(smem, smem_index, src, src_index, nbytes)  cp.async.cg.shared.global, 16 B
                                 (nbytes 16 reads them all; 0 reads nothing and writes zeros)
    cp_async_commit()            cp.async.commit_group
    cp_async_wait(N)             cp.async.wait_group N, N a compile-time integer literal
    pack_f16x2(lo, hi) / pack_bf16x2(lo, hi) -> u32   cvt.rn: lo in bits 0-15
Fragment conventions (PTX ISA, "Matrix Fragments for mma.m16n8k16"), per lane with
g = lane >> 2 and t = lane % 4; a u32 word holds two b16 elements, the first (lower
column / row index) in its low half, exactly as `pack_f16x2(lo, hi)` builds it:
    A [16 x 16], row-major:  a0 = A[g, 2t:2t+2]      a1 = A[g+8, 2t:2t+2]
                             a2 = A[g, 2t+8:2t+10]   a3 = A[g+8, 2t+8:2t+10]
    B [16 x 8] (k x n):      b0 = B[2t:2t+2, g]      b1 = B[2t+8:2t+10, g]
    C, D [16 x 8], f32:      c0, c1 = C[g, 2t], C[g, 2t+1]; c2, c3 = C[g+8, 2t], C[g+8, 2t+1]
ldmatrix (m8n8, b16): `index` is this lane's row address, an element index of the shared
array whose 8 elements (16 bytes, 16-byte aligned) form one row of an 8x8 matrix; lanes
8j .. 8j+7 give rows 0..7 of matrix j (j < 1, 2, 4 for x1, x2, x4). Register j of lane l
gets matrix j's row l // 4, columns 2 (l % 4), +1, or with .trans column l // 4, rows
2 (l % 4), +1. So x4 from a row-major 16x16 tile (lane l's address: row l % 16, column
8 (l // 16)) yields a0..a3; x4 from K rows (tokens) gives b0/b1 of K^T; x4.trans from V
rows gives b0/b1 of V. A C fragment pair (c0, c1) packed is an A fragment word: the
FlashAttention-2 trick that feeds P = softmax(S) back to the next mma from registers.
cp.async: copies land only after the thread's cp_async_wait retires their group; other
threads see them after a barrier (`cuda.syncthreads()`) that follows the wait.
Hopper's wgmma (sm_90a) lives in `fast/wgmma.py`, its stand-ins in `sim/wgmma_sim.py`.
The softmax pieces work in base 2 (q pre-multiplied by scale * log2(e)), as
FlashAttention does. load16's and store16's callers guarantee 16-byte alignment and bounds
(the launcher checks `aligned16` once). Kernel bodies never ask which backend they run on.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32

from . import _backend

VEC_BYTES = 16
FULL_MASK = 0xFFFFFFFF


if _backend.backend() == "simulator":
    from .sim import simulator as _warp
    from .sim import tensor_sim as _tensor

    _warp.install()
else:
    from .gpu import intrinsics as _warp

    _tensor = _warp  # the GPU module holds the tensor-core intrinsics too

bits_to_float = _warp.bits_to_float
device_address = _warp.device_address
fast_exp2 = _warp.fast_exp2
half2_to_float2 = _warp.half2_to_float2
itemsize = _warp.itemsize
load16 = _warp.load16
store16 = _warp.store16
cp_async16 = _tensor.cp_async16
cp_async_commit = _tensor.cp_async_commit
cp_async_wait = _tensor.cp_async_wait
ldmatrix_x1 = _tensor.ldmatrix_x1
ldmatrix_x1_trans = _tensor.ldmatrix_x1_trans
ldmatrix_x2 = _tensor.ldmatrix_x2
ldmatrix_x2_trans = _tensor.ldmatrix_x2_trans
ldmatrix_x4 = _tensor.ldmatrix_x4
ldmatrix_x4_trans = _tensor.ldmatrix_x4_trans
mma_bf16 = _tensor.mma_bf16
mma_f16 = _tensor.mma_f16
pack_bf16x2 = _tensor.pack_bf16x2
pack_f16x2 = _tensor.pack_f16x2


def vec_width(dtype) -> int:
    """Elements of `dtype` in one 16-byte vector: 8 for float16, 4 for float32."""
    return VEC_BYTES // np.dtype(dtype).itemsize


def aligned16(array) -> bool:
    """True when the array's data pointer and every stride but the last are multiples of
    16 bytes, so every row start `index` with index * itemsize % 16 == 0 is aligned."""
    address = device_address(array)
    return address % VEC_BYTES == 0 and all(
        s % VEC_BYTES == 0
        for s, n in zip(array.strides[:-1], array.shape[:-1], strict=True)
        if n > 1
    )


def swizzle_shape(chunks: int) -> tuple[int, int, int]:
    """(stride, shift, mask) of `swizzled` for rows of `chunks` 16-byte chunks that
    ldmatrix reads 8 rows at a time: a power-of-two row is XOR-swizzled (CUTLASS's
    Swizzle<3,3,3> for 128-byte rows) so the 8 rows hit distinct bank groups; any other
    row is padded to an odd number of chunks (conflict-free on its own), mask 0."""
    if chunks & (chunks - 1) == 0:
        return chunks, max(0, 3 - chunks.bit_length() + 1), min(chunks, 8) - 1
    return chunks | 1, 0, 0


@cuda.jit(device=True)
def swizzled(row, chunk, stride, shift, mask):
    """The slot (16-byte chunks from the array start) of `chunk` of `row` (row >= 0)."""
    return row * stride + (chunk ^ ((row >> shift) & mask))


@cuda.jit(device=True)
def unpack16(raw, dst, fp16):
    """16 raw bytes (4 x u32) -> float32 dst[0:8] (fp16=True) or dst[0:4] (float32)."""
    if fp16:
        for i in range(4):
            lo, hi = half2_to_float2(raw[i])
            dst[2 * i] = lo
            dst[2 * i + 1] = hi
    else:
        for i in range(4):
            dst[i] = bits_to_float(raw[i])


@cuda.jit(device=True)
def warp_sum(value, width):
    """Sum of `value` over this lane's aligned group of `width` lanes (a power of two)."""
    offset = width >> 1
    while offset > 0:
        value += cuda.shfl_xor_sync(FULL_MASK, value, offset)
        offset >>= 1
    return value


@cuda.jit(device=True)
def warp_max(value, width):
    """Max of `value` over the aligned group of `width` lanes holding this lane."""
    offset = width >> 1
    while offset > 0:
        value = max(value, cuda.shfl_xor_sync(FULL_MASK, value, offset))
        offset >>= 1
    return value


@cuda.jit(device=True)
def reduce_scatter(vals, n, width, lane):
    """Sum vals[0:n] over the aligned group of `width` lanes (n, width powers of two),
    leaving each lane own = max(1, n // width) of the totals in vals[0:own] (when
    width > n, width // n lanes hold each total). Returns own."""
    cur = n
    offset = width >> 1
    while offset > 0 and cur > 1:  # keep half, send half, at every xor distance
        half = cur >> 1
        upper = (lane & offset) != 0
        for j in range(half):
            send = vals[j] if upper else vals[j + half]
            keep = vals[j + half] if upper else vals[j]
            vals[j] = keep + cuda.shfl_xor_sync(FULL_MASK, send, offset)
        cur = half
        offset >>= 1
    while offset > 0:  # one total per lane: finish it over the lanes left
        vals[0] += cuda.shfl_xor_sync(FULL_MASK, vals[0], offset)
        offset >>= 1
    return cur


@cuda.jit(device=True)
def owned_index(lane, j, n, width):
    """The index k in [0, n) of the total that `reduce_scatter` left in vals[j] of `lane`:
    at each halving the lanes with the xor bit set kept the upper half."""
    k = j
    size = n
    step = width >> 1
    while step > 0 and size > 1:
        size >>= 1
        if lane & step:
            k += size
        step >>= 1
    return k


@cuda.jit(device=True)
def broadcast(vals, n, width, lane, out):
    """out[0:n] <- the n totals `reduce_scatter` spread over the group, in every lane."""
    own = n
    step = width >> 1
    while step > 0 and own > 1:
        own >>= 1
        step >>= 1
    first = lane & ~(width - 1)
    for k in range(n):
        owner = 0  # the lane whose xor bits spell k's upper bits
        size = n
        step = width >> 1
        while step > 0 and size > 1:
            size >>= 1
            if k & size:
                owner += step
            step >>= 1
        out[k] = cuda.shfl_sync(FULL_MASK, vals[k & (own - 1)], first + owner)


@cuda.jit(device=True)
def group_sums(vals, n, width, lane, out):
    """out[0:n] <- the sums of vals[0:n] (scratch) over the aligned group of `width` lanes,
    in every lane: n/2 + n/4 + ... + n shuffles instead of n x log2(width)."""
    reduce_scatter(vals, n, width, lane)
    broadcast(vals, n, width, lane, out)


@cuda.jit(device=True)
def softmax_rescale(m_old, tile_max, slack):
    """Online-softmax step in base 2: (m_new, alpha = 2^(m_old - m_new)). The max moves only
    when the tile's beats it by more than `slack` (FlashAttention-3's lazy rescaling; 0 is
    the textbook rule), else alpha is exactly 1. Before any unmasked score m stays -inf."""
    if tile_max > m_old + slack:
        return tile_max, fast_exp2(m_old - tile_max)
    return m_old, float32(1)


FLOAT32_TINY = float32(np.finfo(np.float32).tiny)  # the smallest normal float32


@cuda.jit(device=True)
def split_scale(scale2):
    """(sign, magnitude) of scale2 for kernels that scale fp32 scores after an fp16 mma:
    the sign rides exactly on Q's fragments, magnitude > 0 keeps maxima and -inf. A zero
    or subnormal scale2 is sign 0, magnitude 1."""
    magnitude = abs(scale2)
    if magnitude < FLOAT32_TINY:
        return float32(0), float32(1)
    return (float32(1) if scale2 > 0 else float32(-1)), magnitude


@cuda.jit(device=True)
def exp2_or_zero(score, m):
    """2^(score - m), exactly 0 for a masked score (-inf); a NaN score gives NaN."""
    if score != -math.inf:
        return fast_exp2(score - m)
    return float32(0)


@cuda.jit(device=True)
def window_span(length, window, sinks):
    """(kept, start): a query seeing `length` positions attends [0, kept) and [start, length)
    (the first `sinks` and the last `window` positions); window <= 0 is full attention."""
    if window <= 0:
        return 0, 0
    kept = min(sinks, length)
    return kept, max(length - window, kept)


@cuda.jit(device=True)
def merge_states(m_a, l_a, m_b, l_b):
    """Merge base-2 softmax states of two disjoint token sets: (m, l, w_a, w_b), acc =
    w_a * acc_a + w_b * acc_b; an empty side (l = 0) gets weight 0."""
    m = max(m_a, m_b)
    w_a = float32(0)
    w_b = float32(0)
    if l_a > 0:
        w_a = fast_exp2(m_a - m)
    if l_b > 0:
        w_b = fast_exp2(m_b - m)
    return m, l_a * w_a + l_b * w_b, w_a, w_b
