"""What subclasses and the scheduler build on: pool=, token ids reaching a hook, the decode
plan, peak blocks, and one trace step per decode step."""

import pytest

from pagedsim import BlockPool, KVCacheManager, story
from pagedsim.policies import SlidingWindowManager


class Recorder(KVCacheManager):
    def __init__(self, *args, **kwargs):
        self.seen = []
        super().__init__(*args, **kwargs)

    def _on_tokens_appended(self, seq_id, first_position, token_ids):
        self.seen.append((seq_id, first_position, token_ids))


def test_token_ids_reach_the_hook_in_order_from_append_and_decode():
    m = Recorder(8, 2, trace=False)
    m.add_sequence("a", 1)
    m.add_sequence("b", 0)
    m.append_tokens("a", 2, token_ids=[7, 8])
    m.decode_step(["b", "a", "b"], token_ids=(1, 2, 3))
    m.append_tokens("a", 1)  # no ids given: the hook is not called
    assert m.seen == [("a", 1, (7, 8)), ("b", 0, (1,)), ("a", 3, (2,)), ("b", 1, (3,))]


def test_a_given_pool_is_used_and_a_mismatched_or_busy_one_is_refused():
    pool = BlockPool(6, 4, "fifo")
    m = KVCacheManager(6, 4, pool=pool)
    m.add_sequence("a", 5)
    assert m.pool is pool and pool.num_free_blocks == 4
    assert m.trace.snapshots[0].free_list == tuple(range(6))
    with pytest.raises(ValueError, match="pool has 6 blocks x 4 tokens"):
        KVCacheManager(6, 2, pool=BlockPool(6, 4))
    with pytest.raises(ValueError, match="every block free"):
        KVCacheManager(6, 4, pool=pool)
    with pytest.raises(TypeError, match="must be a BlockPool"):
        KVCacheManager(6, 4, pool=[0] * 6)


def test_blocks_for_decode_counts_boundaries_repeats_and_one_copy_per_shared_tail():
    m = KVCacheManager(16, 4, trace=False)
    m.add_sequence("a", 2)
    m.fork("a", "b")
    m.fork("a", "c")  # block 0 is held three times, half full
    m.add_sequence("d", 4)  # full: its next token starts a block
    # a and b copy (the count drops 3 -> 2 -> 1); c then writes in place; d takes a block twice
    # over (positions 4 and 5 share one new block), so: 2 copies + 1 boundary.
    assert m.blocks_for_decode(["a", "b", "c", "d", "d"]) == 3
    free = m.num_free_blocks
    m.decode_step(["a", "b", "c", "d", "d"])
    assert free - m.num_free_blocks == 3
    assert len(m.drain_copies()) == 2
    m.check_invariants()


def test_a_decode_step_is_one_trace_step_that_names_the_batch():
    m = KVCacheManager(8, 2)
    m.add_sequence("a", 2)
    m.add_sequence("b", 1)
    steps = len(m.trace.snapshots)
    m.decode_step(["a", "b"])
    assert len(m.trace.snapshots) == steps + 1
    caption = story.caption(m.trace.snapshots[-1])
    assert caption.startswith("decode step: 2 sequences append one token each")
    assert "take block" in caption


def test_peak_blocks_is_the_whole_table_or_the_window_plus_one():
    assert KVCacheManager(64, 4).peak_blocks(10, 30) == 8
    w = SlidingWindowManager(64, 4, sliding_window=8)
    assert w.peak_blocks(30, 40) == 8  # the whole prompt is held until the step ends
    assert w.peak_blocks(2, 40) == w.kept(40) + 1
