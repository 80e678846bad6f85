"""Captions say what the policies did: a window drop and a prefix-cache hit read as such."""

from pagedsim.policies.prefix_cache import PrefixCachingManager
from pagedsim.policies.sliding_window import SlidingWindowManager


def test_a_window_drop_is_named_in_the_caption():
    m = SlidingWindowManager(10, 2, window=4)
    m.add_sequence("A", 4)
    m.append_tokens("A", 3)  # 7 tokens; the window keeps positions 3..6, so block 0 goes
    caption = m.trace.snapshots[-1].caption
    assert "fell out of the window" in caption
    assert f"block {m.trace.snapshots[-2].sequences[0].blocks[0]} fell" in caption


def test_a_prefix_hit_on_a_live_block_is_named_in_the_caption():
    m = PrefixCachingManager(10, 2)
    m.add_sequence("A", 5, tokens=[1, 2, 3, 4, 5])
    m.add_sequence("B", 5, tokens=[1, 2, 3, 4, 9])
    a = m.block_table("A")
    assert f"shares cached blocks {a[0]}, {a[1]}" in m.trace.snapshots[-1].caption
