"""The v1 API refuses what it must, and a refusal changes nothing (issue 33's v1 API rows).

Two state machines, each with `check_invariants()` after every step:

* a prefix cache whose `hash_fn` raises on a call Hypothesis picks: whichever call it
  hits (admission in either shape, allocate_slots on a running sequence, appended or
  decoded token ids, a swap-in's prefix state), the manager is left exactly as it was:
  the sequence is not admitted and holds no blocks, no hash is cached, no counter moves;
* a `HybridManager` driven with good and bad calls side by side: two ids for one token,
  more new tokens than a sequence knows, a second admission of a running sequence.
  `PrefixCachingManager` refuses each of them with a ValueError / SequenceError, and so
  must the hybrid, before any change (never None, "preempt and retry", for an argument
  that can never fit).
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from pagedsim.errors import OutOfBlocks, SequenceError
from pagedsim.policies import PrefixCachingManager, SlidingWindowPrefixCachingManager
from pagedsim.policies.cache_stats import chained_hash
from pagedsim.policies.hybrid import HybridManager
from tests.helpers import manager_state

TOKENS = st.lists(st.integers(0, 2), min_size=1, max_size=12)  # small vocabulary: repeats


class HashFailed(RuntimeError):
    """What the flaky hash_fn raises."""


class FlakyHash:
    """chained_hash, except that call number `fail_at` (counted from arming) raises."""

    def __init__(self):
        self.calls, self.fail_at = 0, None

    def arm(self, fail_at):
        self.calls, self.fail_at = 0, fail_at

    def __call__(self, parent_hash, tokens):
        self.calls += 1
        if self.calls == self.fail_at:
            raise HashFailed(f"hash_fn fails on call {self.calls}")
        return chained_hash(parent_hash, tokens)


def full_state(m) -> tuple:
    """manager_state plus what the prefix cache adds: its hash index, counters, known ids."""
    return (
        manager_state(m),
        sorted(m.pool._key.items()),
        m.stats,
        {s: None if k is None else list(k) for s, k in m._known.items()},
        dict(m._chain),
    )


class RaisingHashMachine(RuleBasedStateMachine):
    @initialize(
        num_gpu_blocks=st.integers(2, 12),
        bs=st.sampled_from([1, 2, 3]),
        window=st.none() | st.integers(1, 6),
    )
    def make(self, num_gpu_blocks, bs, window):
        self.hash = FlakyHash()
        if window is None:
            self.m = PrefixCachingManager(num_gpu_blocks, bs, hash_fn=self.hash, trace=False)
        else:
            self.m = SlidingWindowPrefixCachingManager(
                num_gpu_blocks, bs, sliding_window=window, hash_fn=self.hash, trace=False
            )
        self.next_id = 0
        self.swapped = {}  # seq -> (labels, num_tokens, prefix state), freed for a swap-in

    def attempt(self, fail_at, call):
        """Make the call with hash_fn failing on call `fail_at`; a failure changes nothing."""
        before = full_state(self.m)
        self.hash.arm(fail_at)
        try:
            return call()
        except HashFailed:
            assert full_state(self.m) == before, "a raising hash_fn left the manager changed"
        except OutOfBlocks:
            pass  # a refused v0 admission is a recorded step; nothing else changed
        finally:
            self.hash.arm(None)

    def pick(self, data):
        seqs = self.m.seq_ids()
        return data.draw(st.sampled_from(seqs)) if seqs else None

    @rule(tokens=TOKENS, fail_at=st.integers(1, 6), v1=st.booleans())
    def admit(self, tokens, fail_at, v1):
        seq, self.next_id = self.next_id, self.next_id + 1
        if v1:
            got = self.attempt(
                fail_at, lambda: self.m.allocate_slots(seq, len(tokens), new_token_ids=tokens)
            )
            if got is None:
                assert seq not in self.m
        else:
            self.attempt(fail_at, lambda: self.m.add_sequence(seq, len(tokens), tokens))

    @rule(
        data=st.data(),
        fail_at=st.integers(1, 4),
        how=st.sampled_from(["slots", "append", "decode"]),
    )
    def grow(self, data, fail_at, how):
        seq = self.pick(data)
        if seq is None:
            return
        new = data.draw(st.lists(st.integers(0, 2), min_size=1, max_size=5))
        if how == "slots":
            if self.m._known.get(seq) is None:
                new = None
            self.attempt(
                fail_at, lambda: self.m.allocate_slots(seq, 0 if new is None else len(new), 0, new)
            )
        elif how == "append":
            self.attempt(fail_at, lambda: self.m.append_tokens(seq, len(new), token_ids=new))
        else:
            self.attempt(fail_at, lambda: self.m.decode_step([seq] * len(new), token_ids=new))

    @rule(data=st.data())
    def swap_out(self, data):
        seq = self.pick(data)
        if seq is None or self.m.drops_blocks:
            return
        table = self.m.block_table(seq)
        state = self.m.prefix_state(seq)
        self.m.free_sequence(seq)
        self.swapped[seq] = ((tuple(table.blocks), table.num_tokens), state)

    @rule(data=st.data(), fail_at=st.integers(1, 6))
    def swap_in(self, data, fail_at):
        if not self.swapped:
            return
        seq = data.draw(st.sampled_from(sorted(self.swapped)))
        entry, state = self.swapped.pop(seq)
        self.attempt(fail_at, lambda: self.m.restore_sequences({seq: entry}, {seq: state}))

    @rule(data=st.data())
    def free(self, data):
        seq = self.pick(data)
        if seq is not None:
            self.m.free_sequence(seq)

    @invariant()
    def invariants_hold(self):
        self.m.check_invariants()


RaisingHashMachine.TestCase.settings = settings(
    max_examples=80, stateful_step_count=30, deadline=None
)
test_a_raising_hash_fn_leaves_the_manager_unchanged = RaisingHashMachine.TestCase


def test_a_hash_fn_raising_on_its_third_call_admits_nothing():
    hash_fn = FlakyHash()
    m = PrefixCachingManager(8, 2, hash_fn=hash_fn, trace=False)
    before = full_state(m)
    hash_fn.arm(3)
    with pytest.raises(HashFailed):
        m.allocate_slots("A", 7, new_token_ids=list(range(7)))
    assert "A" not in m and m.num_free_blocks == 8 and full_state(m) == before


class HybridRefusalMachine(RuleBasedStateMachine):
    """Good calls grow and free sequences; each bad call must raise and change nothing."""

    @initialize(
        num_gpu_blocks=st.integers(2, 12), bs=st.sampled_from([1, 2, 4]), window=st.integers(1, 8)
    )
    def make(self, num_gpu_blocks, bs, window):
        self.m = HybridManager(num_gpu_blocks, bs, sliding_window=window, trace=False)
        self.next_id = 0

    def refused(self, error, call):
        before = (self.m.snapshot(), self.m.step, self.m.stats)
        with pytest.raises(error):
            call()
        assert (self.m.snapshot(), self.m.step, self.m.stats) == before

    def pick(self, data):
        seqs = self.m.seq_ids()
        return data.draw(st.sampled_from(seqs)) if seqs else None

    @rule(tokens=TOKENS)
    def admit(self, tokens):
        seq, self.next_id = self.next_id, self.next_id + 1
        hit = self.m.get_computed_blocks(tokens)
        self.m.allocate_slots(seq, len(tokens) - hit.num_tokens, new_token_ids=tokens, computed=hit)

    @rule(data=st.data(), n=st.integers(0, 3))
    def append(self, data, n):
        seq = self.pick(data)
        if seq is not None:
            try:
                self.m.append_tokens(seq, n, token_ids=list(range(n)))
            except OutOfBlocks:
                pass

    @rule(data=st.data(), n=st.integers(0, 3), extra=st.integers(1, 3))
    def append_with_the_wrong_number_of_ids(self, data, n, extra):
        seq = self.pick(data)
        if seq is not None:
            ids = data.draw(
                st.sampled_from(
                    [
                        list(range(n + extra)),
                        list(range(n + extra))[1:] if n + extra > 1 and extra > 1 else [],
                    ]
                )
            )
            if len(ids) != n:
                self.refused(ValueError, lambda: self.m.append_tokens(seq, n, token_ids=ids))

    @rule(data=st.data(), extra=st.integers(1, 100), ahead=st.integers(0, 3))
    def allocate_more_tokens_than_known(self, data, extra, ahead):
        seq = self.pick(data)
        if seq is None or self.m.full._known.get(seq) is None:
            return
        known = len(self.m.full._known[seq])
        n = known - self.m.num_computed_tokens(seq) + extra
        self.refused(ValueError, lambda: self.m.allocate_slots(seq, n, ahead))

    @rule(data=st.data(), tokens=TOKENS)
    def admit_a_running_sequence_again(self, data, tokens):
        seq = self.pick(data)
        if seq is not None:
            self.refused(SequenceError, lambda: self.m.add_sequence(seq, len(tokens), tokens))

    @rule(data=st.data())
    def free(self, data):
        seq = self.pick(data)
        if seq is not None:
            self.m.free_sequence(seq)

    @invariant()
    def invariants_hold(self):
        self.m.check_invariants()


HybridRefusalMachine.TestCase.settings = settings(
    max_examples=80, stateful_step_count=30, deadline=None
)
test_the_hybrid_manager_refuses_what_prefix_caching_refuses = HybridRefusalMachine.TestCase


def test_the_hybrid_manager_refuses_the_three_reported_calls():
    m = HybridManager(4, 4, sliding_window=8, trace=False)
    m.add_sequence("A", 6)
    with pytest.raises(ValueError, match="token_ids has 2 entries for 1 token"):
        m.append_tokens("A", 1, token_ids=[1, 2])
    with pytest.raises(ValueError, match="6 computed \\+ 60 new tokens exceed the 6 known"):
        m.allocate_slots("A", 60)
    with pytest.raises(SequenceError, match="sequence 'A' already exists"):
        m.add_sequence("A", 3)
    m.check_invariants()
    assert m.num_tokens("A") == 6
