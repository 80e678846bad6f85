"""What a student reads: the true cause, in their own calls, once.

Each test checks one known mutant (course/ch03_kv_block/mutants.toml) in-process and reads
the words `pagedsim check` would print for it.
"""

from course import curriculum, mutation
from course.runner import Failure, Outcome, print_report, run_checks


def check_mutant(tmp_path, exercise_id, name):
    ex = curriculum.find(exercise_id)
    m = next(m for m in mutation.wrong_for(exercise_id) if m.name == name)
    path = tmp_path / f"{name}.py"
    path.write_text(m.apply(ex.path("solution").read_text()))
    return run_checks(ex, path, seconds=60)


def test_an_exception_names_the_students_call_that_raised_it(tmp_path):
    out = check_mutant(tmp_path, "3.1", "fragmentation_of_no_free_space")
    raised = [f.message for f in out.failures if f.kind == "raised"]
    assert raised and raised[0].startswith(
        "external_fragmentation([]): your code raised ValueError: max() arg is an empty sequence"
    ), raised


def test_a_state_counterexample_is_the_shortest_list_of_the_students_own_calls(tmp_path):
    out = check_mutant(tmp_path, "3.4a", "free_ignores_the_count")
    lines = [f.message for f in out.failures if "counterexample" in f.message]
    assert lines, [f.message for f in out.failures]
    want = "counterexample: pool = FreeListPool(6); pool.allocate(); pool.incref(0); pool.free(0)"
    assert lines[0].endswith(want), lines[0]


def test_a_counter_never_lowered_is_a_counter_bug_not_a_lost_block(tmp_path):
    ex = curriculum.find("3.4a")
    bad = tmp_path / "stale.py"
    source = ex.path("solution").read_text()
    bad.write_text(
        source.replace(
            "        self.prev[n] = p\n        self.num_free -= 1\n", "        self.prev[n] = p\n"
        )
    )
    assert bad.read_text() != source
    messages = [f.message for f in run_checks(ex, bad, seconds=60).failures]
    assert messages and all("num_free is not kept up to date" in m for m in messages), messages
    assert not any("lost" in m for m in messages)


def test_a_copy_on_write_leak_is_reported_as_a_leak_not_as_free_order(tmp_path):
    out = check_mutant(tmp_path, "3.4b", "cow_keeps_the_source")
    messages = [f.message for f in out.failures]
    assert any("leak" in m for m in messages), messages
    assert not any("last first" in m for m in messages), messages


def test_messages_that_differ_only_in_numbers_are_shown_once(capsys):
    ex = curriculum.find("3.3")
    out = Outcome(
        ex,
        ex.path("solution"),
        passed=1,
        failures=[
            Failure("a", "differs by 0.295 (seed 0): check the gather"),
            Failure("b", "differs by 1.3e-02 (seed 2): check the gather"),
            Failure("c", "returned float32"),
        ],
    )
    print_report(out, verbose=False, hint=False)
    printed = capsys.readouterr().out
    assert printed.count("check the gather") == 1 and "(2 checks)" in printed
    assert "returned float32" in printed


def test_json_messages_fold_lists_of_any_length_like_the_text_report():
    ex = curriculum.find("3.4b")
    out = Outcome(
        ex,
        ex.path("solution"),
        passed=1,
        failures=[
            Failure("a", "after a 6-token prompt (table [0, 1]) the copy pair is (1, 2)"),
            Failure("b", "after a 2-token prompt (table [0]) the copy pair is (0, 2)"),
            Failure("c", "after a 10-token prompt (table [0, 1, 2]) the copy pair is (2, 3)"),
        ],
    )
    assert len(out.as_json()["messages"]) == 1, out.as_json()["messages"]


def test_counterexamples_and_raised_calls_never_show_an_objects_address():
    from course.check_fixtures import short
    from course.runner import no_addresses
    from pagedsim import BlockPool

    assert short(BlockPool(4, 2)) == "pool"
    said = no_addresses("slot_for_append(<pagedsim.block_pool.BlockPool object at 0x7f3a2c>, [])")
    assert said == "slot_for_append(<BlockPool>, [])"
