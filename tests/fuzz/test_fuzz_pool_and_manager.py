"""Fuzz: every public entry point of the pool and the managers refuses bad arguments with
the right kind of error, and leaves every observable thing exactly as it was."""

import copy

import pytest
from helpers import manager_state, pool_state
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pagedsim import NULL_BLOCK, BlockError, BlockPool, KVCacheManager, OutOfBlocks
from pagedsim.errors import MAX_BLOCK_SIZE, MAX_NUM_GPU_BLOCKS
from pagedsim.policies import SlidingWindowManager

from .kit import WRONG_TYPES, bad_counts, bad_seq_ids_arg, bad_token_ids, busy_managers, is_clean

FUZZ = settings(max_examples=40, report_multiple_bugs=False)


def refused(state_of, obj, call, error):
    before = state_of(obj)
    with pytest.raises(error) as info:
        call()
    assert is_clean(info.value), repr(info.value)
    assert state_of(obj) == before, "a refused call changed the state"
    obj.check_invariants()


@FUZZ
@given(
    bad=st.one_of(bad_counts(MAX_NUM_GPU_BLOCKS), st.just((0, ValueError))),
    which=st.sampled_from(["num_gpu_blocks", "block_size"]),
)
def test_a_pool_or_manager_of_a_bad_size_is_never_built(bad, which):
    value, error = bad
    if (
        which == "block_size"
        and isinstance(value, int)
        and not isinstance(value, bool)
        and MAX_NUM_GPU_BLOCKS < value <= MAX_BLOCK_SIZE
    ):
        return
    args = {"num_gpu_blocks": 4, "block_size": 2, which: value}
    for make in (
        BlockPool,
        KVCacheManager,
        lambda **kw: SlidingWindowManager(**kw, sliding_window=3),
    ):
        with pytest.raises(error):
            make(**args)


@FUZZ
@given(n=st.integers(1, 8), taken=st.integers(0, 8), data=st.data())
def test_every_pool_call_refuses_bad_block_ids_and_counts(n, taken, data):
    pool = BlockPool(n, 2, data.draw(st.sampled_from(["lifo", "fifo"])))
    held = pool.allocate_many(min(taken, n))
    value, error = data.draw(
        st.one_of(
            WRONG_TYPES.map(lambda v: (v, TypeError)),
            st.integers(n, 2**70).map(lambda v: (v, BlockError)),
            st.integers(-(2**70), -1).map(lambda v: (v, BlockError)),
        )
    )
    for call in (pool.free, pool.incref, pool.take, pool.ref_count, pool.is_shared):
        refused(pool_state, pool, lambda call=call: call(value), error)
    refused(pool_state, pool, lambda: pool.release(held + [value]), error)
    count, error = data.draw(bad_counts())
    refused(pool_state, pool, lambda: pool.allocate_many(count), error)
    refused(pool_state, pool, lambda: pool.allocate_many(pool.num_free_blocks + 1), OutOfBlocks)
    if held:  # a block listed more often than it is held: nothing is released
        refused(pool_state, pool, lambda: pool.release(held + held[:1]), BlockError)
    for bad_list in ("01", 3, None):
        refused(pool_state, pool, lambda bad_list=bad_list: pool.release(bad_list), TypeError)


@FUZZ
@given(m=st.one_of(busy_managers(), busy_managers(window=True)), data=st.data())
def test_every_manager_call_refuses_bad_arguments_and_changes_nothing(m, data):
    seqs = m.seq_ids()
    seq = data.draw(st.sampled_from(seqs))
    count, count_error = data.draw(bad_counts())
    calls = [
        (lambda: m.add_sequence("new", count), count_error),
        (lambda: m.append_tokens(seq, count), count_error),
        (lambda: m.can_allocate(count), count_error),
        (lambda: m.peak_blocks(count, 4), count_error),
        (lambda: m.add_sequence(["unhashable"], 1), TypeError),
        (lambda: m.add_sequence(seq, 1), ValueError),  # exists
        (lambda: m.append_tokens("nope", 1), ValueError),
        (lambda: m.fork(seq, seq), ValueError),
        (lambda: m.fork("nope", "child"), ValueError),
        (lambda: m.fork(seq, {}), TypeError),
        (lambda: m.free_sequence("nope"), ValueError),
        (lambda: m.block_table([]), ValueError),
        (lambda: m.decode_step(seqs, with_slots="yes"), TypeError),
    ]
    ids, ids_error = data.draw(bad_seq_ids_arg())
    calls += [
        (lambda: m.decode_step(ids), ids_error),
        (lambda: m.blocks_for_decode(ids), ids_error),
    ]
    n = data.draw(st.integers(1, 3))
    tokens, error = data.draw(bad_token_ids(n))
    calls += [(lambda: m.append_tokens(seq, n, token_ids=tokens), error)]
    batch_tokens, batch_error = data.draw(bad_token_ids(len(seqs)))
    calls += [(lambda: m.decode_step(seqs, token_ids=batch_tokens), batch_error)]
    for call, error in calls:
        refused(manager_state, m, call, error)


