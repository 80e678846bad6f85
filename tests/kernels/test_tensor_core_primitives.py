"""The tensor-core stand-ins hold exactly the per-lane fragments the PTX ISA documents.

The tables below are written out from the PTX ISA ("Matrix Fragments for mma.m16n8k16
with floating point type", "ldmatrix"), register by register, independently of the
stand-ins' index arithmetic. Every test gives each lane the elements its table says
it holds (or reads back what a lane got) and compares element by element: a layout that
is permuted but self-consistent would still produce A @ B through its own loads, and
would be wrong on a GPU, so A @ B coming out is not the test.
"""

import numpy as np
import pytest
from numba import cuda

import cuda_kernels
from cuda_kernels import primitives as pr

pytestmark = pytest.mark.skipif(
    cuda_kernels.backend() != "simulator", reason="tests the simulator's stand-ins"
)


def gid(lane):  # "groupID" in the ISA
    return lane >> 2


def tig(lane):  # "threadID_in_group"
    return lane % 4


# register -> [(row, col) of its low half, (row, col) of its high half], per the ISA figures
A_TABLE = {
    0: lambda n: [(gid(n), 2 * tig(n)), (gid(n), 2 * tig(n) + 1)],
    1: lambda n: [(gid(n) + 8, 2 * tig(n)), (gid(n) + 8, 2 * tig(n) + 1)],
    2: lambda n: [(gid(n), 2 * tig(n) + 8), (gid(n), 2 * tig(n) + 9)],
    3: lambda n: [(gid(n) + 8, 2 * tig(n) + 8), (gid(n) + 8, 2 * tig(n) + 9)],
}
B_TABLE = {
    0: lambda n: [(2 * tig(n), gid(n)), (2 * tig(n) + 1, gid(n))],
    1: lambda n: [(2 * tig(n) + 8, gid(n)), (2 * tig(n) + 9, gid(n))],
}
C_TABLE = [
    lambda n: (gid(n), 2 * tig(n)),
    lambda n: (gid(n), 2 * tig(n) + 1),
    lambda n: (gid(n) + 8, 2 * tig(n)),
    lambda n: (gid(n) + 8, 2 * tig(n) + 1),
]


def word(lo, hi, kind="f16"):
    """The u32 holding two b16 values, `lo` in bits 0-15."""
    if kind == "f16":
        return int(np.array([lo, hi], np.float16).view(np.uint32)[0])
    bits = np.array([lo, hi], np.float32).view(np.uint32) >> 16  # exact for these values
    return int(bits[0] | (bits[1] << 16))


def fragments(A, B, C, kind):
    """[32, 10] per-lane operands (a0..a3, b0, b1 as words; c0..c3) from the tables."""
    ops = np.zeros((32, 10), np.float64)
    for lane in range(32):
        for r, cells in A_TABLE.items():
            ops[lane, r] = word(*(A[i, j] for i, j in cells(lane)), kind)
        for r, cells in B_TABLE.items():
            ops[lane, 4 + r] = word(*(B[i, j] for i, j in cells(lane)), kind)
        for r, cell in enumerate(C_TABLE):
            ops[lane, 6 + r] = C[cell(lane)]
    return ops


@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_mma_m16n8k16_gives_each_lane_the_d_elements_the_isa_table_names(kind):
    rng = np.random.default_rng(1)
    A = rng.integers(-8, 9, (16, 16)).astype(np.float64)  # exact in fp16 and bf16
    B = rng.integers(-8, 9, (16, 8)).astype(np.float64)
    C = rng.integers(-50, 50, (16, 8)) + 0.25
    ops = fragments(A, B, C, kind)
    words = ops[:, :6].astype(np.uint32)
    acc = ops[:, 6:].astype(np.float32)
    out = np.full((32, 4), np.nan, np.float32)
    mma = pr.mma_f16 if kind == "f16" else pr.mma_bf16

    @cuda.jit
    def kernel(words, acc, out):
        n = cuda.threadIdx.x
        w, c = words[n], acc[n]
        d = mma(w[0], w[1], w[2], w[3], w[4], w[5], c[0], c[1], c[2], c[3])
        for i in range(4):
            out[n, i] = d[i]

    kernel[1, 32](words, acc, out)
    D = A @ B + C
    for lane in range(32):
        assert out[lane].tolist() == [D[cell(lane)] for cell in C_TABLE], lane


