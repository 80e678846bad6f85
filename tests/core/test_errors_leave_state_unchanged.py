"""Every misuse raises a clear error, and the pool or manager is exactly as it was."""

import numpy as np
import pytest
from helpers import manager_state as full_state
from helpers import pool_state

from pagedsim import BlockError, BlockPool, KVCacheManager, OutOfBlocks, SequenceError


def manager_state(m):  # a refused allocation is still a step: leave the step and trace out
    return full_state(m).without_history()


@pytest.fixture
def busy_pool():
    pool = BlockPool(4, block_size=16)
    pool.allocate(), pool.allocate()
    return pool


def test_allocating_from_an_empty_pool_raises_out_of_blocks():
    pool = BlockPool(2, block_size=16)
    pool.allocate(), pool.allocate()
    before = pool_state(pool)
    with pytest.raises(OutOfBlocks, match="needs 1 free block"):
        pool.allocate()
    assert pool_state(pool) == before


def test_allocate_many_beyond_the_free_count_takes_nothing(busy_pool):
    before = pool_state(busy_pool)
    with pytest.raises(OutOfBlocks):
        busy_pool.allocate_many(3)
    assert pool_state(busy_pool) == before


def test_freeing_a_free_block_is_a_double_free_that_names_the_block(busy_pool):
    before = pool_state(busy_pool)
    with pytest.raises(BlockError, match=r"^block 3 is already free \(double free\)$"):
        busy_pool.free(3)
    assert pool_state(busy_pool) == before


@pytest.mark.parametrize("bad", [-1, 4, 10**9])
def test_freeing_an_out_of_range_id_names_the_block(busy_pool, bad):
    before = pool_state(busy_pool)
    with pytest.raises(BlockError, match=rf"^block {bad} is out of range \[0, 4\)$"):
        busy_pool.free(bad)
    assert pool_state(busy_pool) == before


@pytest.mark.parametrize("bad", [1.0, "1", None, True])
def test_freeing_a_non_integer_is_a_type_error(busy_pool, bad):
    before = pool_state(busy_pool)
    with pytest.raises(TypeError, match="block id must be an int"):
        busy_pool.free(bad)
    assert pool_state(busy_pool) == before


def test_numpy_integers_are_accepted_as_block_ids(busy_pool):
    assert busy_pool.free(np.int32(1)) == 0


def test_block_error_is_a_value_error():
    assert issubclass(BlockError, ValueError)


def test_sharing_or_taking_a_block_in_the_wrong_state_is_refused(busy_pool):
    before = pool_state(busy_pool)
    with pytest.raises(BlockError, match="block 2 is free"):
        busy_pool.incref(2)
    with pytest.raises(BlockError, match="block 0 is not free"):
        busy_pool.take(0)
    assert pool_state(busy_pool) == before


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_gpu_blocks=0, block_size=4),
        dict(num_gpu_blocks=4, block_size=0),
        dict(num_gpu_blocks=4, block_size=4, free_order="random"),
    ],
)
def test_a_pool_with_bad_parameters_is_refused(kwargs):
    with pytest.raises(ValueError):
        BlockPool(**kwargs)


@pytest.fixture
def manager():
    m = KVCacheManager(6, 4)
    m.add_sequence("A", 5)
    m.add_sequence("B", 4)
    m.fork("B", "C")
    return m


def test_adding_a_sequence_that_does_not_fit_changes_nothing(manager):
    before = manager_state(manager)
    with pytest.raises(OutOfBlocks, match="needs 4 free block"):
        manager.add_sequence("D", 13)  # ceil(13 / 4) = 4 blocks; 6 - 3 used = 3 free
    assert manager_state(manager) == before


def test_appending_past_the_pool_changes_nothing_even_halfway(manager):
    before = manager_state(manager)
    with pytest.raises(OutOfBlocks):
        manager.append_tokens("A", 3 + 4 * 3 + 1)  # 4 new blocks wanted, 3 free
    assert manager_state(manager) == before
    assert manager.num_tokens("A") == 5


