"""vLLM's KV cache event tests that name the KV cache group and its spec, re-told on
pagedsim: tests/v1/core/test_prefix_caching.py::test_kv_cache_events (its
kv_cache_spec_kind check), ::test_block_stored_event_group_idx_multiple_groups,
::test_block_removed_event_group_idx and ::test_null_parent_block_hash, as read on
vLLM's main branch together with vllm/distributed/kv_events.py at commit 0181ea3.

Translations: vLLM calls `BlockPool.cache_full_blocks(..., kv_cache_group_id=g)` by hand;
here the groups are the hybrid manager's (group 0 full attention, group 1 a sliding
window, one pool), and blocks are cached by `allocate_slots` as they fill. vLLM's pool
of N blocks holds a null block; pagedsim's NULL_BLOCK is not a pool block (N - 1 here).
Not applicable: vLLM's third (Mamba) group, and the warning for a group index the
metadata lacks (pagedsim's groups are fixed, so it cannot happen).
"""

from pagedsim import NULL_BLOCK
from pagedsim.kv_events import BlockRemoved, BlockStored, event_from_json, event_to_json
from pagedsim.policies import PrefixCachingManager
from pagedsim.policies.hybrid import HybridManager
from pagedsim.policies.sliding_window_cache import SlidingWindowPrefixCachingManager

B = 4


def test_a_single_group_stores_its_blocks_as_group_0_full_attention():
    m = PrefixCachingManager(3, B, enable_kv_cache_events=True)
    m.allocate_slots("0", 2 * B, new_token_ids=list(range(2 * B)))
    (stored,) = m.take_events()
    assert (stored.group_idx, stored.kv_cache_spec_kind) == (0, "full_attention")
    assert stored.kv_cache_spec_sliding_window is None


def test_each_hybrid_group_stores_its_blocks_under_its_own_group_idx_and_spec():
    m = HybridManager(8, B, sliding_window=128, enable_kv_cache_events=True, trace=False)
    m.allocate_slots("0", 2 * B, new_token_ids=list(range(2 * B)))
    events = m.take_events()
    assert [type(e) for e in events] == [BlockStored, BlockStored]
    full, window = events
    assert (full.group_idx, full.kv_cache_spec_kind, full.kv_cache_spec_sliding_window) == (
        0,
        "full_attention",
        None,
    )
    assert (window.group_idx, window.kv_cache_spec_kind, window.kv_cache_spec_sliding_window) == (
        1,
        "sliding_window",
        128,
    )
    # one prefix, one hash in both groups: group_idx tells them apart (v1 0.34; tests/vllm_oracle)
    assert full.block_hashes == window.block_hashes


def test_an_evicted_block_is_removed_under_the_group_that_cached_it():
    m = HybridManager(4, B, sliding_window=2 * B, enable_kv_cache_events=True, trace=False)
    tokens = list(range(2 * B))
    m.allocate_slots("0", 2 * B, new_token_ids=tokens)  # both groups cache 2 blocks: pool full
    stored = m.take_events()
    assert [e.group_idx for e in stored] == [0, 1]
    cached = {(h, e.group_idx) for e in stored for h in e.block_hashes}  # same hashes, 2 groups
    m.free_sequence("0")
    m.allocate_slots("1", 2 * B, new_token_ids=[9] * (2 * B))  # no hit: all four are evicted
    removed = [e for e in m.take_events() if isinstance(e, BlockRemoved)]
    assert len(removed) == 4
    assert {(e.block_hashes[0], e.group_idx) for e in removed} == cached


def test_a_stored_run_after_a_dropped_block_names_the_logical_parent_hash():
    """vLLM's null-parent case: the block before the run is the null block in the table
    (a sliding window dropped it), yet parent_block_hash is the hash it had."""
    m = SlidingWindowPrefixCachingManager(8, 1, sliding_window=1, enable_kv_cache_events=True)
    m.allocate_slots("r", 2, new_token_ids=[10, 11])
    first = m.take_events()
    m.allocate_slots("r", 2, new_token_ids=[12, 13])
    (stored,) = m.take_events()
    table = list(m.block_table("r"))
    assert table[1] == NULL_BLOCK  # the physical parent of the new run is gone
    hashes = [h for e in first for h in e.block_hashes]
    assert stored.parent_block_hash == hashes[1] and stored.parent_block_hash is not None
    assert (stored.group_idx, stored.kv_cache_spec_kind) == (0, "sliding_window")


def test_the_optional_fields_are_left_out_of_json_while_none_and_read_back():
    event = BlockStored(
        [5],
        None,
        [1, 2, 3, 4],
        B,
        group_idx=1,
        kv_cache_spec_kind="sliding_window",
        kv_cache_spec_sliding_window=8,
    )
    obj = event_to_json(event)
    assert list(obj) == [
        "type",
        "block_hashes",
        "parent_block_hash",
        "token_ids",
        "block_size",
        "lora_id",
        "medium",
        "lora_name",
        "group_idx",
        "kv_cache_spec_kind",
        "kv_cache_spec_sliding_window",
    ]  # vLLM's order
    assert event_from_json(obj) == event
    plain = event_to_json(BlockRemoved([5]))
    assert plain == {"type": "BlockRemoved", "block_hashes": [5], "medium": "GPU"}
