"""What SchedulerV0 takes from an engine that runs a real model (vLLM v0's order): requests
added as they come (add_request), a prefill that samples the first token, sampled stop
tokens, and a recompute that prefills the prompt and every sampled token again."""

from collections import deque
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim.config import CacheConfig
from pagedsim.manager import KVCacheManager
from pagedsim.policies.preemption import Group
from pagedsim.policies.prefix_cache import PrefixCachingManager
from pagedsim.scheduler_output import SchedulerOutput
from pagedsim.scheduler_v0 import DEFAULT_SCHEDULER_CONFIG, SchedulerV0, SeqGroupPolicy, V0Settings


def _config(preemption_mode: str):
    """SchedulerV0's defaults with another preemption policy."""
    return replace(DEFAULT_SCHEDULER_CONFIG, preemption_mode=preemption_mode)


def test_the_prefill_samples_and_a_stop_token_ends_the_request():
    s = SchedulerV0([], PrefixCachingManager(16, 2), record=False)
    rid = s.add_request((1, 2, 3), 5, stop_token_ids=(7,))
    out = s.schedule()
    assert out.num_scheduled_tokens == {rid: 3} and s.sampling_req_ids(out) == [rid]
    assert s.update_from_output(out, {rid: 4}) == []
    out = s.schedule()  # the decode computes the sampled token's K/V: position 3
    assert out.scheduled_cached_reqs.num_computed_tokens == [3]
    assert s.manager.num_tokens(rid) == 4
    assert s.update_from_output(out, {rid: 7}) == [rid]  # stopped after 2 of 5 tokens
    assert s.done and s.manager.seq_ids() == []


def test_max_tokens_one_finishes_at_the_prefill():
    s = SchedulerV0([], KVCacheManager(8, 2), record=False)
    rid = s.add_request((5, 6), 1)
    assert s.update_from_output(s.schedule(), {rid: 9}) == [rid] and s.done


def test_a_sampled_token_reaches_the_prefix_cache():
    """The decode names its block with the sampled id: a follow-up prompt that repeats the
    answer hits it (as v0's prefix caching hashes generated tokens too)."""
    s = SchedulerV0([], PrefixCachingManager(16, 2), record=False)
    first = s.add_request((1, 2, 3), 3)
    for token in (4, 5, 6):
        s.update_from_output(s.schedule(), {first: token})
    assert s.done
    second = s.add_request((1, 2, 3, 4, 5, 9), 1)
    out = s.schedule()
    assert out.scheduled_new_reqs[0].num_computed_tokens == 4  # blocks (1, 2), (3, 4)
    assert out.num_scheduled_tokens == {second: 2}


def _model(tokens: tuple) -> int:
    """A fake model: the next token is a function of the whole sequence."""
    return (sum((i + 1) * t for i, t in enumerate(tokens)) * 7 + len(tokens)) % 50


def _alone(prompt: list, max_tokens: int) -> list:
    """The sequence the fake model gives `prompt` run alone (stop token 0)."""
    tokens = list(prompt)
    while len(tokens) - len(prompt) < max_tokens and (len(tokens) == len(prompt) or tokens[-1]):
        tokens.append(_model(tuple(tokens)))
    return tokens


def _schedule(s: SchedulerV0, seqs: dict) -> SchedulerOutput:
    """schedule(), checking that each sampling sequence computes up to the end of its
    tokens (`seqs`: each sequence's prompt and sampled tokens)."""
    out = s.schedule()
    cached = out.scheduled_cached_reqs
    starts = dict(zip(cached.req_ids, cached.num_computed_tokens, strict=True))
    starts.update({n.req_id: n.num_computed_tokens for n in out.scheduled_new_reqs})
    for rid in s.sampling_req_ids(out):
        assert starts[rid] + out.num_scheduled_tokens[rid] == len(seqs[rid])
    return out


def _serve(prompts, max_tokens: int, policy: str, manager) -> SchedulerV0:
    """Serve `prompts` with the fake model; check that each sampling sequence computed
    exactly its prompt and sampled tokens, invariants after every step, and each output
    against the request run alone."""
    s = SchedulerV0([], manager, _config(policy), CacheConfig(num_cpu_blocks=64), record=False)
    seqs = {s.add_request(p, max_tokens, stop_token_ids=(0,)): list(p) for p in prompts}
    for _ in range(500):
        if s.done:
            break
        out = _schedule(s, seqs)
        sampled = {}
        for rid in s.sampling_req_ids(out):
            sampled[rid] = _model(tuple(seqs[rid]))
            seqs[rid].append(sampled[rid])
        s.update_from_output(out, sampled)
        manager.check_invariants()
    assert s.done and manager.seq_ids() == []
    for rid, tokens in seqs.items():
        assert tokens == _alone(prompts[rid[0]], max_tokens)
    return s


