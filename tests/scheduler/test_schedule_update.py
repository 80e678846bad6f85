"""schedule() and update_from_output(): a step split as vLLM v1 and nano-vllm split it (v0, v1).

Each scheduler is driven by a fake model that samples its own random tokens (not the
workload's), and after every schedule() the SchedulerOutput is checked against what v1's
output means: every scheduled request is new or cached (never both), the total is the sum,
the budget holds, a preempted request is not scheduled, `finished_req_ids` are the ones
the previous update finished, and the tokens handed to update_from_output are the ones
the requests hold afterwards.
"""

import random
from dataclasses import replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pagedsim import KVCacheManager
from pagedsim.config import CacheConfig, SchedulerConfig
from pagedsim.policies import PrefixCachingManager
from pagedsim.scheduler_output import SchedulerOutput
from pagedsim.scheduler_v0 import DEFAULT_SCHEDULER_CONFIG as V0_CONFIG
from pagedsim.scheduler_v0 import SchedulerV0
from pagedsim.scheduler_v1 import SchedulerV1
from pagedsim.workloads import Request

SHAPES = st.lists(
    st.tuples(st.integers(1, 30), st.integers(1, 6), st.integers(0, 4)), min_size=1, max_size=5
)


def check_output(s, out: SchedulerOutput, finished_before: set) -> None:
    new = [r.req_id for r in out.scheduled_new_reqs]
    cached = out.scheduled_cached_reqs.req_ids
    assert not set(new) & set(cached)
    assert sorted(new + cached) == sorted(out.num_scheduled_tokens)
    assert out.total_num_scheduled_tokens == sum(out.num_scheduled_tokens.values())
    assert not out.preempted_req_ids & set(out.num_scheduled_tokens)
    assert out.finished_req_ids == finished_before
    bs = s.manager.block_size
    for r in out.scheduled_new_reqs:  # its blocks hold what is computed after this step
        n = out.num_scheduled_tokens[r.req_id]
        assert len(r.block_ids) * bs >= r.num_computed_tokens + n


def drive(s, seed: int, limits=None) -> dict:
    """Run `s` to the end on a model that samples random tokens; the tokens it sent.
    `limits(out)` checks each output further."""
    rng, sent, finished = random.Random(seed), {}, set()
    while not s.done:
        out = s.schedule()
        check_output(s, out, finished)
        if limits:
            limits(out)
        sampled = {rid: rng.randrange(1000) for rid in s.sampling_req_ids(out)}
        for rid, token in sampled.items():
            sent.setdefault(rid, []).append(token)
        finished = set(s.update_from_output(out, sampled))
        s.manager.check_invariants()
        for r in [*s.running, *s.waiting]:  # v1: a request holds the model's tokens
            if hasattr(r, "sampled"):
                assert r.sampled == sent.get(r.request_id, [])
        assert s.now < 10_000
    return sent


