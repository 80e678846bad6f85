"""Checks for puzzle 3.k2: gather one sequence's K through its block table."""

import numpy as np
import pytest
from hypothesis import strategies as st

from course.ch03_kv_block.checks._puzzle import POISON
from course.ch03_kv_block.checks._puzzle_checks import check_launch, check_spec

EXERCISE = "3.k2"
pytestmark = pytest.mark.ch3_7


def spec(k_cache, block_table, out):
    B = k_cache.shape[1]
    for p in range(out.shape[0]):
        out[p] = k_cache[block_table[p // B], p % B]
    return {"out": out}


def case(draw):
    B, D, N = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(2, 6))
    L = draw(st.integers(1, min(N * B, 7)))
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    table = rng.permutation(N)[: -(-L // B)].astype(np.int64)
    arrays = {
        "k_cache": rng.standard_normal((N, B, D)),
        "block_table": table,
        "out": np.full((L, D), POISON),
    }
    return arrays, L * D, f"L={L} tokens, B={B}, D={D}, table {table.tolist()}"


def owner(out_name, index, arrays):
    p, d = index
    return p * arrays["out"].shape[1] + d


def test_gather_reads_each_position_through_the_table(impl):
    """out[p, d] = k_cache[table[p // B], p % B, d] for every p < L; extra threads write nothing."""
    check_spec(impl, "gather_k_kernel", case, spec, outputs=["out"], owner=owner)


def test_gather_launches_under_the_cuda_simulator(impl):
    """One real launch (GPU, or Numba's CUDA simulator), with extra threads."""
    rng = np.random.default_rng(4)
    arrays = {
        "k_cache": rng.standard_normal((4, 3, 2)),
        "block_table": np.array([2, 0, 3]),
        "out": np.full((7, 2), POISON),
    }
    check_launch(impl, "gather_k_kernel", arrays, 16, spec, ["out"])
