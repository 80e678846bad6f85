"""Prefix caching with vLLM v1's rules: generated blocks cached, hits capped at n - 1, token stats,
allocate_slots / get_computed_blocks, the free order, refusals that change nothing."""

from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim import OutOfBlocks
from pagedsim.policies import cache_pool
from pagedsim.policies.prefix_cache import PrefixCachingManager
from pagedsim.policies.sliding_window_cache import SlidingWindowPrefixCachingManager


def state(m):
    """Everything observable about a prefix-caching manager, as plain data."""
    return (
        m.pool.free_list(),
        m.pool.ref_counts(),
        {s: (list(m.block_table(s)), m.num_tokens(s)) for s in m.seq_ids()},
        m.cached_free_blocks(),
        repr(m.stats),
        m.step,
    )


def test_generated_tokens_fill_blocks_that_a_later_turn_hits():
    m = PrefixCachingManager(16, 4)
    m.add_sequence("t1", 6, tokens=[1, 2, 3, 4, 5, 6])
    m.append_tokens("t1", 3, token_ids=[7, 8, 9])  # blocks [1..4], [5..8] are full now
    m.free_sequence("t1")
    m.add_sequence("t2", 11, tokens=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
    assert m.stats.hit_tokens == 8  # both full blocks, the second one half generated
    assert m.stats.prompt_tokens == 6 + 11
    m.check_invariants()


def test_a_block_aligned_fully_cached_prompt_recomputes_its_last_block():
    m = PrefixCachingManager(16, 4)
    m.add_sequence("a", 8, tokens=list(range(8)))
    m.free_sequence("a")
    got = m.get_computed_blocks(list(range(8)))
    assert got.num_tokens == 4 and len(got.blocks) == 1  # capped at 8 - 1 tokens: one block
    m.add_sequence("b", 8, tokens=list(range(8)))
    assert m.stats.hit_tokens == 4 and m.stats.hits == 1 and m.stats.misses == 1 + 2
    assert m.block_table("b")[0] == got.blocks[0]


def test_a_one_token_prompt_never_hits():
    m = PrefixCachingManager(4, 1)
    m.add_sequence("a", 2, tokens=[5, 6])
    assert m.get_computed_blocks([5]).num_tokens == 0
    assert m.get_computed_blocks([5, 6]).num_tokens == 1


def test_get_computed_blocks_changes_nothing():
    m = PrefixCachingManager(8, 2)
    m.add_sequence("a", 5, tokens=[1, 2, 3, 4, 5])
    m.free_sequence("a")
    before = state(m)
    assert m.get_computed_blocks([1, 2, 3, 4, 9]).num_tokens == 4
    assert state(m) == before


def test_allocate_slots_admits_with_hits_then_extends_one_token_at_a_time():
    m = PrefixCachingManager(8, 2)
    m.add_sequence("a", 5, tokens=[1, 2, 3, 4, 5])
    m.free_sequence("a")
    prompt = [1, 2, 3, 4, 6]
    hit = m.get_computed_blocks(prompt)
    new = m.allocate_slots("b", 5 - hit.num_tokens, new_token_ids=prompt, computed=hit)
    assert len(new) == 1 and m.num_computed_tokens("b") == 5
    assert list(m.block_table("b"))[:2] == list(hit.blocks)
    assert m.allocate_slots("b", 1, new_token_ids=[7]) == []  # the block [6 7] fills in place
    assert m.match([1, 2, 3, 4, 6, 7]) == list(m.block_table("b"))  # and is cached at once
    m.check_invariants()


def test_allocate_slots_returns_none_and_changes_nothing_when_short():
    m = PrefixCachingManager(3, 2)
    m.add_sequence("a", 4, tokens=[1, 2, 3, 4])
    before = state(m)
    assert m.allocate_slots("b", 5, new_token_ids=[9, 9, 9, 9, 9]) is None
    assert m.allocate_slots("a", 3, new_token_ids=[5, 6, 7]) is None
    assert state(m) == before
    m.check_invariants()


def test_lookahead_slots_are_allocated_but_not_counted_as_computed():
    m = PrefixCachingManager(8, 2)
    m.allocate_slots("a", 3, 2, new_token_ids=[1, 2, 3])
    assert m.num_computed_tokens("a") == 3 and m.num_tokens("a") == 5
    assert len(m.block_table("a")) == 3
    m.check_invariants()


def test_unhashed_blocks_are_freed_to_the_front_and_hashed_ones_to_the_back():
    m = PrefixCachingManager(6, 2)
    m.add_sequence("a", 5, tokens=[1, 2, 3, 4, 5])  # blocks 0, 1 hashed; 2 holds one token
    m.free_sequence("a")
    assert m.pool.free_list() == [2, 3, 4, 5, 1, 0]  # v1: prepend unhashed, append hashed
    assert m.cached_free_blocks() == [1, 0]  # reversed: the tail block is evicted first


def test_a_new_eviction_policy_is_one_table_entry(monkeypatch):
    monkeypatch.setitem(cache_pool.EVICTION_KEYS, "mru", lambda pool, b, now: (-now,))
    m = PrefixCachingManager(3, 2, eviction="mru")
    m.add_sequence("a", 2, tokens=[1, 2])
    m.add_sequence("b", 2, tokens=[3, 4])
    m.free_sequence("a")
    m.free_sequence("b")  # freed last: most recently used
    m.add_sequence("c", 6, tokens=[7] * 6)  # 1 uncached block + 2 evictions, b's first
    assert m.stats.evictions == 2


@pytest.mark.parametrize("count", [4.0, True, "3", None])
def test_counts_of_the_wrong_type_are_refused_with_nothing_changed(count):
    m = PrefixCachingManager(4, 2)
    before = state(m)
    with pytest.raises(TypeError):
        m.add_sequence("d", count, [1, 2, 3, 4])
    with pytest.raises(TypeError):
        m.allocate_slots("d", count, new_token_ids=[1, 2, 3])
    assert state(m) == before


@pytest.mark.parametrize("tokens", [[1, 2**70], [1, -1]])
def test_out_of_range_token_ids_are_a_value_error_not_an_overflow(tokens):
    m = PrefixCachingManager(4, 2)
    before = state(m)
    with pytest.raises(ValueError):
        m.add_sequence("d", 2, tokens)
    with pytest.raises(ValueError):
        m.get_computed_blocks(tokens)
    assert state(m) == before


def test_stale_computed_blocks_are_refused():
    m = PrefixCachingManager(4, 2)
    m.add_sequence("a", 3, tokens=[1, 2, 3])
    hit = m.get_computed_blocks([1, 2, 3])
    with pytest.raises(ValueError, match="stale"):
        m.allocate_slots("b", 1, new_token_ids=[1, 2, 4], computed=hit)


def test_blocks_that_slide_out_of_the_window_stay_cached():
    m = SlidingWindowPrefixCachingManager(16, 2, sliding_window=4)
    m.add_sequence("a", 9, tokens=list(range(9)))  # the next query reads 6..9: blocks 0-2 go
    assert m.block_table("a")[:4] == [-1, -1, -1, 3]
    assert len(m.cached_free_blocks()) == 3  # freed by the window, still findable
    m.add_sequence("b", 9, tokens=list(range(9)))
    assert m.stats.hit_tokens == 8  # four blocks' worth: two null, then blocks 2 (free) and 3
    m.check_invariants()


def test_a_sliding_window_hit_starts_past_evicted_blocks_it_would_never_read():
    m = SlidingWindowPrefixCachingManager(8, 2, sliding_window=4)  # a hit: ceil(3/2) = 2 blocks
    tokens = list(range(12))
    m.add_sequence("a", 12, tokens=tokens)  # blocks 0..3 slide out (freed, still cached)
    m.free_sequence("a")
    m.add_sequence("x", 8, tokens=[50 + t for t in range(8)])  # 2 uncached + evicts 2 oldest
    assert m.stats.evictions == 2  # blocks 3 and 2: a window frees its last block first (v1)
    assert PrefixCachingManager._match(m, tuple(tokens), 6) == [0, 1]  # full attention: 2 is gone
    m.add_sequence("b", 13, tokens=tokens + [99])
    table = m.block_table("b")
    assert m.stats.hit_tokens == 12  # the last two cached blocks, null blocks before them
    # null blocks before the hit; b's next query (13) reads 10..13, so hit block 4 goes too
    assert table[:5] == [-1] * 5 and -1 not in table[5:]
    m.check_invariants()


@settings(max_examples=20, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 24), st.integers(1, 6), st.integers(0, 1)), min_size=1, max_size=5
    ),
    st.integers(1, 9),
    st.sampled_from([1, 2, 4]),
    st.integers(0, 3),
)
def test_a_sliding_window_cache_under_the_v1_scheduler_keeps_every_invariant(
    shapes, window, bs, spare
):
    from pagedsim.scheduler import make_scheduler
    from pagedsim.workloads import Request

    reqs = [Request(p, o) for p, o, _ in shapes]
    tokens = [[7 * k] * p for p, _, k in shapes]  # two families of prompts that repeat
    m = SlidingWindowPrefixCachingManager(64, bs, sliding_window=window, trace=False)
    need = max(
        min(
            -(-(r.total_len - 1) // bs),  # the whole KV, or the window + one chunk
            m.peak_blocks(r.prompt_len, r.total_len - 1) + -(-min(r.total_len - 1, 5) // bs) + 1,
        )
        for r in reqs
    )
    m = SlidingWindowPrefixCachingManager(need + spare, bs, sliding_window=window, trace=False)
    s = make_scheduler(reqs, m, mode="v1", tokens=tokens, max_num_batched_tokens=5).run(check=True)
    assert s.finished == len(reqs) and m.num_free_blocks == m.num_gpu_blocks


def free_hit_holders(manager, short, protect):
    """A reclaimer that frees every other sequence, including the one holding the hits."""
    for s in manager.seq_ids():
        if s not in protect:
            manager.free_sequence(s)
    manager.after_reclaim = state(manager)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(3, 8),
    st.sampled_from([1, 2, 3]),
    st.lists(st.tuples(st.integers(0, 2), st.integers(1, 9)), min_size=1, max_size=8),
)
def test_a_reclaimer_that_frees_the_hits_is_replanned_and_refusals_change_nothing(
    num_gpu_blocks, bs, requests
):
    m = PrefixCachingManager(num_gpu_blocks, bs, trace=False)
    m.reclaimer = free_hit_holders
    prefix = [7] * 12
    for i, (kind, n) in enumerate(requests):
        tokens = prefix[:n] if kind == 0 else prefix[: n - 1] + [i]
        m.after_reclaim = state(m)  # what a refusal must leave: the reclaimer's work only
        try:
            m.add_sequence(i, n, tokens)
        except OutOfBlocks:
            assert state(m)[:5] == m.after_reclaim[:5]  # free list, counts, tables, cache, stats
            assert n > num_gpu_blocks * bs  # refused only when the pool is really too small
        m.check_invariants()
    used = {b for s in m.seq_ids() for b in m.block_table(s)}
    assert m.num_free_blocks == num_gpu_blocks - len(used)


def test_a_lookahead_slot_in_a_shared_partly_filled_block_copies_it_first_or_changes_nothing():
    m = PrefixCachingManager(num_gpu_blocks=3, block_size=4)
    m.allocate_slots("a", 5, new_token_ids=list(range(5)))
    m.fork("a", "b")  # v0 sharing: b's last block (1 of 4 slots used) is a's too
    m.add_sequence("c", 4)  # takes the last free block
    before = (list(m.block_table("b")), m.num_tokens("b"), m.num_free_blocks)
    assert m.allocate_slots("b", 0, num_lookahead_tokens=1) is None  # the copy needs a block
    assert (list(m.block_table("b")), m.num_tokens("b"), m.num_free_blocks) == before
    m.free_sequence("c")
    assert m.allocate_slots("b", 0, num_lookahead_tokens=1) == [2]
    assert m.drain_copies() == [(1, 2)] and list(m.block_table("a")) == [0, 1]
    m.check_invariants()


COMPACT = cache_pool.CachingBlockPool._compact


def _served(managers, prompts, check):
    """Each prompt served and finished on each (manager, its pool's _compact); `check`."""
    for n, prompt in enumerate(prompts):
        for m, compact in managers:
            with patch.object(cache_pool.CachingBlockPool, "_compact", compact):
                m.add_sequence(n, len(prompt), tokens=prompt)
                m.free_sequence(n)
        check()


def test_one_prompt_served_again_and_again_keeps_the_eviction_heap_bounded():
    m = PrefixCachingManager(6, 2)
    _served([(m, COMPACT)], [[1, 2, 3, 4, 5]] * 60, m.check_invariants)
    assert len(m.pool._heap) <= 2 * m.num_gpu_blocks


@settings(max_examples=30, deadline=None)
@given(
    prompts=st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=9), min_size=1, max_size=40),
    eviction=st.sampled_from(cache_pool.EVICTION_POLICIES),
)
def test_compacting_the_eviction_heap_never_changes_what_is_evicted(prompts, eviction):
    """Every release of a cached block queues a heap entry and the stale ones are
    compacted away: every state (free order, cached blocks, evictions) equals a
    never-compacted pool's, and the heap stays within 2 x the pool."""
    lazy, compacted = (PrefixCachingManager(6, 2, eviction=eviction) for _ in range(2))

    def check():
        assert state(lazy) == state(compacted)
        assert len(compacted.pool._heap) <= 2 * compacted.num_gpu_blocks
        compacted.check_invariants()

    _served([(lazy, lambda self: None), (compacted, COMPACT)], prompts, check)
