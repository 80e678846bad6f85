"""The continuous-batching driver with recompute and swap preemption: invariants, no leaks."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim import KVCacheManager
from pagedsim.config import CacheConfig, SchedulerConfig
from pagedsim.policies import PrefixCachingManager, RecomputePolicy, SwapPolicy, make_policy
from pagedsim.scheduler import make_scheduler
from pagedsim.scheduler_v0 import SchedulerV0
from pagedsim.workloads import Request


@st.composite
def workloads_(draw):
    reqs = []
    for _ in range(draw(st.integers(1, 8))):
        k = draw(st.sampled_from([(1, 1), (2, 1), (3, 1), (1, 2), (1, 3)]))
        reqs.append(
            Request(
                draw(st.integers(1, 12)),
                draw(st.integers(1, 10)),
                *k,
                arrival_step=draw(st.integers(0, 5)),
            )
        )
    return reqs


@settings(max_examples=40)
@given(
    workloads_(),
    st.sampled_from(["recompute", "swap"]),
    st.integers(1, 4),
    st.integers(0, 12),
    st.sampled_from(["newest", "oldest"]),
    st.booleans(),
)
def test_every_driver_step_keeps_the_invariants_and_nothing_leaks(
    reqs, policy, block_size, num_cpu_blocks, victim, cached
):
    worst = max(r.num_seqs * (-(-r.total_len // block_size) + 1) for r in reqs)
    num_gpu_blocks = worst + 2  # tight: forces preemption whenever two requests overlap
    m = (
        PrefixCachingManager(num_gpu_blocks, block_size, trace=False)
        if cached
        else KVCacheManager(num_gpu_blocks, block_size, trace=False)
    )
    tokens = [list(range(r.prompt_len)) for r in reqs] if cached else None
    s = make_scheduler(reqs, m, policy, num_cpu_blocks=num_cpu_blocks, victim=victim, tokens=tokens)
    s.run(max_steps=10_000, check=True)  # check_invariants after every step
    assert s.finished == len(reqs)
    assert m.num_free_blocks == m.num_gpu_blocks and m.seq_ids() == []  # no leaked block
    if policy == "swap":
        assert s.policy.host_free == num_cpu_blocks  # every host block came back


def test_recompute_preempts_the_most_recently_admitted_group_and_counts_its_tokens():
    # 4 blocks of 4 tokens. a (prompt 4) and b (prompt 4) admitted at step 1 in order,
    # each needs a second block at the first decode; a third request is not involved.
    reqs = [Request(4, 6), Request(4, 6)]
    m = KVCacheManager(4, 4, trace=False)
    s = make_scheduler(reqs, m, "recompute", watermark=0.0)
    s.step()  # admits a then b: 1 + 1 blocks, headroom 1 each
    assert [g.key for g in s.running] == [0, 1]
    s.step()  # both decode to 5 tokens: 2 new blocks (4 used), fine
    s.step()
    s.step()
    s.step()  # 8 tokens each: both second blocks are full
    s.step()  # each wants a third block, none is free -> preempt b, the newer one
    assert [g.key for g in s.running] == [0]
    assert s.preemptions == 1
    assert s.discarded_tokens == 4 + 4  # b's prompt plus the 4 tokens it had generated
    assert s.recomputed_tokens == 0  # counted when b is prefilled again
    assert [g.key for g in s.waiting] == [1]
    s.run(check=True)
    assert s.recomputed_tokens == 4 + 4  # no prefix cache: all of it is computed again
    assert m.num_free_blocks == 4


def test_swap_moves_the_victims_distinct_blocks_and_brings_them_back_shared():
    m = KVCacheManager(8, 2, trace=False)
    policy = SwapPolicy(num_cpu_blocks=8, block_bytes=100)
    s = make_scheduler([Request(4, 2, n=2)], m, policy, watermark=0.0)
    s.step()  # admit: seq (0,0) with 2 blocks, (0,1) forked: both share 2 blocks
    group = s.running[0]
    s._preempt(group)
    assert m.num_free_blocks == 8 and policy.bytes_swapped == 2 * 100
    out, _ = policy.drain_swaps()
    assert len(out) == 2  # 2 distinct blocks, though 2 sequences hold them
    assert policy.swap_in(m, group)
    _, back = policy.drain_swaps()
    tables = [m.block_table(x) for x in group.seq_ids]
    assert tables[0] == tables[1] and len(back) == 2
    assert all(m.pool.ref_count(b) == 2 for b in tables[0])
    assert policy.bytes_swapped == 4 * 100 and policy.host_free == 8
    m.check_invariants()


def test_swap_falls_back_to_recompute_when_the_host_pool_is_full():
    m = KVCacheManager(8, 2, trace=False)
    policy = SwapPolicy(num_cpu_blocks=1)
    s = make_scheduler([Request(4, 2)], m, policy)
    s.step()
    s._preempt(s.running[0])
    assert policy.swap_outs == 0 and policy.recomputed_tokens == 4
    assert [g.key for g in s.waiting] == [0] and not s.swapped


def test_requests_that_can_never_fit_and_bad_options_are_refused():
    with pytest.raises(ValueError, match="request 0 .* more than the pool's 4"):
        make_scheduler([Request(30, 10)], KVCacheManager(4, 4))
    with pytest.raises(ValueError, match="victim must be one of"):
        make_scheduler([], KVCacheManager(4, 4), victim="random")
    with pytest.raises(ValueError, match="preemption policy must be one of"):
        make_policy("drop")
    assert isinstance(make_policy("recompute"), RecomputePolicy)


def test_parallel_samples_fork_and_copy_on_write_their_shared_last_block():
    m = KVCacheManager(16, 4)  # tracing on: the driver's calls become trace steps
    s = make_scheduler([Request(6, 3, n=3)], m)
    s.step()
    tables = [m.block_table((0, k)) for k in range(3)]
    assert tables[0] == tables[1] == tables[2]  # prompt blocks shared by all three samples
    s.step()  # first decode: the partly filled shared block is copied for two of them
    tables = [m.block_table((0, k)) for k in range(3)]
    assert len({t[0] for t in tables}) == 1 and len({t[1] for t in tables}) == 3
    assert s.records[-1].unshared_blocks == 3 * 2 and s.records[-1].blocks_used == 4
    s.run(check=True)
    assert m.num_free_blocks == 16


def test_v0_takes_its_policy_cap_and_swap_space_from_vllms_configs():
    """vLLM v0's Scheduler reads preemption_mode and max_num_seqs from SchedulerConfig and
    its swap space from CacheConfig: a cap of 2 sequences never runs 3 at once."""
    reqs = [Request(3, 4) for _ in range(4)]
    config = SchedulerConfig(preemption_mode="swap", max_num_seqs=2)
    s = SchedulerV0(reqs, KVCacheManager(64, 4), config, CacheConfig(num_cpu_blocks=8))
    assert isinstance(s.policy, SwapPolicy) and s.policy.host.num_cpu_blocks == 8
    s.run(check=True)
    assert s.finished == 4 and max(r.running for r in s.records) == 2
    uncapped = SchedulerV0(reqs, KVCacheManager(64, 4)).run()
    assert type(uncapped.policy) is RecomputePolicy
    assert max(r.running for r in uncapped.records) == 4


@pytest.mark.parametrize("bad", [{"max_num_seqs": 2}, None])
def test_v0_refuses_a_config_that_is_not_vllms(bad):
    with pytest.raises(TypeError, match="scheduler_config must be a SchedulerConfig"):
        SchedulerV0([], KVCacheManager(4, 4), bad)
    with pytest.raises(TypeError, match="cache_config must be a CacheConfig"):
        SchedulerV0([], KVCacheManager(4, 4), cache_config=bad)
    with pytest.raises(TypeError, match="settings must be a V0Settings"):
        SchedulerV0([], KVCacheManager(4, 4), settings=bad)


def test_v0_keywords_become_its_configs_and_a_v1_only_one_is_refused():
    s = make_scheduler([], KVCacheManager(8, 4), "swap", num_cpu_blocks=3, max_num_seqs=5)
    assert s.scheduler_config.preemption_mode == "swap" and s.max_num_seqs == 5
    assert isinstance(s.policy, SwapPolicy) and s.policy.host.num_cpu_blocks == 3
    with pytest.raises(TypeError, match="mode='v0' takes no max_num_batched_tokens"):
        make_scheduler([], KVCacheManager(8, 4), max_num_batched_tokens=64)