@pytest.mark.parametrize("policy", ["recompute", "swap"])
@pytest.mark.parametrize("caching", [True, False])
def test_a_preempted_request_samples_what_it_would_alone(policy, caching):
    prompts = [[1, 2, 3, 4, 5], [6, 7, 8, 9, 1], [2, 4, 6, 8, 1]]
    manager = (PrefixCachingManager if caching else KVCacheManager)(10, 2)
    assert _serve(prompts, 8, policy, manager).preemptions > 0


@settings(max_examples=40, deadline=None)
@given(
    prompts=st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=7), min_size=1, max_size=5),
    max_tokens=st.integers(1, 6),
    policy=st.sampled_from(["recompute", "swap"]),
    caching=st.booleans(),
    num_gpu_blocks=st.integers(10, 16),
)
def test_preemption_never_changes_what_a_sequence_computes(
    prompts, max_tokens, policy, caching, num_gpu_blocks
):
    """Whatever the pool and policy, a model sees each sequence as it would alone."""
    _serve(
        prompts,
        max_tokens,
        policy,
        (PrefixCachingManager if caching else KVCacheManager)(num_gpu_blocks, 2),
    )


def test_n_samples_fork_after_the_first_sample_and_share_the_prompt():
    """vLLM v0's output processor forks the samples once the prompt's logits are in."""
    m = KVCacheManager(16, 2)
    s = SchedulerV0([], m, _config("swap"), CacheConfig(num_cpu_blocks=16), record=False)
    rid = s.add_request((1, 2, 3), 3, best_of=2)
    out = s.schedule()
    assert out.num_scheduled_tokens == {rid: 3}  # one prefill for both samples
    s.fork_seq(rid, (0, 1))
    assert s.sampling_req_ids(out) == [rid, (0, 1)]
    assert m.block_table((0, 1)).blocks == m.block_table(rid).blocks
    s.update_from_output(out, {rid: 4, (0, 1): 5})
    out = s.schedule()  # each computes its own sampled token: the shared tail is copied
    assert out.num_scheduled_tokens == {rid: 1, (0, 1): 1}
    assert m.block_table(rid).blocks[0] == m.block_table((0, 1)).blocks[0]
    assert m.block_table(rid).blocks[1] != m.block_table((0, 1)).blocks[1]
    s.free_seq((0, 1))  # it stopped
    assert s.update_from_output(out, {rid: 6}) == []
    assert s.update_from_output(s.schedule(), {rid: 7}) == [rid] and s.done
    assert m.seq_ids() == []


def test_a_group_whose_sequences_are_all_freed_is_finished():
    s = SchedulerV0([], KVCacheManager(16, 2), record=False)
    rid = s.add_request((1, 2, 3), 5, best_of=2)
    out = s.schedule()
    s.free_seq(rid)  # a beam search that ended early: no beam left
    assert s.update_from_output(out, {}) == [] and s.done and s.manager.seq_ids() == []


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda s: s.fork_seq((0, 0), (1, 1)), "child must be a sequence id"),
        (lambda s: s.fork_seq((0, 0), (0, 0)), "already a live sequence"),
        (lambda s: s.fork_seq((0, 5), (0, 1)), "parent"),
        (lambda s: s.free_seq((0, 3)), "not a live sequence of a request sampling"),
    ],
)
def test_a_bad_fork_or_free_changes_nothing(call, message):
    s = SchedulerV0([], KVCacheManager(16, 2), record=False)
    s.add_request((1, 2, 3), 5, best_of=2)
    s.add_request((4, 5), 5)
    s.update_from_output(s.schedule(), {(0, 0): 1, (1, 0): 2})
    s.schedule()  # both decode
    with pytest.raises(ValueError, match=message):
        call(s)
    assert s.manager.seq_ids() == [(0, 0), (1, 0)] and s._groups[0].seq_ids == [(0, 0)]


def test_a_forked_request_is_never_recomputed():
    s = SchedulerV0([], KVCacheManager(15, 2), settings=V0Settings(victim="oldest"), record=False)
    rid = s.add_request((1, 2, 3), 8, best_of=2)
    others = [s.add_request((4, 5, 6), 8), s.add_request((7, 8), 8)]
    out = s.schedule()
    s.fork_seq(rid, (0, 1))
    s.update_from_output(out, {rid: 1, (0, 1): 2, **dict.fromkeys(others, 3)})
    with pytest.raises(RuntimeError, match="can only be swapped"):
        for _ in range(8):
            out = s.schedule()
            s.update_from_output(out, dict.fromkeys(s.sampling_req_ids(out), 1))


