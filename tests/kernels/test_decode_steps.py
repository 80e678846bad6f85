"""The decode kernel's per-step pieces on the simulator: the reduce-scatter leaves each
lane the totals `owned_index` names, `broadcast` gives every lane all of them, the vote
stand-in follows CUDA's __any_sync, and primitives.exp2_or_zero (the one masked exp2) keeps NaN."""

import math

import numpy as np
import pytest
from numba import cuda, float32

import cuda_kernels  # noqa: F401  (selects the backend)
from cuda_kernels.primitives import broadcast, exp2_or_zero, owned_index, reduce_scatter


def group_kernel(n, width):
    own_n = max(1, n // width)

    @cuda.jit
    def kernel(values, owned, owned_k, every):
        lane = cuda.threadIdx.x
        vals = cuda.local.array(n, float32)
        out = cuda.local.array(n, float32)
        for i in range(n):
            vals[i] = values[lane, i]
        own = reduce_scatter(vals, n, width, lane)
        for j in range(own):
            owned[lane, j] = vals[j]
            owned_k[lane, j] = owned_index(lane, j, n, width)
        broadcast(vals, n, width, lane, out)
        for i in range(n):
            every[lane, i] = out[i]

    return kernel, own_n


@pytest.mark.parametrize("n,width", [(1, 8), (2, 16), (8, 16), (16, 16), (8, 4), (4, 1)])
def test_each_lane_owns_the_group_totals_owned_index_names_and_broadcast_gives_all(n, width):
    rng = np.random.default_rng(n * 31 + width)
    values = rng.integers(-50, 50, (32, n)).astype(np.float32)  # exact sums in float32
    kernel, own = group_kernel(n, width)
    owned = np.full((32, own), np.nan, np.float32)
    owned_k = np.full((32, own), -1, np.int64)
    every = np.full((32, n), np.nan, np.float32)
    kernel[1, 32](values, owned, owned_k, every)
    totals = values.reshape(32 // width, width, n).sum(axis=1)  # [groups, n]
    for lane in range(32):
        want = totals[lane // width]
        np.testing.assert_array_equal(every[lane], want)
        for j in range(own):
            assert 0 <= owned_k[lane, j] < n
            assert owned[lane, j] == want[owned_k[lane, j]]
    for g in range(32 // width):  # together the lanes of a group own every total
        assert set(owned_k[g * width : (g + 1) * width].ravel()) == set(range(n))


@cuda.jit
def vote_kernel(flags, out):
    lane = cuda.threadIdx.x
    out[lane] = cuda.any_sync(0xFFFFFFFF, flags[lane] != 0)


@pytest.mark.parametrize("hot", [[], [0], [31], [3, 17]])
def test_the_vote_is_one_in_every_lane_exactly_when_some_lane_votes(hot):
    flags = np.zeros(32, np.int32)
    flags[hot] = 1
    out = np.full(32, -1, np.int32)
    vote_kernel[1, 32](flags, out)
    assert (out == (1 if hot else 0)).all()


@cuda.jit
def exp_kernel(scores, m, out):
    i = cuda.threadIdx.x
    out[i] = exp2_or_zero(scores[i], m[i])


def test_exp2_or_zero_is_zero_only_for_a_masked_score_and_keeps_nan():
    scores = np.array([-math.inf, np.nan, 1.0, 3.0, np.nan], np.float32)
    m = np.array([2.0, 2.0, 2.0, 3.0, -math.inf], np.float32)
    out = np.full(5, 7.0, np.float32)
    exp_kernel[1, 5](scores, m, out)
    assert out[0] == 0 and np.isnan(out[1]) and np.isnan(out[4])
    assert out[2] == np.float32(0.5) and out[3] == 1
