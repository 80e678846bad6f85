"""pagedsim's managers against vLLM v1's own KVCacheManager, step by step.

Three pairs, one machine: `PrefixCachingManager` against a KVCacheManager with one
full-attention group; `SlidingWindowPrefixCachingManager` against one with a single
sliding-window group (v1's SlidingWindowManager); `HybridManager` against one with a
full-attention and a sliding-window group (v1's hybrid coordinator) over one pool.

The same requests go to both: get_computed_blocks, then allocate_slots for a drawn chunk of
the prompt (chunked prefill) with drawn lookahead slots, later chunks and decode steps that
bring the sampled token, free, evict_blocks, reset_prefix_cache. Requests share prefixes and
carry a cache_salt and a LoRA adapter (vLLM keys an adapter by its name; pagedsim by its
lora_id: adapter 1 is named "lora1"). After every step both agree on the hits, which
allocations are refused, the new block ids, every block table, the whole free queue, every
ref count and the KV events (BlockStored with token ids, parents and lora_id, BlockRemoved,
AllBlocksCleared; hashes through a one-to-one map).
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

from pagedsim.policies import PrefixCachingManager, SlidingWindowPrefixCachingManager
from pagedsim.policies.hybrid import HybridManager

from .sides import HashMap, P, agreed, compare_events, needs_vllm, vllm_free_list, vllm_request

needs_vllm()  # skips this module where vLLM is missing (conftest.py)

N, B, MAX_LEN = 12, 2, 24  # pagedsim blocks (vLLM: one more), tokens per block, longest seq
W = 5  # the sliding window, in tokens (ceil((W - 1) / B) = 2 cached blocks make a hit)
PREFIXES = ((), (1, 2), (1, 2, 3, 4), (1, 2, 3, 4, 5, 6), (7, 7, 7))
STEPS = settings(max_examples=25, stateful_step_count=40, deadline=None)


def vllm_manager(vllm, num_gpu_blocks, block_size, kinds=("full",)):
    """vLLM's KVCacheManager with one KV cache group per kind ("full" attention or a
    "window" of W tokens), one layer each, events on."""
    spec = vllm.spec
    shape = dict(block_size=block_size, num_kv_heads=1, head_size=1, dtype=vllm.float32)
    groups = [
        spec.KVCacheGroupSpec(
            [f"layer{i}"],
            spec.FullAttentionSpec(**shape)
            if kind == "full"
            else spec.SlidingWindowSpec(sliding_window=W, **shape),
        )
        for i, kind in enumerate(kinds)
    ]
    config = spec.KVCacheConfig(
        num_blocks=num_gpu_blocks, kv_cache_tensors=[], kv_cache_groups=groups
    )
    return vllm.KVCacheManager(
        config,
        1_000,
        scheduler_block_size=block_size,
        hash_block_size=block_size,
        enable_caching=True,
        enable_kv_cache_events=True,
    )


class Req:
    def __init__(self, theirs, tokens):
        self.theirs = theirs  # vLLM's Request
        self.tokens = list(tokens)  # every token id known (prompt + sampled)
        self.computed = 0
        self.pending: list[int] = []  # sampled ids pagedsim has not been given yet


class ManagerOracle(RuleBasedStateMachine):
    """PrefixCachingManager against a KVCacheManager with one full-attention group."""

    reqs = Bundle("reqs")
    kinds: tuple[str, ...] = ("full",)

    def make_ours(self):
        return PrefixCachingManager(N, B, enable_kv_cache_events=True, trace=False)

    def our_tables(self, rid):
        """The request's block table per KV cache group (NULL_BLOCK is vLLM's null block)."""
        return (self.ours.block_table(rid).blocks,)

    @staticmethod
    def per_group(got):
        """pagedsim's answer (hits or new blocks) as one list per group."""
        return (list(got),)

    def __init__(self, vllm):
        super().__init__()
        self.vllm = vllm
        self.theirs = vllm_manager(vllm, N + 1, B, self.kinds)
        self.ours = self.make_ours()
        self.hashes = HashMap()
        self.ids = (f"r{i}" for i in itertools.count())
        self.live: dict[str, Req] = {}

    @rule(
        target=reqs,
        prefix=st.sampled_from(PREFIXES),
        tail=st.lists(st.integers(1, 3), min_size=1, max_size=3 * B),
        salt=st.sampled_from([None, None, "tenant"]),
        lora=st.sampled_from([None, None, 1]),
        data=st.data(),
    )
    def admit(self, prefix, tail, salt, lora, data):
        from vllm.lora.request import LoRARequest

        rid, tokens = next(self.ids), list(prefix) + tail
        adapter = LoRARequest(f"lora{lora}", lora, "/none") if lora else None
        req = vllm_request(self.vllm, rid, tokens, B, cache_salt=salt, lora_request=adapter)
        blocks, hit, _ = self.theirs.get_computed_blocks(req)
        mine = self.ours.get_computed_blocks(tokens, cache_salt=salt, lora_id=lora)
        assert hit == mine.num_tokens, f"hit tokens: vLLM {hit}, pagedsim {mine.num_tokens}"
        hits = tuple([P(b) for b in group] for group in blocks.get_block_ids())
        assert hits == self.per_group(mine.blocks), "hit blocks"
        n = data.draw(st.integers(1, len(tokens) - hit), label="num_new_tokens")
        ahead = data.draw(st.integers(0, 3), label="num_lookahead_tokens")
        got = self.theirs.allocate_slots(
            req,
            n,
            num_new_computed_tokens=hit,
            new_computed_blocks=blocks,
            num_lookahead_tokens=ahead,
        )
        new = self.ours.allocate_slots(
            rid, n, ahead, new_token_ids=tokens, computed=mine, cache_salt=salt, lora_id=lora
        )
        self._same_new(got, new, f"admit {rid}")
        if new is None:
            return rid  # never admitted: later rules skip it
        req_state = Req(req, tokens)
        req_state.computed = req.num_computed_tokens = hit + n
        self.live[rid] = req_state
        self._slide(req_state)
        return rid

    def _slide(self, r):
        """vLLM's scheduler frees what a window no longer reads once a step's tokens are
        computed (remove_skipped_blocks); pagedsim does so as the step ends."""
        self.theirs.remove_skipped_blocks(r.theirs.request_id, r.computed)

    def _same_new(self, got, new, what):
        assert (got is None) == (new is None), f"{what}: refused by vLLM? {got is None}"
        if got is not None:
            theirs = tuple([P(b) for b in group] for group in got.get_block_ids())
            assert theirs == self.per_group(new), f"{what}: new block ids"

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def step(self, data):
        """The next chunk of a prompt, or a decode step with a freshly sampled token."""
        rid = data.draw(st.sampled_from(sorted(self.live)), label="request")
        r = self.live[rid]
        if r.computed < len(r.tokens):
            n = data.draw(st.integers(1, len(r.tokens) - r.computed), label="chunk")
        elif len(r.tokens) < MAX_LEN:
            n, token = 1, data.draw(st.integers(1, 3), label="sampled")
            r.theirs.append_output_token_ids(token)
            r.tokens.append(token)
            r.pending.append(token)
        else:
            return
        ahead = data.draw(st.integers(0, 3), label="num_lookahead_tokens")
        got = self.theirs.allocate_slots(r.theirs, n, num_lookahead_tokens=ahead)
        new = self.ours.allocate_slots(rid, n, ahead, new_token_ids=r.pending)
        self._same_new(got, new, f"step {rid}")
        if new is not None:
            r.pending = []
            r.computed += n
            r.theirs.num_computed_tokens += n
            self._slide(r)

    @rule(rid=consumes(reqs))
    def free(self, rid):
        r = self.live.pop(rid, None)
        if r is not None:
            self.theirs.free(r.theirs)
            self.ours.free_sequence(rid)

    @rule(data=st.data())
    def evict_blocks(self, data):
        ids = sorted(data.draw(st.sets(st.integers(1, N), max_size=3), label="evict"))
        self.theirs.evict_blocks(ids)
        self.ours.pool.evict_blocks([P(v) for v in ids])

    @rule()
    def reset_prefix_cache(self):
        ok = self.theirs.reset_prefix_cache()
        assert ok == self.ours.reset_prefix_cache(), f"reset_prefix_cache: vLLM {ok}"

    @invariant()
    def agree(self):
        for rid in self.live:
            theirs = tuple([P(b) for b in group] for group in self.theirs.get_block_ids(rid))
            assert theirs == self.our_tables(rid), f"block tables of {rid}"
        pool = self.theirs.block_pool
        assert vllm_free_list(pool) == self.ours.pool.free_list(), "free queue order"
        assert [b.ref_cnt for b in pool.blocks[1:]] == self.ours.pool.ref_counts(), "ref counts"
        compare_events(self.theirs.take_events(), self.ours.take_events(), self.hashes)
        self.ours.check_invariants()
        agreed(self)


class WindowOracle(ManagerOracle):
    """SlidingWindowPrefixCachingManager against v1's SlidingWindowManager (one group)."""

    kinds = ("window",)

    def make_ours(self):
        return SlidingWindowPrefixCachingManager(
            N, B, sliding_window=W, enable_kv_cache_events=True, trace=False
        )


class HybridOracle(ManagerOracle):
    """HybridManager against v1's hybrid coordinator: a full and a window group, one pool."""

    kinds = ("full", "window")

    def make_ours(self):
        return HybridManager(N, B, sliding_window=W, enable_kv_cache_events=True, trace=False)

    def our_tables(self, rid):
        return tuple(t.blocks for t in self.ours.block_tables(rid))

    @staticmethod
    def per_group(got):
        return tuple(list(group) for group in got)


def test_prefix_caching_manager_follows_vllm(vllm):
    run_state_machine_as_test(lambda: ManagerOracle(vllm), settings=STEPS)


def test_sliding_window_manager_follows_vllm(vllm):
    run_state_machine_as_test(lambda: WindowOracle(vllm), settings=STEPS)


def test_hybrid_manager_follows_vllm(vllm):
    run_state_machine_as_test(lambda: HybridOracle(vllm), settings=STEPS)
