"""Checks for exercise 3.4a: the free list with reference counts (chapter 3.4).

The pool is compared step by step with a plain-Python model (a list for the free
list, a dict for the counts) on Hypothesis's lists of calls, and its pointers are
walked after every step: the walk length equals num_free, prev/next are symmetric,
and a block is on the list exactly when its count is 0. A failing list of calls is cut
down to the shortest one that fails the same way and shown as the student's own calls
(pool = FreeListPool(6); pool.allocate(); pool.incref(0); pool.free(0)).
"""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.ch03_kv_block.checks._expect import raises
from course.i18n import say
from pagedsim.testing.remote_caps import capability

EXERCISE = "3.4a"
pytestmark = pytest.mark.ch3_4


def walk_invariants(pool) -> list[int]:
    """Walk the free list by its pointers and check the structural invariants."""
    n, order, node = pool.num_gpu_blocks, [], pool.head
    # one copy of each array (each read of pool.next from the student's process is a message)
    nexts, prevs, tail = list(pool.next), list(pool.prev), pool.tail
    while True:
        nxt = nexts[node]
        assert prevs[nxt] == node, say(
            f"the free list's links disagree: next[{node}] is {nxt} but prev[{nxt}] is "
            f"{prevs[nxt]}",
            f"空闲链表的指针不一致：next[{node}] 是 {nxt}，但 prev[{nxt}] 是 {prevs[nxt]}",
        )
        if nxt == tail:
            break
        assert 0 <= nxt < n and nxt not in order, say(
            f"the free list loops or leaves the pool at {nxt}",
            f"空闲链表成环或跑出了池，位置 {nxt}",
        )
        order.append(nxt)
        node = nxt
    listed = pool.free_list()
    assert listed == order, say(
        f"free_list() returns {listed} but the pointers give {order}",
        f"free_list() 返回 {listed}，但按指针走得到 {order}",
    )
    refs, num_free = list(pool.ref), pool.num_free
    for b in range(n):
        assert (refs[b] == 0) == (b in order), say(
            f"block {b} has count {refs[b]} but is {'on' if b in order else 'off'} the "
            f"free list" + ("" if refs[b] or b in order else ": a block was lost"),
            f"块 {b} 的计数是 {refs[b]}，却{'在' if b in order else '不在'}空闲链表上"
            + ("" if refs[b] or b in order else "：丢了一个块"),
        )
    if len(order) != num_free:  # the list is right (checked above): the counter is wrong
        which = (
            "_unlink (or allocate/take) never lowers it"
            if num_free > len(order)
            else "_push (or free) never raises it"
        )
        which_zh = (
            "_unlink（或 allocate/take）没有把它减一"
            if num_free > len(order)
            else "_push（或 free）没有把它加一"
        )
        raise AssertionError(
            say(
                f"num_free is not kept up to date: it says {num_free}, but the free list is "
                f"right and holds {len(order)} blocks: {which}",
                f"num_free 没有及时更新：它是 {num_free}，但空闲链表本身是对的，有 "
                f"{len(order)} 个块：{which_zh}",
            )
        )
    return order


def test_a_new_pool_hands_out_every_block_exactly_once(impl):
    """allocate() on a fresh pool hands out 0, 1, 2, ... each once, then refuses."""
    pool = impl.FreeListPool(5)
    order = walk_invariants(pool)
    tail = say(
        ": the list is reversed, so _push puts a block at the TAIL (first in, first out); it must "
        "insert it right after the head sentinel, so the block pushed last (0) comes out first",
        "：链表反了，说明 _push 把块放到了尾部（先进先出）；它必须把块插到头哨兵之后，"
        "这样最后压入的块（0）最先出来",
    )
    assert order == [0, 1, 2, 3, 4], say(
        f"a new pool's free list is {order}, expected 0, 1, 2, 3, 4 (__init__ pushes 4, 3, 2, "
        "1, 0 in turn)" + (tail if order == [4, 3, 2, 1, 0] else ""),
        f"新池的空闲链表是 {order}，应为 0, 1, 2, 3, 4（__init__ 依次压入 4, 3, 2, 1, 0）"
        + (tail if order == [4, 3, 2, 1, 0] else ""),
    )
    got = []
    for _ in range(5):
        got.append(pool.allocate())
        first = pool.next[pool.head]
        assert first == pool.tail or pool.prev[first] == pool.head, say(
            f"after allocate() took block {got[-1]}, the new first block {first} has prev "
            f"{pool.prev[first]}, not the head sentinel {pool.head}: _unlink(b) must set "
            "prev[next[b]] = prev[b] as well as next[prev[b]] = next[b]",
            f"allocate() 取走块 {got[-1]} 后，新的第一个块 {first} 的 prev 是 "
            f"{pool.prev[first]}，而不是头哨兵 {pool.head}：_unlink(b) 既要设置 "
            "next[prev[b]] = next[b]，也要设置 prev[next[b]] = prev[b]",
        )
    assert got == [0, 1, 2, 3, 4], say(
        f"a fresh pool handed out {got}, expected 0, 1, 2, 3, 4",
        f"新池分配出 {got}，应为 0, 1, 2, 3, 4",
    )
    assert [pool.ref[b] for b in got] == [1] * 5, say(
        "an allocated block should have count 1", "刚分配的块计数应为 1"
    )
    raises(impl.PoolError, pool.allocate, what="allocate() on a pool with no free block")
    walk_invariants(pool)


