"""The hybrid allocator (v1's HybridKVCacheCoordinator): two KV cache groups over one pool,
aligned hits, all-or-nothing allocation, per-group drops, and clear refusals."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim import NULL_BLOCK, OutOfBlocks, story
from pagedsim.policies.hybrid import HybridManager

B = 2


def state(m):
    snap = m.snapshot()
    return (
        snap.free_list,
        snap.ref_counts,
        snap.sequences,
        m.step,
        len(m.trace.snapshots) if m.trace else None,
        sorted(m.pool._key),
    )


def test_both_groups_draw_from_one_pool_and_only_the_window_group_drops():
    m = HybridManager(12, B, sliding_window=4)
    m.add_sequence("A", 9)
    full, window = m.block_tables("A")
    assert NULL_BLOCK not in full.blocks and len(full) == 5
    assert window.blocks[:3] == [NULL_BLOCK] * 3  # the next query reads 6..9 only
    assert m.num_free_blocks == 12 - 5 - 2
    m.check_invariants()


def test_a_short_pool_refuses_both_groups_and_changes_nothing():
    m = HybridManager(6, B, sliding_window=4)
    m.add_sequence("A", 4)  # 2 + 2 blocks
    before = state(m)
    assert m.allocate_slots("B", 4, new_token_ids=[9, 9, 9, 9]) is None  # needs 4, 2 free
    assert state(m) == before
    with pytest.raises(OutOfBlocks):
        m.add_sequence("B", 4, [9, 9, 9, 9])
    assert state(m)[:3] == before[:3]  # recorded as a step, nothing else changed
    m.check_invariants()


def test_a_protected_cached_block_is_passed_over_by_eviction():
    # what keeps the window group's hits alive while the full group allocates (vLLM #33775)
    from pagedsim.policies import CachingBlockPool

    pool = CachingBlockPool(3, 1)
    for b in pool.allocate_many(3):
        pool.cache(b, 100 + b, (b,), 0)
    for b in (0, 1, 2):
        pool.free(b)  # every free block is cached; 0 is the least recently used
    with pool.protecting([0]):
        assert pool.allocate() == 1  # 0 would be evicted first, but it is protected
    assert pool.allocate() == 0 and pool.is_cached(2)
    pool.check_invariants()


def test_the_groups_return_one_common_prefix_count_each():
    m = HybridManager(16, B, sliding_window=4)
    m.add_sequence("A", 6, [1] * 6)
    hit = m.get_computed_blocks([1] * 6)
    m.allocate_slots("B", 6 - hit.num_tokens, new_token_ids=[1] * 6, computed=hit)
    assert m.get_num_common_prefix_blocks("A", 2)[1] == 0  # the window group: always 0


def test_a_request_is_one_prefix_cache_lookup_however_many_groups():
    m = HybridManager(16, B, sliding_window=4)
    m.allocate_slots("A", 6, new_token_ids=[1] * 6)
    hit = m.get_computed_blocks([1] * 6)
    m.allocate_slots("B", 6 - hit.num_tokens, new_token_ids=[1] * 6, computed=hit)
    # two requests of 6 prompt tokens; B hits A's full blocks in both groups (4 of its tokens:
    # a lookup stops one token short of the prompt)
    assert (m.stats.requests, m.stats.prompt_tokens) == (2, 12)
    assert m.stats.hit_tokens == hit.num_tokens == 4


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"sliding_window": 0}, ValueError),
        ({"sliding_window": 2.5}, TypeError),
        ({"sliding_window": 4, "trace": 1}, TypeError),
        ({"sliding_window": 4, "eviction": "mru"}, ValueError),
    ],
)
def test_bad_construction_arguments_are_refused(kwargs, error):
    with pytest.raises(error):
        HybridManager(8, B, **kwargs)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "grow", "free"]),
            st.lists(st.integers(0, 2), min_size=1, max_size=7),
        ),
        max_size=15,
    ),
    st.integers(1, 5),
    st.integers(4, 14),
)
def test_random_operations_keep_both_groups_consistent(ops, window, num_gpu_blocks):
    m = HybridManager(num_gpu_blocks, B, sliding_window=window, trace=False)
    k = 0
    for op, tokens in ops:
        before = state(m)
        live = m.seq_ids()
        if op == "add":
            hit = m.get_computed_blocks(tokens)
            got = m.allocate_slots(
                k, len(tokens) - hit.num_tokens, new_token_ids=tokens, computed=hit
            )
            k += 1
        elif op == "grow" and live:
            got = m.allocate_slots(live[0], len(tokens), new_token_ids=tokens)
        elif live:
            m.free_sequence(live[-1])
            got = ()
        else:
            continue
        if got is None:
            assert state(m) == before
        m.check_invariants()
    for s in m.seq_ids():
        m.free_sequence(s)
    assert m.num_free_blocks == num_gpu_blocks


def test_bad_calls_are_refused_with_nothing_changed():
    m = HybridManager(8, B, sliding_window=4)
    m.add_sequence("A", 3)
    before = state(m)
    for call, error in [
        (lambda: m.allocate_slots("A", -1), ValueError),
        (lambda: m.allocate_slots("A", 1, new_token_ids="ab"), TypeError),
        (lambda: m.allocate_slots("B", 1), ValueError),  # a new sequence needs its prompt
        (lambda: m.allocate_slots("B", 1, new_token_ids=[1], computed=(1,)), TypeError),
        (lambda: m.allocate_slots("B", 5, new_token_ids=[1]), ValueError),
        (lambda: m.free_sequence("nope"), ValueError),
        (lambda: m.get_computed_blocks([1], cache_salt=3), TypeError),
    ]:
        with pytest.raises(error):
            call()
        assert state(m) == before


def test_the_playgrounds_hybrid_option_shows_both_groups_tables_and_refuses_fork():
    from pagedsim.app.play_session import Options, Refused, Session

    s = Session(Options(num_gpu_blocks=14, sliding_window=6, hybrid=True))
    s.run("alloc A 10 hello")
    s.run("alloc B 10 hello")  # the same prompt: both groups hit
    snap = s.current()
    assert [q.seq_id for q in snap.sequences] == ["A:full", "A:window", "B:full", "B:window"]
    assert snap.sequence("B:full").blocks[:2] == snap.sequence("A:full").blocks[:2]
    assert NULL_BLOCK in snap.sequence("B:window").blocks
    with pytest.raises(Refused, match="fork"):
        s.run("fork A C")
    s.run("alloc Z 99")  # a pool that runs dry is a step, and says so truthfully
    assert "OutOfBlocks, nothing changed" in story.caption(s.timeline()[-1])
    assert s.manager.seq_ids() == ["A", "B"]
    for bad in (
        {"enable_prefix_caching": True, "sliding_window": 6},
        {"sliding_window": None},
        {"sliding_window": 0},
        {"preemption_mode": "swap", "sliding_window": 6},
    ):
        with pytest.raises(Refused):
            Session(Options(hybrid=True, **bad))
    with pytest.raises(Refused, match="hybrid must be True or False, got 6"):
        Session(Options(hybrid=6))  # the window is sliding_window's, not hybrid's