@settings(max_examples=40, deadline=None)
@given(
    prompts=st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=6), min_size=1, max_size=4),
    best_of=st.integers(1, 3),
    num_gpu_blocks=st.integers(22, 32),
    seed=st.integers(0, 2**16),
)
def test_forks_and_frees_keep_every_sequence_computable(prompts, best_of, num_gpu_blocks, seed):
    """A fake output processor forks `best_of` samples after the prompt, then at random frees
    one or forks one from another (beam search's moves): every sampling sequence has
    computed exactly its tokens but the last, whatever swaps happen; invariants hold."""
    rng = np.random.default_rng(seed)
    manager = KVCacheManager(num_gpu_blocks, 2)
    s = SchedulerV0([], manager, _config("swap"), CacheConfig(num_cpu_blocks=256), record=False)
    seqs = {s.add_request(p, 5, best_of=best_of): list(p) for p in prompts}
    made = dict.fromkeys(range(len(prompts)), 1)  # sequences each request has had
    for _ in range(300):
        if s.done:
            break
        out = _schedule(s, seqs)
        for rid in s.sampling_req_ids(out):
            live = s._groups[rid[0]].seq_ids
            if len(live) < best_of or (len(live) > 1 and rng.random() < 0.3):
                child = (rid[0], made[rid[0]])
                made[rid[0]] += 1
                parent = live[int(rng.integers(len(live)))]
                s.fork_seq(parent, child)
                seqs[child] = list(seqs[parent])
                if len(live) > best_of:
                    s.free_seq(live[0])
        sampled = {rid: int(rng.integers(1, 50)) for rid in s.sampling_req_ids(out)}
        for rid, token in sampled.items():
            seqs[rid].append(token)
        s.update_from_output(out, sampled)
        manager.check_invariants()
    assert s.done and manager.seq_ids() == []


# ---- v0's preemption per group, and the requests that could never be admitted -------------
def _forked(m: KVCacheManager, key: int) -> Group:
    """A group of two sequences sharing a 3-token prompt (two blocks of 2)."""
    m.add_sequence((key, 0), 3)
    m.fork((key, 0), (key, 1))
    return Group(key, 3, 4, [(key, 0), (key, 1)])


def test_v0s_group_rule_recomputes_a_lone_sequence_and_swaps_a_forked_group():
    m = KVCacheManager(16, 2)
    policy = SeqGroupPolicy(16)
    m.add_sequence((0, 0), 3)
    assert policy.preempt(m, Group(0, 3, 4, [(0, 0)])) == "recompute"
    assert policy.swap_outs == 0 and policy.drain_swaps() == ([], [])
    assert policy.preempt(m, _forked(m, 1)) == "swap"
    out, _ = policy.drain_swaps()
    assert len(out) == 2 and policy.swap_outs == 1  # the shared blocks move once
    assert m.seq_ids() == [] and m.num_free_blocks == 16


def test_swap_mode_swaps_a_lone_sequence_and_recomputes_it_when_the_host_is_full():
    m = KVCacheManager(16, 2)
    m.add_sequence((0, 0), 3)
    m.add_sequence((1, 0), 3)
    policy = SeqGroupPolicy(2, swap_single=True)
    assert policy.preempt(m, Group(0, 3, 4, [(0, 0)])) == "swap"
    assert policy.preempt(m, Group(1, 3, 4, [(1, 0)])) == "recompute"  # no host block left


def test_a_forked_group_that_finds_the_host_full_raises_and_changes_nothing():
    m = KVCacheManager(16, 2)
    group = _forked(m, 0)
    policy = SeqGroupPolicy(1)
    with pytest.raises(RuntimeError, match=r"the host pool is full \(1 free blocks, 2 needed\)"):
        policy.preempt(m, group)
    assert m.seq_ids() == [(0, 0), (0, 1)] and policy.host_free == 1 and policy.preemptions == 0


def test_a_request_the_pool_holds_at_its_peak_is_taken_and_one_block_more_is_refused():
    """What the engine took before SchedulerV0 served it (best_of x its peak blocks) is
    taken, and admitted with no block of headroom unless its next decode starts a block;
    one block more is refused."""
    s = SchedulerV0([], KVCacheManager(8, 4), record=False)
    s.check_request(5, 11, best_of=2)  # 2 sequences x blocks(16) = 8
    with pytest.raises(ValueError, match="needs up to 10 blocks, more than the pool's 8"):
        s.check_request(5, 12, best_of=2)  # 2 x blocks(17) = 10
    with pytest.raises(ValueError, match="needs up to 10 blocks"):
        s.add_request((1, 2, 3, 4, 5), 12, best_of=2)
    assert s.requests == [] and s.waiting == deque()
    tiny = SchedulerV0([], KVCacheManager(1, 4), record=False)
    rid = tiny.add_request((7,), 3)  # one block holds its 1 + 3 tokens
    for token in (3, 4, 5):
        out = tiny.schedule()
        assert out.total_num_scheduled_tokens > 0
        tiny.update_from_output(out, {rid: token})
    assert tiny.done and tiny.manager.num_free_blocks == 1
