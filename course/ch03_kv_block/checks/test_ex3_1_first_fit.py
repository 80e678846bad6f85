"""Checks for exercise 3.1: first fit over variable-size ranges (chapter 3.1).

The allocator is compared with a slot-by-slot occupancy map: after every step its
holes must be exactly the maximal runs of free slots, and allocate must return the
start of the first run long enough (Hypothesis drives random traces). A fixed trace
then shows external fragmentation: first fit refuses a request that the free slots,
added up, could hold, while a pool of fixed blocks serves it.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course.ch03_kv_block.checks._expect import raises
from course.i18n import say
from pagedsim import BlockPool

EXERCISE = "3.1"
pytestmark = pytest.mark.ch3_1


def runs(occupied: list[bool]) -> list[tuple[int, int]]:
    """Maximal runs of free slots, as (start, size), from an occupancy map."""
    out, start = [], None
    for i, used in enumerate(occupied + [True]):
        if not used and start is None:
            start = i
        elif used and start is not None:
            out.append((start, i - start))
            start = None
    return out


def test_allocate_takes_the_front_of_the_first_hole_that_fits(impl):
    """With holes of 2, 8 and 5 slots, a request for 4 goes to the start of the 8-slot hole."""
    a = impl.FirstFit(20)
    a.holes = [(0, 2), (5, 8), (15, 5)]
    got = a.allocate(4)
    if got == 9:  # the last 4 slots of the 8-slot hole at 5
        raise AssertionError(
            say(
                "allocate(4) returned 9, the END of the first hole that fits ((5, 8)): take the "
                "slots from the FRONT of the hole (return 5) and leave (9, 4)",
                "allocate(4) 返回 9，即第一个放得下的空洞 (5, 8) 的末尾：应从空洞的开头取槽位"
                "（返回 5），留下 (9, 4)",
            )
        )
    assert got == 5, say(
        f"allocate(4) returned {got}: first fit should take the first hole with room (start 5), "
        "not a later or smaller one",
        f"allocate(4) 返回 {got}：首次适配应取第一个放得下的空洞（起点 5），"
        "而不是更靠后或更小的那个",
    )
    assert a.holes == [(0, 2), (9, 4), (15, 5)], say(
        f"after taking 4 slots at 5 the holes are {a.holes}, expected [(0, 2), (9, 4), (15, 5)]",
        f"在 5 处取走 4 个槽位后空洞是 {a.holes}，应为 [(0, 2), (9, 4), (15, 5)]",
    )


def test_a_hole_of_exactly_the_requested_size_is_used_and_removed(impl):
    """A request the same size as a hole fills it, and the hole disappears from the list."""
    a = impl.FirstFit(10)
    a.holes = [(2, 3), (7, 3)]
    assert a.allocate(3) == 2, say(
        "a hole exactly as big as the request should be used",
        "大小恰好等于请求的空洞也应被使用（>=，不是 >）",
    )
    assert a.holes == [(7, 3)], say(
        f"a filled hole should be removed, holes are {a.holes}",
        f"被填满的空洞应被移除，现在空洞是 {a.holes}",
    )
    none = a.allocate(4)
    assert none is None and a.holes == [(7, 3)], say(
        f"allocate(4) with holes [(7, 3)] returned {none!r} and left {a.holes}: a request no "
        "hole can hold returns None (not -1 or 0) and changes nothing",
        f"空洞为 [(7, 3)] 时 allocate(4) 返回 {none!r}，留下 {a.holes}：没有空洞放得下的请求"
        "应返回 None（不是 -1 或 0），且不改变任何东西",
    )


def test_bad_sizes_are_refused_and_change_nothing(impl):
    """A capacity or request that is not a positive int raises ValueError; 1 is the smallest
    allowed."""
    for bad in (0, -3, 2.5):
        raises(ValueError, impl.FirstFit, bad, what=f"FirstFit({bad!r})")
    one = impl.FirstFit(1)
    assert one.capacity == 1 and one.holes == [(0, 1)], say(
        "FirstFit(1) should hold one hole (0, 1)", "FirstFit(1) 应有一个空洞 (0, 1)"
    )
    a = impl.FirstFit(10)
    for bad in (0, -3, 2.5):
        raises(ValueError, a.allocate, bad, what=f"allocate({bad!r})")
        assert a.holes == [(0, 10)], say(
            f"a refused allocate({bad!r}) changed the holes to {a.holes}",
            f"被拒绝的 allocate({bad!r}) 把空洞改成了 {a.holes}",
        )
    assert a.allocate(1) == 0 and a.holes == [(1, 9)], say(
        "allocate(1), the smallest request, should take slot 0", "最小的请求 allocate(1) 应取槽位 0"
    )


def test_free_merges_the_range_with_both_neighbouring_holes(impl):
    """Freeing the range between two holes leaves one hole covering all three."""
    a = impl.FirstFit(12)
    a.holes = [(0, 3), (6, 6)]
    a.free(3, 3)
    holes = [tuple(h) for h in a.holes]
    touching = [(h, k) for h, k in zip(holes, holes[1:], strict=False) if h[0] + h[1] == k[0]]
    side = ""
    if touching:
        side = (
            "the hole before it (it ends where the range starts)"
            if touching[0][0] == (0, 3)
            else "the hole after it (it starts where the range ends)"
        )
    if holes != sorted(holes):
        raise AssertionError(
            say(
                f"freeing [3, 6) between holes [0, 3) and [6, 12) left {a.holes}: the holes are "
                "not sorted by start; insert the range before the first hole that starts after "
                "it, then merge it with its neighbours",
                f"释放空洞 [0, 3) 与 [6, 12) 之间的 [3, 6) 后留下 {a.holes}：空洞没有按起点排序；"
                "应把区间插到第一个起点在它之后的空洞前面，再与相邻空洞合并",
            )
        )
    if len(holes) == 1 and holes[0][0] == 0:  # one hole, as it should be, but the wrong size
        assert holes == [(0, 12)], say(
            f"freeing [3, 6) between holes [0, 3) and [6, 12) left one hole of size "
            f"{holes[0][1]}, expected size 12: the merged hole's size should be the sum of "
            "the three sizes (3 + 3 + 6)",
            f"释放空洞 [0, 3) 与 [6, 12) 之间的 [3, 6) 后留下一个大小为 {holes[0][1]} 的空洞，"
            "应为 12：合并后的大小应是三段之和（3 + 3 + 6）",
        )
    assert a.holes == [(0, 12)], say(
        f"freeing [3, 6) between holes [0, 3) and [6, 12) left {a.holes}, expected one hole"
        + (
            f": {touching[0][0]} and {touching[0][1]} touch, so free did not merge with {side}"
            if touching
            else ""
        ),
        f"释放空洞 [0, 3) 与 [6, 12) 之间的 [3, 6) 后留下 {a.holes}，应合并成一个空洞"
        + (
            f"：{touching[0][0]} 和 {touching[0][1]} 相接，free 没有与相邻的空洞合并"
            if touching
            else ""
        ),
    )
    b = impl.FirstFit(12)
    b.holes = [(4, 2)]
    b.free(9, 3)
    b.free(0, 2)
    assert b.holes == [(0, 2), (4, 2), (9, 3)], say(
        f"frees that touch no hole should stay separate: {b.holes}",
        f"不与任何空洞相邻的释放应保持独立：{b.holes}",
    )


@st.composite
def traces(draw):
    """A list of ("alloc", size) and ("free", k) steps over a 32-slot region."""
    return draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("alloc"), st.integers(1, 9)),
                st.tuples(st.just("free"), st.integers(0, 99)),
            ),
            max_size=30,
        )
    )


@settings(max_examples=40, derandomize=True, database=None, deadline=None)
@given(traces())
def test_first_fit_matches_a_slot_by_slot_map_on_any_trace(impl, trace):
    """On random traces the holes are always the maximal free runs, and first fit picks the first
    that fits."""
    a, occupied, live = impl.FirstFit(32), [False] * 32, []
    for op, arg in trace:
        if op == "alloc":
            fits = [start for start, size in runs(occupied) if size >= arg]
            got = a.allocate(arg)
            want = fits[0] if fits else None
            assert got == want, say(
                f"allocate({arg}) returned {got}; first fit over holes "
                f"{runs(occupied)} gives {want}",
                f"allocate({arg}) 返回 {got}；在空洞 {runs(occupied)} 上首次适配应得到 {want}",
            )
            if got is not None:
                occupied[got : got + arg] = [True] * arg
                live.append((got, arg))
        elif live:
            start, size = live.pop(arg % len(live))
            a.free(start, size)
            occupied[start : start + size] = [False] * size
        assert a.holes == runs(occupied), say(
            f"the holes are {a.holes} but the free slots form the runs {runs(occupied)}: "
            "holes must be sorted and merged whenever they touch",
            f"空洞是 {a.holes}，但空闲槽位构成的连续段是 {runs(occupied)}：空洞必须有序，且相邻"
            f"时要合并",
        )


def test_external_fragmentation_is_one_minus_largest_hole_over_free(impl):
    """Holes of 2 and 3 slots: 5 free, the largest is 3, so fragmentation is 1 - 3/5 = 0.4."""
    got = impl.external_fragmentation([(0, 2), (5, 3)])
    whole = say(
        " (a whole number: 3 // 5 is 0 in integer division; divide with /)",
        "（整数：整数除法里 3 // 5 等于 0；要用 / 做除法）",
    )
    assert got == pytest.approx(0.4), say(
        f"external_fragmentation of holes 2 and 3 gave {got}, expected 0.4 = 1 - 3 / 5"
        + (whole if got in (0, 1) else ""),
        f"空洞 2 和 3 的 external_fragmentation 得到 {got}，应为 0.4 = 1 - 3 / 5"
        + (whole if got in (0, 1) else ""),
    )
    assert impl.external_fragmentation([(0, 7)]) == 0.0, say(
        "one hole means no external fragmentation", "只有一个空洞就没有外部碎片"
    )
    assert impl.external_fragmentation([]) == 0.0, say(
        "no free space means no external fragmentation (not an error)",
        "没有空闲空间就没有外部碎片（不是错误）",
    )


def test_first_fit_refuses_a_request_that_fixed_blocks_serve(impl):
    """External fragmentation: 6 slots are free in pieces of 2, so first fit refuses 6; blocks do
    not."""
    a = impl.FirstFit(12)
    starts = [a.allocate(2) for _ in range(6)]
    for start in starts[::2]:
        a.free(start, 2)
    assert a.free_slots() == 6 and a.allocate(6) is None, say(
        "with 6 free slots in three separate 2-slot holes a 6-slot request must be refused",
        "6 个空闲槽位分散在三个 2 槽位的空洞里时，6 槽位的请求必须被拒绝",
    )
    assert impl.external_fragmentation(a.holes) == pytest.approx(2 / 3)
    pool = BlockPool(6, 2)  # the same 12 slots as 6 fixed blocks of 2
    blocks = [pool.allocate() for _ in range(6)]
    for b in blocks[::2]:
        pool.free(b)
    assert [pool.allocate() for _ in range(3)], say(
        "fixed blocks serve a 6-slot request from any 3 free blocks",
        "固定大小的块可以用任意 3 个空闲块满足 6 槽位的请求",
    )


def test_external_fragmentation_counts_equal_holes_and_takes_them_in_any_order(impl):
    """Holes of 2, 4 and 2 slots given out of order: 8 free, the largest is 4, so 1 - 4/8 = 0.5."""
    holes = [(10, 2), (0, 4), (20, 2)]
    given_holes = list(holes)
    got = impl.external_fragmentation(holes)
    assert got == pytest.approx(0.5), say(
        f"external_fragmentation({given_holes}) gave {got}, expected 1 - 4/8 = 0.5: two holes of "
        "the same size both count as free space, and the largest hole is not necessarily the "
        "first or the last",
        f"external_fragmentation({given_holes}) 得到 {got}，应为 1 - 4/8 = 0.5：两个同样大小的空洞"
        "都算空闲空间，最大的空洞也不一定是第一个或最后一个",
    )
    assert holes == given_holes, say(
        f"external_fragmentation changed the list it was given: {given_holes} became {holes}",
        f"external_fragmentation 改动了传入的列表：{given_holes} 变成了 {holes}",
    )
    assert isinstance(got, float), say(
        f"external_fragmentation returned a {type(got).__name__}; it should return a float",
        f"external_fragmentation 返回了 {type(got).__name__}；应返回 float",
    )
