"""Checks for puzzle 3.k4: merging two split-K partials by their log-sum-exp."""

from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import strategies as st

from course.ch03_kv_block.checks._puzzle import POISON
from course.ch03_kv_block.checks._puzzle_checks import Puzzle, check_launches, check_spec, mistake
from course.i18n import say

EXERCISE = "3.k4"
pytestmark = pytest.mark.ch3_7


def spec(o1, lse1, o2, lse2, out, lse_out):
    m = np.maximum(lse1, lse2)
    w1, w2 = np.exp(lse1 - m), np.exp(lse2 - m)
    out[:] = (w1[:, None] * o1 + w2[:, None] * o2) / (w1 + w2)[:, None]
    lse_out[:] = m + np.log(w1 + w2)
    return {"out": out, "lse_out": lse_out}


class Case(NamedTuple):  # `build(case)` makes its arrays, the same ones every time
    H: int  # heads
    D: int  # head_dim
    base: float  # lse1 is about base, lse2 about base +- gap
    gap: float
    seed: int


def build(case: Case) -> dict:
    """Two partials whose lse are about `base` and `base + gap`, head by head (either larger)."""
    H, D, base, gap, seed = case
    rng = np.random.default_rng(seed)
    lse1 = base + rng.standard_normal(H) * 3
    lse2 = lse1 + gap * rng.choice([-1.0, 1.0], H) + rng.standard_normal(H)
    return {
        "o1": rng.standard_normal((H, D)),
        "lse1": lse1,
        "o2": rng.standard_normal((H, D)),
        "lse2": lse2,
        "out": np.full((H, D), POISON),
        "lse_out": np.full(H, POISON),
    }


@st.composite
def params(draw, *, full: bool):
    D = draw(st.sampled_from([1, 3, 16, 64, 128]) if full else st.integers(1, 3))
    return Case(  # one thread per output number: at most 256 (a small grid for the simulator)
        H=draw(st.integers(1, max(1, min(4, 256 // D))) if full else st.integers(1, 3)),
        D=D,
        base=draw(st.sampled_from([0.0, 800.0, -800.0, 3000.0, -3000.0])),
        gap=draw(st.sampled_from([0.0, 5.0, 800.0, 2000.0])),
        seed=draw(st.integers(0, 2**16)),
    )


NUMERICS = say(
    "On this case an lse is near base and the two differ by up to gap (see the case): shift "
    "both by their MAXIMUM, m = max(lse1[h], lse2[h]), so that the larger weight is exp(0) = 1 "
    "and the other is at most 1 (shifting by lse1 alone, or by the minimum, overflows).",
    "该用例的 lse 接近 base，两者相差可达 gap（见用例）：用二者的最大值 m = max(lse1[h], lse2[h]) "
    "平移，使较大的权重为 exp(0) = 1、另一个不超过 1（只用 lse1 或用最小值平移都会溢出）。",
)
AXES = {
    "o1": ("H, heads", "D, head_dim"),
    "o2": ("H, heads", "D, head_dim"),
    "lse1": ("H, heads",),
    "lse2": ("H, heads",),
    "out": ("H, heads", "D, head_dim"),
    "lse_out": ("H, heads",),
}


def _weights(lse1, lse2):
    m = np.maximum(lse1, lse2)
    return m, np.exp(lse1 - m), np.exp(lse2 - m)


def _swapped(o1, lse1, o2, lse2, out, lse_out):
    _, w1, w2 = _weights(lse1, lse2)
    out[:] = (w2[:, None] * o1 + w1[:, None] * o2) / (w1 + w2)[:, None]
    return {"out": out}


def _lse_without_m(o1, lse1, o2, lse2, out, lse_out):
    _, w1, w2 = _weights(lse1, lse2)
    lse_out[:] = np.log(w1 + w2)
    return {"lse_out": lse_out}


def _lse_is_the_max(o1, lse1, o2, lse2, out, lse_out):
    lse_out[:] = np.maximum(lse1, lse2)
    return {"lse_out": lse_out}


def _plain_average(o1, lse1, o2, lse2, out, lse_out):
    out[:] = (o1 + o2) / 2
    return {"out": out}


def _unshifted_weights(o1, lse1, o2, lse2, out, lse_out):
    lse_out[:] = np.maximum(lse1, lse2) + np.log(np.exp(lse1) + np.exp(lse2))
    return {"lse_out": lse_out}


MISTAKES = (
    mistake(
        "The weights were exp(lse1[h]) and exp(lse2[h]), not shifted by m: lse_out = m + "
        "log(w1 + w2) needs w = exp(lse - m) (and exp(lse) alone overflows above 709).",
        "权重用了 exp(lse1[h]) 和 exp(lse2[h])，没有减去 m：lse_out = m + log(w1 + w2) 需要 "
        "w = exp(lse - m)（而且 exp(lse) 超过 709 就溢出）。",
        _unshifted_weights,
    ),
    mistake(
        "o1 was weighed by w2 and o2 by w1: o1 goes with w1 = exp(lse1[h] - m).",
        "o1 乘了 w2、o2 乘了 w1：o1 对应 w1 = exp(lse1[h] - m)。",
        _swapped,
    ),
    mistake(
        "lse_out lacks the shift: add m back, lse_out[h] = m + log(w1 + w2).",
        "lse_out 少了平移量：要把 m 加回来，lse_out[h] = m + log(w1 + w2)。",
        _lse_without_m,
    ),
    mistake(
        "lse_out is only the maximum m: add log(w1 + w2), the log of the weights' sum.",
        "lse_out 只是最大值 m：还要加上 log(w1 + w2)，即权重之和的对数。",
        _lse_is_the_max,
    ),
    mistake(
        "out is the plain average (o1 + o2) / 2: weigh each partial by exp(lse - m) and "
        "divide by the weights' sum.",
        "out 是简单平均 (o1 + o2) / 2：每个部分要按 exp(lse - m) 加权，再除以权重之和。",
        _plain_average,
    ),
)

# run first on every stepped run, all with 2 heads of 2 or 3 numbers (H != D):
EXAMPLES = (
    Case(H=2, D=3, base=0.0, gap=5.0, seed=0),  # small lse: the arithmetic alone
    # lse near 800, lse2 - lse1 above 709 on one head and below -709 on the other: a shift by
    # lse1 alone, or by the minimum, overflows
    Case(H=2, D=2, base=800.0, gap=2000.0, seed=2),
    Case(H=2, D=2, base=-800.0, gap=5.0, seed=0),  # lse near -800: unshifted exps underflow
)

PUZZLE = Puzzle(
    module=__name__,
    kernel="merge_kernel",
    build=build,
    spec=spec,
    outputs=("out", "lse_out"),
    threads=lambda arrays: arrays["o1"].size,
    owner=lambda out, index, arrays: (
        index[0] * arrays["o1"].shape[1] + (index[1] if out == "out" else 0)
    ),
    numerics=NUMERICS,
    axes=AXES,
    mistakes=MISTAKES,
    examples=EXAMPLES,
)


def test_the_merge_weighs_each_partial_by_its_log_sum_exp(impl):
    """out = (w1 o1 + w2 o2) / (w1 + w2) with w = exp(lse - max); lse_out = max + log(w1 + w2)."""
    check_spec(PUZZLE, impl, params(full=False))


def test_the_merge_launches_on_every_case_the_spec_allows(impl):
    """Real launches: head_dim up to 128, lse in the thousands of either sign, gaps up to 2000."""
    check_launches(PUZZLE, impl, params(full=True))
