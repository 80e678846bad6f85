"""A Hypothesis state machine drives the v1 mechanisms: lookups and allocate_slots with extra
keys and lookahead, growth with sampled ids, frees, reset_prefix_cache, evict_blocks and
the KV cache events, with `check_invariants()` after every step.

Besides the manager's own invariants it keeps a model built only from the published
events: replaying BlockStored / BlockRemoved / AllBlocksCleared must give exactly the
multiset of hashes the pool holds, so no change of the cache goes unpublished. A
refused call (allocate_slots returning None, reset while blocks are in use) must change
nothing a caller can observe.
"""

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from pagedsim.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from pagedsim.policies import PrefixCachingManager, SlidingWindowPrefixCachingManager
from tests.helpers import manager_state

TOKENS = st.lists(st.integers(0, 2), min_size=1, max_size=12)  # small vocabulary: repeats
SALTS = st.sampled_from([None, None, "a", "b"])
LORAS = st.sampled_from([None, None, 3])


class V1CacheMachine(RuleBasedStateMachine):
    @initialize(
        num_gpu_blocks=st.integers(2, 10),
        bs=st.sampled_from([1, 2, 3]),
        window=st.none() | st.integers(1, 6),
    )
    def make(self, num_gpu_blocks, bs, window):
        if window is None:
            self.m = PrefixCachingManager(
                num_gpu_blocks, bs, enable_kv_cache_events=True, trace=False
            )
        else:
            self.m = SlidingWindowPrefixCachingManager(
                num_gpu_blocks, bs, sliding_window=window, enable_kv_cache_events=True, trace=False
            )
        self.published = Counter()  # hashes cached, as the events tell it
        self.next_id = 0

    def absorb_events(self):
        for e in self.m.take_events():
            if isinstance(e, BlockStored):
                assert len(e.token_ids) == e.block_size * len(e.block_hashes)
                self.published.update(e.block_hashes)
            elif isinstance(e, BlockRemoved):
                self.published.subtract(e.block_hashes)
            else:
                assert isinstance(e, AllBlocksCleared)
                self.published.clear()
        self.published = +self.published  # drop zero counts

    @rule(tokens=TOKENS, salt=SALTS, lora=LORAS, ahead=st.integers(0, 3), share=st.booleans())
    def admit(self, tokens, salt, lora, ahead, share):
        seq = self.next_id
        self.next_id += 1
        hit = self.m.get_computed_blocks(tokens, cache_salt=salt, lora_id=lora)
        assert hit.num_tokens <= len(tokens) - 1 or hit.num_tokens == 0
        before = manager_state(self.m)
        n = len(tokens) - (hit.num_tokens if share else 0)
        got = self.m.allocate_slots(
            seq, n, ahead, tokens, hit if share else None, cache_salt=salt, lora_id=lora
        )
        if got is None:
            assert manager_state(self.m) == before
        else:
            assert self.m.num_computed_tokens(seq) == len(tokens)

    @rule(data=st.data())
    def grow(self, data):
        seqs = self.m.seq_ids()
        if not seqs:
            return
        seq = data.draw(st.sampled_from(seqs))
        new = data.draw(st.lists(st.integers(0, 2), max_size=4))
        ahead = data.draw(st.integers(0, 2))
        before = manager_state(self.m)
        done = self.m.num_computed_tokens(seq)
        if self.m.allocate_slots(seq, len(new), ahead, new or None) is None:
            assert manager_state(self.m) == before
        else:
            assert self.m.num_computed_tokens(seq) == done + len(new)

    @rule(data=st.data())
    def free(self, data):
        seqs = self.m.seq_ids()
        if seqs:
            self.m.free_sequence(data.draw(st.sampled_from(seqs)))

    @rule()
    def reset(self):
        before = manager_state(self.m)
        busy = self.m.pool.num_free_blocks != self.m.pool.num_gpu_blocks
        assert self.m.reset_prefix_cache() is (not busy)
        if busy:
            assert manager_state(self.m) == before
        else:
            assert self.m.cached_free_blocks() == []

    @rule(data=st.data())
    def evict(self, data):
        ids = data.draw(st.lists(st.integers(0, self.m.num_gpu_blocks - 1), max_size=3))
        self.m.pool.evict_blocks(ids)
        assert not any(self.m.pool.is_cached(b) for b in ids)

    @invariant()
    def invariants_hold_and_every_change_is_published(self):
        self.m.check_invariants()
        self.absorb_events()
        held = Counter(
            self.m.pool.hash_of(b) for b in range(self.m.num_gpu_blocks) if self.m.pool.is_cached(b)
        )
        assert self.published == held


V1CacheMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_v1_cache_machine = V1CacheMachine.TestCase
