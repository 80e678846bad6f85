"""The hybrid allocator's step captions say a block fell out of the sliding window only
when one did (the window group's table holds a null block), and then how many."""

from hypothesis import given
from hypothesis import strategies as st

from pagedsim.policies.hybrid import HybridManager


@given(
    prompt=st.integers(1, 12),
    appends=st.lists(st.integers(1, 6), max_size=4),
    window=st.integers(2, 12),
)
def test_the_caption_says_fell_out_exactly_when_the_window_dropped_blocks(prompt, appends, window):
    m = HybridManager(64, 4, sliding_window=window)
    m.add_sequence("A", prompt)
    for n in [None, *appends]:
        if n is not None:
            m.append_tokens("A", n)
        caption = m.trace.snapshots[-1].custom_caption
        gone = sum(1 for b in m.block_tables("A")[1] if b < 0)
        assert ("fell out" in caption) == (gone > 0), caption
        if gone:
            assert f"the other {gone} fell out of its window" in caption


def test_a_short_sequence_keeps_every_block_and_says_nothing_fell_out():
    m = HybridManager(16, 4, sliding_window=8)
    m.add_sequence("A", 5)
    caption = m.trace.snapshots[-1].custom_caption
    assert "the sliding-window group 2 of 2" in caption and "fell out" not in caption