def test_a_single_nonzero_a_element_reaches_only_the_rows_of_d_the_tables_predict():
    """One-hot probes: A[i, j] = 1 and B = ones makes D's row i all ones. Which lanes see
    it depends on the tables only, so a swapped register pair would show here."""
    out = np.full((32, 4), np.nan, np.float32)

    @cuda.jit
    def kernel(words, out):
        n = cuda.threadIdx.x
        w = words[n]
        d = pr.mma_f16(w[0], w[1], w[2], w[3], w[4], w[5], 0.0, 0.0, 0.0, 0.0)
        for i in range(4):
            out[n, i] = d[i]

    for i, j in ((0, 0), (3, 9), (12, 5), (15, 15)):
        A = np.zeros((16, 16))
        A[i, j] = 1.0
        B = np.zeros((16, 8))
        B[j, :] = np.arange(1, 9)  # column n of row j carries n + 1
        kernel[1, 32](fragments(A, B, np.zeros((16, 8)), "f16")[:, :6].astype(np.uint32), out)
        for lane in range(32):
            want = [float(c + 1) if r == i else 0.0 for r, c in (cell(lane) for cell in C_TABLE)]
            assert out[lane].tolist() == want, (i, j, lane)


LD_ROW = {1: lambda n: n % 8, 2: lambda n: n % 16, 4: lambda n: n}  # thread -> row it gives


