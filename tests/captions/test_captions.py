"""Captions say what the policies did: a window drop and a prefix-cache hit read as such."""

from pagedsim import story
from pagedsim.policies.prefix_cache import PrefixCachingManager
from pagedsim.policies.sliding_window import SlidingWindowManager


def test_a_window_drop_is_named_in_the_caption():
    m = SlidingWindowManager(10, 2, sliding_window=4)
    m.add_sequence("A", 4)
    first, second = m.trace.snapshots[-1].sequences[0].blocks  # positions 0..1 and 2..3
    m.append_tokens("A", 3)  # 7 computed tokens: the next query (position 7) reads 4..7 (v1)
    caption = story.caption(m.trace.snapshots[-1])
    assert "fell out of the window" in caption
    assert f"blocks {second}, {first} fell" in caption  # the last one first, as v1 frees them


def test_a_prefix_hit_on_a_live_block_is_named_in_the_caption():
    m = PrefixCachingManager(10, 2)
    m.add_sequence("A", 5, tokens=[1, 2, 3, 4, 5])
    m.add_sequence("B", 5, tokens=[1, 2, 3, 4, 9])
    a = m.block_table("A")
    assert f"shares cached blocks {a[0]}, {a[1]}" in story.caption(m.trace.snapshots[-1])