def test_a_decode_step_that_does_not_fit_changes_nothing():
    m = KVCacheManager(3, 2, trace=False)
    for s in "ABC":
        m.add_sequence(s, 2)  # every block full; the next token of each needs a block
    before = manager_state(m)
    with pytest.raises(OutOfBlocks, match="needs 3 free block"):
        m.decode_step(["A", "B", "C"])
    assert manager_state(m) == before


@pytest.mark.parametrize(
    "op",
    [
        lambda m: m.append_tokens("nope"),
        lambda m: m.free_sequence("nope"),
        lambda m: m.fork("nope", "X"),
        lambda m: m.block_table("nope"),
        lambda m: m.decode_step(["A", "nope"]),
        lambda m: m.slot_mapping("nope"),
    ],
)
def test_an_unknown_sequence_is_a_sequence_error(manager, op):
    before = manager_state(manager)
    with pytest.raises(SequenceError, match="unknown sequence 'nope'"):
        op(manager)
    assert manager_state(manager) == before


@pytest.mark.parametrize(
    "seq_ids, named",
    [
        (["A", "B", "nope"], "'nope'"),  # the tokens given to A and B are taken back
        (["B", "A", "B", "A", "nope", "A"], "'nope'"),  # listed twice, B at a block boundary
        (["A", "nope", "other"], "'nope'"),  # the first unknown id is named
        (["A", "B", ["unhashable"]], r"\['unhashable'\]"),
        ([["unhashable"]], r"\['unhashable'\]"),
    ],
)
def test_a_quiet_decode_step_with_an_unknown_sequence_changes_nothing(seq_ids, named):
    # tracing off, no slots, nothing shared, room enough: the step that checks ids as it goes
    m = KVCacheManager(8, 4, trace=False)
    m.add_sequence("A", 5)
    m.add_sequence("B", 4)  # full: B's next token starts a block
    before = manager_state(m)
    with pytest.raises(SequenceError, match=rf"^unknown sequence {named}$"):
        m.decode_step(seq_ids, with_slots=False)
    assert manager_state(m) == before
    m.check_invariants()
    slots = m.decode_step(["B", "A"])  # the step still goes on from where it was
    assert slots == [m.block_table("B")[1] * 4, m.block_table("A")[1] * 4 + 1]


@pytest.mark.parametrize("op", [lambda m: m.add_sequence("A", 1), lambda m: m.fork("A", "B")])
def test_reusing_a_live_sequence_id_is_refused(manager, op):
    before = manager_state(manager)
    with pytest.raises(SequenceError, match="already exists"):
        op(manager)
    assert manager_state(manager) == before


@pytest.mark.parametrize(
    "bad, error",
    [(-1, ValueError), (1.5, TypeError), ("3", TypeError), (True, TypeError), (None, TypeError)],
)
def test_token_counts_must_be_non_negative_integers(manager, bad, error):
    before = manager_state(manager)
    with pytest.raises(error, match=r"must be an int"):
        manager.append_tokens("A", bad)
    with pytest.raises(error, match=r"must be an int"):
        manager.add_sequence("Z", bad)
    assert manager_state(manager) == before


def test_an_unhashable_sequence_id_is_refused(manager):
    with pytest.raises(TypeError, match="hashable"):
        manager.add_sequence(["A"], 1)


@pytest.mark.parametrize("free_order", ["lifo", "fifo"])
@pytest.mark.parametrize(
    "tail, message",
    [
        ([1], r"^block 1 is listed 2 times but has 1 owner\(s\)$"),  # held once, listed twice
        ([5], r"^block 5 is already free \(double free\)$"),
        ([9], r"^block 9 is out of range \[0, 8\)$"),
        ([-1], r"^block -1 is out of range \[0, 8\)$"),
    ],
)
def test_releasing_held_blocks_then_a_bad_one_releases_none(free_order, tail, message):
    # nothing is shared, so release takes its one-pass path; the good ids come first
    pool = BlockPool(8, block_size=4, free_order=free_order)
    held = pool.allocate_many(4)
    before = pool_state(pool)
    with pytest.raises(BlockError, match=message):
        pool.release(held + tail)
    assert pool_state(pool) == before
    pool.check_invariants()
