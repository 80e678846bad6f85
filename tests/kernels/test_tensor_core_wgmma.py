"""The wgmma (sm_90a) stand-in follows the PTX ISA's warpgroup fragments and the
shared-memory matrix descriptor: B is laid out in memory here core matrix by core
matrix (no swizzle) or row by row with the 128-byte XOR swizzle, independently of the
stand-in's address arithmetic, and every lane's D elements are checked one by one."""

import numpy as np
import pytest
from numba import cuda

import cuda_kernels
from cuda_kernels import primitives as pr

pytestmark = pytest.mark.skipif(cuda_kernels.backend() != "simulator",
                                reason="tests the simulator's stand-ins")


def a_words(A):
    """[128, 4] u32: warp w's lanes hold rows 16w.. of A [64 x 16] in the mma A layout
    (a0: row g, cols 2t, 2t+1; a1: row g+8; a2: row g, cols 2t+8, +9; a3: row g+8, ...)."""
    out = np.zeros((128, 4), np.uint32)
    for thread in range(128):
        w, lane = divmod(thread, 32)
        g, t = lane // 4, lane % 4
        cells = [(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]
        for r, (row, col) in enumerate(cells):
            pair = np.array([A[16 * w + row, col], A[16 * w + row, col + 1]], np.float16)
            out[thread, r] = pair.view(np.uint32)[0]
    return out


def run(memory, words, lbo, sbo, swizzle, acc):
    out = np.full((128, 4), np.nan, np.float32)

    @cuda.jit
    def kernel(memory, words, acc, out):
        tid = cuda.threadIdx.x
        smem = cuda.shared.array(2048, np.float16)
        for i in range(16):
            smem[tid * 16 + i] = memory[tid * 16 + i]
        cuda.syncthreads()  # B is in shared memory before the warpgroup reads it
        desc = pr.smem_desc(smem, 0, lbo, sbo, swizzle)
        pr.wgmma_fence()
        w = words[tid]
        d = pr.wgmma_m64n8k16_f16(desc, w[0], w[1], w[2], w[3], acc[tid, 0], acc[tid, 1],
                                  acc[tid, 2], acc[tid, 3], 1)
        pr.wgmma_commit()
        pr.wgmma_wait(0)
        for i in range(4):
            out[tid, i] = d[i]

    kernel[1, 128](memory, words, acc, out)
    return out


@pytest.mark.parametrize("swizzle", [0, 1])
def test_wgmma_m64n8k16_reads_b_through_its_descriptor_and_gives_each_lane_its_d(swizzle):
    rng = np.random.default_rng(swizzle)
    A = rng.integers(-4, 5, (64, 16)).astype(np.float64)
    B = rng.integers(-4, 5, (16, 8)).astype(np.float64)
    C = rng.integers(-9, 10, (64, 8)) + 0.5
    memory = np.full(2048, np.nan, np.float16)  # every byte B does not use is NaN
    lbo, sbo = 384, 1024  # unusual offsets, so that swapping them would show
    for n in range(8):
        for kc in range(2):  # the two 8-wide k halves of row n
            for kk in range(8):
                if swizzle == 0:  # core matrix kc: 8 rows of 16 bytes, kc * lbo from start
                    at = kc * lbo // 2 + n * 8 + kk
                else:  # 128-byte rows; 16-byte chunk kc lands in chunk kc ^ (n % 8)
                    at = n * 64 + (kc ^ (n % 8)) * 8 + kk
                memory[at] = B[8 * kc + kk, n]
    acc = np.zeros((128, 4), np.float32)
    for thread in range(128):
        w, lane = divmod(thread, 32)
        g, t = lane // 4, lane % 4
        cells = [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]
        acc[thread] = [C[16 * w + r, c] for r, c in cells]
    out = run(memory, a_words(A), lbo, sbo, swizzle, acc)
    D = A @ B + C
    for thread in range(128):
        w, lane = divmod(thread, 32)
        g, t = lane // 4, lane % 4
        cells = [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]
        assert out[thread].tolist() == [D[16 * w + r, c] for r, c in cells], thread


def test_a_descriptor_holds_the_fields_where_the_isa_puts_them():
    out = np.zeros(2, np.uint64)

    @cuda.jit
    def kernel(out):
        smem = cuda.shared.array(64, np.float16)
        out[0] = pr.smem_desc(smem, 0, 384, 1024, 1)
        out[1] = pr.smem_desc(smem, 8, 384, 1024, 1)

    kernel[1, 1](out)
    first, second = int(out[0]), int(out[1])
    assert (first >> 16) & 0x3FFF == 384 >> 4 and (first >> 32) & 0x3FFF == 1024 >> 4
    assert first >> 62 == 1 and (first >> 14) & 3 == 0 and (first >> 46) & 0xFFFF == 0
    assert (second & 0x3FFF) - (first & 0x3FFF) == 1  # 8 halves = 16 bytes = one unit
