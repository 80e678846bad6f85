"""Checks for puzzle 3.k2: gather one sequence's K through its block table."""

from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import strategies as st

from course.ch03_kv_block.checks._puzzle import POISON
from course.ch03_kv_block.checks._puzzle_checks import (
    Puzzle,
    check_launches,
    check_spec,
    mistake,
    on_block_edge,
    paged_table,
)
from course.i18n import say

EXERCISE = "3.k2"
pytestmark = pytest.mark.ch3_7


def spec(k_cache, block_table, out):
    B = k_cache.shape[1]
    for p in range(out.shape[0]):
        out[p] = k_cache[block_table[p // B], p % B]
    return {"out": out}


class Case(NamedTuple):  # `build(case)` makes its arrays, the same ones every time
    B: int  # block_size
    D: int  # head_dim
    L: int  # the sequence's length
    spare_blocks: int  # cache blocks it does not use
    spare_entries: int  # garbage table entries past its last block
    seed: int


def build(case: Case, fill=np.nan) -> dict:
    """A cache whose slots past the sequence hold `fill`; a table `spare_entries` longer than L
    needs, its extra entries garbage (ids past the cache's end)."""
    B, D, L, spare_blocks, spare_entries, seed = case
    rng = np.random.default_rng(seed)
    N, table = paged_table(rng, L, B, spare_blocks, spare_entries)
    k_cache = np.full((N, B, D), fill)
    pos = np.arange(L)
    k_cache[table[pos // B], pos % B] = rng.standard_normal((L, D))
    return {"k_cache": k_cache, "block_table": table, "out": np.full((L, D), POISON)}


@st.composite
def params(draw, *, full: bool):
    """One thread per output number: at most 256 of them (a small grid for the simulator)."""
    D = draw(st.sampled_from([1, 2, 8, 64, 128]) if full else st.integers(1, 3))
    B = draw(st.integers(1, 32) if full else st.integers(1, 4))
    L = draw(st.integers(1, max(1, 256 // D)) if full else st.integers(1, 7))
    return Case(
        B=B,
        D=D,
        L=on_block_edge(draw, L, B),
        spare_blocks=draw(st.integers(0, 2)),
        spare_entries=draw(st.integers(0, 2)),
        seed=draw(st.integers(0, 2**16)),
    )


AXES = {
    "k_cache": ("num_blocks", "B, block_size", "D, head_dim"),
    "block_table": ("the table's length M",),
    "out": ("L, the sequence length", "D, head_dim"),
}


def _table_skipped(k_cache, block_table, out):
    B = k_cache.shape[1]
    for p in range(out.shape[0]):
        out[p] = k_cache[p // B, p % B]
    return {"out": out}


MISTAKES = (
    mistake(
        "Position p was read from block p // B itself: that is its LOGICAL block; look up "
        "the physical one in the table, block_table[p // B].",
        "位置 p 是直接从块 p // B 读取的：那是它的逻辑块；要查表得到物理块 block_table[p // B]。",
        _table_skipped,
    ),
)

# run first on every stepped run: 7 positions in blocks of 3 (B != D), so the last block holds
# one; a table that moves every block, with 2 garbage entries past the last; 2 extra threads
EXAMPLES = (Case(B=3, D=2, L=7, spare_blocks=1, spare_entries=2, seed=0),)

PUZZLE = Puzzle(
    module=__name__,
    kernel="gather_k_kernel",
    build=build,
    spec=spec,
    outputs=("out",),
    threads=lambda arrays: arrays["out"].size,
    owner=lambda out, index, arrays: index[0] * arrays["out"].shape[1] + index[1],
    axes=AXES,
    mistakes=MISTAKES,
    examples=EXAMPLES,
    unused_read=say(
        "The cache's unused slots hold NaN here: that value came from a slot the sequence does "
        "not use. Position p lives in block block_table[p // B] at offset p % B.",
        "这里缓存中未用的槽是 NaN：这个值来自序列没有用到的槽。位置 p 在块 block_table[p // B] 的"
        "偏移 p % B 处。",
    ),
    bounds=say(
        "block_table may be longer than the sequence needs, and its entries past the last block "
        "are garbage: the partly filled last block is entry (L - 1) // B, not the table's last.",
        "block_table 可能比序列所需的更长，最后一个块之后的条目是垃圾值：部分填充的最后一个块是"
        "第 (L - 1) // B 项，而不是表的最后一项。",
    ),
)


def test_gather_reads_each_position_through_the_table(impl):
    """out[p, d] = k_cache[table[p // B], p % B, d] for every p < L; extra threads write nothing."""
    check_spec(PUZZLE, impl, params(full=False))


def test_gather_launches_on_every_case_the_spec_allows(impl):
    """Real launches: blocks up to 32, head_dim up to 128, lengths on block edges, tables longer
    than needed with garbage past the last block."""
    check_launches(PUZZLE, impl, params(full=True))