@pytest.mark.parametrize("count", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_hands_lane_l_row_l_over_4_or_with_trans_column_l_over_4(count, trans):
    """Shared memory holds 4 matrices of 8 rows x 8 b16, row r of matrix m at a row of its
    own (rows interleaved to show that only the addresses matter); threads 8m .. 8m+7 give
    the row addresses of matrix m."""
    values = np.arange(4 * 8 * 8, dtype=np.float16).reshape(4, 8, 8)  # [matrix, row, col]
    order = np.random.default_rng(count).permutation(32)  # memory row of (matrix, row)
    memory = np.zeros((32, 8), np.float16)
    memory[order] = values.reshape(32, 8)
    out = np.zeros((32, 4), np.uint32)
    load = {
        (1, False): pr.ldmatrix_x1,
        (2, False): pr.ldmatrix_x2,
        (4, False): pr.ldmatrix_x4,
        (1, True): pr.ldmatrix_x1_trans,
        (2, True): pr.ldmatrix_x2_trans,
        (4, True): pr.ldmatrix_x4_trans,
    }[count, trans]
    rows = np.array([order[LD_ROW[count](n)] for n in range(32)], np.int32)

    @cuda.jit
    def kernel(memory, rows, out):
        n = cuda.threadIdx.x
        smem = cuda.shared.array((32, 8), np.float16)
        for c in range(8):
            smem[n, c] = memory[n, c]
        cuda.syncthreads()  # every row written before any lane loads
        got = load(smem, rows[n] * 8)
        if count == 1:
            out[n, 0] = got
        else:
            for m in range(count):
                out[n, m] = got[m]

    kernel[1, 32](memory, rows, out)
    for lane in range(32):
        for m in range(count):
            if trans:
                cells = [(2 * tig(lane), gid(lane)), (2 * tig(lane) + 1, gid(lane))]
            else:
                cells = [(gid(lane), 2 * tig(lane)), (gid(lane), 2 * tig(lane) + 1)]
            want = word(*(values[m][c] for c in cells))
            assert int(out[lane, m]) == want, (lane, m)


def test_ldmatrix_x4_of_a_row_major_tile_yields_the_mma_a_fragment():
    """Lane l points at row l % 16, column 8 (l // 16) of a 16 x 16 tile: registers 0..3
    are then a0..a3 of the A table."""
    A = np.arange(256, dtype=np.float16).reshape(16, 16) / 4
    out = np.zeros((32, 4), np.uint32)

    @cuda.jit
    def kernel(tile, out):
        n = cuda.threadIdx.x
        smem = cuda.shared.array((16, 16), np.float16)
        for k in range(8):
            smem[n // 2, (n % 2) * 8 + k] = tile[n // 2, (n % 2) * 8 + k]
        cuda.syncthreads()  # the tile is in shared memory before ldmatrix reads it
        got = pr.ldmatrix_x4(smem, (n % 16) * 16 + (n // 16) * 8)
        for m in range(4):
            out[n, m] = got[m]

    kernel[1, 32](A, out)
    for lane in range(32):
        assert [int(w) for w in out[lane]] == [
            word(*(A[c] for c in A_TABLE[r](lane))) for r in range(4)
        ], lane


def test_ldmatrix_refuses_a_row_address_that_is_not_16_byte_aligned():
    @cuda.jit
    def kernel(out):
        smem = cuda.shared.array((8, 16), np.float16)
        out[cuda.threadIdx.x] = pr.ldmatrix_x1(smem, cuda.threadIdx.x * 16 + 4)

    with pytest.raises(RuntimeError, match="misaligned"):
        kernel[1, 32](np.zeros(32, np.uint32))


def test_cp_async_lands_only_when_wait_group_retires_its_group():
    """Two groups of copies: after wait_group 1 only the older is in shared memory, after
    wait_group 0 both; a zero-size source fills its 16 bytes with zeros."""
    src = np.arange(64, dtype=np.float16)
    out = np.full((3, 24), -1, np.float16)

    @cuda.jit
    def kernel(src, out):
        smem = cuda.shared.array(24, np.float16)
        for i in range(24):
            smem[i] = -7.0
        pr.cp_async16(smem, 0, src, 8, 16)  # group 0: src[8:16] -> smem[0:8]
        pr.cp_async_commit()
        pr.cp_async16(smem, 8, src, 32, 16)  # group 1: src[32:40] -> smem[8:16]
        pr.cp_async16(smem, 16, src, 0, 0)  # group 1: zeros -> smem[16:24]
        pr.cp_async_commit()
        for i in range(24):
            out[0, i] = smem[i]
        pr.cp_async_wait(1)
        for i in range(24):
            out[1, i] = smem[i]
        pr.cp_async_wait(0)
        for i in range(24):
            out[2, i] = smem[i]

    kernel[1, 1](src, out)
    assert out[0].tolist() == [-7.0] * 24
    assert out[1].tolist() == list(range(8, 16)) + [-7.0] * 16
    assert out[2].tolist() == list(range(8, 16)) + list(range(32, 40)) + [0.0] * 8


@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_packing_rounds_to_nearest_even_with_lo_in_the_low_half(kind):
    pairs = [(1.0, -2.5), (1.0 + 2**-11, 3.0), (1.0 + 3 * 2**-11, 65504.0 * 2), (np.nan, 0.5)]
    if kind == "bf16":
        pairs = [(1.0, -2.5), (1.0 + 2**-8, 3.0), (1.0 + 3 * 2**-8, 3.4e38), (np.nan, 0.5)]
    data = np.array(pairs, np.float32)
    out = np.zeros(len(pairs), np.uint32)
    pack = pr.pack_f16x2 if kind == "f16" else pr.pack_bf16x2

    @cuda.jit
    def kernel(data, out):
        i = cuda.threadIdx.x
        out[i] = pack(data[i, 0], data[i, 1])

    kernel[1, len(pairs)](data, out)
    halves = out.view(np.uint16).reshape(-1, 2)  # little endian: [lo, hi]
    if kind == "f16":
        got = halves.view(np.float16).astype(np.float32)
        want = [(1.0, -2.5), (1.0, 3.0), (1.0 + 4 * 2**-11, np.inf), (np.nan, 0.5)]
    else:
        got = (halves.astype(np.uint32) << 16).view(np.float32)
        want = [(1.0, -2.5), (1.0, 3.0), (1.0 + 4 * 2**-8, np.inf), (np.nan, 0.5)]
    assert np.allclose(got, np.array(want, np.float32), rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("chunks", [1, 2, 4, 8, 16, 32, 6, 10, 12])
def test_swizzled_rows_put_any_8_consecutive_rows_of_one_chunk_in_distinct_bank_groups(chunks):
    stride, shift, mask = pr.swizzle_shape(chunks)
    slots = {
        (r, c): pr.swizzled.py_func(r, c, stride, shift, mask)
        for r in range(64)
        for c in range(chunks)
    }
    assert len(set(slots.values())) == len(slots)  # a bijection onto the array
    assert all(r * stride <= s < (r + 1) * stride for (r, _), s in slots.items())  # own row
    for c in range(chunks):
        for r0 in range(0, 64, 8):
            assert len({slots[r, c] % 8 for r in range(r0, r0 + 8)}) == 8, (c, r0)
