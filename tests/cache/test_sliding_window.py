"""Sliding window with attention sinks: blocks behind the window go back, sink blocks stay."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim import NULL_BLOCK
from pagedsim.policies import SlidingWindowManager
from pagedsim.scheduler import make_scheduler
from pagedsim.workloads import Request


def test_blocks_entirely_behind_the_window_are_freed_and_marked_null():
    # B = 4, W = 6, S = 2: block 0 holds the sinks and always stays.
    m = SlidingWindowManager(10, 4, sliding_window=6, sinks=2)
    m.add_sequence("a", 12)  # the next query (12) reads 7..12: block 1 (4..7) still needed
    assert m.block_table("a") == [0, 1, 2]
    m.append_tokens("a", 2)  # 14 tokens: the next query reads 9..14, block 1 (4..7) goes
    assert m.block_table("a") == [0, NULL_BLOCK, 2, 3]
    assert m.pool.is_free(1) and m.dropped_blocks == 1
    assert list(m.slot_mapping("a")[4:8]) == [-1] * 4
    m.check_invariants()


def test_without_sinks_the_first_block_goes_too():
    m = SlidingWindowManager(10, 4, sliding_window=4)
    m.add_sequence("a", 9)  # the next query (9) reads 6..9: block 0 (0..3) is gone
    assert m.block_table("a") == [NULL_BLOCK, 1, 2]


def test_a_shared_block_dropped_by_one_fork_stays_for_the_other():
    m = SlidingWindowManager(10, 2, sliding_window=3, trace=False)
    m.add_sequence("a", 3)  # [0, 1]; the next query (position 3) reads 1..3: both stay
    m.fork("a", "b")
    m.decode_step(["a"])  # a has 4 tokens: its next query reads 2..4, block 0 (0..1) goes
    assert m.block_table("a")[0] == NULL_BLOCK and m.block_table("b")[0] == 0
    assert m.pool.ref_count(0) == 1
    m.check_invariants()


def test_bad_window_arguments_are_refused():
    with pytest.raises(ValueError, match=r"window must be an int in \[1, "):
        SlidingWindowManager(4, 2, sliding_window=0)
    with pytest.raises(ValueError, match=r"sinks must be an int in \[0, "):
        SlidingWindowManager(4, 2, sliding_window=3, sinks=-1)
    with pytest.raises(ValueError, match=r"block_size must be an int in \[1, "):
        SlidingWindowManager(8, 0, sliding_window=4)  # not a ZeroDivisionError
    with pytest.raises(TypeError, match="window must be an int"):
        SlidingWindowManager(4, 2, sliding_window=2.5)


@settings(max_examples=25)
@given(
    st.integers(1, 4),
    st.integers(1, 9),
    st.integers(0, 5),
    st.lists(st.tuples(st.integers(1, 20), st.integers(1, 20)), min_size=1, max_size=5),
    st.booleans(),
)
def test_the_driver_with_a_window_keeps_only_window_and_sink_blocks(
    bs, window, sinks, rows, traced
):
    reqs = [Request(p, o, n=2) for p, o in rows]
    m = SlidingWindowManager(64, bs, sliding_window=window, sinks=sinks, trace=traced)
    make_scheduler(reqs, m).run(check=True)  # check_invariants counts the kept blocks exactly
    assert m.num_free_blocks == 64
