"""Checks for puzzle 3.k5: copy_blocks for copy-on-write pairs."""

from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import strategies as st

from course.ch03_kv_block.checks._puzzle_checks import Puzzle, check_launches, check_spec, mistake

EXERCISE = "3.k5"
pytestmark = pytest.mark.ch3_7


def spec(cache, pairs):
    for src, dst in pairs:
        cache[dst] = cache[src]
    return {"cache": cache}


class Case(NamedTuple):  # `build(case)` makes its arrays, the same ones every time
    N: int  # blocks in the cache
    B: int  # block_size
    D: int  # head_dim
    P: int  # (src, dst) pairs
    seed: int


def build(case: Case) -> dict:
    """P pairs over N blocks; no source is a destination, no two pairs share a destination."""
    N, B, D, P, seed = case
    rng = np.random.default_rng(seed)
    ids = rng.permutation(N)[: 2 * P]
    pairs = np.stack([ids[:P], ids[P:]], axis=1).astype(np.int64)
    return {"cache": rng.standard_normal((N, B, D)), "pairs": pairs}


@st.composite
def params(draw, *, full: bool):
    """One thread per copied number: at most 256 of them (a small grid for the simulator)."""
    D = draw(st.sampled_from([1, 2, 8, 64]) if full else st.integers(1, 2))
    B = draw(st.integers(1, max(1, min(32, 128 // D))) if full else st.integers(1, 3))
    N = draw(st.integers(2, 8) if full else st.integers(2, 6))
    return Case(
        N=N,
        B=B,
        D=D,
        P=draw(st.integers(1, max(1, min(N // 2, 256 // (B * D))))),
        seed=draw(st.integers(0, 2**16)),
    )


def owner(out, index, arrays):
    blk, b, d = index
    B, D = arrays["cache"].shape[1:]
    hits = [p for p, (_, dst) in enumerate(arrays["pairs"]) if dst == blk]
    return (hits[0] * B + b) * D + d if hits else None


AXES = {
    "cache": ("num_blocks", "B, block_size", "D, head_dim"),
    "pairs": ("P, the number of pairs", "2: (src, dst)"),
}


def _the_wrong_way(cache, pairs):
    for src, dst in pairs:
        cache[src] = cache[dst]
    return {"cache": cache}


MISTAKES = (
    mistake(
        "The copy went from dst to src: pairs[p, 0] is the source and pairs[p, 1] the "
        "destination, cache[dst, b, d] = cache[src, b, d].",
        "拷贝方向反了：pairs[p, 0] 是源、pairs[p, 1] 是目标，cache[dst, b, d] = cache[src, b, d]。",
        _the_wrong_way,
    ),
)

# run first on every stepped run: 3 pairs (pairs is 3 x 2, not square) over 8 blocks (more
# than twice the pairs), blocks of 2 slots of 2 numbers, then 2 extra threads
EXAMPLES = (Case(N=8, B=2, D=2, P=3, seed=0),)

PUZZLE = Puzzle(
    module=__name__,
    kernel="copy_blocks_kernel",
    build=build,
    spec=spec,
    outputs=("cache",),
    threads=lambda arrays: arrays["pairs"].shape[0] * arrays["cache"][0].size,
    owner=owner,
    axes=AXES,
    mistakes=MISTAKES,
    examples=EXAMPLES,
)


def test_every_destination_block_becomes_a_copy_of_its_source(impl):
    """cache[dst] = cache[src] for every pair, slot by slot; sources and other blocks unchanged."""
    check_spec(PUZZLE, impl, params(full=False))


def test_copy_blocks_launches_on_every_case_the_spec_allows(impl):
    """Real launches: blocks of up to 32 slots, head_dim up to 64, several pairs."""
    check_launches(PUZZLE, impl, params(full=True))