def test_a_freed_block_is_the_next_one_allocated(impl):
    """free() pushes onto the head, so the block freed last is reused first (LIFO)."""
    pool = impl.FreeListPool(4)
    a, b = pool.allocate(), pool.allocate()
    assert pool.free(a) == 0 and pool.free(b) == 0, say(
        "free() of a single-owner block should return 0", "只有一个持有者的块，free() 应返回 0"
    )
    assert walk_invariants(pool) == [b, a, 2, 3], say(
        "freed blocks should go to the head of the free list", "释放的块应插到空闲链表表头"
    )
    assert pool.allocate() == b, say(
        "the block freed last should be allocated first", "最后释放的块应最先被分配（后进先出）"
    )


def test_freeing_a_shared_block_keeps_it_until_the_last_owner_frees(impl):
    """A block shared by two sequences stays allocated until both have freed it."""
    pool = impl.FreeListPool(3)
    b = pool.allocate()
    assert pool.incref(b) == 2, say(
        "incref() on a block with one owner should return 2",
        "对只有一个持有者的块 incref() 应返回 2",
    )
    left = pool.free(b)
    assert b not in pool.free_list(), say(
        "freeing a block shared by two sequences returned it to the free list while seq B still "
        "uses it",
        "释放一个被两个序列共享的块时把它放回了空闲链表，而序列 B 还在用它",
    )
    assert left == 1, say(
        f"free() of a block with count 2 should return 1, got {left}",
        f"计数为 2 的块 free() 应返回 1，实际 {left}",
    )
    walk_invariants(pool)
    assert pool.free(b) == 0 and b in walk_invariants(pool), say(
        "the last owner's free() should put the block back on the free list",
        "最后一个持有者的 free() 应把块放回空闲链表",
    )


def test_a_double_free_is_refused_and_changes_nothing(impl):
    """Freeing a block whose count is already 0 raises PoolError and changes nothing."""
    pool = impl.FreeListPool(3)
    b = pool.allocate()
    pool.free(b)
    before = (walk_invariants(pool), list(pool.ref), pool.num_free)
    raises(impl.PoolError, pool.free, b, what=f"a double free (free({b}) of a block already free)")
    assert (walk_invariants(pool), list(pool.ref), pool.num_free) == before, say(
        "a refused double free still changed the pool", "被拒绝的重复释放仍然改变了池"
    )


def test_take_unlinks_a_block_from_the_middle_and_keeps_its_neighbours(impl):
    """take(b) removes b from the middle of the free list; its neighbours are joined."""
    pool = impl.FreeListPool(5)
    assert pool.take(2) == 2, say("take(2) should return 2", "take(2) 应返回 2")
    assert walk_invariants(pool) == [0, 1, 3, 4], say(
        "after take(2) the free list should be 0, 1, 3, 4: the unlink lost or kept a block",
        "take(2) 之后空闲链表应为 0, 1, 3, 4：摘除时丢了或留下了一个块",
    )
    raises(impl.PoolError, pool.take, 2, what="take(2) of a block in use")


def test_incref_of_a_free_block_is_refused(impl):
    """Sharing a block nobody holds is a bug: incref() of a free block raises PoolError."""
    pool = impl.FreeListPool(2)
    raises(impl.PoolError, pool.incref, 1, what="incref(1) of a free block")
    assert walk_invariants(pool) == [0, 1], say(
        "a refused incref() changed the free list", "被拒绝的 incref() 改变了空闲链表"
    )


