"""Checks for exercise 3.4a: the free list with reference counts (chapter 3.4).

The pool is compared step by step with a plain-Python model (a list for the free
list, a dict for the counts) by a Hypothesis state machine, and its pointers are
walked after every step: the walk length equals num_free, prev/next are symmetric,
and a block is on the list exactly when its count is 0.
"""

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from course.ch03_kv_block.checks._expect import raises
from course.i18n import say
from course.impl import load_impl

EXERCISE = "3.4a"
pytestmark = pytest.mark.ch3_4


def walk_invariants(pool) -> list[int]:
    """Walk the free list by its pointers and check the structural invariants."""
    n, order, node = pool.num_blocks, [], pool.head
    while True:
        nxt = pool.next[node]
        assert pool.prev[nxt] == node, say(
            f"the free list's links disagree: next[{node}] is {nxt} but prev[{nxt}] is {pool.prev[nxt]}",
            f"空闲链表的指针不一致：next[{node}] 是 {nxt}，但 prev[{nxt}] 是 {pool.prev[nxt]}")
        if nxt == pool.tail:
            break
        assert 0 <= nxt < n and nxt not in order, say(
            f"the free list loops or leaves the pool at {nxt}",
            f"空闲链表成环或跑出了池，位置 {nxt}")
        order.append(nxt)
        node = nxt
    assert pool.free_list() == order, say(
        f"free_list() returns {pool.free_list()} but the pointers give {order}",
        f"free_list() 返回 {pool.free_list()}，但按指针走得到 {order}")
    assert len(order) == pool.num_free, (
        say(f"the free list holds {len(order)} blocks but num_free says {pool.num_free}: a block was lost",
            f"空闲链表里有 {len(order)} 个块，但 num_free 是 {pool.num_free}：丢了一个块"))
    for b in range(n):
        assert (pool.ref[b] == 0) == (b in order), (
            say(f"block {b} has count {pool.ref[b]} but is {'on' if b in order else 'off'} the free list",
                f"块 {b} 的计数是 {pool.ref[b]}，却{'在' if b in order else '不在'}空闲链表上"))
    return order


def test_a_new_pool_hands_out_every_block_exactly_once(impl):
    """allocate() on a fresh pool hands out 0, 1, 2, ... each once, then refuses."""
    pool = impl.FreeListPool(5)
    assert walk_invariants(pool) == [0, 1, 2, 3, 4], say(
        "a new pool's free list should be 0, 1, 2, 3, 4",
        "新池的空闲链表应为 0, 1, 2, 3, 4")
    got = [pool.allocate() for _ in range(5)]
    assert got == [0, 1, 2, 3, 4], say(
        f"a fresh pool handed out {got}, expected 0, 1, 2, 3, 4",
        f"新池分配出 {got}，应为 0, 1, 2, 3, 4")
    assert [pool.ref[b] for b in got] == [1] * 5, say("an allocated block should have count 1", "刚分配的块计数应为 1")
    raises(impl.PoolError, pool.allocate, what="allocate() on a pool with no free block")
    walk_invariants(pool)


def test_a_freed_block_is_the_next_one_allocated(impl):
    """free() pushes onto the head, so the block freed last is reused first (LIFO)."""
    pool = impl.FreeListPool(4)
    a, b = pool.allocate(), pool.allocate()
    assert pool.free(a) == 0 and pool.free(b) == 0, say(
        "free() of a single-owner block should return 0",
        "只有一个持有者的块，free() 应返回 0")
    assert walk_invariants(pool) == [b, a, 2, 3], say(
        "freed blocks should go to the head of the free list",
        "释放的块应插到空闲链表表头")
    assert pool.allocate() == b, say("the block freed last should be allocated first", "最后释放的块应最先被分配（后进先出）")


