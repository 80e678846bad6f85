"""KVCacheManager: tables, slots, sharing, copy-on-write, usage and the recorded trace."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim import (
    NULL_BLOCK,
    BlockTable,
    KVCacheManager,
    OutOfBlocks,
    SequenceError,
    blocks_needed,
    story,
)
from pagedsim.io import trace_json
from pagedsim.policies.prefix_cache import PrefixCachingManager
from pagedsim.story import describe
from pagedsim.trace import AllocationFailed, CopyOnWrite, PrefixCacheReset


def test_a_table_has_ceil_tokens_over_block_size_entries():
    m = KVCacheManager(16, 4)
    for seq, n in enumerate([0, 1, 4, 5, 8, 9]):
        m.add_sequence(seq, n)
        assert len(m.block_table(seq)) == blocks_needed(n, 4) == -(-n // 4)


def test_a_token_maps_to_its_block_offset_and_slot():
    t = BlockTable(4, [7, 2, 9], num_tokens=10)
    assert t.locate(0) == (7, 0)
    assert t.locate(5) == (2, 1)
    assert t.slot(9) == 9 * 4 + 1
    assert t.slot_mapping().tolist() == [28, 29, 30, 31, 8, 9, 10, 11, 36, 37]
    with pytest.raises(IndexError):
        t.locate(10)


def test_a_dropped_block_has_no_slots():
    t = BlockTable(2, [3, NULL_BLOCK, 5], num_tokens=5)
    assert t.slot_mapping().tolist() == [6, 7, -1, -1, 10]
    with pytest.raises(IndexError, match="dropped"):
        t.locate(2)


def test_appending_returns_the_slots_the_tokens_land_in():
    m = KVCacheManager(8, 4)
    m.add_sequence("A", 3)
    slots = m.append_tokens("A", 3)
    table = m.block_table("A")
    assert slots == [table.slot(3), table.slot(4), table.slot(5)]
    assert m.slot_mapping("A").tolist()[3:] == slots


def test_block_table_is_a_copy_the_caller_cannot_corrupt():
    m = KVCacheManager(8, 4)
    m.add_sequence("A", 5)
    t = m.block_table("A")
    t.blocks.append(7)
    assert len(m.block_table("A")) == 2
    m.check_invariants()


def test_a_fork_shares_every_block_and_raises_each_count():
    m = KVCacheManager(8, 4)
    m.add_sequence("A", 6)
    m.fork("A", "B")
    assert m.block_table("B") == m.block_table("A")
    assert [m.pool.ref_count(b) for b in m.block_table("A")] == [2, 2]


def test_freeing_a_shared_block_keeps_it_until_the_last_owner_frees():
    m = KVCacheManager(8, 4)
    m.add_sequence("A", 6)
    m.fork("A", "B")
    m.free_sequence("A")
    blocks = list(m.block_table("B"))
    assert all(b not in m.pool.free_list() for b in blocks)
    m.free_sequence("B")
    assert set(blocks) <= set(m.pool.free_list())


def test_appending_into_a_shared_partial_block_copies_it_first():
    m = KVCacheManager(8, 4)
    m.add_sequence("A", 6)  # blocks [0, 1], block 1 half full
    m.fork("A", "B")
    m.append_tokens("B", 1)
    a, b = m.block_table("A"), m.block_table("B")
    assert a[0] == b[0]  # the full block stays shared
    assert a[1] != b[1]  # the partial block was copied
    assert m.drain_copies() == [(a[1], b[1])]
    assert m.drain_copies() == []  # drained
    assert m.pool.ref_count(a[1]) == 1 and m.pool.ref_count(b[1]) == 1


def test_appending_after_a_full_shared_block_needs_no_copy():
    m = KVCacheManager(8, 4)
    m.add_sequence("A", 8)
    m.fork("A", "B")
    m.append_tokens("B", 1)
    assert m.drain_copies() == []
    assert m.block_table("B")[:2] == m.block_table("A")[:2]


def test_usage_counts_shared_tokens_once_and_empty_slots():
    m = KVCacheManager(8, 4)
    m.add_sequence("A", 6)
    m.fork("A", "B")
    u = m.usage()
    assert (u.blocks_used, u.blocks_free) == (2, 6)
    assert (u.tokens_stored, u.logical_tokens, u.empty_slots) == (6, 12, 2)
    assert u.utilization == pytest.approx(6 / 8)


def test_can_allocate_tells_whether_a_prompt_fits():
    m = KVCacheManager(3, 4)
    assert m.can_allocate(12) and not m.can_allocate(13)


@settings(max_examples=40)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3)), max_size=40))
def test_decode_step_with_tracing_off_matches_append_tokens_with_tracing_on(ops):
    """The fast path and the traced path end in the same state, slot for slot."""
    fast, slow = KVCacheManager(40, 2, trace=False), KVCacheManager(40, 2, trace=True)
    for m in (fast, slow):
        m.add_sequence(0, 3)
        m.fork(0, 1)
        m.add_sequence(2, 2)
    for kind, seq in ops:
        if kind == 0:
            batch = [s for s in range(3) if s != seq]
            got_fast = fast.decode_step(batch)
            got_slow = [x for s in batch for x in slow.append_tokens(s, 1)]
            assert got_fast == got_slow
        elif kind == 1 and seq < 3:
            assert fast.append_tokens(seq, seq) == slow.append_tokens(seq, seq)
        assert fast.drain_copies() == slow.drain_copies()
    a, b = fast.snapshot(), slow.snapshot()
    assert (a.free_list, a.ref_counts, a.sequences) == (b.free_list, b.ref_counts, b.sequences)


def test_a_sequence_listed_twice_in_a_decode_step_gets_two_tokens():
    m = KVCacheManager(4, 2, trace=False)
    m.add_sequence("A", 1)
    assert len(m.decode_step(["A", "A"])) == 2
    assert m.num_tokens("A") == 3
    m.check_invariants()


def test_each_call_is_one_step_with_a_snapshot_and_a_caption():
    m = KVCacheManager(4, 2)
    m.add_sequence("A", 3)
    m.fork("A", "B")
    m.append_tokens("B")
    snaps = m.trace.snapshots
    assert [s.step for s in snaps] == [0, 1, 2, 3]
    assert "arrives with 3 tokens" in story.caption(snaps[1])
    assert "forks from seq A" in story.caption(snaps[2])
    assert "copy-on-write" in story.caption(snaps[3])
    assert any(isinstance(e, CopyOnWrite) for e in snaps[3].events)
    assert all(e.step == 3 for e in snaps[3].events)


def test_snapshots_are_time_travel_to_the_exact_earlier_state():
    m = KVCacheManager(6, 2)
    states = [m.snapshot()]
    for op in (
        lambda: m.add_sequence("A", 3),
        lambda: m.fork("A", "B"),
        lambda: m.append_tokens("A", 2),
        lambda: m.free_sequence("B"),
    ):
        op()
        states.append(m.snapshot())
    for recorded, live in zip(m.trace.snapshots, states, strict=True):
        assert (
            recorded.free_list,
            recorded.ref_counts,
            recorded.sequences,
            recorded.block_fill,
        ) == (live.free_list, live.ref_counts, live.sequences, live.block_fill)


def test_a_refused_operation_is_recorded_but_changes_nothing():
    m = KVCacheManager(1, 2)
    m.add_sequence("A", 2)
    with pytest.raises(OutOfBlocks):
        m.append_tokens("A", 1)
    last = m.trace.snapshots[-1]
    assert isinstance(last.events[0], AllocationFailed)
    assert "OutOfBlocks" in story.caption(last)
    assert last.sequences == m.trace.snapshots[-2].sequences


def test_the_trace_is_json_ready():
    m = KVCacheManager(4, 2)
    m.add_sequence("A", 3)
    m.fork("A", "B")
    data = json.loads(json.dumps(trace_json.to_dict(m.trace)))
    assert [e["kind"] for e in data["events"]][:2] == ["sequence_added", "block_allocated"]
    assert data["snapshots"][-1]["sequences"][1]["seq_id"] == "B"


def test_a_trace_with_a_prefix_cache_reset_loads_back():
    m = PrefixCachingManager(4, 2)
    m.add_sequence("A", 4, [1, 2, 3, 4])
    m.free_sequence("A")
    assert m.reset_prefix_cache()
    data = json.loads(json.dumps(trace_json.to_dict(m.trace)))
    snaps = trace_json.snapshots_from_dict(data)
    assert snaps[-1].events == (PrefixCacheReset(m.step, 2),)
    assert snaps == m.trace.snapshots


def test_a_trace_saved_before_the_rename_reads_back_as_saved():
    """Traces written before issue 41 said num_blocks (the snapshot's pool, and the count a
    prefix-cache reset forgot): they load into the same snapshots as the new keys."""
    m = PrefixCachingManager(6, 2)
    m.add_sequence("A", 5, [1, 2, 3, 4, 5])
    m.free_sequence("A")
    assert m.reset_prefix_cache()
    data = json.loads(json.dumps(trace_json.to_dict(m.trace)))
    for snap in data["snapshots"]:
        snap["num_blocks"] = snap.pop("num_gpu_blocks")  # as saved before issue 41
        for e in snap["events"]:
            if e["kind"] == "prefix_cache_reset":
                e["num_blocks"] = e.pop("num_forgotten")
    assert any(e["kind"] == "prefix_cache_reset" for e in data["snapshots"][-1]["events"])
    assert trace_json.snapshots_from_dict(data) == m.trace.snapshots


def test_a_snapshot_with_both_names_for_its_pool_is_judged_by_the_new_one():
    m = KVCacheManager(4, 2)
    data = json.loads(json.dumps(trace_json.to_dict(m.trace)))
    data["snapshots"][0]["num_blocks"] = 99
    assert trace_json.snapshots_from_dict(data)[0].num_gpu_blocks == 4
    data["snapshots"][0]["num_gpu_blocks"] = 0
    with pytest.raises(ValueError, match="num_gpu_blocks"):
        trace_json.snapshots_from_dict(data)


def test_describe_never_returns_an_empty_caption():
    assert describe([]) == "nothing changed"


def test_tracing_can_be_switched_off():
    m = KVCacheManager(4, 2, trace=False)
    m.add_sequence("A", 3)
    assert m.trace is None
    assert m.snapshot().sequences[0].num_tokens == 3


def test_slot_mapping_is_an_int64_array():
    m = KVCacheManager(4, 2)
    slots = m.add_sequence("A", 3)
    assert isinstance(slots, np.ndarray) and slots.dtype == np.int64
    assert slots.tolist() == m.slot_mapping("A").tolist()


def test_restoring_swapped_sequences_keeps_a_shared_prefix_shared():
    m = KVCacheManager(8, 2)
    m.add_sequence("X", 1)
    placed = m.restore_sequences({"A": ([70, 71, 72], 5), "B": ([70, 71, 73], 6)})
    assert set(placed) == {70, 71, 72, 73} and len(set(placed.values())) == 4
    a, b = m.block_table("A"), m.block_table("B")
    assert a[:2] == b[:2] == [placed[70], placed[71]]
    assert [m.pool.ref_count(x) for x in a] == [2, 2, 1]
    assert "arrives" in story.caption(m.trace.snapshots[-1])
    m.check_invariants()


def test_restoring_more_than_fits_or_a_live_id_changes_nothing():
    m = KVCacheManager(3, 2)
    m.add_sequence("X", 1)
    before = m.snapshot()
    with pytest.raises(OutOfBlocks):
        m.restore_sequences({"A": ([1, 2], 4), "B": ([3], 1)})  # 3 distinct blocks, 2 free
    with pytest.raises(SequenceError, match="already exists"):
        m.restore_sequences({"X": ([1], 1)})
    with pytest.raises(ValueError, match="2 labels for 1 tokens"):
        m.restore_sequences({"A": ([1, 2], 1)})
    after = m.snapshot()
    assert (after.free_list, after.ref_counts, after.sequences) == (
        before.free_list,
        before.ref_counts,
        before.sequences,
    )


def test_add_sequence_without_slots_returns_none_and_admits_the_same_blocks():
    with_slots, without = KVCacheManager(8, 4), KVCacheManager(8, 4)
    slots = with_slots.add_sequence("A", 6)
    assert without.add_sequence("A", 6, with_slots=False) is None
    assert list(without.block_table("A")) == list(with_slots.block_table("A"))
    assert list(without.slot_mapping("A")) == list(slots)


def test_add_sequence_refuses_a_non_bool_with_slots_and_changes_nothing():
    m = KVCacheManager(8, 4)
    with pytest.raises(TypeError, match="with_slots"):
        m.add_sequence("A", 6, with_slots="no")
    assert "A" not in m and m.num_free_blocks == 8
    m.check_invariants()