def test_ids_outside_the_pool_are_refused_and_change_nothing(impl):
    """take, incref and free of -1, num_gpu_blocks or a non-int raise PoolError (self._check)
    and change nothing."""
    raises(ValueError, impl.FreeListPool, 0, what="FreeListPool(0)")
    raises(ValueError, impl.FreeListPool, 2.0, what="FreeListPool(2.0)")
    assert walk_invariants(impl.FreeListPool(1)) == [0], say(
        "FreeListPool(1) should hold one free block", "FreeListPool(1) 应有一个空闲块"
    )
    pool = impl.FreeListPool(3)
    b = pool.allocate()
    before = (walk_invariants(pool), list(pool.ref), pool.num_free)
    for op in ("take", "incref", "free"):
        for bad in (-1, 3, 4, "1"):
            raises(
                impl.PoolError, getattr(pool, op), bad, what=f"{op}({bad!r}) on a pool of 3 blocks"
            )
            assert (walk_invariants(pool), list(pool.ref), pool.num_free) == before, say(
                f"a refused {op}({bad!r}) still changed the pool",
                f"被拒绝的 {op}({bad!r}) 仍然改变了池",
            )
    assert pool.free(b) == 0


LIST_METHODS = ("append", "clear", "copy", "count", "extend", "index", "insert", "pop", "remove")
LIST_METHODS += ("reverse", "sort")


@capability(
    methods=LIST_METHODS,
    operations={"__getitem__", "__setitem__", "__len__", "__iter__", "__contains__"},
)
class CountingArray:
    """One of the pool's arrays, counting the work done on it: an element read or write costs 1;
    anything that may look at every element (a method such as count/index/remove, `in`,
    comparison, conversion, slicing) costs the array's length; iteration costs 1 per element.
    It is no list subclass, so no list method can do work it does not see. It is handed to
    the student's pool, so it is a capability with exactly this surface
    (pagedsim/testing/remote_caps.py): iterating it gives values one by one, never the
    generator."""

    touched = 0

    def __init__(self, items):
        object.__setattr__(self, "_items", list(items))

    def _cost(self, n):
        CountingArray.touched += n

    def __getitem__(self, i):
        self._cost(len(self._items) if isinstance(i, slice) else 1)
        return self._items[i]

    def __setitem__(self, i, v):
        self._cost(len(self._items) if isinstance(i, slice) else 1)
        self._items[i] = v

    def __len__(self):
        self._cost(1)
        return len(self._items)

    def __iter__(self):
        for x in self._items:
            self._cost(1)
            yield x

    def __contains__(self, x):
        self._cost(len(self._items))
        return x in self._items

    def __eq__(self, other):
        self._cost(len(self._items))
        return self._items == other

    __hash__ = None

    def __getattr__(self, name):  # count, index, remove, insert, copy, ...: all may be O(n)
        attr = getattr(self._items, name)
        if not callable(attr):
            return attr

        def method(*args, **kwargs):
            self._cost(len(self._items))
            return attr(*args, **kwargs)

        return method


