"""The v1 mechanisms a learner meets in vLLM's code: reset_prefix_cache, KV cache events,
extra keys in block hashes, get_num_common_prefix_blocks, and replaying an event stream."""

import json
import subprocess
import sys

import pytest

from pagedsim import kv_events as ke
from pagedsim import story
from pagedsim.policies import PrefixCachingManager, SlidingWindowManager
from tests.helpers import manager_state

BS = 4


def cached_manager(num_gpu_blocks=8, **kw):
    return PrefixCachingManager(num_gpu_blocks, BS, enable_kv_cache_events=True, **kw)


# ---- reset_prefix_cache ----------------------------------------------------------------------
def test_reset_prefix_cache_is_refused_while_a_block_is_in_use_and_changes_nothing():
    m = cached_manager()
    m.allocate_slots("a", 8, new_token_ids=list(range(8)))
    before = manager_state(m)
    assert m.reset_prefix_cache() is False
    assert manager_state(m) == before and m.take_events()[-1].block_hashes


def test_reset_prefix_cache_forgets_every_cached_block_once_all_are_free():
    m = cached_manager()
    m.allocate_slots("a", 8, new_token_ids=list(range(8)))
    m.free_sequence("a")
    assert len(m.cached_free_blocks()) == 2
    assert m.reset_prefix_cache() is True
    assert m.cached_free_blocks() == [] and m.get_computed_blocks(list(range(9))).num_tokens == 0
    assert isinstance(m.take_events()[-1], ke.AllBlocksCleared)
    m.check_invariants()


# ---- KV cache events -------------------------------------------------------------------------
def test_a_prefill_publishes_one_block_stored_with_vllms_fields():
    m = cached_manager()
    m.allocate_slots("a", 9, new_token_ids=list(range(9)))  # two full blocks and one token
    (stored,) = m.take_events()
    assert isinstance(stored, ke.BlockStored)
    assert len(stored.block_hashes) == 2 and stored.parent_block_hash is None
    assert stored.token_ids == list(range(8)) and stored.block_size == BS
    assert stored.block_hashes == [m.pool.hash_of(b) for b in m.block_table("a")[:2]]
    assert m.take_events() == []  # take_events empties the queue


def test_a_decode_that_fills_a_block_chains_its_event_from_the_previous_block():
    m = cached_manager()
    m.allocate_slots("a", 6, new_token_ids=list(range(6)))
    first = m.take_events()[0].block_hashes[0]
    m.allocate_slots("a", 2, new_token_ids=[6, 7])  # block 1 fills
    (stored,) = m.take_events()
    assert stored.parent_block_hash == first and stored.token_ids == [4, 5, 6, 7]


def test_an_eviction_publishes_block_removed_for_the_overwritten_hash():
    m = cached_manager(num_gpu_blocks=2)
    m.allocate_slots("a", 8, new_token_ids=list(range(8)))
    hashes = m.take_events()[0].block_hashes
    m.free_sequence("a")
    m.allocate_slots("b", 4, new_token_ids=[50, 51, 52, 53])
    removed, stored = m.take_events()
    assert isinstance(removed, ke.BlockRemoved) and removed.block_hashes[0] in hashes
    assert isinstance(stored, ke.BlockStored)


def test_with_events_off_nothing_is_queued():
    m = PrefixCachingManager(4, BS)
    m.allocate_slots("a", 8, new_token_ids=list(range(8)))
    assert m.take_events() == [] and m.pool.kv_event_queue is None


# ---- extra keys --------------------------------------------------------------------------------
def test_two_tenants_with_the_same_prompt_do_not_share_blocks():
    m = cached_manager()
    prompt = list(range(9))
    m.allocate_slots("a", 9, new_token_ids=prompt, cache_salt="tenant-a")
    assert m.get_computed_blocks(prompt, cache_salt="tenant-a").num_tokens == 8
    assert m.get_computed_blocks(prompt, cache_salt="tenant-b").num_tokens == 0
    assert m.get_computed_blocks(prompt).num_tokens == 0


def test_two_lora_adapters_do_not_share_blocks_and_the_event_names_the_adapter():
    m = cached_manager()
    prompt = list(range(9))
    m.allocate_slots("a", 9, new_token_ids=prompt, lora_id=42)
    assert m.take_events()[0].lora_id == 42
    assert m.get_computed_blocks(prompt, lora_id=42).num_tokens == 8
    assert m.get_computed_blocks(prompt, lora_id=7).num_tokens == 0
    m.allocate_slots("b", 9, new_token_ids=prompt)
    assert m.take_events()[0].lora_id is None


def test_a_lookup_with_other_extra_keys_cannot_be_used_for_an_admission():
    m = cached_manager()
    m.allocate_slots("a", 9, new_token_ids=list(range(9)), cache_salt="s")
    hit = m.get_computed_blocks(list(range(9)), cache_salt="s")
    before = manager_state(m)
    with pytest.raises(ValueError, match="extra keys"):
        m.allocate_slots("b", 1, new_token_ids=list(range(9)), computed=hit)
    assert manager_state(m) == before


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"cache_salt": 5}, TypeError),
        ({"lora_id": "x"}, TypeError),
        ({"lora_id": 0}, ValueError),
        ({"lora_id": True}, TypeError),
        ({"cache_salt": b"s"}, TypeError),
    ],
)
def test_bad_extra_keys_are_refused_with_nothing_changed(kwargs, error):
    m = cached_manager()
    m.allocate_slots("a", 5, new_token_ids=list(range(5)))
    before = manager_state(m)
    for call in (
        lambda: m.allocate_slots("b", 5, new_token_ids=list(range(5)), **kwargs),
        lambda: m.get_computed_blocks(list(range(5)), **kwargs),
        lambda: m.add_sequence("c", 5, list(range(5)), **kwargs),
    ):
        with pytest.raises(error):
            call()
        assert manager_state(m) == before


