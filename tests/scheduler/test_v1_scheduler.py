"""The v1 scheduler: one token budget, chunked prefill, recompute-only preemption in v1's order;
and the options neither mode can ever serve, refused at construction."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim import KVCacheManager
from pagedsim.policies import PrefixCachingManager
from pagedsim.scheduler import make_scheduler
from pagedsim.scheduler_v1 import SchedulerV1
from pagedsim.workloads import Request


def v1(reqs, num_gpu_blocks=64, bs=4, **kw):
    m = PrefixCachingManager(num_gpu_blocks, bs, trace=False)
    return make_scheduler(reqs, m, mode="v1", **kw)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 40), st.integers(1, 6), st.integers(0, 4)), min_size=1, max_size=5
    ),
    st.integers(2, 9),
    st.integers(1, 4),
    st.integers(0, 4),
    st.booleans(),
)
def test_the_token_budget_is_never_exceeded_and_long_prompts_still_finish(
    shapes, budget, max_seqs, spare, cached
):
    reqs = [Request(p, o, arrival_step=a) for p, o, a in shapes]
    bs = 4
    num_gpu_blocks = max(-(-(r.total_len - 1) // bs) for r in reqs) + spare
    m = (
        PrefixCachingManager(num_gpu_blocks, bs, trace=False)
        if cached
        else KVCacheManager(num_gpu_blocks, bs, trace=False)
    )
    s = make_scheduler(
        reqs, m, mode="v1", max_num_batched_tokens=budget, max_num_seqs=max_seqs
    ).run(check=True)
    assert s.finished == len(reqs) and m.num_free_blocks == num_gpu_blocks
    assert all(r.scheduled_tokens <= budget for r in s.records)
    assert all(r.running <= max_seqs for r in s.records)
    computed = sum(r.scheduled_tokens for r in s.records)
    once = sum(r.total_len - 1 for r in reqs)  # every token that gets KV (not the last sampled)
    if cached:  # hits on another request's blocks are never computed by this one
        assert computed <= once + s.recomputed_tokens
    else:
        assert computed == once + s.recomputed_tokens


def test_a_prompt_longer_than_the_budget_is_prefilled_in_chunks():
    s = v1([Request(10, 2)], max_num_batched_tokens=4)
    s.run()
    steps = [(r.prefill_tokens, r.decode_tokens) for r in s.records]
    assert steps == [(4, 0), (4, 0), (2, 0), (0, 1)]  # 10 = 4 + 4 + 2, then one decode


def test_running_requests_are_served_before_waiting_ones():
    s = v1([Request(3, 3), Request(6, 1, arrival_step=1)], max_num_batched_tokens=4)
    s.step()  # request 0 prefills 3
    s.step()  # request 0 decodes 1, then request 1 gets the 3 tokens left
    assert (s.records[-1].decode_tokens, s.records[-1].prefill_tokens) == (1, 3)


def test_the_last_running_request_is_the_victim_and_goes_to_the_front_of_waiting():
    # 5 blocks of 2: a and b both fit their prompts; their decodes then run short.
    s = v1([Request(4, 5), Request(4, 5)], num_gpu_blocks=5, bs=2, max_num_batched_tokens=16)
    s.step()  # both prefill: 4 blocks
    s.step()  # a's decode needs a block (the last free one); b's decode finds none: b is popped
    assert [r.request_id for r in s.running] == [(0, 0)]
    assert [r.request_id for r in s.waiting] == [(1, 0)] and s.preemptions == 1
    s.run(check=True)
    assert s.finished == 2


def test_recomputation_is_counted_net_of_prefix_cache_hits():
    s = v1([Request(5, 5), Request(5, 5)], num_gpu_blocks=6, bs=2, max_num_batched_tokens=32)
    s.run(check=True)
    assert s.preemptions >= 1
    assert 0 < s.recomputed_tokens < s.discarded_tokens  # the victim's full blocks stayed cached


def test_parallel_samples_are_independent_requests_sharing_the_prompt_through_the_cache():
    s = v1([Request(9, 3, n=3)], bs=4)
    s.run(check=True)
    st_ = s.manager.stats
    assert st_.requests == 3 and st_.hit_tokens == 2 * 8  # samples 2 and 3 hit both full blocks
    assert s.finished == 1 and s.finished_seqs == 3


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"mode": "v2"}, ValueError),
        ({"mode": "v1", "max_num_batched_tokens": 0}, ValueError),
        ({"mode": "v1", "max_num_seqs": 0}, ValueError),
        ({"mode": "v1", "max_num_batched_tokens": 2.5}, TypeError),
        ({"watermark": 1.0}, ValueError),
        ({"watermark": -0.01}, ValueError),
        ({"watermark": float("nan")}, ValueError),
        ({"watermark": "1%"}, TypeError),
        ({"max_num_seqs": 0}, ValueError),
        ({"max_num_seqs": 1}, ValueError),  # the request has 2 samples: it could never run
    ],
)
def test_options_that_could_never_serve_a_request_are_refused_at_construction(kwargs, error):
    with pytest.raises(error):
        make_scheduler([Request(4, 2, n=2)], PrefixCachingManager(16, 4), **kwargs)


def test_v1_refuses_beam_search_which_it_runs_at_the_entry_point():
    with pytest.raises(ValueError, match="entry point"):
        make_scheduler([Request(4, 2, beam_width=2)], PrefixCachingManager(16, 4), mode="v1")


def test_mode_v1_builds_the_v1_scheduler():
    assert isinstance(v1([Request(2, 2)]), SchedulerV1)


@settings(max_examples=15, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 20), st.integers(1, 6)), min_size=1, max_size=4),
    st.integers(1, 3),
    st.integers(2, 8),
)
def test_lookahead_slots_are_reserved_without_breaking_the_budget_or_the_pool(
    shapes, lookahead, budget
):
    reqs = [Request(p, o) for p, o in shapes]
    bs = 2
    num_gpu_blocks = max(-(-(r.total_len - 1 + lookahead) // bs) for r in reqs) + 1
    s = v1(
        reqs,
        num_gpu_blocks=num_gpu_blocks,
        bs=bs,
        max_num_batched_tokens=budget,
        num_lookahead_tokens=lookahead,
    ).run(check=True)
    assert s.finished == len(reqs) and s.manager.num_free_blocks == num_gpu_blocks
    assert all(r.scheduled_tokens <= budget for r in s.records)


@pytest.mark.parametrize("mode", ["v0", "v1"])
@pytest.mark.parametrize(
    "tokens, error",
    [
        ([[1, 2, 2**70]], ValueError),  # out of int64: a clear error, not an OverflowError
        ([[1, 2]], ValueError),  # two ids for a three-token prompt
        ([[1, 2, 3], [4, 5, 6]], ValueError),  # a prompt for a request that does not exist
        ([[1, 2, 3.5]], TypeError),
    ],
)
def test_prompt_token_ids_are_checked_when_the_scheduler_is_built(mode, tokens, error):
    with pytest.raises(error):
        make_scheduler([Request(3, 2)], PrefixCachingManager(16, 4), mode=mode, tokens=tokens)


def test_with_priorities_the_least_important_running_request_is_the_victim():
    # same shape as the FCFS test, but request 0 has the larger (less urgent) priority value
    s = v1(
        [Request(4, 5), Request(4, 5)],
        num_gpu_blocks=5,
        bs=2,
        max_num_batched_tokens=16,
        policy="priority",
        priorities=[1, 0],
    )
    s.step()
    s.step()  # a's decode takes the last block; b's finds none: a, the least urgent, is preempted
    assert [r.request_id for r in s.waiting] == [(0, 0)] and s.preemptions == 1
    s.run(check=True)
    assert s.finished == 2
