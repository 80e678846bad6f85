"""Regression tests for the five v1-fidelity bugs of issue 20 (each failed before its fix).

1. a sliding window counted lookahead slots as computed and freed KV still needed
2. a sliding window dropped (n - W) // B blocks where v1 drops (n - W + 1) // B
3. policy="priority" ordered only the victim, not the waiting queue
4. a forged ComputedBlocks bypassed the num_tokens - 1 cap
5. a request that can never fit preempted every sequence before it was refused
"""

import pytest

from pagedsim import NULL_BLOCK, KVCacheManager, story
from pagedsim.app.play_session import Options, Session
from pagedsim.errors import OutOfBlocks
from pagedsim.policies import (
    ComputedBlocks,
    PrefixCachingManager,
    SlidingWindowManager,
    SlidingWindowPrefixCachingManager,
)
from pagedsim.scheduler import make_scheduler
from pagedsim.workloads import Request
from tests.helpers import manager_state


# ---- 1. lookahead slots are not computed tokens -------------------------------------------
def test_lookahead_slots_do_not_push_the_window_forward():
    m = SlidingWindowPrefixCachingManager(16, 2, sliding_window=4)
    new = m.allocate_slots("s", 4, num_lookahead_tokens=4, new_token_ids=[1, 2, 3, 4])
    # 4 computed tokens: the next query (position 4) reads 1..4, so blocks 0 and 1 stay
    assert m.num_computed_tokens("s") == 4 and m.num_tokens("s") == 8
    assert NULL_BLOCK not in m.block_table("s")
    assert NULL_BLOCK not in new and len(new) == 4
    m.check_invariants()


def test_new_blocks_returned_by_allocate_slots_are_where_the_step_writes_never_null():
    m = SlidingWindowPrefixCachingManager(16, 2, sliding_window=4)
    new = m.allocate_slots("s", 9, new_token_ids=list(range(9)))  # 3 blocks slide out at once
    assert NULL_BLOCK not in new and len(new) == 5  # the step's KV goes to all five
    assert m.block_table("s").blocks == [NULL_BLOCK] * 3 + new[3:]
    assert all(m.pool.is_free(b) and m.pool.is_cached(b) for b in new[:3])


# ---- 2. v1's drop count ------------------------------------------------------------------
@pytest.mark.parametrize("n, dropped", [(4, 0), (5, 1), (6, 1), (7, 2), (11, 4)])
def test_the_window_drops_what_the_next_query_never_reads_as_v1_does(n, dropped):
    m = SlidingWindowManager(16, 2, sliding_window=4)
    m.add_sequence("s", n)
    assert m.block_table("s").blocks.count(NULL_BLOCK) == dropped == (n - 4 + 1) // 2
    m.check_invariants()


