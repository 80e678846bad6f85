"""The wgmma stand-ins (`cuda_kernels.fast.wgmma` under the simulator) follow the PTX ISA's
warpgroup fragments, matrix descriptor and swizzle modes, element by element.

The tables here are written out independently of `_wgmma_sim`: A and D per thread as
the ISA's figures draw them (register r of a lane, its row and column), B placed in
shared memory the way the ISA's swizzle-atom figures draw it (8 rows of W bytes, the
16-byte chunk c of row r stored at chunk c ^ (row pattern)), with NaN in every byte
that B does not use and unusual LBO / SBO values, so that swapping them would show.
Mutation checks: words laid out with two registers swapped, or a swizzled B with two
chunks left unswapped, give a wrong product."""

from collections import namedtuple

import numpy as np
import pytest
from numba import cuda, float32

import cuda_kernels
from cuda_kernels.fast import wgmma as wg

pytestmark = pytest.mark.skipif(
    cuda_kernels.backend() != "simulator", reason="tests the simulator's stand-ins"
)
SMEM = 20 * 1024  # fp16 elements of the test's shared array (room for B and the pad)
WIDTH = {0: 0, 1: 128, 2: 64, 3: 32}  # swizzle mode -> row bytes W


def a_words(A, swap=None):
    """[128, 4] u32 from A [64 x 16]: warp w's rows 16w..; register r of lane (g, t) holds
    (row, col), (row, col + 1) with (row, col) = (g, 2t), (g+8, 2t), (g, 2t+8), (g+8, 2t+8)."""
    out = np.zeros((128, 4), np.uint32)
    for thread in range(128):
        w, lane = divmod(thread, 32)
        g, t = lane // 4, lane % 4
        cells = [(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]
        if swap:
            cells[swap[0]], cells[swap[1]] = cells[swap[1]], cells[swap[0]]
        for r, (row, col) in enumerate(cells):
            pair = np.array([A[16 * w + row, col], A[16 * w + row, col + 1]], np.float16)
            out[thread, r] = pair.view(np.uint32)[0]
    return out


def d_table(n):
    """[128][N/2] (row, col) of D per thread register: for each 8-column block j, the
    registers 4j .. 4j+3 hold (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1) of it."""
    table = []
    for thread in range(128):
        w, lane = divmod(thread, 32)
        g, t = lane // 4, lane % 4
        cells = []
        for j in range(n // 8):
            for row, col in ((g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)):
                cells.append((16 * w + row, 8 * j + col))
        table.append(cells)
    return table


# B placed in shared memory: memory fp16 [SMEM - 512], the start element, LBO and SBO
Placed = namedtuple("Placed", "memory start lbo sbo")


def place(B, mode, trans_b, k0=0, swizzle=True) -> Placed:
    """B [16 x N] laid out for descriptor mode `mode` (K-major, or MN-major with trans_b)."""
    n = B.shape[1]
    memory = np.full(SMEM - 512, np.nan, np.float16)
    width = WIDTH[mode]
    if width == 0:  # core matrices of 8 rows x 16 bytes
        lbo, sbo = (n // 8) * 128 + 384, 128
        for k in range(16):
            for j in range(n):
                if not trans_b:  # row j % 8 of core (k // 8, j // 8), element k % 8
                    at = (k // 8) * lbo + (j // 8) * sbo + (j % 8) * 16 + (k % 8) * 2
                else:  # row k % 8 of core (k // 8, j // 8), element j % 8
                    at = (k // 8) * lbo + (j // 8) * sbo + (k % 8) * 16 + (j % 8) * 2
                memory[at // 2] = B[k, j]
        return Placed(memory, 0, lbo, sbo)
    per_row, chunks = width // 2, width // 16  # fp16 and 16-byte chunks in a row

    def chunk_at(row, chunk):  # rows of one 8 * W atom share the pattern W / 128 at a time
        return chunk ^ ((row * width // 128) % chunks) if swizzle else chunk

    atom = 8 * width
    if not trans_b:  # row j: 8-row groups SBO apart; B's k at k0 + k of the row
        lbo, sbo = 16, 2 * atom
        for k in range(16):
            for j in range(n):
                col = k0 + k
                at = (j // 8) * sbo + (j % 8) * width + chunk_at(j % 8, col // 8) * 16
                memory[(at + (col % 8) * 2) // 2] = B[k, j]
        return Placed(memory, k0, lbo, sbo)
    panels = -(-n // per_row)  # n split in panels of per_row, LBO apart; 8-k groups SBO
    lbo, sbo = atom, (panels + 1) * atom
    for k in range(16):
        for j in range(n):
            at = (j // per_row) * lbo + (k // 8) * sbo + (k % 8) * width
            at += chunk_at(k % 8, (j % per_row) // 8) * 16 + (j % 8) * 2
            memory[at // 2] = B[k, j]
    return Placed(memory, 0, lbo, sbo)


def run(b, mode, n, trans_b, words, acc):
    """D = A B + C on one warpgroup: B placed (`place`), A as each thread's words, C acc."""
    memory, start, lbo, sbo = b
    mma, regs, size = wg.mma_for(n, trans_b), n // 2, memory.size
    out = np.full((128, regs), np.nan, np.float32)

    @cuda.jit
    def kernel(memory, words, acc, out):
        tid = cuda.threadIdx.x
        smem = cuda.shared.array(SMEM, np.float16)
        pad = wg.align_pad(smem)  # the tile starts on a 1024-byte boundary
        for i in range(tid, size, 128):
            smem[pad + i] = memory[i]
        wg.fence_proxy_async()
        cuda.syncthreads()  # B is in shared memory before the warpgroup reads it
        d = cuda.local.array(regs, float32)
        for i in range(regs):
            d[i] = acc[tid, i]
        desc = wg.smem_desc(smem, pad + start, lbo, sbo, mode)
        w = words[tid]
        wg.wgmma_fence()
        mma(desc, w[0], w[1], w[2], w[3], d, 0, 1)
        wg.wgmma_commit()
        wg.wgmma_wait(0)
        for i in range(regs):
            out[tid, i] = d[i]

    kernel[1, 128](memory, words, acc, out)
    return out


def operands(seed, n):
    rng = np.random.default_rng(seed)
    A = rng.integers(-4, 5, (64, 16)).astype(np.float64)
    B = rng.integers(-4, 5, (16, n)).astype(np.float64)
    C = rng.integers(-9, 10, (64, n)) + 0.5
    table = d_table(n)
    acc = np.array([[C[r, c] for r, c in cells] for cells in table], np.float32)
    return A, B, C, acc, table


CASES = [
    (0, False, 16, 0),
    (1, False, 64, 16),
    (2, False, 32, 16),
    (3, False, 24, 0),
    (0, True, 16, 0),
    (1, True, 64, 0),
    (2, True, 64, 0),
    (3, True, 40, 0),
]


@pytest.mark.parametrize("mode, trans_b, n, k0", CASES)
def test_every_lane_gets_its_d_elements_for_each_swizzle_mode_and_major_ness(mode, trans_b, n, k0):
    A, B, C, acc, table = operands(10 * mode + n, n)
    out = run(place(B, mode, trans_b, k0), mode, n, trans_b, a_words(A), acc)
    D = A @ B + C
    for thread, cells in enumerate(table):
        assert out[thread].tolist() == [D[r, c] for r, c in cells], thread


def test_a_words_with_two_registers_swapped_give_a_wrong_product():
    A, B, C, acc, table = operands(1, 16)
    out = run(place(B, 1, False), 1, 16, False, a_words(A, swap=(1, 2)), acc)
    want = np.array([[(A @ B + C)[r, c] for r, c in cells] for cells in table])
    assert (out != want).any()


@pytest.mark.parametrize("trans_b", [False, True])
def test_a_128_byte_swizzled_tile_stored_unswizzled_gives_a_wrong_product(trans_b):
    A, B, C, acc, table = operands(2, 64)
    out = run(place(B, 1, trans_b, swizzle=False), 1, 64, trans_b, a_words(A), acc)
    want = np.array([[(A @ B + C)[r, c] for r, c in cells] for cells in table])
    assert not np.array_equal(out, want)


def test_d_lands_only_at_wait_and_two_wgmmas_chain_on_one_accumulator():
    """Between commit and wait the accumulator still holds its old value (on a GPU:
    undefined); two wgmmas issued on it before the wait add up."""
    A, B, C, acc, table = operands(3, 8)
    memory, start, lbo, sbo = place(B, 0, False)
    words, size = a_words(A), memory.size
    early = np.full((128, 4), np.nan, np.float32)
    late = np.full((128, 4), np.nan, np.float32)

    @cuda.jit
    def kernel(memory, words, acc, early, late):
        tid = cuda.threadIdx.x
        smem = cuda.shared.array(SMEM, np.float16)
        pad = wg.align_pad(smem)
        for i in range(tid, size, 128):
            smem[pad + i] = memory[i]
        wg.fence_proxy_async()
        cuda.syncthreads()  # B is in shared memory before the warpgroup reads it
        d = cuda.local.array(4, float32)
        for i in range(4):
            d[i] = acc[tid, i]
        desc = wg.smem_desc(smem, pad + start, lbo, sbo, 0)
        w = words[tid]
        wg.wgmma_fence()
        wg.wgmma_n8(desc, w[0], w[1], w[2], w[3], d, 0, 1)
        wg.wgmma_n8(desc, w[0], w[1], w[2], w[3], d, 0, 1)
        wg.wgmma_commit()
        for i in range(4):
            early[tid, i] = d[i]
        wg.wgmma_wait(0)
        for i in range(4):
            late[tid, i] = d[i]

    kernel[1, 128](memory, words, acc, early, late)
    D = 2 * (A @ B) + C
    assert np.array_equal(early, acc)
    for thread, cells in enumerate(table):
        assert late[thread].tolist() == [D[r, c] for r, c in cells], thread


def test_the_descriptor_encodes_start_lbo_sbo_and_swizzle_where_the_isa_puts_them():
    out = np.zeros(3, np.uint64)

    @cuda.jit
    def kernel(out):
        smem = cuda.shared.array(64, np.float16)
        out[0] = wg.smem_desc(smem, 0, 384, 2048, 2)
        out[1] = wg.smem_desc(smem, 8, 384, 2048, 2)
        out[2] = wg.shared_address(smem, 8)

    kernel[1, 1](out)
    first, second = int(out[0]), int(out[1])
    assert (first >> 16) & 0x3FFF == 384 >> 4 and (first >> 32) & 0x3FFF == 2048 >> 4
    assert first >> 62 == 2 and (first >> 14) & 3 == 0 and (first >> 46) & 0xFFFF == 0
    assert (second & 0x3FFF) - (first & 0x3FFF) == 1  # 8 halves = 16 bytes = one unit
    assert second & 0x3FFF == (int(out[2]) & 0x3FFFF) >> 4


def test_an_unknown_shape_is_refused_with_the_served_list():
    with pytest.raises(ValueError, match="wgmma serves N in"):
        wg.mma_for(12, False)
