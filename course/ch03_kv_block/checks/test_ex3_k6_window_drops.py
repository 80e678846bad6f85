"""Checks for puzzle 3.k6: which blocks a sliding window drops."""

import numpy as np
import pytest
from hypothesis import strategies as st

from course.ch03_kv_block.checks._puzzle import POISON
from course.ch03_kv_block.checks._puzzle_checks import check_launch, check_spec

EXERCISE = "3.k6"
pytestmark = pytest.mark.ch3_7


def spec(params, dropped):
    n, w, B = (int(x) for x in params)
    dropped[:] = [1 if (j + 1) * B <= n - w else 0 for j in range(len(dropped))]
    return {"dropped": dropped}


def case(draw):
    B, n = draw(st.integers(1, 4)), draw(st.integers(1, 16))
    w = draw(st.sampled_from([1, B, B + 1, n, max(1, n - B)]))  # edges: a window ending on a
    # block boundary, one token past it, the whole sequence
    M = -(-n // B)
    arrays = {"params": np.array([n, w, B]), "dropped": np.full(M, POISON)}
    return arrays, M, f"n={n} tokens, window w={w}, B={B}: {M} blocks"


def owner(out_name, index, arrays):
    return index[0]


def test_a_block_is_dropped_exactly_when_all_its_tokens_are_before_the_window(impl):
    """dropped[j] = 1 iff (j + 1) * B <= n - w, including windows that end on a block boundary."""
    check_spec(impl, "dropped_kernel", case, spec, outputs=["dropped"], owner=owner)


def test_window_drops_launch_under_the_cuda_simulator(impl):
    """One real launch (GPU, or Numba's CUDA simulator), with extra threads."""
    # n - w = 8 is not a multiple of B: block 2 (tokens 6..8) straddles the window start
    arrays = {"params": np.array([13, 5, 3]), "dropped": np.full(5, POISON)}
    check_launch(impl, "dropped_kernel", arrays, 7, spec, ["dropped"])
