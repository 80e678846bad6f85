"""vLLM v1 behaviours re-told on pagedsim: sliding-window admission under chunked prefill,
any int priority, preempted requests counted apart in the prefix-cache stats, the
scheduler's reset_prefix_cache(reset_running_requests=True), and an indexable waiting queue.

Sources (vLLM main, read for behaviour, re-told in pagedsim's own calls):
    * vllm/v1/kv_cache_interface.py SlidingWindowSpec.max_memory_usage_bytes and
      tests/v1/core/test_kv_cache_utils.py (the sliding-window memory checks): a request
      holds at most cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), B) + 1
      blocks, so a long prompt is admitted into a pool that could not hold all of it;
    * tests/v1/core/test_scheduler.py's priority tests, whose random cases draw priorities
      from [-3, 3];
    * vllm/v1/metrics/stats.py PrefixCacheStats.record(..., preempted) and
      tests/v1/core/test_prefix_caching.py's stats checks: a preempted request's lookup
      goes to preempted_requests / preempted_queries / preempted_hits;
    * tests/v1/core/test_scheduler.py::test_reset_prefix_cache and the
      reset_running_requests variant;
    * `scheduler.waiting[0]`, which vLLM's scheduler tests read (a deque there).

Translations: as in test_scheduler.py (a pool of N vLLM blocks is N - 1 here; one `step()`
is schedule + update_from_output). pagedsim's CacheStats names vLLM's queries and hits
`prompt_tokens` and `hit_tokens` (its `hits` counts blocks), hence `preempted_prompt_tokens`
and `preempted_hit_tokens`.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim import KVCacheManager
from pagedsim.policies import PrefixCachingManager, SlidingWindowPrefixCachingManager
from pagedsim.policies.sliding_window import SlidingWindowManager
from pagedsim.scheduler import make_scheduler
from pagedsim.workloads import Request


def cdiv(a, b):
    return -(-a // b)


# ---- sliding-window admission under chunked prefill ---------------------------------------
@pytest.mark.parametrize("manager", [SlidingWindowManager, SlidingWindowPrefixCachingManager])
def test_a_long_prompt_is_admitted_when_the_window_plus_one_chunk_fits(manager):
    # window 64, budget 128, B 16: v1's cap is cdiv(63 + 128, 16) + 1 = 13 blocks, while
    # the 516-token prompt alone spans 33
    assert cdiv(64 - 1 + 128, 16) + 1 == 13
    m = manager(13, 16, sliding_window=64)
    s = make_scheduler([Request(516, 4)], m, mode="v1", max_num_batched_tokens=128)
    peak = 0
    while not s.done:
        s.step()
        m.check_invariants()
        peak = max(peak, m.pool.num_used)
    assert s.finished == 1 and s.preemptions == 0 and peak <= 13


def test_the_window_cap_is_v1s_max_memory_usage_in_blocks():
    # the values of vLLM's sliding-window memory test: window 1024, budget 1024, B 16
    w = SlidingWindowManager(10_000, 16, sliding_window=1024)
    assert w.peak_blocks(16_384, 16_384, 1024) == cdiv(1024 - 1 + 1024, 16) + 1 == 129
    # a request shorter than the window plus a chunk holds all of its blocks
    assert w.peak_blocks(100, 200, 1024) == cdiv(200, 16)
    # v0 admits a prompt whole: there the prompt is the peak
    assert w.peak_blocks(16_384, 16_384) == 16_384 // 16
    assert KVCacheManager(64, 4).peak_blocks(10, 30, 4) == 8  # full attention holds all


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 60), st.integers(1, 6)), min_size=1, max_size=4),
    st.integers(1, 24),
    st.sampled_from([1, 2, 4, 8]),
    st.integers(1, 24),
    st.booleans(),
    st.integers(0, 3),
)
def test_a_pool_of_v1s_cap_serves_every_request_with_a_sliding_window(
    shapes, window, bs, budget, cached, ahead
):
    reqs = [Request(p, o) for p, o in shapes]
    if not cached:
        ahead = 0  # lookahead slots need allocate_slots (a prefix-caching manager)
    # v1's cap, computed here from its formula: the whole KV, or the window + one chunk
    cap = max(
        min(
            cdiv(r.total_len - 1 + ahead, bs),
            cdiv(min(window - 1 + min(budget, r.total_len) + ahead, r.total_len - 1 + ahead), bs)
            + 1,
        )
        for r in reqs
    )
    manager = SlidingWindowPrefixCachingManager if cached else SlidingWindowManager
    m = manager(cap, bs, sliding_window=window, trace=False)
    tokens = [[7] * p for p, _ in shapes] if cached else None
    s = make_scheduler(
        reqs, m, mode="v1", tokens=tokens, max_num_batched_tokens=budget, num_lookahead_tokens=ahead
    ).run(check=True)
    assert s.finished == len(reqs) and m.num_free_blocks == m.num_gpu_blocks


# ---- any int priority ------------------------------------------------------------------------
@given(st.lists(st.integers(-3, 3), min_size=1, max_size=8))
def test_any_int_priority_is_accepted_and_the_smallest_is_admitted_first(priorities):
    n = len(priorities)
    s = make_scheduler(
        [Request(10, 2) for _ in range(n)],
        KVCacheManager(9999, 16),
        mode="v1",
        policy="priority",
        priorities=priorities,
        max_num_seqs=1,
        arrival_times=[float(i) for i in range(n)],
    )
    order = []
    while not s.done:
        s.step()
        order += [r.request_id[0] for r in s.running if r.request_id[0] not in order]
    assert order == sorted(range(n), key=lambda i: (priorities[i], i))


# ---- preempted requests counted apart ------------------------------------------------------------
def test_a_preempted_request_is_counted_apart_and_out_of_the_hit_rate():
    # two 8-token prompts in a 4-block pool of 4-token blocks: the second decode step needs
    # a fifth block, so request 1 (the last running) is preempted, then admitted again
    m = PrefixCachingManager(4, 4, trace=False)
    s = make_scheduler(
        [Request(8, 4), Request(8, 4)], m, mode="v1", tokens=[list(range(8)), list(range(10, 18))]
    )
    s.run(check=True)
    assert s.preemptions >= 1
    st_ = m.stats
    assert (st_.requests, st_.prompt_tokens) == (2, 16)  # each request's first lookup
    assert st_.preempted_requests == s.preemptions
    assert st_.hit_tokens == 0 and st_.hit_rate == 0.0  # the prompts share nothing
    assert st_.preempted_hit_tokens > 0  # its own blocks, cached before it was preempted


def test_a_lookup_can_be_recorded_as_preempted_only_for_a_new_sequence():
    m = PrefixCachingManager(8, 4, trace=False)
    m.allocate_slots("a", 4, new_token_ids=[1, 2, 3, 4], preempted=True)
    assert (m.stats.requests, m.stats.preempted_requests) == (0, 1)
    assert m.stats.preempted_prompt_tokens == 4
    with pytest.raises(ValueError, match="running; preempted is for new ones"):
        m.allocate_slots("a", 1, new_token_ids=[5], preempted=True)
    with pytest.raises(TypeError, match="preempted must be a bool"):
        m.allocate_slots("b", 4, new_token_ids=[1, 2, 3, 4], preempted=1)
    assert "b" not in m.seq_ids()


# ---- the scheduler's reset_prefix_cache ---------------------------------------------------
def running_cached_scheduler():
    m = PrefixCachingManager(99, 4, trace=False)
    s = make_scheduler(
        [Request(8, 6) for _ in range(3)], m, mode="v1", tokens=[[i] * 8 for i in range(3)]
    )
    s.step()
    return s, m


def test_reset_prefix_cache_fails_while_requests_run():
    s, m = running_cached_scheduler()
    cached = len(m.pool.cached_free_blocks())
    used = m.pool.num_used
    assert s.reset_prefix_cache() is False
    assert len(s.running) == 3 and m.pool.num_used == used
    assert len(m.pool.cached_free_blocks()) == cached


def test_reset_running_requests_preempts_them_in_order_then_resets():
    s, m = running_cached_scheduler()
    assert s.reset_prefix_cache(reset_running_requests=True) is True
    assert s.running == [] and s.preemptions == 3
    assert [r.request_id[0] for r in s.waiting] == [0, 1, 2]  # v1's order kept
    assert s.waiting[0].num_computed_tokens == 0 and m.pool.num_used == 0
    assert len(m.pool.cached_free_blocks()) == 0
    assert m.get_computed_blocks([0] * 8).num_tokens == 0  # request 0's blocks are forgotten
    s.run(check=True)
    assert s.finished == 3
    assert m.stats.preempted_requests == 3 and m.stats.preempted_hit_tokens == 0  # all forgotten


def test_reset_running_requests_must_be_a_bool():
    s, _ = running_cached_scheduler()
    with pytest.raises(TypeError, match="reset_running_requests must be a bool"):
        s.reset_prefix_cache(reset_running_requests="yes")
    assert len(s.running) == 3


def test_without_a_prefix_cache_a_reset_succeeds_once_no_block_is_in_use():
    s = make_scheduler([Request(8, 2)], KVCacheManager(9, 4), mode="v1")
    s.step()
    assert s.reset_prefix_cache() is False
    assert s.reset_prefix_cache(reset_running_requests=True) is True
    assert s.run().finished == 1


# ---- an indexable waiting queue --------------------------------------------------------------
@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_the_waiting_queue_is_indexed_in_admission_order(policy):
    s = make_scheduler(
        [Request(10, 2) for _ in range(4)],
        KVCacheManager(9999, 16),
        mode="v1",
        max_num_seqs=1,
        policy=policy,
        priorities=[3, -1, 2, 0],
    )
    s.step()
    expected = [1, 2, 3] if policy == "fcfs" else [3, 2, 0]
    assert [s.waiting[i].request_id[0] for i in range(3)] == expected
    assert s.waiting[-1] is list(s.waiting)[-1]
    with pytest.raises(IndexError):
        s.waiting[3]