# ---- common prefix blocks ------------------------------------------------------------------------
def test_common_prefix_blocks_are_those_every_running_request_holds():
    m = cached_manager(num_gpu_blocks=16)
    shared = list(range(8))
    for i, tail in enumerate(([90, 91, 92], [93, 94, 95], [96])):
        hit = m.get_computed_blocks(shared + tail)
        m.allocate_slots(
            f"r{i}", 8 + len(tail) - hit.num_tokens, new_token_ids=shared + tail, computed=hit
        )
    assert m.get_num_common_prefix_blocks("r0", 3) == 2
    assert m.get_num_common_prefix_blocks("r0", 2) == 0  # counts are 3, not 2
    with pytest.raises(ValueError):
        m.get_num_common_prefix_blocks("r0", 0)


def test_a_sliding_window_has_no_common_prefix_blocks_as_in_v1():
    m = SlidingWindowManager(8, BS, sliding_window=4)
    m.add_sequence("a", 6)
    assert m.get_num_common_prefix_blocks("a", 1) == 0


# ---- replaying a stream -------------------------------------------------------------------------
STREAM = [
    {
        "ts": 1.0,
        "events": [
            {
                "type": "BlockStored",
                "block_hashes": [11, 12],
                "parent_block_hash": None,
                "token_ids": [1, 2, 3, 4],
                "block_size": 2,
                "lora_id": None,
                "medium": "GPU",
            }
        ],
    },
    {
        "ts": 2.0,
        "events": [
            {
                "type": "BlockStored",
                "block_hashes": [13],
                "parent_block_hash": 12,
                "token_ids": [5, 6],
                "block_size": 2,
                "lora_id": None,
                "medium": "GPU",
            },
            ["BlockStored", [14], 12, [7, 8], 2, None, "GPU"],
        ],
    },  # an older, array-like encoding
    {"ts": 3.0, "events": [{"type": "BlockRemoved", "block_hashes": [13], "medium": "GPU"}]},
    {"type": "AllBlocksCleared"},
]


def test_a_stream_in_vllms_format_replays_into_the_cached_blocks_it_names():
    events = ke.read_stream(json.dumps(line) for line in STREAM)
    snaps = ke.replay(events)
    assert len(snaps) == 6
    assert snaps[3].cached_blocks == (0, 1, 2, 3)  # 11, 12 and both children of 12
    assert snaps[3].ref_counts == (0,) * 4 and snaps[3].sequences == ()  # a stream has none
    assert snaps[4].cached_blocks == (0, 1, 3)  # 13 evicted
    assert snaps[5].cached_blocks == () and snaps[5].block_fill == (0,) * 4
    assert "BlockRemoved" in story.caption(snaps[4])
    t = ke.timeline(events)
    held = {key.hash: r for key, r in t.cached_at(3).items()}
    assert sorted(held) == [11, 12, 13, 14]
    assert held[14].parent == 12 and held[14].token_ids == (7, 8)


def test_events_written_by_pagedsim_read_back_the_same():
    m = cached_manager(num_gpu_blocks=2)
    m.allocate_slots("a", 8, new_token_ids=list(range(8)))
    m.free_sequence("a")
    m.allocate_slots("b", 4, new_token_ids=[7, 7, 7, 7])
    events = m.take_events()
    lines = [json.dumps(ke.event_to_json(e)) for e in events]
    assert ke.read_stream(lines) == events


@pytest.mark.parametrize(
    "line",
    [
        '{"type": "BlockStored", "block_hashes": [1], "token_ids": [1], "block_size": 2}',
        '{"type": "BlockStored", "block_hashes": [], "token_ids": [], "block_size": 2}',
        '{"type": "BlockRemoved", "block_hashes": [true]}',
        '{"type": "Nope"}',
        "[1, 2",
        '{"events": 5}',
        '["BlockStored"]',
    ],
)
def test_a_malformed_line_is_a_value_error_naming_the_line(line):
    with pytest.raises(ValueError, match="line 2"):
        ke.read_stream(['{"type": "AllBlocksCleared"}', line])


def test_play_events_prints_every_event_and_refuses_a_bad_file_with_exit_2(tmp_path):
    good, bad = tmp_path / "e.jsonl", tmp_path / "bad.jsonl"
    good.write_text("\n".join(json.dumps(line) for line in STREAM), encoding="utf-8")
    bad.write_text('{"type": "BlockStored"}\n', encoding="utf-8")
    run = [sys.executable, "-m", "pagedsim", "play", "--width", "90", "--events"]
    out = subprocess.run(run + [str(good)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.count("event ") == 5  # one line per event
    err = subprocess.run(run + [str(bad)], capture_output=True, text=True, timeout=120)
    assert err.returncode == 2 and "--events: line 1" in err.stderr
    assert "Traceback" not in err.stderr
