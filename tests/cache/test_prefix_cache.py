"""Prefix caching: chained hashes confirmed by tokens, cached free blocks, lru/lfu/fifo eviction."""

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pagedsim import OutOfBlocks
from pagedsim.policies import PrefixCachingManager, chained_hash
from pagedsim.policies.preemption import HostPool


def test_a_freed_prompt_block_is_taken_back_from_the_middle_of_the_free_list():
    m = PrefixCachingManager(6, 2)
    m.add_sequence("a", 4, tokens=[1, 2, 3, 4])  # blocks 0, 1 full and cached
    m.free_sequence("a")
    assert m.cached_free_blocks() == [1, 0]  # behind the uncached blocks, last block first
    assert m.pool.free_list() == [2, 3, 4, 5, 1, 0]
    assert m.snapshot().cached_blocks == (1, 0)  # what the pictures shade as "cached"
    m.add_sequence("b", 3, tokens=[1, 2, 9])  # block 0 is a hit; 9 needs a fresh block
    assert m.block_table("b") == [0, 2]
    assert m.pool.free_list() == [3, 4, 5, 1]  # 0 unlinked from the tail end, 2 from the head
    assert (m.stats.hits, m.stats.misses) == (1, 2)  # a: 2 misses; b: 1 hit
    m.check_invariants()


def test_a_hit_on_a_block_in_use_shares_it_and_raises_its_count():
    m = PrefixCachingManager(6, 2)
    m.add_sequence("a", 3, tokens=[5, 6, 7])
    m.add_sequence("b", 3, tokens=[5, 6, 8])
    assert m.block_table("a")[0] == m.block_table("b")[0]
    assert m.pool.ref_count(m.block_table("a")[0]) == 2
    m.check_invariants()


def test_a_hash_collision_is_caught_by_comparing_tokens():
    m = PrefixCachingManager(6, 2, hash_fn=lambda parent, tokens: 0)  # every block collides
    m.add_sequence("a", 4, tokens=[1, 2, 3, 4])
    m.add_sequence("b", 4, tokens=[1, 2, 9, 9])  # block 0 hits, block 1 collides but differs
    m.add_sequence("c", 4, tokens=[3, 4, 1, 2])  # same blocks, other order: nothing matches
    a, b, c = (m.block_table(s) for s in "abc")
    assert b[0] == a[0] and b[1] != a[1]
    assert set(c).isdisjoint(a)  # [3, 4] first is not a's second block: its parent differs
    assert m.stats.hits == 1


def test_a_child_of_an_evicted_and_reused_parent_no_longer_matches():
    # A parent-blind hash, so only the (parent block, generation) check can tell prefixes apart.
    m = PrefixCachingManager(3, 2, eviction="fifo", hash_fn=lambda parent, tokens: hash(tokens))
    m.add_sequence("a", 4, tokens=[1, 2, 3, 4])  # caches block 0 = [1 2], block 1 = [3 4] after 0
    m.free_sequence("a")
    m.add_sequence("x", 2, tokens=[7, 8])  # takes the uncached block 2
    m.add_sequence("y", 2, tokens=[9, 9])  # fifo evicts block 0 (cached first), now [9 9]
    assert m.block_table("y") == [0] and m.stats.evictions == 1
    # [9 9 | 3 4] never existed: block 1 still holds [3 4], but it followed the old block 0.
    assert m.match([9, 9, 3, 4]) == [0]
    assert m.match([1, 2, 3, 4]) == []


def test_block_floor_counts_shared_tokens_left_in_an_unshared_block():
    m = PrefixCachingManager(8, 4)
    m.add_sequence("a", 9, tokens=[1, 2, 3, 4, 5, 6, 7, 8, 9])  # caches [1 2 3 4], [5 6 7 8]
    m.add_sequence("b", 8, tokens=[1, 2, 3, 4, 5, 6, 7, 0])
    # block 0 hits; block 1 is [5 6 7 0]: 3 tokens agree with the cached [5 6 7 8] -> floor 3
    assert m.stats.hits == 1 and m.stats.block_floor == 3


def evict_one(eviction, free_first):
    """Cache [1 2] then [3 4] (a third token each, as a hit is capped at n - 1 tokens); free
    them in `free_first` order; force exactly one eviction."""
    m = PrefixCachingManager(6, 2, eviction=eviction)
    m.add_sequence("a", 3, tokens=[1, 2, 0])
    m.add_sequence("b", 3, tokens=[3, 4, 0])
    if eviction == "lfu":
        for i in range(3):  # [1 2] gets hit three times
            m.add_sequence(f"h{i}", 3, tokens=[1, 2, 5])
            m.free_sequence(f"h{i}")
    for s in free_first:
        m.free_sequence(s)
    m.add_sequence("c", 10, tokens=list(range(7, 17)))  # 4 uncached blocks + 1 eviction
    assert m.stats.evictions == 1
    m.check_invariants()
    return {t: bool(m.match(t)) for t in ((1, 2), (3, 4))}


