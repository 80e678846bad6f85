"""Hypothesis state machines drive BlockPool and KVCacheManager with random operations.

The pool machine drives a BlockPool and a LinkedBlockPool side by side: their free lists
(ids on stacks, a linked list) must stay the same list, in the same order.

After every step `check_invariants()` runs, and the manager machine also keeps a
shadow "physical memory": every appended token writes a unique value into the slot
the manager returned, copy-on-write pairs are applied as the copy kernel would, and
every sequence must read back exactly its own tokens through its slot mapping.
In CI (derandomised) the two machines take about 14,000 steps in all (measured by
counting invariant checks; the ceiling is 150 x 50 + 150 x 60).

The manager is also driven through `pagedsim.testing` -- the kit outside users point at
their own managers -- with its stricter options on: exact block ids for both free
orders, bad ids, and `check_invariants()` after every step. The kit keeps its own
shadow memory and compares with a second KVCacheManager as the model, so this checks
the kit and the manager against each other (`steps_run` counts its steps).
"""

import numpy as np
import pytest
from helpers import pool_state
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from pagedsim import BlockError, BlockPool, KVCacheManager, OutOfBlocks
from pagedsim.linked_pool import LinkedBlockPool
from pagedsim.testing import NonConformance, check_manager, manager_machine


class PoolMachine(RuleBasedStateMachine):
    """A BlockPool (free ids on two stacks) and a LinkedBlockPool (v1's linked queue) take
    the same calls: after each, both free lists must be the same list, in the same order."""

    held = Bundle("held")  # one entry per reference we own

    @initialize(n=st.integers(1, 12), order=st.sampled_from(["lifo", "fifo"]))
    def make(self, n, order):
        self.pool = BlockPool(n, block_size=4, free_order=order)
        self.linked = LinkedBlockPool(n, block_size=4, free_order=order)
        self.refs = {}  # block -> references the test holds

    @rule(target=held)
    def allocate(self):
        expected = self.pool.free_list()[:1]
        try:
            b = self.pool.allocate()
        except OutOfBlocks:
            assert not expected
            with pytest.raises(OutOfBlocks):
                self.linked.allocate()
            return multiple()  # nothing new to hold
        assert [b] == expected, "allocate() must hand out the head of the free list"
        assert self.linked.allocate() == b
        self.refs[b] = 1
        return b

    @rule(target=held, k=st.integers(0, 5))
    def allocate_many(self, k):
        expected = self.pool.free_list()[:k]
        if len(expected) < k:
            for pool in (self.pool, self.linked):
                before = pool_state(pool)
                with pytest.raises(OutOfBlocks):
                    pool.allocate_many(k)
                assert pool_state(pool) == before, "a refused allocate_many changed the pool"
            return multiple()
        got = self.pool.allocate_many(k)
        assert got == expected, "allocate_many(k) must hand out the first k, head first"
        assert self.linked.allocate_many(k) == got
        self.refs.update(dict.fromkeys(got, 1))
        return multiple(*got)

    @rule(target=held, data=st.data())
    def take(self, data):
        free = self.pool.free_list()
        if not free:
            return multiple()
        b = data.draw(st.sampled_from(free))
        assert self.pool.take(b) == b == self.linked.take(b)
        self.refs[b] = 1
        return b

    @rule(target=held, b=held)
    def share(self, b):
        if self.refs.get(b):
            self.refs[b] += 1
            assert self.pool.incref(b) == self.refs[b] == self.linked.incref(b)
        return b

    @rule(b=consumes(held))
    def free(self, b):
        if not self.refs.get(b):
            for pool in (self.pool, self.linked):
                with pytest.raises(BlockError):
                    pool.free(b)
            return
        self.refs[b] -= 1
        assert self.pool.free(b) == self.refs[b] == self.linked.free(b)
        if self.refs[b] == 0:
            head_or_tail = 0 if self.pool.free_order == "lifo" else -1
            assert self.pool.free_list()[head_or_tail] == b

    @rule(blocks=st.lists(consumes(held), max_size=4))
    def release(self, blocks):
        listed = {b: blocks.count(b) for b in blocks}
        if any(self.refs.get(b, 0) < k for b, k in listed.items()):
            for pool in (self.pool, self.linked):
                before = pool_state(pool)
                with pytest.raises(BlockError):
                    pool.release(blocks)
                assert pool_state(pool) == before, "a refused release changed the pool"
            return
        for pool in (self.pool, self.linked):
            pool.release(blocks)
        for b, k in listed.items():
            self.refs[b] -= k

    @invariant()
    def consistent(self):
        if hasattr(self, "pool"):
            self.pool.check_invariants()
            self.linked.check_invariants()
            assert self.pool.free_list() == self.linked.free_list(), "the two lists differ"
            assert self.pool.ref_counts() == self.linked.ref_counts()
            assert self.pool.num_shared == self.linked.num_shared
            for b, count in self.refs.items():
                assert self.pool.ref_count(b) == count


PoolMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=50)
test_block_pool_state_machine = pytest.mark.slow(PoolMachine.TestCase)