@FUZZ
@given(m=busy_managers(), data=st.data())
def test_restore_refuses_bad_tables_whole(m, data):
    bs, free = m.block_size, m.num_free_blocks
    labels = list(range(100, 100 + data.draw(st.integers(1, 3))))
    good = {"r1": (labels, len(labels) * bs)}
    bad, error = data.draw(
        st.sampled_from(
            [
                ({"r2": ([7, 7], 2 * bs)}, BlockError),  # one table naming a block twice
                ({"r2": ([NULL_BLOCK, 7], 2 * bs)}, BlockError),  # no window: no dropped blocks
                ({"r2": ([-5], bs)}, ValueError),
                ({"r2": ([1.5], bs)}, TypeError),
                ({"r2": ("ab", 2 * bs)}, TypeError),
                ({"r2": ([7], 5 * bs)}, ValueError),  # too few labels
                ({"r2": ([7], -1)}, ValueError),
                ({"r2": [7]}, TypeError),
                ({m.seq_ids()[0]: ([7], bs)}, ValueError),  # already live
            ]
        )
    )
    tables = {**good, **bad}
    refused(manager_state, m, lambda: m.restore_sequences(tables), error)
    refused(manager_state, m, lambda: m.restore_sequences([("r", ([1], 1))]), TypeError)
    if len(labels) <= free:
        placed = m.restore_sequences(good)
        assert sorted(placed) == labels
        m.check_invariants()


@FUZZ
@given(m=st.one_of(busy_managers(), busy_managers(window=True)), data=st.data())
def test_decode_step_reads_a_generator_once_and_equals_a_list_with_tracing_on_or_off(m, data):
    seqs = data.draw(st.lists(st.sampled_from(m.seq_ids()), min_size=1, max_size=4))
    twin = copy.deepcopy(m)
    try:
        got = m.decode_step(s for s in seqs)
    except OutOfBlocks:
        with pytest.raises(OutOfBlocks):
            twin.decode_step(list(seqs))
        return
    assert got == twin.decode_step(tuple(seqs))
    assert manager_state(m)[:4] == manager_state(twin)[:4]
    m.check_invariants()


@FUZZ
@given(m=busy_managers(), data=st.data())
def test_a_reclaimer_runs_before_out_of_blocks_and_the_request_is_planned_again(m, data):
    victims = list(m.seq_ids())
    calls = []

    def reclaim(manager, short, protect):  # like the scheduler: preempt until enough is free
        calls.append((short, set(protect)))
        start = manager.num_free_blocks
        for s in [s for s in victims if s not in protect and s in manager]:
            if manager.num_free_blocks - start >= short:
                break
            manager.free_sequence(s)

    m.reclaimer = reclaim
    want = data.draw(st.integers(0, 4 * m.num_gpu_blocks * m.block_size))
    fits_after_all = -(-want // m.block_size) <= m.num_gpu_blocks
    try:
        m.add_sequence("big", want)
    except OutOfBlocks:
        assert not fits_after_all  # every other sequence was given up first
    else:
        assert "big" in m
    assert all("big" in protect for _, protect in calls)
    m.check_invariants()


def test_a_reclaimer_that_frees_nothing_ends_in_out_of_blocks_with_nothing_changed():
    m = KVCacheManager(4, 2, trace=True)
    m.add_sequence("a", 6)
    m.reclaimer = lambda manager, short, protect: None
    before = manager_state(m)
    with pytest.raises(OutOfBlocks):
        m.add_sequence("b", 4)
    after = manager_state(m)
    assert after[:4] == before[:4] and after.pool == before.pool  # blocks, tables, copies, pool
    assert m.trace.events[-1].kind == "allocation_failed"


def test_a_window_manager_of_block_size_zero_is_a_value_error_not_a_zero_division():
    with pytest.raises(ValueError, match="block_size"):
        SlidingWindowManager(8, 0, sliding_window=4)
    with pytest.raises(ValueError, match="window"):
        SlidingWindowManager(8, 2, sliding_window=2**31)


@FUZZ
@given(m=st.one_of(busy_managers(), busy_managers(window=True)), data=st.data())
def test_a_decode_step_without_slots_takes_the_same_blocks_as_one_with_slots(m, data):
    # with tracing off and no slots wanted, the common step checks ids in its one pass
    seqs = data.draw(st.lists(st.sampled_from(m.seq_ids()), min_size=1, max_size=6))
    twin = copy.deepcopy(m)
    try:
        m.decode_step(seqs, with_slots=False)
    except OutOfBlocks:
        with pytest.raises(OutOfBlocks):
            twin.decode_step(seqs)
        return
    twin.decode_step(seqs)
    assert manager_state(m)[:4] == manager_state(twin)[:4]
    m.check_invariants()


@FUZZ
@given(m=st.one_of(busy_managers(), busy_managers(window=True)), data=st.data())
def test_a_decode_step_with_an_unknown_id_anywhere_changes_nothing(m, data):
    # tracing off and no slots: the common step, which finds the unknown id mid-pass
    assume(m.trace is None)
    seqs = data.draw(st.lists(st.sampled_from(m.seq_ids()), min_size=1, max_size=6))
    seqs.insert(data.draw(st.integers(1, len(seqs))), "nope")
    before = manager_state(m)
    with pytest.raises(ValueError, match="^unknown sequence 'nope'$"):
        m.decode_step(seqs, with_slots=False)
    assert manager_state(m)[:4] == before[:4]
    m.check_invariants()
