"""The manager half of pagedsim.testing: correct managers pass, classic bugs are caught
with a short, readable script, and the strategies draw what they promise."""

import re

import pytest
from deque_allocator import DequeBlockManager
from hypothesis import given, settings
from kit_buggy_managers import BUGS, HalfwayAllocation, SkipsCopyOnWrite
from vllm_names import make_adapter

from pagedsim import KVCacheManager, SequenceError
from pagedsim.testing import (
    NonConformance,
    Op,
    check_manager,
    manager_machine,
    operations,
    requests,
)

FAST = dict(examples=30, steps=20)  # pools of 1..32 blocks of 1, 2, 4 or 8 tokens
HUNT = dict(FAST, examples=100)  # what `pagedsim conform` runs; a bug stops the search early


def script_of(message: str) -> list[str]:
    """The pasted calls of a counterexample, without the marker comment."""
    body = message.split("your manager):\n", 1)[1]
    return [line.split("  #")[0].strip() for line in body.splitlines()]


@pytest.mark.parametrize("factory", [DequeBlockManager, make_adapter], ids=["deque", "vllm_names"])
def test_the_two_example_managers_conform(factory):
    summary = check_manager(factory, **FAST)
    assert summary.examples >= 30 and summary.steps > 100


@pytest.mark.parametrize("bug", list(BUGS), ids=list(BUGS.values()))
def test_each_classic_bug_is_caught_with_a_short_script_that_replays_the_failure(bug):
    with pytest.raises(NonConformance) as caught:
        check_manager(bug, **HUNT)
    calls = script_of(str(caught.value))
    assert re.fullmatch(r"m = factory\(\d+, \d+\)", calls[0])
    assert 2 <= len(calls) <= 5, calls
    # the script is real Python: on the buggy and on the correct manager alike, every
    # call before the failing one runs (only the failing call may differ between them)
    for factory in (bug, DequeBlockManager):
        scope = {"factory": factory}
        for line in calls[:-1]:
            exec(line, scope)


def test_a_refusal_that_keeps_half_its_blocks_is_reported_as_all_or_nothing_broken():
    with pytest.raises(NonConformance, match=r"all-or-nothing broken\): num_free_blocks went"):
        check_manager(HalfwayAllocation, **HUNT)


def test_the_model_conforms_to_its_own_contract_with_bad_ids_and_exact_free_order():
    for order in ("lifo", "fifo"):
        check_manager(
            lambda nb, bs, o=order: KVCacheManager(nb, bs, free_order=o, trace=False),
            check_free_order=order,
            invalid_ids=True,
            extra_check=KVCacheManager.check_invariants,
            **FAST,
        )


def test_without_drain_copies_a_moved_block_counts_as_copied_and_skipped_copies_still_fail():
    class Silent(DequeBlockManager):
        drain_copies = property()  # hasattr() is False: the kit infers the copies

    class SilentAndSkipping(SkipsCopyOnWrite):
        drain_copies = property()

    check_manager(Silent, **FAST)
    with pytest.raises(NonConformance, match="copy-on-write"):
        check_manager(SilentAndSkipping, **HUNT)


def test_check_free_order_tells_a_fifo_manager_from_a_lifo_one():
    check_manager(DequeBlockManager, check_free_order="fifo", **FAST)
    with pytest.raises(NonConformance, match=r"with lifo free order the model gives"):
        check_manager(DequeBlockManager, check_free_order="lifo", **HUNT)


def test_a_manager_that_accepts_an_unknown_id_fails_the_bad_id_rule():
    class Lenient(DequeBlockManager):
        def free_sequence(self, seq_id):
            if seq_id in self.tables:
                super().free_sequence(seq_id)

    check_manager(Lenient, **FAST)  # bad ids are only tried when asked for
    with pytest.raises(NonConformance, match=r"free_sequence\(\d+\) returned normally"):
        check_manager(Lenient, invalid_ids=True, **HUNT)


def test_a_missing_contract_name_is_named_in_the_message():
    class NoTable(DequeBlockManager):
        block_table = property()  # hasattr() is False: reading it raises AttributeError

    with pytest.raises(NonConformance, match="has no `block_table`"):
        check_manager(NoTable, examples=1)


def test_manager_machine_rejects_an_unknown_free_order():
    with pytest.raises(ValueError, match="check_free_order"):
        manager_machine(DequeBlockManager, check_free_order="random")


@settings(max_examples=40)
@given(ops=operations(max_ops=12, max_id=3))
def test_the_model_rejects_exactly_the_bad_ids_that_operations_draws(ops):
    m, live = KVCacheManager(64, 4, trace=False), set()
    for op in ops:
        seq = op.args[0]
        if op.name == "add_sequence":
            bad = seq in live
        else:
            bad = seq not in live or (op.name == "fork" and op.args[1] in live)
        before = m.snapshot()
        if bad:
            with pytest.raises(SequenceError):
                op.apply(m)
            after = m.snapshot()
            assert (after.free_list, after.sequences) == (before.free_list, before.sequences)
            continue
        op.apply(m)
        if op.name == "add_sequence":
            live.add(seq)
        elif op.name == "fork":
            live.add(op.args[1])
        elif op.name == "free_sequence":
            live.discard(seq)
        assert sorted(m.seq_ids()) == sorted(live), str(op)


def test_an_op_prints_as_the_python_call_it_makes():
    m = DequeBlockManager(4, 2)
    for line in ("m.add_sequence(0, 3)", "m.fork(0, 1)", "m.append_tokens(1, 2)"):
        name, args = line[2:].split("(")
        op = Op(name, tuple(int(a) for a in args.rstrip(")").split(", ")))
        assert str(op) == line
        op.apply(m)
    assert m.block_table(1) == [0, 2, 3] and m.drain_copies() == [(1, 2)]  # copy-on-write


@settings(max_examples=40)
@given(reqs=requests(max_requests=4, max_prompt=24, num_prefixes=1))
def test_requests_share_one_prefix_and_use_samples_or_beams_not_both(reqs):
    for r in reqs:
        assert len(r.prompt) == r.request.prompt_len >= 1
        assert r.request.n == 1 or r.request.beam_width == 1
    prefixes = {r.prompt[: r.shared_prefix] for r in reqs if r.shared_prefix}
    assert len(prefixes) <= 1, "with one prefix, every prefixed prompt starts the same way"