def test_the_drop_rule_agrees_with_the_sliding_window_hit_rule():
    # a hit needs ceil((W - 1) / B) cached blocks before the next token: exactly what stays
    m = SlidingWindowPrefixCachingManager(32, 2, sliding_window=5)
    m.add_sequence("a", 12, tokens=list(range(12)))
    kept = [b for b in m.block_table("a") if b != NULL_BLOCK]
    assert len(kept) == -(-(5 - 1) // 2)  # 12 tokens fill 6 blocks; the window keeps 2


# ---- 3. priority orders the waiting queue ---------------------------------------------------
def admission_order(sched) -> list:
    order = []
    while not sched.done:
        sched.step()
        for r in sched.running:
            if r.request_id[0] not in order:
                order.append(r.request_id[0])
    return order


def test_priority_scheduling_admits_the_most_urgent_waiting_request_first():
    reqs = [Request(2, 3) for _ in range(3)]
    s = make_scheduler(
        reqs,
        PrefixCachingManager(16, 2),
        mode="v1",
        max_num_seqs=1,
        policy="priority",
        priorities=[2, 0, 1],
    )
    assert admission_order(s) == [1, 2, 0]


def test_equal_priorities_are_admitted_in_arrival_order():
    reqs = [Request(2, 3, arrival_step=a) for a in (1, 0, 0)]
    s = make_scheduler(
        reqs,
        PrefixCachingManager(16, 2),
        mode="v1",
        max_num_seqs=1,
        policy="priority",
        priorities=[0, 0, 0],
    )
    assert admission_order(s) == [1, 2, 0]


def test_fcfs_keeps_arrival_order_whatever_the_priorities():
    s = make_scheduler(
        [Request(2, 3) for _ in range(3)],
        PrefixCachingManager(16, 2),
        mode="v1",
        max_num_seqs=1,
        priorities=[2, 0, 1],
    )
    assert admission_order(s) == [0, 1, 2]


# ---- 4. a forged ComputedBlocks is refused ---------------------------------------------
def cache_holding_two_zeros():
    m = PrefixCachingManager(8, 1)
    m.allocate_slots("a", 2, new_token_ids=[0, 0])
    m.allocate_slots("a", 1, new_token_ids=[0])  # both blocks full and computed: cached
    m.free_sequence("a")
    return m


@pytest.mark.parametrize(
    "forged",
    [
        ComputedBlocks((0, 0), (0, 1), 2),  # the whole prompt: the last token must be computed
        ComputedBlocks((0, 0), (0,), 2),  # num_tokens larger than its blocks hold
        ComputedBlocks((0, 0), (0,), 0),  # ... or smaller
    ],
)
def test_a_forged_computed_blocks_is_refused_with_nothing_changed(forged):
    m = cache_holding_two_zeros()
    assert m.get_computed_blocks([0, 0]) == ComputedBlocks((0, 0), (0,), 1)
    before = manager_state(m)
    with pytest.raises(ValueError, match="computed"):
        m.allocate_slots("g", 0, new_token_ids=[0, 0], computed=forged)
    assert manager_state(m) == before


def test_what_get_computed_blocks_returned_is_still_accepted():
    m = cache_holding_two_zeros()
    hit = m.get_computed_blocks([0, 0])
    assert m.allocate_slots("g", 1, new_token_ids=[0, 0], computed=hit) is not None
    assert m.num_computed_tokens("g") == 2 and m.stats.hit_tokens == 1


# ---- 5. a request that can never fit preempts nobody -----------------------------------
def test_a_request_larger_than_the_pool_is_refused_without_calling_the_reclaimer():
    m = KVCacheManager(12, 4)
    m.add_sequence("a", 16)
    calls = []
    m.reclaimer = lambda manager, short, protect: calls.append(short)
    with pytest.raises(OutOfBlocks):
        m.add_sequence("Z", 99)  # 25 blocks > 12
    assert calls == [] and m.seq_ids() == ["a"]
    with pytest.raises(OutOfBlocks):  # 10 blocks could fit by preempting: the reclaimer is asked
        m.add_sequence("b", 40)
    assert calls == [2]


def test_the_playground_says_truthfully_that_nothing_was_preempted():
    s = Session(Options(preemption_mode="recompute"))
    s.run("alloc A 8")
    s.run("alloc B 8")
    moment = s.run("alloc Z 99")
    assert s.manager.seq_ids() == ["A", "B"] and not s.preempted
    assert "nothing was preempted" in " ".join(moment.notes)
    assert "OutOfBlocks, nothing changed" in story.caption(s.timeline()[-1])


def test_max_model_len_refuses_a_longer_request_when_the_v1_scheduler_is_built():
    m = PrefixCachingManager(64, 4)
    with pytest.raises(ValueError, match="longer than max_model_len 10"):
        make_scheduler([Request(4, 2), Request(8, 3)], m, mode="v1", max_model_len=10)
    assert m.reclaimer is None and m.step == 0
    make_scheduler([Request(8, 2)], m, mode="v1", max_model_len=10).run(check=True)
