"""Checks for puzzle 3.k4: merging two split-K partials by their log-sum-exp."""

import numpy as np
import pytest
from hypothesis import strategies as st

from course.ch03_kv_block.checks._puzzle import POISON
from course.ch03_kv_block.checks._puzzle_checks import check_launch, check_spec

EXERCISE = "3.k4"
pytestmark = pytest.mark.ch3_7


def spec(o1, lse1, o2, lse2, out, lse_out):
    m = np.maximum(lse1, lse2)
    w1, w2 = np.exp(lse1 - m), np.exp(lse2 - m)
    out[:] = (w1[:, None] * o1 + w2[:, None] * o2) / (w1 + w2)[:, None]
    lse_out[:] = m + np.log(w1 + w2)
    return {"out": out, "lse_out": lse_out}


def case(draw):
    H, D = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    big = draw(st.sampled_from([0.0, 800.0]))  # lse in the hundreds: exp(lse) overflows
    arrays = {
        "o1": rng.standard_normal((H, D)),
        "lse1": rng.standard_normal(H) * 3 + big,
        "o2": rng.standard_normal((H, D)),
        "lse2": rng.standard_normal(H) * 3 + big,
        "out": np.full((H, D), POISON),
        "lse_out": np.full(H, POISON),
    }
    return arrays, H * D, f"H={H}, D={D}, lse near {big:g}"


def owner(out_name, index, arrays):
    D = arrays["o1"].shape[1]
    return index[0] * D + (index[1] if out_name == "out" else 0)


def test_the_merge_weighs_each_partial_by_its_log_sum_exp(impl):
    """out = (w1 o1 + w2 o2) / (w1 + w2) with w = exp(lse - max); lse_out = max + log(w1 + w2)."""
    check_spec(impl, "merge_kernel", case, spec, outputs=["out", "lse_out"], owner=owner)


def test_the_merge_launches_under_the_cuda_simulator(impl):
    """One real launch (GPU, or Numba's CUDA simulator), with extra threads."""
    rng = np.random.default_rng(8)
    arrays = {
        "o1": rng.standard_normal((2, 3)),
        "lse1": np.array([1.0, 900.0]),
        "o2": rng.standard_normal((2, 3)),
        "lse2": np.array([2.5, 899.0]),
        "out": np.full((2, 3), POISON),
        "lse_out": np.full(2, POISON),
    }
    check_launch(impl, "merge_kernel", arrays, 8, spec, ["out", "lse_out"])
