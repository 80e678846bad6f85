"""Checks for puzzle 3.k5: copy_blocks for copy-on-write pairs."""

import numpy as np
import pytest
from hypothesis import strategies as st

from course.ch03_kv_block.checks._puzzle_checks import check_launch, check_spec

EXERCISE = "3.k5"
pytestmark = pytest.mark.ch3_7


def spec(cache, pairs):
    for src, dst in pairs:
        cache[dst] = cache[src]
    return {"cache": cache}


def case(draw):
    N, B, D = draw(st.integers(2, 6)), draw(st.integers(1, 3)), draw(st.integers(1, 2))
    P = draw(st.integers(1, N // 2))
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    ids = rng.permutation(N)[: 2 * P]
    pairs = np.stack([ids[:P], ids[P:]], axis=1).astype(np.int64)  # sources never a destination
    arrays = {"cache": rng.standard_normal((N, B, D)), "pairs": pairs}
    return arrays, P * B * D, f"N={N} blocks of B={B}, D={D}, pairs {pairs.tolist()}"


def owner(out_name, index, arrays):
    blk, b, d = index
    B, D = arrays["cache"].shape[1:]
    hits = [p for p, (_, dst) in enumerate(arrays["pairs"]) if dst == blk]
    return (hits[0] * B + b) * D + d if hits else None


def test_every_destination_block_becomes_a_copy_of_its_source(impl):
    """cache[dst] = cache[src] for every pair, slot by slot; sources and other blocks unchanged."""
    check_spec(impl, "copy_blocks_kernel", case, spec, outputs=["cache"], owner=owner)


def test_copy_blocks_launches_under_the_cuda_simulator(impl):
    """One real launch (GPU, or Numba's CUDA simulator), with extra threads."""
    rng = np.random.default_rng(10)
    arrays = {"cache": rng.standard_normal((5, 2, 3)), "pairs": np.array([[0, 3], [4, 1]])}
    check_launch(impl, "copy_blocks_kernel", arrays, 14, spec, ["cache"])
