"""The simulator's stand-ins behave as CUDA documents its warp shuffles and loads,
and the primitives built on them (reductions, online softmax) are right.

CUDA C++ Programming Guide, "Warp Shuffle Functions": with width w, lanes form aligned
groups of w; __shfl_sync reads lane (src % w) of the caller's group; __shfl_up/down
return the caller's own value when the source leaves the group; __shfl_xor may read an
earlier group but returns its own value for a later one.
"""

import math
import time

import numpy as np
import pytest
from numba import cuda

import cuda_kernels
from cuda_kernels import primitives
from cuda_kernels.sim import simulator as _simulator

pytestmark = pytest.mark.skipif(
    cuda_kernels.backend() != "simulator", reason="tests the simulator's stand-ins"
)
FULL = 0xFFFFFFFF


def run_lanes(threads, body, width=None, **kw):
    """Run `body(tid, out)` on one block of `threads` simulated threads; out[tid] rows."""
    out = np.full((threads, width or 1), np.nan)

    @cuda.jit
    def kernel(out):
        body(cuda.threadIdx.x, out)

    kernel[1, threads](out)
    return out


@pytest.mark.parametrize("lane_mask", [16, 8, 4, 2, 1])
def test_xor_shuffle_swaps_values_between_lanes_that_differ_in_the_mask_bits(lane_mask):
    def body(tid, out):
        out[tid, 0] = cuda.shfl_xor_sync(FULL, 100 + tid, lane_mask)

    got = run_lanes(64, body)[:, 0]
    want = [100 + (t // 32) * 32 + ((t % 32) ^ lane_mask) for t in range(64)]
    assert got.tolist() == want  # two warps: lanes never cross into the other warp


@pytest.mark.parametrize(
    "mode,b,width",
    [
        ("idx", 3, 32),
        ("idx", 35, 32),
        ("idx", 5, 8),
        ("up", 2, 32),
        ("up", 3, 8),
        ("down", 1, 32),
        ("down", 4, 16),
        ("xor", 4, 8),
        ("xor", 16, 8),
        ("xor", 1, 1),
    ],
)
def test_every_mode_and_width_follows_the_cuda_definition(mode, b, width):
    def body(tid, out):
        out[tid, 0] = _simulator.shuffle(mode, FULL, float(tid), b, width)

    got = run_lanes(32, body)[:, 0]
    first = [(lane // width) * width for lane in range(32)]
    want = {
        "idx": [f + b % width for f in first],
        "up": [
            lane - b if lane - b >= f else lane for lane, f in zip(range(32), first, strict=True)
        ],
        "down": [
            lane + b if lane + b < f + width else lane
            for lane, f in zip(range(32), first, strict=True)
        ],
        "xor": [
            lane ^ b if (lane ^ b) < f + width else lane
            for lane, f in zip(range(32), first, strict=True)
        ],
    }
    assert got.tolist() == [float(v) for v in want[mode]]


def test_numba_named_shuffles_are_installed_with_width_32():
    def body(tid, out):
        out[tid, 0] = cuda.shfl_sync(FULL, tid, 7)
        out[tid, 1] = cuda.shfl_up_sync(FULL, tid, 1)
        out[tid, 2] = cuda.shfl_down_sync(FULL, tid, 1)

    got = run_lanes(32, body, width=3)
    assert got[:, 0].tolist() == [7] * 32
    assert got[:, 1].tolist() == [0] + list(range(31))
    assert got[:, 2].tolist() == list(range(1, 32)) + [31]


def test_a_half_warp_mask_exchanges_only_among_the_lanes_it_names():
    def body(tid, out):
        if tid < 16:  # lanes 16..31 never call: legal, they are not in the mask
            out[tid, 0] = cuda.shfl_xor_sync(0x0000FFFF, tid, 8)

    got = run_lanes(32, body)[:, 0]
    assert got[:16].tolist() == [t ^ 8 for t in range(16)] and np.isnan(got[16:]).all()


def test_reading_a_lane_outside_the_mask_or_calling_from_outside_it_is_an_error():
    def reads_outside(tid, out):
        if tid < 16:
            out[tid, 0] = cuda.shfl_xor_sync(0x0000FFFF, tid, 16)

    with pytest.raises(RuntimeError, match="not in mask"):
        run_lanes(32, reads_outside)

    def not_in_own_mask(tid, out):
        out[tid, 0] = cuda.shfl_xor_sync(0x1, tid, 0)

    with pytest.raises(RuntimeError, match="not in its mask"):
        run_lanes(2, not_in_own_mask)


def test_a_divergent_shuffle_is_reported_instead_of_hanging(monkeypatch):
    monkeypatch.setattr(_simulator, "TIMEOUT_S", 2.0)  # seconds with no lane arriving

    def body(tid, out):
        if tid != 5:  # lane 5 skips a full-mask shuffle
            out[tid, 0] = cuda.shfl_xor_sync(FULL, tid, 1)

    with pytest.raises(RuntimeError, match=r"lanes \[5\].*never reached"):
        run_lanes(32, body)


def test_lanes_that_arrive_late_but_one_after_another_are_slow_not_divergent(monkeypatch):
    # lane i reaches the shuffle i * 0.14 s late: the last comes 4.3 s after the first, over
    # two timeouts, but each gap between arrivals is a fourteenth of one (a loaded machine's
    # pattern). With a 0.5 s timeout and 0.05 s gaps, a run beside CI at load 20 saw one
    # thread woken more than 0.5 s late and took it for divergence.
    monkeypatch.setattr(_simulator, "TIMEOUT_S", 2.0)

    def body(tid, out):
        time.sleep(0.14 * tid)
        out[tid, 0] = cuda.shfl_xor_sync(FULL, tid, 1)

    assert run_lanes(32, body)[:, 0].tolist() == [t ^ 1 for t in range(32)]


@pytest.mark.parametrize("width", [32, 16, 4, 1])
def test_warp_sum_and_max_reduce_each_aligned_group_of_width_lanes(width):
    values = np.random.default_rng(width).standard_normal(32).astype(np.float32)

    def body(tid, out):
        out[tid, 0] = primitives.warp_sum(values[tid], width)
        out[tid, 1] = primitives.warp_max(values[tid], width)

    got = run_lanes(32, body, width=2)
    groups = values.reshape(-1, width).astype(np.float64)
    assert np.allclose(got[:, 0], np.repeat(groups.sum(1), width), rtol=1e-6, atol=1e-6)
    assert got[:, 1].tolist() == np.repeat(groups.max(1), width).tolist()


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_load16_reads_the_16_bytes_at_an_element_index_and_unpack16_converts_them(dtype):
    data = np.random.default_rng(1).standard_normal((3, 16)).astype(dtype)
    vec = primitives.vec_width(dtype)
    out = np.full((4, 8), np.nan, np.float32)

    @cuda.jit
    def kernel(a, out):
        t = cuda.threadIdx.x
        raw = primitives.load16(a, 16 + t * vec)  # row 1 of a [3, 16] array
        primitives.unpack16(raw, out[t], vec == 8)

    kernel[1, 16 // vec](data, out)
    got = out[: 16 // vec, :vec].reshape(-1)
    assert got.tolist() == data[1].astype(np.float32).tolist()


def test_load16_faults_on_a_misaligned_or_out_of_bounds_address_like_a_gpu():
    data = np.zeros(16, np.float32)
    assert primitives.aligned16(data) and primitives.device_address(data) % 16 == 0

    @cuda.jit
    def kernel(a, at):
        primitives.load16(a, at)

    with pytest.raises(RuntimeError, match="misaligned"):
        kernel[1, 1](data, 1)
    with pytest.raises(RuntimeError, match="outside"):
        kernel[1, 1](data, 16)
    assert not primitives.aligned16(np.zeros(17, np.float32)[1:])


@pytest.mark.parametrize("slack", [0.0, 8.0])
def test_online_softmax_pieces_merge_two_halves_into_the_full_softmax(slack):
    """Base-2 states of two halves (one with a masked token), merged, give the softmax
    of all scores; lazy rescaling (slack 8) only changes where the max is kept."""
    scores = (np.random.default_rng(3).standard_normal(10) * 6).astype(np.float32)
    scores[2] = -np.inf  # a masked token
    values = np.random.default_rng(4).standard_normal(10).astype(np.float32)
    out = np.zeros(8, np.float32)

    @cuda.jit
    def kernel(s, v, out):
        states = cuda.local.array(6, np.float32)  # (m, l, acc) per half
        for half in range(2):
            m, lsum, acc = -math.inf, np.float32(0), np.float32(0)
            for i in range(5 * half, 5 * half + 5):
                m, alpha = primitives.softmax_rescale(m, s[i], slack)
                p = primitives.exp2_or_zero(s[i], m)
                lsum = lsum * alpha + p
                acc = acc * alpha + p * v[i]
            states[3 * half], states[3 * half + 1], states[3 * half + 2] = m, lsum, acc
        m, lsum, w_a, w_b = primitives.merge_states(states[0], states[1], states[3], states[4])
        out[0], out[1], out[2] = m, lsum, (w_a * states[2] + w_b * states[5]) / lsum
        empty = primitives.merge_states(-math.inf, np.float32(0), states[3], states[4])
        out[4], out[5], out[6], out[7] = empty
        out[3] = primitives.softmax_rescale(-math.inf, -math.inf, slack)[1]  # nothing seen yet

    kernel[1, 1](scores, values, out)
    keep = np.isfinite(scores)
    s2, v = scores[keep].astype(np.float64), values[keep].astype(np.float64)
    p = 2.0 ** (s2 - out[0])
    assert out[0] <= s2.max() <= out[0] + slack  # the kept max lags by at most the slack
    assert math.isclose(out[1], p.sum(), rel_tol=1e-5)
    assert math.isclose(out[2], (p * v).sum() / p.sum(), rel_tol=1e-5, abs_tol=1e-6)
    assert out[3] == 1.0 and out[6] == 0.0 and out[7] == 1.0  # the empty side weighs 0
    second = scores[5:].astype(np.float64)  # merging with an empty state changes nothing
    assert math.isclose(out[5], (2.0 ** (second - out[4])).sum(), rel_tol=1e-5)


def test_lanes_asking_for_a_shared_array_at_once_all_get_the_same_one(monkeypatch):
    """numba's simulator creates a shared array without a lock: two lanes arriving
    together could each create one (seen once in ~30 decode launches as garbage output).
    Slowing the creation down makes that window wide; the installed version holds."""
    import threading
    import time

    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    shared = FakeCUDAShared(0)
    real_empty = np.empty

    def slow_empty(*args, **kwargs):
        time.sleep(0.02)
        return real_empty(*args, **kwargs)

    monkeypatch.setattr(np, "empty", slow_empty)
    got = []
    lanes = [
        threading.Thread(target=lambda: got.append(shared.array(4, np.float32))) for _ in range(4)
    ]
    for lane in lanes:
        lane.start()
    for lane in lanes:
        lane.join()
    assert len(got) == 4 and all(array is got[0] for array in got)


@pytest.mark.parametrize("n,width", [(8, 16), (32, 16), (1, 4), (4, 1), (2, 32), (16, 2)])
def test_group_sums_gives_every_lane_of_a_group_all_n_totals(n, width):
    values = np.random.default_rng(n * width).standard_normal((32, n)).astype(np.float32)
    out = np.full((32, n), np.nan, np.float32)

    @cuda.jit
    def kernel(values, out):
        lane = cuda.threadIdx.x
        vals = cuda.local.array(32, np.float32)
        for k in range(n):
            vals[k] = values[lane, k]
        primitives.group_sums(vals, n, width, lane, out[lane])

    kernel[1, 32](values, out)
    want = values.astype(np.float64).reshape(32 // width, width, n).sum(1)  # [groups, n]
    assert np.allclose(out, np.repeat(want, width, axis=0), rtol=1e-5, atol=1e-5)
