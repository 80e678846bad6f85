"""Checks for puzzle 3.k6: which blocks a sliding window drops."""

from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import strategies as st

from course.ch03_kv_block.checks._puzzle import POISON
from course.ch03_kv_block.checks._puzzle_checks import Puzzle, check_launches, check_spec, mistake
from course.i18n import say

EXERCISE = "3.k6"
pytestmark = pytest.mark.ch3_7


def spec(params, dropped):
    n, w, B = (int(x) for x in params)
    dropped[:] = [1 if (j + 1) * B <= n - w else 0 for j in range(len(dropped))]
    return {"dropped": dropped}


class Case(NamedTuple):  # `build(case)` makes its arrays, the same ones every time
    n: int  # tokens in the sequence
    w: int  # sliding_window
    B: int  # block_size
    spare: int  # entries of dropped past the sequence's blocks


def build(case: Case) -> dict:
    """dropped has the sequence's ceil(n / B) entries plus `spare` more (the spec covers all)."""
    n, w, B, spare = case
    return {"params": np.array([n, w, B]), "dropped": np.full(-(-n // B) + spare, POISON)}


@st.composite
def params(draw, *, full: bool):
    B = draw(st.integers(1, 32) if full else st.integers(1, 4))
    n = draw(st.integers(1, 200) if full else st.integers(1, 16))
    # edges: a window ending on a block boundary, one token past it, the whole sequence
    w = draw(st.sampled_from([1, B, B + 1, n, max(1, n - B), max(1, n - n % B), n + B]))
    return Case(n=n, w=w, B=B, spare=draw(st.integers(0, 3)))


def _rule(keep):
    """A spec whose test for block j is keep(j, n, w, B) instead of (j + 1) * B <= n - w."""

    def alt(params, dropped):
        n, w, B = (int(x) for x in params)
        dropped[:] = [1 if keep(j, n, w, B) else 0 for j in range(len(dropped))]
        return {"dropped": dropped}

    return alt


MISTAKES = (
    mistake(
        "A block whose last token is n - w - 1, just before the window, was kept: drop block "
        "j when (j + 1) * B <= n - w (<=, not <).",
        "最后一个 token 是 n - w - 1（紧挨窗口之前）的块被保留了：当 (j + 1) * B <= n - w 时丢"
        "弃块 j（<=，不是 <）。",
        _rule(lambda j, n, w, B: (j + 1) * B < n - w),
    ),
    mistake(
        "A block that is only partly before the window was dropped (the count was rounded "
        "up): a block goes only when ALL its tokens, up to (j + 1) * B - 1, are before n - w.",
        "只有一部分在窗口之前的块被丢弃了（向上取整了）：只有当块的全部 token（直到 "
        "(j + 1) * B - 1）都在 n - w 之前时才丢弃。",
        _rule(lambda j, n, w, B: j < -(-(n - w) // B)),
    ),
    mistake(
        "Only the block's first token was compared with the window: every token of block j, "
        "up to (j + 1) * B - 1, must be before n - w.",
        "只比较了块的第一个 token：块 j 的每个 token（直到 (j + 1) * B - 1）都必须在 n - w 之前。",
        _rule(lambda j, n, w, B: j * B < n - w),
    ),
    mistake(
        "The window was ignored: a block is dropped when it ends before n - w, the window's "
        "first position, not before n.",
        "忽略了窗口：块在 n - w（窗口的第一个位置）之前结束才丢弃，而不是在 n 之前。",
        _rule(lambda j, n, w, B: (j + 1) * B <= n),
    ),
)

# run first on every stepped run, each with entries past the sequence's blocks:
EXAMPLES = (
    Case(n=10, w=4, B=3, spare=2),  # the window starts at 6, on a block boundary: block 1 goes
    Case(n=11, w=4, B=3, spare=1),  # it starts at 7, inside block 2: block 2 stays
    Case(n=5, w=9, B=2, spare=1),  # a window longer than the sequence: nothing goes
)

PUZZLE = Puzzle(
    module=__name__,
    kernel="dropped_kernel",
    build=build,
    spec=spec,
    outputs=("dropped",),
    threads=lambda arrays: arrays["dropped"].shape[0],
    owner=lambda out, index, arrays: index[0],
    axes={"params": ("3: n, w, B",), "dropped": ("M, the output's length",)},
    mistakes=MISTAKES,
    examples=EXAMPLES,
    unwritten=say(
        "dropped may have more entries than the sequence has blocks: guard with "
        "dropped.shape[0], and write every entry the spec defines.",
        "dropped 的条目可能多于序列的块数：用 dropped.shape[0] 作条件，并写出规范定义的每一项。",
    ),
)


def test_a_block_is_dropped_exactly_when_all_its_tokens_are_before_the_window(impl):
    """dropped[j] = 1 iff (j + 1) * B <= n - w, including windows that end on a block boundary."""
    check_spec(PUZZLE, impl, params(full=False))


def test_window_drops_launch_on_every_case_the_spec_allows(impl):
    """Real launches: blocks up to 32, sequences up to 200 tokens, outputs longer than needed."""
    check_launches(PUZZLE, impl, params(full=True))
