"""The interleaving explorer: the racy pop double-hands blocks, CAS and atomic_add never do."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim.labs import interleavings as il

pytestmark = pytest.mark.ch3_7


@st.composite
def free_stacks(draw, threads):
    """Distinct block ids, at least `threads` of them (so no pop finds the stack empty)."""
    return tuple(
        draw(st.lists(st.integers(0, 99), min_size=threads, max_size=threads + 2, unique=True))
    )


@pytest.mark.parametrize(
    "impl,threads", [("racy", 2), ("racy", 3), ("atomic_add", 2), ("atomic_add", 3)]
)
def test_fixed_length_pops_walk_exactly_the_multinomial_count_of_schedules(impl, threads):
    k = il.STEPS_PER_POP[impl]
    outs = list(il.explore(impl, threads))
    assert len(outs) == il.multinomial(threads, k)
    # every schedule is distinct and contains each thread's steps exactly k times
    orders = {tuple(s.thread for s in o.steps) for o in outs}
    assert len(orders) == len(outs)
    assert all(sorted(order) == sorted(list(range(threads)) * k) for order in orders)


def test_multinomial_formula_matches_small_cases_by_hand():
    assert il.multinomial(2, 3) == 20  # choose 3 of 6 positions for thread 0
    assert il.multinomial(3, 2) == 90  # 6! / 2^3
    assert il.multinomial(1, 5) == 1


def test_racy_pop_hands_one_block_to_two_threads_unless_the_pops_do_not_overlap():
    s = il.summarize("racy", 2)
    # only the two serial orders (all of thread 0 then all of thread 1, or the reverse) are safe
    assert (s.total, s.bad, s.duplicated) == (20, 18, 18)
    good = [o for o in il.explore("racy", 2) if not o.bad]
    assert {tuple(st.thread for st in o.steps) for o in good} == {
        (0, 0, 0, 1, 1, 1),
        (1, 1, 1, 0, 0, 0),
    }


def test_a_bad_racy_schedule_reads_the_same_top_twice_before_either_write():
    out = il.summarize("racy", 2).first_bad
    reads = [s for s in out.steps if s.op == "read" and s.addr == "top"]
    assert reads[0].value == reads[1].value and out.blocks[0] == out.blocks[1]
    assert out.top_drift == 1  # two threads got a block, top moved only once


@settings(max_examples=5)
@given(st.integers(2, 3).flatmap(lambda n: st.tuples(st.just(n), free_stacks(n))))
def test_cas_pop_never_double_hands_a_block_in_any_interleaving(case):
    threads, stack = case
    for out in il.explore("cas", threads, stack):
        assert not out.bad, il.format_schedule(out)
        assert sorted(out.blocks) == sorted(stack[-threads:])  # exactly the top `threads` ids


@settings(max_examples=10)
@given(st.integers(2, 3).flatmap(lambda n: st.tuples(st.just(n), free_stacks(n))))
def test_atomic_add_pop_never_double_hands_a_block_in_any_interleaving(case):
    threads, stack = case
    outs = list(il.explore("atomic_add", threads, stack))
    assert outs and not any(o.bad for o in outs)
    assert all(sorted(o.blocks) == sorted(stack[-threads:]) for o in outs)


@settings(max_examples=10)
@given(st.integers(2, 3).flatmap(lambda n: st.tuples(st.just(n), free_stacks(n))))
def test_racy_pop_has_bad_interleavings_for_any_stack_contents(case):
    threads, stack = case
    s = il.summarize("racy", threads, stack)
    assert s.duplicated > 0 and s.bad < s.total


def test_cas_retries_are_walked_so_it_has_more_schedules_than_three_straight_steps():
    s = il.summarize("cas", 3)
    assert s.bad == 0 and s.total > il.multinomial(3, 3)
    assert any(step.op == "cas fail" for o in il.explore("cas", 2) for step in o.steps)


def test_explorer_rejects_bad_arguments_by_name():
    with pytest.raises(ValueError, match="impl"):
        list(il.explore("lock", 2))
    with pytest.raises(ValueError, match="threads"):
        list(il.explore("racy", 7))
    with pytest.raises(ValueError, match="stack"):
        list(il.explore("racy", 3, (1, 2)))


def test_race_command_prints_a_schedule_table_for_the_racy_pop(capsys):
    assert il.main(["--threads", "2", "--impl", "racy", "--show", "2"]) == 0
    text = capsys.readouterr().out
    assert "interleavings walked: 20" in text and "bad: 18" in text
    assert text.count("BAD: block(s)") == 2 and "thread 1" in text


def test_race_command_reports_no_bad_schedule_for_cas(capsys):
    assert il.main(["--impl", "cas", "--threads", "3"]) == 0
    text = capsys.readouterr().out
    assert "bad: 0" in text and "BAD" not in text


def test_pagedsim_race_is_dispatched_by_the_cli(capsys):
    from pagedsim.app import cli

    assert cli.main(["race", "--impl", "atomic_add", "--threads", "3"]) == 0
    assert "interleavings walked: 90" in capsys.readouterr().out
