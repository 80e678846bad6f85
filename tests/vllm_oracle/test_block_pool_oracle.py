"""pagedsim's CachingBlockPool against vLLM v1's own BlockPool, step by step.

Both pools take the same calls -- get_new_blocks, free_blocks (in a drawn order), touch
(of prefix-cache hits), cache_full_blocks, evict_blocks, reset_prefix_cache -- and after
every step agree on the whole free queue (head first), every ref count, which blocks are
cached and under which hash, the hits, which calls are refused, and the KV events the
pool itself queues (BlockRemoved, AllBlocksCleared; BlockStored is the managers', see
test_manager_oracle.py). Also LinkedBlockPool(free_order="prepend") against vLLM's
BlockPool with caching off: v1's plain order.
"""

from __future__ import annotations

import itertools

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from pagedsim.linked_pool import LinkedBlockPool
from pagedsim.policies import CachingBlockPool, chained_hash
from pagedsim.policies.cache_pool import ROOT

from .sides import (
    HashMap,
    P,
    agreed,
    compare_events,
    external,
    needs_vllm,
    vllm_free_list,
    vllm_request,
)

needs_vllm()  # skips this module where vLLM is missing (conftest.py)

N, B = 10, 2  # pagedsim blocks (vLLM has one more: its null block), tokens per block
TOKENS = st.lists(st.integers(0, 2), min_size=1, max_size=4 * B)  # few values: many hits
STEPS = settings(max_examples=30, stateful_step_count=40, deadline=None)


class Seq:
    """One request's blocks on both sides, and how many of them are cached."""

    def __repr__(self):
        return f"Seq({self.request.request_id}, {self.tokens})"

    def __init__(self, request, tokens, blocks, hits):
        self.request, self.tokens, self.blocks = request, tokens, blocks
        self.num_cached = hits  # full blocks cached so far (hits are)
        self.chain = ROOT  # pagedsim content id of the last cached block (pinned)