class ManagerMachine(RuleBasedStateMachine):
    pool_factory = BlockPool  # replaced by a buggy pool in the mutation test below

    @initialize(
        num_gpu_blocks=st.integers(1, 24),
        block_size=st.sampled_from([1, 2, 4, 8]),
        order=st.sampled_from(["lifo", "fifo"]),
        trace=st.booleans(),
    )
    def make(self, num_gpu_blocks, block_size, order, trace):
        self.m = KVCacheManager(num_gpu_blocks, block_size, free_order=order, trace=trace)
        self.m.pool = self.pool_factory(num_gpu_blocks, block_size, order)
        self.memory = np.full(num_gpu_blocks * block_size, -1, dtype=np.int64)  # shadow KV cache
        self.tokens = {}  # seq id -> the values it wrote, in order
        self.next_id = 0
        self.next_value = 0

    # -- helpers --
    def _state(self):
        s = self.m.snapshot()
        return (s.free_list, s.ref_counts, s.sequences, s.pending_copies)

    def _apply_copies(self):
        bs = self.m.block_size
        for src, dst in self.m.drain_copies():
            self.memory[dst * bs : (dst + 1) * bs] = self.memory[src * bs : (src + 1) * bs]

    def _write(self, seq, slots):
        self._apply_copies()  # the copy kernel runs before the new tokens are written
        values = list(range(self.next_value, self.next_value + len(slots)))
        self.next_value += len(slots)
        self.memory[np.asarray(slots, dtype=np.int64)] = values
        self.tokens[seq] = self.tokens[seq] + values

    def _refused(self, op):
        before = self._state()
        with pytest.raises(OutOfBlocks):
            op()
        assert self._state() == before, "a refused operation changed the state"

    # -- rules --
    @rule(n=st.integers(0, 20))
    def add(self, n):
        seq = self.next_id
        if not self.m.can_allocate(n):
            return self._refused(lambda: self.m.add_sequence(seq, n))
        self.next_id += 1
        self.tokens[seq] = []
        self._write(seq, self.m.add_sequence(seq, n))

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), n=st.integers(0, 9))
    def append(self, data, n):
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        try:
            slots = self.m.append_tokens(seq, n)
        except OutOfBlocks:
            return self._refused(lambda: self.m.append_tokens(seq, n))
        self._write(seq, slots)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def decode(self, data):
        seqs = data.draw(st.lists(st.sampled_from(sorted(self.tokens)), min_size=1, max_size=4))
        try:
            slots = self.m.decode_step(seqs)
        except OutOfBlocks:
            return self._refused(lambda: self.m.decode_step(seqs))
        self._apply_copies()
        for seq, slot in zip(seqs, slots, strict=True):
            self.memory[slot] = self.next_value
            self.tokens[seq] = self.tokens[seq] + [self.next_value]
            self.next_value += 1

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.tokens)))
        child = self.next_id
        self.next_id += 1
        self.m.fork(parent, child)
        self.tokens[child] = list(self.tokens[parent])

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        self.m.free_sequence(seq)
        del self.tokens[seq]

    # -- invariants --
    @invariant()
    def invariants_hold(self):
        if hasattr(self, "m"):
            self.m.check_invariants()

    @invariant()
    def every_sequence_reads_back_its_own_tokens(self):
        if not hasattr(self, "m"):
            return
        self._apply_copies()
        for seq, values in self.tokens.items():
            assert self.m.num_tokens(seq) == len(values)
            got = self.memory[self.m.slot_mapping(seq)].tolist()
            assert got == values, f"seq {seq} reads {got}, wrote {values}"

    def teardown(self):
        if not hasattr(self, "m"):
            return
        for seq in list(self.tokens):
            self.m.free_sequence(seq)
        self.m.check_invariants()
        assert self.m.pool.num_free_blocks == self.m.num_gpu_blocks, (
            "blocks leaked after freeing all"
        )
        assert sum(self.m.pool.ref_counts()) == 0


ManagerMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=60)
test_kv_cache_manager_state_machine = pytest.mark.slow(ManagerMachine.TestCase)


class PoolThatNeverDecrements(BlockPool):
    """The classic bug: free() forgets to drop the count, so blocks never come back."""

    __slots__ = ()

    def free(self, block_id):
        return self.ref_count(block_id)

    def release(self, blocks):
        pass


def test_the_state_machine_catches_a_count_that_is_never_decremented():
    class Buggy(ManagerMachine):
        pool_factory = PoolThatNeverDecrements

    with pytest.raises(AssertionError, match="ref counts sum to|leaked|reads"):
        run_state_machine_as_test(
            Buggy,
            settings=settings(
                max_examples=200,
                stateful_step_count=30,
                database=None,
                report_multiple_bugs=False,
                phases=[p for p in Phase if p != Phase.explain],
            ),
        )  # explaining costs ~90% here


def kit_factory(order, trace):
    def factory(num_gpu_blocks, block_size):
        return KVCacheManager(num_gpu_blocks, block_size, free_order=order, trace=trace)

    return factory


@pytest.mark.parametrize("order, trace", [("lifo", True), ("fifo", False)])
def test_kv_cache_manager_conforms_through_the_testing_kit(order, trace):
    machine = manager_machine(
        kit_factory(order, trace),
        num_gpu_blocks=st.integers(1, 24),
        block_size=st.sampled_from([1, 2, 4, 8]),
        check_free_order=order,
        invalid_ids=True,
        extra_check=KVCacheManager.check_invariants,
    )
    run_state_machine_as_test(machine, settings=settings(max_examples=60, stateful_step_count=30))
    assert machine.steps_run > 60 * 5, "the kit ran (almost) nothing"


def test_the_testing_kit_catches_a_count_that_is_never_decremented():
    def factory(num_gpu_blocks, block_size):
        m = KVCacheManager(num_gpu_blocks, block_size, trace=False)
        m.pool = PoolThatNeverDecrements(num_gpu_blocks, block_size)
        return m

    with pytest.raises(NonConformance, match=r"m.free_sequence\(0\)  +# <- fails here"):
        check_manager(factory, examples=100, steps=20)