def test_freeing_a_shared_block_keeps_it_until_the_last_owner_frees(impl):
    """A block shared by two sequences stays allocated until both have freed it."""
    pool = impl.FreeListPool(3)
    b = pool.allocate()
    assert pool.incref(b) == 2, say(
        "incref() on a block with one owner should return 2",
        "对只有一个持有者的块 incref() 应返回 2")
    left = pool.free(b)
    assert b not in pool.free_list(), say(
        "freeing a block shared by two sequences returned it to the free list while seq B still uses it",
        "释放一个被两个序列共享的块时把它放回了空闲链表，而序列 B 还在用它")
    assert left == 1, say(
        f"free() of a block with count 2 should return 1, got {left}",
        f"计数为 2 的块 free() 应返回 1，实际 {left}")
    walk_invariants(pool)
    assert pool.free(b) == 0 and b in walk_invariants(pool), say(
        "the last owner's free() should put the block back on the free list",
        "最后一个持有者的 free() 应把块放回空闲链表")


def test_a_double_free_is_refused_and_changes_nothing(impl):
    """Freeing a block whose count is already 0 raises PoolError and changes nothing."""
    pool = impl.FreeListPool(3)
    b = pool.allocate()
    pool.free(b)
    before = (walk_invariants(pool), list(pool.ref), pool.num_free)
    raises(impl.PoolError, pool.free, b, what=f"a double free (free({b}) of a block already free)")
    assert (walk_invariants(pool), list(pool.ref), pool.num_free) == before, say(
        "a refused double free still changed the pool", "被拒绝的重复释放仍然改变了池")


def test_take_unlinks_a_block_from_the_middle_and_keeps_its_neighbours(impl):
    """take(b) removes b from the middle of the free list; its neighbours are joined."""
    pool = impl.FreeListPool(5)
    assert pool.take(2) == 2, say("take(2) should return 2", "take(2) 应返回 2")
    assert walk_invariants(pool) == [0, 1, 3, 4], say(
        "after take(2) the free list should be 0, 1, 3, 4: the unlink lost or kept a block",
        "take(2) 之后空闲链表应为 0, 1, 3, 4：摘除时丢了或留下了一个块")
    raises(impl.PoolError, pool.take, 2, what="take(2) of a block in use")


def test_incref_of_a_free_block_is_refused(impl):
    """Sharing a block nobody holds is a bug: incref() of a free block raises PoolError."""
    pool = impl.FreeListPool(2)
    raises(impl.PoolError, pool.incref, 1, what="incref(1) of a free block")
    assert walk_invariants(pool) == [0, 1], say(
        "a refused incref() changed the free list",
        "被拒绝的 incref() 改变了空闲链表")


def test_ids_outside_the_pool_are_refused_and_change_nothing(impl):
    """take, incref and free of -1, num_blocks or a non-int raise PoolError (self._check) and change nothing."""
    raises(ValueError, impl.FreeListPool, 0, what="FreeListPool(0)")
    raises(ValueError, impl.FreeListPool, 2.0, what="FreeListPool(2.0)")
    assert walk_invariants(impl.FreeListPool(1)) == [0], say(
        "FreeListPool(1) should hold one free block",
        "FreeListPool(1) 应有一个空闲块")
    pool = impl.FreeListPool(3)
    b = pool.allocate()
    before = (walk_invariants(pool), list(pool.ref), pool.num_free)
    for op in ("take", "incref", "free"):
        for bad in (-1, 3, 4, "1"):
            raises(impl.PoolError, getattr(pool, op), bad, what=f"{op}({bad!r}) on a pool of 3 blocks")
            assert (walk_invariants(pool), list(pool.ref), pool.num_free) == before, say(
                f"a refused {op}({bad!r}) still changed the pool", f"被拒绝的 {op}({bad!r}) 仍然改变了池")
    assert pool.free(b) == 0


class CountingList(list):
    """A list that counts element reads and writes, to measure work per operation."""

    touched = 0

    def __getitem__(self, i):
        CountingList.touched += 1
        return super().__getitem__(i)

    def __setitem__(self, i, v):
        CountingList.touched += 1
        super().__setitem__(i, v)


