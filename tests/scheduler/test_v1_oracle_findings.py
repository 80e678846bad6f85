"""What the vLLM oracle (tests/vllm_oracle/test_scheduler_oracle.py) found SchedulerV1 doing
differently from vLLM 0.34's v1 Scheduler, pinned here so the main suite keeps it without
vLLM: the lone request's prefill cap, lookahead slots at max_model_len, the free queue with
prefix caching off, and aborts (finish_requests)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim.config import CacheConfig, SchedulerConfig
from pagedsim.policies import PrefixCachingManager
from pagedsim.scheduler import make_scheduler
from pagedsim.scheduler_v1 import SchedulerV1
from pagedsim.workloads import Request


def v1(reqs, num_gpu_blocks=16, bs=2, **kw):
    return make_scheduler(
        reqs, PrefixCachingManager(num_gpu_blocks, bs, trace=False), mode="v1", **kw
    )


def test_a_lone_request_is_not_capped_by_long_prefill_token_threshold():
    # v1 0.34: the cap keeps a long prefill from starving others; alone, nobody starves
    s = v1([Request(6, 1)], max_num_batched_tokens=4, long_prefill_token_threshold=1)
    assert s.schedule().num_scheduled_tokens == {(0, 0): 4}


def test_the_cap_holds_while_another_request_waits():
    s = v1([Request(6, 1), Request(6, 1)], max_num_batched_tokens=4, long_prefill_token_threshold=1)
    assert s.schedule().num_scheduled_tokens == {(0, 0): 1, (1, 0): 1}


def test_lookahead_slots_stop_at_max_model_len():
    # prompt 1 + 1 output = max_model_len 2; 3 lookahead slots would need 4 blocks of 1
    m = PrefixCachingManager(2, 1, trace=False)
    s = SchedulerV1(
        [Request(1, 1)],
        m,
        SchedulerConfig(max_num_batched_tokens=1, max_model_len=2),
        num_lookahead_tokens=3,
        record=False,
    )
    s.schedule()
    assert len(m.block_table((0, 0)).blocks) == 2  # slots 0..1: max_model_len, not 0..3


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4))
def test_with_prefix_caching_off_freed_blocks_go_back_to_the_head(prompt_len, output_len):
    # v1's KVCacheManager(enable_caching=False) hashes nothing: free_blocks prepends them all
    m = PrefixCachingManager(10, 1, trace=False)
    s = SchedulerV1(
        [Request(prompt_len, output_len)],
        m,
        SchedulerConfig(max_num_batched_tokens=8),
        CacheConfig(block_size=1, enable_prefix_caching=False),
        record=False,
    )
    s.run()
    used = prompt_len + output_len - 1  # the last sampled token is never computed
    assert m.pool.free_list() == [*range(used - 1, -1, -1), *range(used, 10)]
    assert m.cached_free_blocks() == []


def aborted_at(step_of_abort, reqs, **kw):
    s = v1(reqs, **kw)
    for _ in range(step_of_abort):
        s.step()
    return s


def test_abort_a_running_request_frees_its_blocks_and_reports_it_next_step():
    s = aborted_at(1, [Request(4, 3), Request(4, 3)], max_num_batched_tokens=8)
    assert s.finish_requests((0, 0)) == [(0, 0)]
    assert [r.request_id for r in s.running] == [(1, 0)]
    out = s.schedule()
    assert out.finished_req_ids == {(0, 0)}
    s.update_from_output(out, s.workload_tokens(out))
    assert s.finish_requests([(0, 0)]) == []  # already finished: skipped, as in v1


def test_abort_a_waiting_and_a_not_yet_arrived_request():
    s = aborted_at(1, [Request(4, 3), Request(4, 3), Request(2, 1, arrival_step=5)], max_num_seqs=1)
    assert s.finish_requests([(1, 0), (2, 0), (7, 0)]) == [(1, 0)]  # (2, 0): not arrived yet
    assert len(s.waiting) == 0
    s.run()
    assert s.finished == 3 and s.manager.num_free_blocks == 16


@pytest.mark.parametrize(
    "bad, error",
    [("r0", TypeError), (3, TypeError), ([(0,)], TypeError), ([(0, "a")], TypeError)],
)
def test_abort_refuses_a_bad_id_and_changes_nothing(bad, error):
    s = aborted_at(1, [Request(4, 3)])
    before = (list(s.running), s.manager.pool.free_list())
    with pytest.raises(error, match="request id"):
        s.finish_requests(bad)
    assert (list(s.running), s.manager.pool.free_list()) == before


def test_abort_between_schedule_and_update_is_refused():
    s = v1([Request(4, 3)])
    s.schedule()
    with pytest.raises(RuntimeError, match="between schedule"):
        s.finish_requests((0, 0))
