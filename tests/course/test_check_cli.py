"""`pagedsim check` from a student's side: the workspace, the JSON line, the hidden solutions,
a file that loops or exits at import, and messages matched to the symptom.

Each run is in-process (course.runner.run_checks or course.cli.check_main) on exercise
3.1, whose checks take well under a second, except the one that needs a fresh interpreter.
"""

import json
import os
import subprocess
import sys

from course import cli, curriculum, workspace
from course.runner import counterexample, run_checks

EX = curriculum.find("3.1")


def test_workspace_copies_every_stub_once_and_check_finds_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PAGEDSIM_WORKSPACE", raising=False)
    assert workspace.main([]) == 0
    mine = tmp_path / workspace.DEFAULT / "ex3_1_first_fit.py"
    assert workspace.find(EX) == mine and mine.read_text() == EX.path("stub").read_text()
    mine.write_text(EX.path("solution").read_text())
    workspace.main([])  # never overwrites
    assert mine.read_text() == EX.path("solution").read_text()
    capsys.readouterr()
    assert cli.check_main(["3.1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (
        result["status"] == "pass"
        and result["passed"] == result["total"] > 0
        and result["failed"] == []
    )


def test_workspace_without_a_folder_goes_where_pagedsim_workspace_names(
    tmp_path, monkeypatch, capsys
):
    """`check` looks in $PAGEDSIM_WORKSPACE first, so `workspace` creates it there."""
    named = tmp_path / "course-work"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PAGEDSIM_WORKSPACE", str(named))
    assert workspace.main([]) == 0
    assert workspace.find(EX) == named / "ex3_1_first_fit.py"
    assert not (tmp_path / workspace.DEFAULT).exists()
    assert f"workspace: {named.resolve()}" in capsys.readouterr().out


def test_a_file_that_imports_the_solution_is_an_error_not_a_pass(tmp_path):
    cheat = tmp_path / "cheat.py"
    cheat.write_text("from course.ch03_kv_block.solutions.ex3_1_first_fit import *\n")
    out = run_checks(EX, cheat, seconds=20).as_json()
    assert out["status"] == "error" and out["passed"] == 0
    assert "reference solutions are hidden" in out["messages"][0]
    import course.ch03_kv_block.solutions.ex3_1_first_fit  # noqa: F401 - importable again afterwards


def test_the_solutions_stay_hidden_when_pytest_marks_the_course_for_assertion_rewriting(
    tmp_path, monkeypatch
):
    """An installed pagedsim registers a pytest plugin, so pytest marks `course` for rewriting
    and its rewriting finder, first on sys.meta_path, would import the solutions itself.
    In-process checking (isolate=False) is where that hole exists: a file checked in its own
    process never imports anything in the checker's."""
    from course import runner

    info = tmp_path / "site" / "pagedsim_fake-0.1.dist-info"  # what `pip install pagedsim` leaves
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pagedsim-fake\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[pytest11]\npagedsim_fake = course.i18n\n")
    (info / "RECORD").write_text("course/__init__.py,,\npagedsim_fake-0.1.dist-info/METADATA,,\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    cheat = tmp_path / "cheat.py"
    cheat.write_text("from course.ch03_kv_block.solutions.ex3_1_first_fit import *\n")
    with (
        monkeypatch.context() as m
    ):  # the setup really opens the hole: without keep_first it passes
        m.setattr(runner, "keep_first", lambda: None)
        assert run_checks(EX, cheat, seconds=20, isolate=False).as_json()["status"] == "pass"
    again = tmp_path / "cheat_again.py"  # a new file: the first one's import is cached
    again.write_text(cheat.read_text())
    out = run_checks(EX, again, seconds=20, isolate=False).as_json()
    assert out["status"] == "error" and "reference solutions are hidden" in out["messages"][0], out


def test_a_loop_at_import_times_out_and_sys_exit_is_an_error(tmp_path):
    loop, leave = tmp_path / "loop.py", tmp_path / "leave.py"
    loop.write_text("while True:\n    pass\n")
    leave.write_text("import sys\nsys.exit(3)\n")
    timed = run_checks(EX, loop, seconds=0.5).as_json()
    assert (
        timed["status"] == "timeout"
        and "importing your file ran for over 0.5 s" in timed["messages"][0]
    )
    exited = run_checks(EX, leave, seconds=5).as_json()
    assert exited["status"] == "error" and "sys.exit(3)" in exited["messages"][0]


def test_a_refusal_that_never_happens_says_did_not_raise(tmp_path):
    lax = tmp_path / "lax.py"
    lax.write_text(
        EX.path("solution")
        .read_text()
        .replace(
            '            raise ValueError(f"size must be a positive int, got {size!r}")',
            "            return None",
        )
    )
    messages = run_checks(EX, lax, seconds=20).as_json()["messages"]
    assert "allocate(0) did not raise ValueError" in messages, messages
    assert not any("raised Failed" in m for m in messages)


def test_a_state_machine_counterexample_becomes_a_short_call_line():
    class Found(AssertionError):
        __notes__ = [
            "Failing test case: <state machine>",
            "state = PoolMachine()",
            "state.agrees_with_the_model()",
            "state.allocate()",
            "Draw 1: 0  # or any other generated value",
            "state.release(data=data(...))",
            "state.teardown()",
        ]

    assert counterexample(Found()) == "allocate(); release(0)"


def test_a_check_leaves_no_hypothesis_folder_in_the_students_folder(tmp_path):
    """A fresh interpreter in the student's folder: Hypothesis would put .hypothesis/ there."""
    env = {**os.environ, "MPLBACKEND": "Agg"}
    env.pop("PAGEDSIM_IMPL", None)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pagedsim.app.cli",
            "check",
            "3.4a",
            "--impl",
            str(curriculum.find("3.4a").path("solution")),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0 and "PASS 3.4a" in run.stdout, run.stdout + run.stderr
    assert list(tmp_path.iterdir()) == [], "pagedsim check wrote into the current folder"


def test_json_messages_fold_like_the_text_report_one_per_kind_of_failure():
    from course.runner import Failure, Outcome, fold

    failures = [
        Failure("check_a", "block 3 was handed out twice"),
        Failure("check_b", "block 17 was handed out twice\ncalls: allocate(2)"),
        Failure("check_c", "free(9) did not raise ValueError"),
    ]
    outcome = Outcome(EX, EX.path("stub"), passed=1, failures=failures)
    assert fold(failures) == [
        ("block 17 was handed out twice\ncalls: allocate(2)", ["check_a", "check_b"]),
        ("free(9) did not raise ValueError", ["check_c"]),
    ]
    out = outcome.as_json()
    assert out["messages"] == [m for m, _ in fold(failures)]
    assert out["failed"] == ["check_a", "check_b", "check_c"] and out["total"] == 4


def test_a_missing_file_is_one_error_line_with_no_hint(tmp_path, capsys):
    assert cli.check_main(["3.1", "--impl", str(tmp_path / "nope.py")]) != 0
    out = capsys.readouterr().out
    assert "no such file" in out and "nope.py" in out and "hint" not in out, out


def test_escape_sequences_in_the_files_messages_cannot_overwrite_the_verdict_line(tmp_path, capsys):
    """An exception text that moves the cursor up, erases the FAIL line and writes a PASS line
    over it is printed as visible escapes (an instructor runs `check --impl` on a student's
    file)."""
    fake = "\\x1b[1A\\x1b[2K\\x1b[GPASS 3.1  first fit (8/8 checks)\\x1b[8m"
    stub = EX.path("stub").read_text()
    mine = tmp_path / "ex3_1_first_fit.py"
    raising = stub.replace('raise NotImplementedError("allocate")', f'raise OSError("{fake}")')
    mine.write_text(raising)
    assert cli.check_main(["3.1", "--impl", str(mine)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and out.startswith("FAIL 3.1") and "\\x1b[1A" in out