def work_per_operation(impl, num_blocks):
    """Entries of ref/next/prev touched by one allocate, one take, one incref and two frees."""
    pool = impl.FreeListPool(num_blocks)
    for name in ("ref", "next", "prev"):
        setattr(pool, name, CountingList(getattr(pool, name)))
    CountingList.touched = 0
    b, c = pool.allocate(), pool.take(num_blocks // 2)
    pool.incref(b)
    pool.free(b), pool.free(c)
    return CountingList.touched


def test_allocate_take_and_free_do_constant_work_whatever_the_pool_size(impl):
    """O(1): the same operations touch as many list entries in a pool of 10,000 as in one of 10."""
    small, large = work_per_operation(impl, 10), work_per_operation(impl, 10_000)
    assert large == small, say(
        f"the same five operations touched {small} list entries in a pool of 10 blocks but {large} "
        "in a pool of 10,000: something walks the free list; allocate, take and free must be O(1)",
        f"同样的五个操作在 10 个块的池里访问了 {small} 个列表元素，在 10,000 个块的池里却访问了 {large} 个："
        "有代码在遍历空闲链表；allocate、take 和 free 必须是 O(1)")


def test_the_pool_matches_a_simple_model_under_any_sequence_of_operations():
    """A Hypothesis state machine: every step agrees with a list-and-dict model."""
    impl = load_impl(EXERCISE)

    class PoolMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.pool = impl.FreeListPool(6)
            self.free = list(range(6))  # the model's free list, head first
            self.count = {}  # the model's counts of allocated blocks

        @precondition(lambda self: self.free)
        @rule()
        def allocate(self):
            b = self.pool.allocate()
            assert b == self.free[0], say(
                f"allocate() returned {b} but the head of the free list was {self.free[0]}",
                f"allocate() 返回 {b}，但空闲链表表头是 {self.free[0]}")
            self.free.pop(0)
            self.count[b] = 1

        @precondition(lambda self: self.count)
        @rule(data=st.data())
        def share(self, data):
            b = data.draw(st.sampled_from(sorted(self.count)))
            self.count[b] += 1
            assert self.pool.incref(b) == self.count[b], say(
                f"incref({b}) returned the wrong count",
                f"incref({b}) 返回的计数不对")

        @precondition(lambda self: self.count)
        @rule(data=st.data())
        def release(self, data):
            b = data.draw(st.sampled_from(sorted(self.count)))
            self.count[b] -= 1
            assert self.pool.free(b) == self.count[b], say(
                f"free({b}) returned the wrong count",
                f"free({b}) 返回的计数不对")
            if not self.count[b]:
                del self.count[b]
                self.free.insert(0, b)

        @precondition(lambda self: self.free)
        @rule(data=st.data())
        def take(self, data):
            b = data.draw(st.sampled_from(self.free))
            assert self.pool.take(b) == b
            self.free.remove(b)
            self.count[b] = 1

        @precondition(lambda self: self.free)
        @rule(data=st.data())
        def double_free(self, data):
            b = data.draw(st.sampled_from(self.free))
            try:
                self.pool.free(b)
            except impl.PoolError:
                return
            raise AssertionError(f"a double free of block {b} was accepted")

        @invariant()
        def agrees_with_the_model(self):
            order = walk_invariants(self.pool)
            assert order == self.free, say(
                f"the free list is {order} but should be {self.free}",
                f"空闲链表是 {order}，应为 {self.free}")
            counts = {b: c for b, c in enumerate(self.pool.ref) if c}
            assert counts == self.count, say(
                f"the counts are {counts} but should be {self.count}",
                f"计数是 {counts}，应为 {self.count}")

    run_state_machine_as_test(PoolMachine, settings=settings(
        max_examples=40, stateful_step_count=20, derandomize=True, database=None, deadline=None))