class PoolOracle(RuleBasedStateMachine):
    seqs = Bundle("seqs")

    def __init__(self, vllm):
        super().__init__()
        self.vllm = vllm
        self.theirs = vllm.BlockPool(N + 1, True, B, enable_kv_cache_events=True)
        self.ours = CachingBlockPool(N, B, enable_kv_cache_events=True)
        self.hashes = HashMap()
        self.ids = itertools.count()
        self.live: list[Seq] = []

    def _hits(self, req, tokens):
        """The cached blocks holding `tokens`' full blocks from the start, on both sides."""
        theirs, ours, parent = [], [], ROOT
        h = 0
        for i, vh in enumerate(req.block_hashes):
            chunk = tuple(tokens[i * B : (i + 1) * B])
            got = self.theirs.get_cached_block(vh, [0])
            h = chained_hash(h, chunk)
            mine = self.ours.lookup(h, chunk, parent)
            assert (got is None) == (mine is None), f"hit {i}: vLLM {got}, pagedsim {mine}"
            if got is None:
                break
            theirs.append(got[0])
            ours.append(mine)
            parent = self.ours.parent_key(mine)
        assert [P(b.block_id) for b in theirs] == ours, "hit blocks differ"
        return theirs, ours

    @rule(target=seqs, tokens=TOKENS, extra=st.integers(0, 2))
    def new_seq(self, tokens, extra):
        """A request: touch its cached prefix, then get_new_blocks for the rest (+ extra)."""
        req = vllm_request(self.vllm, f"r{next(self.ids)}", tokens, B)
        hit_v, hit_p = self._hits(req, tokens)
        k = -(-len(tokens) // B) - len(hit_v) + extra
        self.theirs.touch(hit_v)
        for b in hit_p:
            self.ours.touch(b)
        refused = []
        try:
            new_v = self.theirs.get_new_blocks(k)
        except ValueError:
            new_v, refused = [], ["vLLM"]
        try:
            new_p = self.ours.allocate_many(k)
        except Exception:  # OutOfBlocks
            new_p, refused = [], refused + ["pagedsim"]
        assert refused in ([], ["vLLM", "pagedsim"]), f"get_new_blocks({k}) refused by {refused}"
        assert [P(b.block_id) for b in new_v] == new_p, f"get_new_blocks({k}) ids"
        seq = Seq(req, tokens, list(zip(hit_v + new_v, hit_p + new_p, strict=True)), len(hit_v))
        if hit_p:
            seq.chain = self.ours.parent_key(hit_p[-1])
            self.ours.pin(seq.chain)
        self.live.append(seq)
        return seq

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def cache_full_blocks(self, data):
        seq = data.draw(st.sampled_from(self.live))
        full = min(len(seq.tokens) // B, len(seq.blocks))
        upto = data.draw(st.integers(seq.num_cached, full))
        blocks_v = [v for v, _ in seq.blocks]
        self.theirs.cache_full_blocks(seq.request, blocks_v, seq.num_cached, upto, B, 0)
        for i in range(seq.num_cached, upto):
            chunk = tuple(seq.tokens[i * B : (i + 1) * B])
            h = chained_hash(self._chain_hash(seq, i), chunk)
            b = seq.blocks[i][1]
            self.ours.cache(b, h, chunk, seq.chain, 0)
            self.ours.unpin(seq.chain)
            seq.chain = self.ours.parent_key(b)
            self.ours.pin(seq.chain)
        seq.num_cached = max(seq.num_cached, upto)

    @staticmethod
    def _chain_hash(seq, i):
        h = 0
        for j in range(i):
            h = chained_hash(h, tuple(seq.tokens[j * B : (j + 1) * B]))
        return h

    @rule(seq=consumes(seqs), data=st.data())
    def free_blocks(self, seq, data):
        """Free a request's blocks in a drawn order (the manager gives them tail first)."""
        order = [seq.blocks[i] for i in data.draw(st.permutations(range(len(seq.blocks))))]
        self.theirs.free_blocks([v for v, _ in order])
        self.ours.release([p for _, p in order])
        self.ours.unpin(seq.chain)
        self.live.remove(seq)

    @rule(data=st.data())
    def evict_blocks(self, data):
        """Drop cached blocks (held or free) by id, and ids that hold nothing."""
        cached = [b.block_id for b in self.theirs.blocks[1:] if b.block_hash is not None]
        some = st.sampled_from(cached) if cached else st.nothing()
        ids = data.draw(st.sets(some | st.integers(1, N), max_size=3), label="evict")
        self.theirs.evict_blocks(sorted(ids))
        self.ours.evict_blocks([P(v) for v in sorted(ids)])

    @rule()
    def reset_prefix_cache(self):
        ok = self.theirs.reset_prefix_cache()
        assert ok == self.ours.reset(), f"reset_prefix_cache: vLLM {ok}"

    @invariant()
    def agree(self):
        assert vllm_free_list(self.theirs) == self.ours.free_list(), "free queue order"
        blocks = self.theirs.blocks[1:]
        assert [b.ref_cnt for b in blocks] == self.ours.ref_counts(), "ref counts"
        for b in blocks:
            cached = b.block_hash is not None
            assert cached == self.ours.is_cached(P(b.block_id)), f"block {b.block_id} cached?"
            if cached:
                self.hashes.same(
                    external(self.vllm, b.block_hash), self.ours.hash_of(P(b.block_id))
                )
        compare_events(
            self.theirs.take_events(),
            self.ours.take_events(),
            self.hashes,
            ("BlockRemoved", "AllBlocksCleared"),
        )
        self.ours.check_invariants()
        agreed(self)


class PlainPoolOracle(RuleBasedStateMachine):
    """vLLM's BlockPool with prefix caching off against LinkedBlockPool("prepend")."""

    held = Bundle("held")

    def __init__(self, vllm):
        super().__init__()
        self.theirs = vllm.BlockPool(N + 1, False, B)
        self.ours = LinkedBlockPool(N, B, free_order="prepend")

    @rule(target=held, k=st.integers(0, N + 1))
    def get_new_blocks(self, k):
        if k > self.ours.num_free_blocks:
            try:
                self.theirs.get_new_blocks(k)
            except ValueError:
                return []
            raise AssertionError(f"vLLM gave {k} blocks; pagedsim has fewer free")
        got = list(zip(self.theirs.get_new_blocks(k), self.ours.allocate_many(k), strict=True))
        assert [P(v.block_id) for v, _ in got] == [p for _, p in got], "new block ids"
        return got

    @rule(blocks=consumes(held), data=st.data())
    def free_blocks(self, blocks, data):
        order = data.draw(st.permutations(blocks))
        self.theirs.free_blocks([v for v, _ in order])
        self.ours.release([p for _, p in order])

    @invariant()
    def agree(self):
        assert vllm_free_list(self.theirs) == self.ours.free_list(), "free queue order"
        assert [b.ref_cnt for b in self.theirs.blocks[1:]] == self.ours.ref_counts()
        self.ours.check_invariants()
        agreed(self)


def test_caching_pool_follows_vllm(vllm):
    run_state_machine_as_test(lambda: PoolOracle(vllm), settings=STEPS)


def test_plain_pool_follows_vllm(vllm):
    run_state_machine_as_test(lambda: PlainPoolOracle(vllm), settings=STEPS)
