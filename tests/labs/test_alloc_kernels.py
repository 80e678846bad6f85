"""Device block pool under the simulator: atomics and prefix sums never double-hand or lose a
block."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuda_kernels.alloc import DevicePool, prefix
from pagedsim.errors import OutOfBlocks

pytestmark = [pytest.mark.kernels, pytest.mark.ch3_7]


@st.composite
def batches(draw, max_requests=64):
    """A pool size and a batch of 32..64 concurrent requests, each wanting 0..4 blocks."""
    counts = draw(st.lists(st.integers(0, 4), min_size=32, max_size=max_requests))
    slack = draw(st.integers(1, 20))
    return sum(counts) + slack, np.array(counts, dtype=np.int32)


def granted_ids(table, granted, counts):
    rows = table[granted]
    ids = rows[rows >= 0]
    # every granted request got exactly its count, every refused one nothing
    assert ((table >= 0).sum(axis=1) == np.where(granted, counts, 0)).all()
    return ids


@settings(max_examples=6)
@given(batches(), st.sampled_from(["cas", "atomic_add", "prefix_sum"]))
def test_concurrent_allocation_hands_every_block_to_at_most_one_request(case, method):
    num_blocks, counts = case
    pool = DevicePool(num_blocks)
    table, granted = pool.allocate(counts, method)
    assert granted.all()
    ids = granted_ids(table, granted, counts)
    assert len(set(ids.tolist())) == ids.size == counts.sum()  # no block twice
    free = pool.free_list()
    assert sorted(ids.tolist() + free.tolist()) == list(range(num_blocks))  # no block lost
    ref = pool.ref_counts()
    assert (ref[ids] == 1).all() and (ref[free] == 0).all()
    pool.check_invariants()


@settings(max_examples=4)
@given(st.lists(st.integers(1, 5), min_size=32, max_size=48), st.integers(5, 40))
def test_cas_allocation_refuses_what_does_not_fit_and_takes_nothing_for_it(counts, num_blocks):
    counts = np.array(counts, dtype=np.int32)
    pool = DevicePool(num_blocks)
    table, granted = pool.allocate(counts, "cas")
    ids = granted_ids(table, granted, counts)
    assert len(set(ids.tolist())) == ids.size
    assert ids.size + pool.num_free == num_blocks
    assert not granted.all() or counts.sum() <= num_blocks
    # a refused request failed because too little was left at that moment
    assert (~granted).sum() == 0 or pool.num_free < counts[~granted].min()
    pool.check_invariants()


@settings(max_examples=4)
@given(batches(max_requests=40), st.data())
def test_free_returns_exactly_the_blocks_whose_count_reaches_zero(case, data):
    num_blocks, counts = case
    pool = DevicePool(num_blocks)
    table, _ = pool.allocate(counts, "atomic_add")
    ids = table[table >= 0]
    shared = np.array(
        data.draw(st.lists(st.sampled_from(ids.tolist()), max_size=20)) if ids.size else [],
        dtype=np.int32,
    )
    pool.incref(shared)  # forks: some blocks get extra owners
    expected_ref = np.zeros(num_blocks, dtype=np.int64)
    np.add.at(expected_ref, ids, 1)
    np.add.at(expected_ref, shared, 1)
    assert (pool.ref_counts() == expected_ref).all()
    drop = ids.copy()  # every original owner lets go, concurrently
    released = pool.free(drop)
    assert sorted(drop[released].tolist()) == sorted(set(ids.tolist()) - set(shared.tolist()))
    expected_ref[ids] -= 1
    assert (pool.ref_counts() == expected_ref).all()
    pool.check_invariants()
    released = pool.free(shared)  # now the forks let go: the rest come back
    assert sorted(shared[released].tolist()) == sorted(set(shared.tolist()))
    assert pool.num_free == num_blocks
    pool.check_invariants()


def test_device_scan_matches_numpy_across_several_thread_blocks():
    rng = np.random.default_rng(7)
    values = rng.integers(0, 9, size=prefix.SCAN_TPB * 2 + 37).astype(np.int32)
    from numba import cuda

    excl = prefix.exclusive_scan(cuda.to_device(values)).copy_to_host()
    assert (excl == np.concatenate([[0], np.cumsum(values)[:-1]])).all()


def test_prefix_sum_gives_request_i_the_slice_its_scan_offset_names():
    pool = DevicePool(10)
    table, granted = pool.allocate([2, 0, 3], "prefix_sum")
    # stack bottom-first is 9..0; base = 10 - 5 = 5, so the slice is free_ids[5:10] = 4,3,2,1,0
    assert table.tolist() == [[4, 3, -1], [-1, -1, -1], [2, 1, 0]] and granted.all()


def test_racy_kernel_is_correct_when_one_thread_runs_alone():
    pool = DevicePool(6)
    table, _ = pool.allocate([3], "racy")
    assert table.tolist() == [[2, 1, 0]] and pool.num_free == 3


@pytest.mark.parametrize("method", ["atomic_add", "prefix_sum", "racy"])
def test_batch_that_does_not_fit_raises_before_launch_and_changes_nothing(method):
    pool = DevicePool(5)
    with pytest.raises(OutOfBlocks, match="needs 6"):
        pool.allocate([3, 3], method)
    assert pool.num_free == 5 and not pool.ref_counts().any()


def test_bad_arguments_are_named_and_leave_the_pool_unchanged():
    pool = DevicePool(4)
    with pytest.raises(ValueError, match="method"):
        pool.allocate([1], "lock")
    with pytest.raises(ValueError, match="counts must be non-negative"):
        pool.allocate([1, -1])
    with pytest.raises(ValueError, match="counts must be 1-D"):
        pool.allocate([[1]])
    table, _ = pool.allocate([2])
    with pytest.raises(ValueError, match="more often than they are owned"):
        pool.free([table[0, 0], table[0, 0]])
    with pytest.raises(ValueError, match="pool has 4 blocks"):
        pool.free([9])
    with pytest.raises(ValueError, match=r"free block id\(s\) \[2\]"):
        pool.incref([table[0, 0], pool.free_list()[-1]])
    with pytest.raises(ValueError, match="num_blocks"):
        DevicePool(0)
    assert pool.num_free == 2 and sorted(pool.ref_counts().tolist()) == [0, 0, 1, 1]