@settings(max_examples=30, deadline=None)
@given(SHAPES, st.integers(2, 24), st.integers(1, 4), st.booleans(), st.integers(0, 99))
def test_v1_outputs_keep_v1s_meaning_on_any_model(shapes, budget, max_seqs, cached, seed):
    reqs = [Request(p, o, arrival_step=a) for p, o, a in shapes]
    bs = 4
    nb = max(-(-(r.total_len - 1) // bs) for r in reqs) + 2
    m = (PrefixCachingManager if cached else KVCacheManager)(nb, bs)
    s = SchedulerV1(reqs, m, SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=max_seqs))

    def limits(out):
        assert out.total_num_scheduled_tokens <= budget
        assert len(out.num_scheduled_tokens) <= max_seqs
        assert all(n >= 1 for n in out.num_scheduled_tokens.values())

    sent = drive(s, seed, limits)
    assert s.finished == len(reqs) and m.num_free_blocks == nb
    assert {rid: len(t) for rid, t in sent.items()} == {
        (i, 0): r.output_len for i, r in enumerate(reqs)
    }


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 20), st.integers(1, 20), st.integers(0, 4)), min_size=1, max_size=5
    ),
    st.sampled_from(["recompute", "swap"]),
    st.integers(0, 1),
    st.integers(0, 99),
)
@example([(20, 20, 0), (20, 20, 0), (12, 20, 1)], "recompute", 0, 0)  # recomputes 24 tokens
def test_v0_outputs_decode_one_token_per_sequence(shapes, policy, beams, seed):
    reqs = [
        Request(p, o, arrival_step=a, beam_width=1 + beams * (i % 2))
        for i, (p, o, a) in enumerate(shapes)
    ]
    s = SchedulerV0(
        reqs,
        KVCacheManager(24, 4),
        replace(V0_CONFIG, preemption_mode=policy),
        CacheConfig(num_cpu_blocks=64),
    )
    sent = drive(s, seed)
    assert s.finished == len(reqs) and s.manager.num_free_blocks == 24
    for i, r in enumerate(reqs):  # every sequence decoded output_len tokens
        assert [len(sent[(i, k)]) for k in range(r.num_seqs)] == [r.output_len] * r.num_seqs


@pytest.mark.parametrize("mode", ["v0", "v1"])
def test_a_wrong_update_is_refused_and_changes_nothing(mode):
    reqs = [Request(5, 3), Request(3, 2)]
    m = KVCacheManager(16, 4)
    s = SchedulerV1(reqs, m) if mode == "v1" else SchedulerV0(reqs, m)
    while True:  # a step in which someone samples
        out = s.schedule()
        want = s.workload_tokens(out)
        if want:
            break
        s.update_from_output(out, want)
    with pytest.raises(RuntimeError, match="before update_from_output"):
        s.schedule()
    if mode == "v1":  # the step's requests keep their computed tokens until the update
        with pytest.raises(RuntimeError, match="between schedule"):
            s.reset_prefix_cache(reset_running_requests=True)
    state = (s.now, len(s.records), m.num_free_blocks)
    rid = next(iter(want))
    for bad, err in (
        ({}, ValueError),  # a token missing
        ({**want, (9, 9): 1}, ValueError),  # a request that was not scheduled
        ({**want, rid: -1}, ValueError),  # not a token id
        ({**want, "r0": 1}, ValueError),  # an id of another kind
        ({**want, rid: "a"}, TypeError),
        ([1, 2], TypeError),
    ):
        with pytest.raises(err):
            s.update_from_output(out, bad)
        assert (s.now, len(s.records), m.num_free_blocks) == state
    s.update_from_output(out, want)
    with pytest.raises(ValueError, match="not yet updated"):
        s.update_from_output(out, want)  # the same output twice
    s.run()
    assert s.finished == 2


@settings(max_examples=30, deadline=None)
@given(SHAPES, st.sampled_from(["v0", "v1"]), st.integers(12, 20), st.booleans())
@example([(9, 12, 1), (17, 8, 0), (4, 10, 0)], "v1", 10, True)  # preempts
def test_step_is_schedule_then_update_with_the_workloads_tokens(shapes, mode, nb, cached):
    reqs = [Request(p, o, arrival_step=a) for p, o, a in shapes]

    def build():
        m = (PrefixCachingManager if cached else KVCacheManager)(nb, 4)
        if mode == "v0":
            tokens = [[(i * 7 + j) % 5 for j in range(r.prompt_len)] for i, r in enumerate(reqs)]
            return SchedulerV0(reqs, m, tokens=tokens)
        return SchedulerV1(reqs, m, SchedulerConfig(max_num_batched_tokens=8))

    try:
        by_step = build().run()
    except ValueError:  # a request the pool can never hold: refused when built
        return
    by_hand = build()
    while not by_hand.done:
        out = by_hand.schedule()
        by_hand.update_from_output(out, by_hand.workload_tokens(out))
    assert by_hand.records == by_step.records
    assert by_hand.recomputed_tokens == by_step.recomputed_tokens