def test_lru_evicts_the_block_freed_longest_ago():
    assert evict_one("lru", ["b", "a"]) == {(1, 2): True, (3, 4): False}


def test_fifo_evicts_the_block_cached_first_even_if_freed_last():
    assert evict_one("fifo", ["b", "a"]) == {(1, 2): False, (3, 4): True}


def test_lfu_evicts_the_least_hit_block_even_if_freed_last():
    assert evict_one("lfu", ["a", "b"]) == {(1, 2): True, (3, 4): False}


def test_bad_eviction_names_and_token_counts_are_refused():
    with pytest.raises(ValueError, match="eviction must be one of"):
        PrefixCachingManager(4, 2, eviction="random")
    m = PrefixCachingManager(4, 2)
    with pytest.raises(ValueError, match="tokens has 2 entries but num_tokens is 3"):
        m.add_sequence("a", 3, tokens=[1, 2])
    assert m.seq_ids() == [] and m.num_free_blocks == 4


PREFIXES = ([1, 2, 3, 4, 5, 6], [1, 2, 7, 7], [9, 8, 7, 6, 5])


class PrefixCacheMachine(RuleBasedStateMachine):
    """Random admissions/appends/forks/frees/swaps against a shadow K/V store.

    Every slot a token is written to holds that token in `kv`; copy-on-write pairs
    copy whole blocks, and a swap copies blocks to `host_kv` and back. After every rule
    each live sequence must read back its own tokens through its table: a block freed
    or evicted while a live sequence still used it, or a wrong prefix-cache hit, would
    show up as a wrong token. And every full block of a sequence whose token ids all
    reached the manager (`hashed`) must be cached under the chained hash of its token
    prefix -- after a swap-in too (v0's block manager re-hashes swapped-in blocks).
    """

    @initialize(
        eviction=st.sampled_from(["lru", "lfu", "fifo"]),
        block_size=st.sampled_from([1, 2, 3]),
        collide=st.booleans(),
        num_gpu_blocks=st.integers(3, 8),
    )
    def setup(self, eviction, block_size, collide, num_gpu_blocks):
        hash_fn = (lambda parent, tokens: 0) if collide else chained_hash
        self.m = PrefixCachingManager(
            num_gpu_blocks, block_size, eviction=eviction, hash_fn=hash_fn, trace=False
        )
        self.kv = {}
        self.tokens = {}  # seq -> tokens whose KV is written (its computed tokens)
        self.pending = {}  # seq -> prompt tokens allocate_slots has not computed yet (v1 chunks)
        self.hashed = set()  # live seqs the manager was given every token id of
        self.host, self.host_kv = HostPool(8), {}
        self.swapped = {}  # seq -> (saved tables, tokens, hashed?)
        self.hash_fn = hash_fn
        self.next_id = 0

    def write(self, slots, toks):
        for slot, t in zip(slots, toks, strict=True):
            self.kv[int(slot)] = t

    def apply_copies(self):
        bs = self.m.block_size
        for src, dst in self.m.drain_copies():
            for o in range(bs):
                if src * bs + o in self.kv:
                    self.kv[dst * bs + o] = self.kv[src * bs + o]

    @rule(
        prefix=st.sampled_from(PREFIXES),
        cut=st.integers(1, 6),
        tail=st.lists(st.integers(0, 3), max_size=3),
    )
    def add(self, prefix, cut, tail):
        toks = prefix[:cut] + tail
        s, hits = self.next_id, self.m.stats.hits
        try:
            slots = self.m.add_sequence(s, len(toks), tokens=toks)
        except OutOfBlocks:
            assert s not in self.m
            return
        self.next_id += 1
        skip = (self.m.stats.hits - hits) * self.m.block_size  # hit blocks are not written
        self.write(list(slots)[skip:], toks[skip:])
        self.tokens[s] = list(toks)
        self.hashed.add(s)

    @rule(
        prefix=st.sampled_from(PREFIXES),
        cut=st.integers(1, 6),
        tail=st.lists(st.integers(0, 3), max_size=3),
        chunk=st.integers(1, 4),
    )
    def admit_v1(self, prefix, cut, tail, chunk):
        """v1's way in: a pure lookup, then allocate_slots for one chunk of the rest."""
        toks = prefix[:cut] + tail
        s, before = self.next_id, self.m.snapshot()
        hit = self.m.get_computed_blocks(toks)
        n = min(len(toks) - hit.num_tokens, chunk)
        if self.m.allocate_slots(s, n, 0, toks, hit) is None:
            after = self.m.snapshot()
            assert (after.free_list, after.ref_counts, after.sequences) == (
                before.free_list,
                before.ref_counts,
                before.sequences,
            )
            return
        self.next_id += 1
        done = hit.num_tokens + n
        self.write(list(self.m.slot_mapping(s))[hit.num_tokens :], toks[hit.num_tokens : done])
        self.tokens[s], self.pending[s] = list(toks[:done]), list(toks[done:])
        self.hashed.add(s)

    @precondition(lambda self: any(self.pending.values()))
    @rule(data=st.data(), chunk=st.integers(1, 4))
    def prefill_chunk(self, data, chunk):
        s = data.draw(st.sampled_from(sorted(k for k, v in self.pending.items() if v)))
        first = len(self.tokens[s])
        n = min(chunk, len(self.pending[s]))
        if self.m.allocate_slots(s, n) is None:
            return
        self.apply_copies()
        self.write(list(self.m.slot_mapping(s))[first:], self.pending[s][:n])
        self.tokens[s] += self.pending[s][:n]
        del self.pending[s][:n]

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), token=st.integers(0, 3))
    def append(self, data, token):
        s = data.draw(st.sampled_from(sorted(self.tokens)))
        try:
            slots = self.m.append_tokens(s, 1, token_ids=[token])  # generated blocks get cached
        except OutOfBlocks:
            return
        self.apply_copies()
        self.write(slots, [token])
        self.tokens[s].append(token)
        if self.pending.get(s):  # the prompt's rest is abandoned: the appended token took its
            self.hashed.discard(s)  # place, so the ids known no longer match: hashing stops
        self.pending[s] = []

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def fork(self, data):
        s = data.draw(st.sampled_from(sorted(self.tokens)))
        self.m.fork(s, self.next_id)
        self.tokens[self.next_id] = list(self.tokens[s])
        self.pending[self.next_id] = list(self.pending.get(s, []))
        if s in self.hashed:
            self.hashed.add(self.next_id)
        self.next_id += 1

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free(self, data):
        s = data.draw(st.sampled_from(sorted(self.tokens)))
        self.m.free_sequence(s)
        del self.tokens[s]
        self.pending.pop(s, None)
        self.hashed.discard(s)

    @precondition(lambda self: any(not self.pending.get(s) for s in self.tokens))
    @rule(data=st.data())
    def swap_out(self, data):
        """v0 swapping: the blocks go to the host, the sequence is freed."""
        s = data.draw(st.sampled_from(sorted(s for s in self.tokens if not self.pending.get(s))))
        moved = self.host.swap_out(self.m, [s])
        if moved is None:
            return
        pairs, saved = moved
        bs = self.m.block_size
        for gpu, host in pairs:
            for o in range(bs):
                if gpu * bs + o in self.kv:
                    self.host_kv[host * bs + o] = self.kv[gpu * bs + o]
        self.swapped[s] = (saved, self.tokens.pop(s), s in self.hashed)
        self.pending.pop(s, None)
        self.hashed.discard(s)

    @precondition(lambda self: self.swapped)
    @rule(data=st.data())
    def swap_in(self, data):
        s = data.draw(st.sampled_from(sorted(self.swapped)))
        saved, toks, hashed = self.swapped[s]
        pairs = self.host.swap_in(self.m, saved)
        if pairs is None:
            return
        bs = self.m.block_size
        for host, gpu in pairs:
            for o in range(bs):
                if host * bs + o in self.host_kv:
                    self.kv[gpu * bs + o] = self.host_kv[host * bs + o]
        del self.swapped[s]
        self.tokens[s] = toks
        if hashed:
            self.hashed.add(s)

    @invariant()
    def every_live_sequence_reads_back_its_tokens(self):
        self.m.check_invariants()
        for s, toks in self.tokens.items():
            assert [self.kv.get(int(x)) for x in self.m.slot_mapping(s)] == toks, f"seq {s}"

    @invariant()
    def no_block_a_live_sequence_uses_is_free_or_cached_free(self):
        live = {b for s in self.tokens for b in self.m.block_table(s)}
        assert live.isdisjoint(self.m.pool.free_list())

    @invariant()
    def every_full_block_carries_the_hash_of_its_token_prefix(self):
        bs, pool = self.m.block_size, self.m.pool
        for s in self.hashed:
            h, toks = 0, self.tokens[s]
            for logical, b in enumerate(list(self.m.block_table(s))[: len(toks) // bs]):
                block_tokens = tuple(toks[logical * bs : (logical + 1) * bs])
                h = self.hash_fn(h, block_tokens)
                assert pool.is_cached(b), f"seq {s}: full block {logical} ({b}) has no hash"
                assert (pool.hash_of(b), pool.tokens_of(b)) == (h, block_tokens), (
                    f"seq {s}: block {logical} ({b}) is named by another prefix"
                )


TestPrefixCacheMachine = PrefixCacheMachine.TestCase
TestPrefixCacheMachine.settings = settings(max_examples=60, stateful_step_count=30)
