"""The free list, narrated: do one step, look at the neighbours, do the next step.

The neighbours are a LinkedBlockPool's prev/next links (vLLM v1's free queue); the plain
BlockPool keeps the same list as ids on two stacks, and the tests that look only at the
order run on both.
"""

import pytest

from pagedsim import BlockPool
from pagedsim.linked_pool import LinkedBlockPool

BOTH = pytest.mark.parametrize("pool_class", [LinkedBlockPool, BlockPool])


def links(pool, b):
    """(prev, next) of block b, with the sentinels shown as 'H' and 'T'."""
    name = lambda x: "H" if x == pool._head else "T" if x == pool._tail else x  # noqa: E731
    return name(pool._prev[b]), name(pool._next[b])


def test_a_new_pool_lists_every_block_in_id_order():
    pool = LinkedBlockPool(4, block_size=16)
    assert pool.free_list() == [0, 1, 2, 3]
    assert links(pool, 0) == ("H", 1)
    assert links(pool, 3) == (2, "T")
    pool.check_invariants()


def test_allocate_pops_the_head_and_the_next_block_becomes_the_head():
    pool = LinkedBlockPool(4, block_size=16)
    assert pool.allocate() == 0
    # Block 1 is now first: its prev is the head sentinel.
    assert links(pool, 1) == ("H", 2)
    assert pool.ref_count(0) == 1 and pool.num_free_blocks == 3
    assert pool.allocate() == 1
    assert links(pool, 2) == ("H", 3)
    assert pool.free_list() == [2, 3]
    pool.check_invariants()


def test_lifo_free_puts_the_block_back_at_the_head():
    pool = LinkedBlockPool(4, block_size=16, free_order="lifo")
    a, b = pool.allocate(), pool.allocate()  # 0, 1
    pool.free(a)
    # 0 is back in front of 2.
    assert pool.free_list() == [0, 2, 3]
    assert links(pool, 0) == ("H", 2)
    assert links(pool, 2) == (0, 3)
    pool.free(b)
    assert pool.free_list() == [1, 0, 2, 3]
    assert pool.allocate() == 1  # the hottest block is reused first
    pool.check_invariants()


def test_fifo_free_puts_the_block_back_at_the_tail():
    pool = LinkedBlockPool(4, block_size=16, free_order="fifo")
    a, b = pool.allocate(), pool.allocate()
    pool.free(a)
    assert pool.free_list() == [2, 3, 0]
    assert links(pool, 0) == (3, "T")
    assert links(pool, 3) == (2, 0)
    pool.free(b)
    assert pool.free_list() == [2, 3, 0, 1]
    assert pool.allocate() == 2  # least recently freed first: LRU order
    pool.check_invariants()


def test_take_unlinks_a_block_from_the_middle_and_joins_its_neighbours():
    pool = LinkedBlockPool(5, block_size=16)
    assert pool.take(2) == 2
    assert links(pool, 1) == (0, 3)
    assert links(pool, 3) == (1, 4)
    assert pool.free_list() == [0, 1, 3, 4]
    assert pool.ref_count(2) == 1
    pool.check_invariants()


@BOTH
def test_a_shared_block_returns_to_the_free_list_only_when_the_last_owner_frees_it(pool_class):
    pool = pool_class(3, block_size=16)
    b = pool.allocate()
    assert pool.incref(b) == 2  # a second sequence now holds it (beam search)
    assert pool.num_shared == 1
    assert pool.free(b) == 1
    assert pool.num_shared == 0
    assert b not in pool.free_list()  # still in use by the other owner
    assert pool.free(b) == 0
    assert pool.free_list()[0] == b
    pool.check_invariants()


def test_allocate_many_splices_a_run_off_the_head_in_order():
    pool = LinkedBlockPool(6, block_size=4)
    assert pool.allocate_many(3) == [0, 1, 2]
    assert links(pool, 3) == ("H", 4)
    assert pool.num_free_blocks == 3
    pool.release([2, 1, 0])  # release, last block first, as a sequence does
    assert pool.free_list() == [0, 1, 2, 3, 4, 5]
    pool.check_invariants()


@BOTH
def test_bulk_release_leaves_the_list_as_freeing_one_by_one_would(pool_class):
    for order in ("lifo", "fifo"):
        for shared in (False, True):
            bulk, single = pool_class(8, 4, order), pool_class(8, 4, order)
            for pool in (bulk, single):
                held = pool.allocate_many(5)
                if shared:
                    pool.incref(held[1])  # one block has a second owner and must stay
            bulk.release(reversed(held))
            for b in reversed(held):
                single.free(b)
            assert bulk.free_list() == single.free_list()
            assert bulk.ref_counts() == single.ref_counts()
            bulk.check_invariants()


def test_a_lifo_pool_frees_a_whole_sequence_onto_its_stack_at_once():
    pool = BlockPool(5, block_size=16)
    assert pool._free == [4, 3, 2, 1, 0]  # the head last
    table = pool.allocate_many(3)
    assert table == [0, 1, 2] and pool._free == [4, 3]  # one slice off the end
    pool.release(table[::-1])  # a sequence frees its last block first
    assert pool._free == [4, 3, 2, 1, 0] and pool._back == []
    assert pool.free_list() == [0, 1, 2, 3, 4]
    pool.check_invariants()


def test_a_fifo_pool_keeps_tail_frees_on_a_second_stack_until_the_head_runs_short():
    pool = BlockPool(4, block_size=16, free_order="fifo")
    assert pool.allocate_many(3) == [0, 1, 2]
    pool.release([1, 0])  # each to the tail in turn
    assert (pool._free, pool._back) == ([3], [1, 0])
    assert pool.free_list() == [3, 1, 0]
    assert pool.allocate_many(2) == [3, 1]  # the tail's blocks moved under the head's
    assert (pool._free, pool._back) == ([0], [])
    assert pool.take(0) == 0 and pool.free_list() == []
    pool.check_invariants()