def work_per_operation(impl, num_gpu_blocks):
    """Work on ref/next/prev (element reads and writes, whole-array methods, iteration) done by one
    allocate, one take, one incref and two frees."""
    pool = impl.FreeListPool(num_gpu_blocks)
    for name in ("ref", "next", "prev"):
        setattr(pool, name, CountingArray(getattr(pool, name)))
    CountingArray.touched = 0
    b, c = pool.allocate(), pool.take(num_gpu_blocks // 2)
    pool.incref(b)
    pool.free(b), pool.free(c)
    return CountingArray.touched


def test_allocate_take_and_free_do_constant_work_whatever_the_pool_size(impl):
    """O(1): the same operations do as much work on the pool's arrays in a pool of 10,000 blocks as
    in one of 10 (work counted, not timed: a loaded machine cannot change the verdict)."""
    small, large = work_per_operation(impl, 10), work_per_operation(impl, 10_000)
    assert large <= small + 8, say(
        f"the same five operations did {small} units of work on ref/next/prev in a pool of 10 "
        f"blocks but {large} in a pool of 10,000: something scans a whole array (a loop, or a list "
        "method such as count, index, remove or `in`); allocate, take and free must be O(1): keep "
        "num_free as a counter and reach blocks only through next/prev",
        f"同样的五个操作在 10 个块的池里对 ref/next/prev 做了 {small} 单位的工作，"
        f"在 10,000 个块的池里却做了 {large}：有代码扫描了整个数组"
        "（循环，或 count、index、remove、`in` 之类的列表方法）；"
        "allocate、take 和 free 必须是 O(1)：num_free 用计数器维护，只通过 next/prev 访问块",
    )


CALLS = ("allocate", "incref", "free", "take")


def as_calls(calls) -> list[str]:
    """[(name, block)] as the student writes them: allocate(), incref(0), ..."""
    return ["allocate()" if name == "allocate" else f"{name}({b})" for name, b in calls]


def replay(impl, calls) -> None:
    """Run the calls [(name, block)] on FreeListPool(6) and a list-and-dict model. A call the model
    refuses (a double free, incref or take of the wrong block) must raise PoolError; everything
    else must agree with the model after every step."""
    pool, free, count = impl.FreeListPool(6), list(range(6)), {}
    for (name, b), call in zip(calls, as_calls(calls), strict=True):
        refused = (not free) if name == "allocate" else (b in free) != (name == "take")
        if refused and name == "allocate":
            raises(impl.PoolError, pool.allocate, what="allocate() with no free block")
        elif refused:
            what = f"{call} (block {b} is {'free' if b in free else 'in use'})"
            raises(impl.PoolError, getattr(pool, name), b, what=what)
        elif name in ("allocate", "take"):
            b = free[0] if name == "allocate" else b
            got = pool.allocate() if name == "allocate" else pool.take(b)
            assert got == b, say(
                f"{call} returned {got}, but the head of the free list was {b}",
                f"{call} 返回 {got}，但空闲链表表头是 {b}",
            )
            free.remove(b)
            count[b] = 1
        else:
            count[b] += 1 if name == "incref" else -1
            got = getattr(pool, name)(b)
            assert got == count[b], say(
                f"{call} returned {got}; the count is now {count[b]}",
                f"{call} 返回 {got}；现在的计数是 {count[b]}",
            )
            if not count[b]:
                del count[b]
                free.insert(0, b)
        order = walk_invariants(pool)
        assert order == free, say(
            f"after {call} the free list is {order} but should be {free}",
            f"{call} 之后空闲链表是 {order}，应为 {free}",
        )
        counts = {b: c for b, c in enumerate(pool.ref) if c}
        assert counts == count, say(
            f"after {call} the counts are {counts} but should be {count}",
            f"{call} 之后计数是 {counts}，应为 {count}",
        )


def failure(impl, calls):
    """How replaying `calls` fails, as (exception type, message with its numbers and call left
    out)."""
    try:
        replay(impl, calls)
    except NotImplementedError:
        raise
    except Exception as e:
        first_line = (str(e).splitlines() or [""])[0]  # pytest may append its own explanation
        return type(e), re.sub(r"\d+", "#", re.sub(r"^after \S+ ", "", first_line))
    return None


def _simpler(calls):
    """Scripts one step simpler than `calls`: one call dropped, one id lowered, two ids swapped."""
    for i in range(len(calls)):
        yield calls[:i] + calls[i + 1 :]
    for i, (name, b) in enumerate(calls):
        for lower in range(b):
            yield calls[:i] + [(name, lower)] + calls[i + 1 :]
    ids = sorted({b for name, b in calls if name != "allocate"})
    for high in ids:
        for low in range(high):  # swap the two ids everywhere: the same story with smaller ids
            swap = {high: low, low: high}
            yield [(name, b if name == "allocate" else swap.get(b, b)) for name, b in calls]


def shortest_failing(impl, calls):
    """Simplify while the same failure remains: the shortest script, with the smallest ids, that a
    student can replay."""
    calls = [(name, 0 if name == "allocate" else b) for name, b in calls]  # allocate takes no id
    want = failure(impl, calls)
    while True:
        size = (len(calls), [b for _, b in calls])  # strictly smaller each round, so it ends
        simpler = next(
            (
                c
                for c in _simpler(calls)
                if (len(c), [b for _, b in c]) < size and failure(impl, c) == want
            ),
            None,
        )
        if simpler is None:
            return calls
        calls = simpler


# block ids lean towards the first ones, which allocate() hands out first, so that most calls
# reach blocks in use; a script costs microseconds, so many are tried
BLOCK = st.one_of(st.integers(0, 1), st.integers(0, 5))


def test_the_pool_matches_a_simple_model_under_any_sequence_of_calls(impl):
    """Any sequence of allocate, incref, free and take agrees with a list-and-dict model, step by
    step."""
    found = []

    # Hypothesis explores; the first failing script is cut down once, here, by shortest_failing
    # (letting Hypothesis shrink too would replay every candidate twice over)
    @settings(max_examples=300, derandomize=True, database=None, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from(CALLS), BLOCK), max_size=20))
    def explore(calls):
        if not found and failure(impl, calls) is not None:
            found.append(calls)

    explore()
    if not found:
        return
    shortest = shortest_failing(impl, found[0])
    try:
        replay(impl, shortest)
    except Exception as e:
        e.calls = "; ".join(
            ["pool = FreeListPool(6)"] + [f"pool.{call}" for call in as_calls(shortest)]
        )
        raise
