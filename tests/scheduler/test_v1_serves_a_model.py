"""What SchedulerV1 takes from an engine that runs a real model: requests added as they
come (add_request), sampled stop tokens, prefix caching switched off, and a window that
slides only once update_from_output says the step's tokens are computed."""

import pytest

from pagedsim.block_table import NULL_BLOCK
from pagedsim.config import CacheConfig, SchedulerConfig
from pagedsim.policies.hybrid import HybridManager
from pagedsim.policies.prefix_cache import PrefixCachingManager
from pagedsim.policies.sliding_window_cache import SlidingWindowPrefixCachingManager
from pagedsim.scheduler_v0 import SchedulerV0
from pagedsim.scheduler_v1 import SchedulerV1


def test_an_added_request_stops_at_a_sampled_stop_token_and_frees_its_blocks():
    s = SchedulerV1([], PrefixCachingManager(8, 2), record=False)
    rid = s.add_request((1, 2, 3), 5, stop_token_ids=(7,))
    req = s._by_id[rid]
    out = s.schedule()
    assert out.num_scheduled_tokens == {rid: 3} and out.scheduled_new_reqs[0].req_id == rid
    assert s.update_from_output(out, {rid: 4}) == []
    out = s.schedule()
    assert s.update_from_output(out, {rid: 7}) == [rid]  # stopped after 2 of 5 tokens
    assert s.done and s.manager.seq_ids() == [] and req.sampled == [4, 7]
    assert rid not in s._by_id  # a finished request leaves the scheduler, as in v1


@pytest.mark.parametrize(
    "args, error, message",
    [
        (((1, 2.5), 3), TypeError, "prompt"),
        (((), 3), ValueError, "prompt"),
        (((1, 2), 0), ValueError, "max_tokens"),
        (((1, 2), 3, (-1,)), ValueError, "stop_token_ids"),
        (((1,) * 10, 10), ValueError, "more than the pool's 8"),
    ],
)
@pytest.mark.parametrize("scheduler", [SchedulerV1, SchedulerV0])
def test_a_bad_request_is_refused_and_changes_nothing(scheduler, args, error, message):
    """Both schedulers' add_request (SchedulerV0's: test_v0_serves_a_model.py)."""
    s = scheduler([], PrefixCachingManager(8, 2), record=False)
    with pytest.raises(error, match=message):
        s.add_request(*args)
    assert s.requests == [] and len(s.waiting) == 0 and s.done


@pytest.mark.parametrize("caching", [True, False])
def test_prefix_caching_off_looks_nothing_up(caching):
    s = SchedulerV1(
        [],
        PrefixCachingManager(16, 2),
        cache_config=CacheConfig(enable_prefix_caching=caching),
        record=False,
    )
    first = s.add_request((1, 2, 3, 4, 5), 1)
    s.update_from_output(s.schedule(), {first: 9})  # finished: its full blocks stay cached
    second = s.add_request((1, 2, 3, 4, 6), 1)
    out = s.schedule()
    assert out.scheduled_new_reqs[0].num_computed_tokens == (4 if caching else 0)
    assert out.num_scheduled_tokens == {second: 1 if caching else 5}


def test_a_window_slides_past_a_step_only_after_the_model_computed_it():
    m = SlidingWindowPrefixCachingManager(16, 2, sliding_window=3)
    s = SchedulerV1([], m, record=False, slide_after_update=True)
    rid = s.add_request(tuple(range(1, 9)), 2)
    out = s.schedule()  # the whole prompt: its queries read blocks 0..3 during the step
    assert NULL_BLOCK not in m.block_table(rid).blocks
    s.update_from_output(out, {rid: 9})
    assert NULL_BLOCK not in m.block_table(rid).blocks  # v1 frees at the next allocate_slots
    s.schedule()
    # computed 8: the next query (position 8) reads positions 6.. only: blocks 0-2 went
    # before its slot was counted (v1: remove_skipped_blocks at the top of allocate_slots)
    assert m.block_table(rid).blocks[:3] == [NULL_BLOCK] * 3


def test_without_a_model_the_window_slides_at_schedule_time():
    m = SlidingWindowPrefixCachingManager(16, 2, sliding_window=3)
    s = SchedulerV1([], m, record=False)
    rid = s.add_request(tuple(range(1, 9)), 2)
    s.schedule()
    assert m.block_table(rid).blocks[:3] == [NULL_BLOCK] * 3


def test_a_hybrid_manager_peaks_at_the_sum_of_its_groups():
    m = HybridManager(64, 4, sliding_window=8)
    assert m.peak_blocks(10, 40, 16) == m.full.peak_blocks(10, 40, 16) + m.window.peak_blocks(
        10, 40, 16
    )
    s = SchedulerV1([], m, SchedulerConfig(max_num_batched_tokens=16), record=False)
    rid = s.add_request(tuple(range(1, 11)), 4)
    out = s.schedule()
    assert out.num_scheduled_tokens == {rid: 10} and out.scheduled_new_reqs[0].block_ids
