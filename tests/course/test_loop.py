"""The rustlings loop: hints on request, graduated; progress kept in the workspace; the reference
only after a pass; `watch` checks and moves on after a pass."""

import json
import subprocess
import sys
import types

import pytest

from course import curriculum, hints, progress, watch, workspace
from course.runner import run_checks


def _workspace_here(tmp_path, monkeypatch) -> None:
    """A fresh `pagedsim workspace` in tmp_path, the current folder, and no PAGEDSIM_WORKSPACE."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PAGEDSIM_WORKSPACE", raising=False)
    workspace.create(tmp_path / workspace.DEFAULT)


def test_a_failing_check_offers_a_hint_and_never_prints_it(capsys, tmp_path):
    ex = curriculum.find("3.4b")
    from course.runner import Failure, Outcome, print_report

    print_report(
        Outcome(ex, tmp_path / "x.py", failures=[Failure("a", "wrong")]), verbose=False, hint=True
    )
    printed = capsys.readouterr().out
    assert "need a hint? pagedsim hint 3.4b" in printed
    assert ex.hint not in printed and "pool.incref" not in printed


@pytest.mark.parametrize("level", [1, 2, 3])
def test_hints_go_deeper_level_by_level(capsys, level):
    ex = curriculum.find("3.4a")
    assert hints.main(["3.4a", "--level", str(level)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert " ".join(ex.hint_levels("en")[level - 1].split()) in printed
    assert ("--level" in printed) == (level < 3)


def test_every_exercise_has_three_distinct_hint_levels():
    for ex in curriculum.load():
        levels = ex.hint_levels("en")
        assert len(levels) == 3 and len(set(levels)) == 3, ex.id


def test_every_hint_level_has_a_chinese_text_of_its_own():
    """`--lang zh` promises Chinese hints at every level, not only the last."""
    for ex in curriculum.load():
        en, zh = ex.hint_levels("en"), ex.hint_levels("zh")
        assert len(zh) == len(en), ex.id
        for level, (a, b) in enumerate(zip(en, zh, strict=True), start=1):
            assert a != b and any("\u4e00" <= c <= "\u9fff" for c in b), (ex.id, level)


def test_hint_in_chinese_frames_the_hint_in_chinese_too(capsys, monkeypatch):
    monkeypatch.setenv("PAGEDSIM_LANG", "en")  # --lang zh sets it; restored after the test
    assert hints.main(["3.4a", "--level", "1", "--lang", "zh"]) == 0
    printed = capsys.readouterr().out
    assert curriculum.find("3.4a").hint_levels("zh")[0][:12] in printed
    assert "第 1 级" in printed and "pagedsim hint 3.4a --level 2" in printed
    assert "hint 3.4a, level" not in printed and "still stuck" not in printed


def test_progress_is_kept_in_the_workspace_and_the_solution_waits_for_a_pass(
    tmp_path, monkeypatch, capsys
):
    _workspace_here(tmp_path, monkeypatch)
    ex = curriculum.find("3.1")
    mine = tmp_path / workspace.DEFAULT / "ex3_1_first_fit.py"
    assert progress.solution_main(["3.1"]) == 1
    assert "--force" in capsys.readouterr().out
    mine.write_text(ex.path("solution").read_text())
    assert watch.watch(ex, curriculum.load(), interval=0.05, iterations=2) == 1  # 3.1, then 3.2
    data = json.loads((mine.parent / progress.NAME).read_text())
    assert data["3.1"]["status"] == "pass" and data["3.2"]["status"] == "fail"
    capsys.readouterr()
    assert progress.main([]) == 0
    table = capsys.readouterr().out
    total = len(curriculum.load())
    assert "done  3.1" in table and "left  3.2" in table and f"1/{total} exercises done" in table
    assert progress.solution_main(["3.1"]) == 0
    assert "def allocate" in capsys.readouterr().out
    mine.write_text(mine.read_text() + "\n# edited\n")  # a pass is for the file as it was
    assert progress.solution_main(["3.1"]) == 1
    assert "changed since its last check" in capsys.readouterr().out


def test_watch_checks_again_when_the_file_is_saved(tmp_path, monkeypatch):
    _workspace_here(tmp_path, monkeypatch)
    ex = curriculum.find("3.1")
    mine = tmp_path / workspace.DEFAULT / "ex3_1_first_fit.py"
    saver = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import time, pathlib, sys\n"
                "p = pathlib.Path(sys.argv[1])\n"
                "for _ in range(6000):  # ten minutes at most\n"
                "    if (p.parent / '.pagedsim-progress.json').exists(): break\n"
                "    time.sleep(0.1)\n"
                "else: raise SystemExit\n"
                "p.write_text(pathlib.Path(sys.argv[2]).read_text())\n"
            ),
            str(mine),
            str(ex.path("solution")),
        ]
    )
    try:
        status = watch.watch(ex, curriculum.load(), interval=0.1, iterations=2)
    finally:
        saver.wait(timeout=600)
    data = json.loads((mine.parent / progress.NAME).read_text())
    assert status == 0 and data["3.1"]["status"] == "pass"  # the stub failed, the save passed


def test_watch_checks_a_save_made_while_the_check_was_running(tmp_path, monkeypatch):
    _workspace_here(tmp_path, monkeypatch)
    ex = curriculum.find("3.1")
    mine = tmp_path / workspace.DEFAULT / "ex3_1_first_fit.py"
    checked = []

    def check_then_save(ex, path, seconds=None):
        outcome = run_checks(ex, path, seconds=seconds)
        if not checked:  # the student saves the fix while the first check still runs
            mine.write_text(ex.path("solution").read_text())
        checked.append(outcome.ok)
        return outcome

    def no_save_comes(seconds):
        raise AssertionError("watch waited for a save that had already happened")

    monkeypatch.setattr(watch, "run_checks", check_then_save)
    monkeypatch.setattr(watch, "time", types.SimpleNamespace(sleep=no_save_comes))
    assert watch.watch(ex, curriculum.load(), interval=0.1, iterations=2) == 0
    assert checked == [False, True]


def test_passing_the_last_exercise_with_stubs_left_moves_on_to_the_first_stub(
    tmp_path, monkeypatch, capsys
):
    """Passing 3.k6 (last in course order) while 3.1 ... are stubs is not "every exercise passes":
    watch names 3.1 next and keeps going."""
    _workspace_here(tmp_path, monkeypatch)
    exercises = curriculum.load()
    last = exercises[-1]
    mine = workspace.find(last)
    mine.write_text(last.path("solution").read_text())
    assert watch.watch(last, exercises, interval=0.05, iterations=2) == 1  # last passes, 3.1 fails
    printed = capsys.readouterr().out
    assert f"{last.id} passes; next: {exercises[0].id}" in printed
    assert f"new section: read `pagedsim lesson {exercises[0].section}` first" in printed
    assert "well done" not in printed


def test_the_exercise_list_suggests_the_one_you_are_on(tmp_path, monkeypatch, capsys):
    from course import cli
    from course.runner import Outcome

    _workspace_here(tmp_path, monkeypatch)
    exercises = curriculum.load()
    progress.record(Outcome(exercises[0], workspace.find(exercises[0]), passed=8))
    capsys.readouterr()
    assert cli._list_exercises(exercises) == 0
    assert f"check one with `pagedsim check {exercises[1].id}`" in capsys.readouterr().out


def test_checking_outside_a_workspace_says_where_to_run_from(tmp_path, monkeypatch):
    """A student who made the workspace elsewhere is told to go there, not to make another."""
    from types import SimpleNamespace

    from course import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PAGEDSIM_WORKSPACE", raising=False)
    ex = curriculum.find("3.1")
    path, said = cli._choose_impl(ex, SimpleNamespace(impl=None, solutions=False))
    assert path == ex.path("stub")
    assert "from the folder that holds pagedsim-work/" in said and "PAGEDSIM_WORKSPACE" in said


def test_hint_without_an_exercise_is_for_the_one_you_are_on(tmp_path, monkeypatch, capsys):
    _workspace_here(tmp_path, monkeypatch)
    assert hints.main([]) == 0
    first = curriculum.load()[0]
    printed = capsys.readouterr().out
    assert f"hint {first.id}, level 1" in printed
    assert " ".join(first.hint_levels("en")[0].split()) in " ".join(printed.split())


@pytest.mark.parametrize(
    "argv", [["--interval", "0"], ["--iterations", "0"], ["--timeout", "nan"], ["--timeout", "-1"]]
)
def test_watch_refuses_a_bad_number_in_one_line_before_checking_anything(argv, capsys):
    """A zero interval, no iterations or a timeout that is not a positive number is a usage
    error (exit 2) naming the option, before any check runs."""
    with pytest.raises(SystemExit) as e:
        watch.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and argv[0] in err and "must be" in err, err
