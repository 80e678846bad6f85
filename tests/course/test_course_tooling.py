"""The course's own machinery: the curriculum, the check runner, the stubs, the mutants, the
lessons.

The exercise checks themselves live in tests/course/ch03/ and, in a plain pytest run,
check the reference solutions. The tests here prove the rest of the promise: every
stub fails with "not implemented yet", every known-buggy variant is caught, and the
curriculum refuses orphans, missing paths and empty hints.
"""

import ast
import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from course import cli, curriculum, mutation

REPO = curriculum.REPO_ROOT
EXERCISES = curriculum.load()


def pagedsim(*args, timeout=300):
    """Run `pagedsim ARGS` in a fresh interpreter (the checks run pytest in-process)."""
    env = {**os.environ, "MPLBACKEND": "Agg"}
    env.pop("PAGEDSIM_IMPL", None)
    return subprocess.run(
        [sys.executable, "-m", "pagedsim.app.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def course_order(exercise_id):
    """A section ("3.4") or an exercise id ("3.4a", a kernel puzzle "3.k1" of section 3.7) as a
    sort key: its section's numbers, then the id."""
    section = next((e.section for e in EXERCISES if e.id == exercise_id), exercise_id)
    return tuple(int(p) for p in section.split(".")), exercise_id


def test_the_curriculum_lists_the_exercises_in_course_order_and_is_sound():
    assert [e.id for e in EXERCISES] == sorted((e.id for e in EXERCISES), key=course_order)
    assert {e.section for e in EXERCISES} <= set(curriculum.sections())
    assert curriculum.problems(EXERCISES) == []


def test_the_curriculum_check_refuses_orphans_missing_paths_and_empty_hints():
    broken = [
        dataclasses.replace(EXERCISES[0], hint="  "),
        dataclasses.replace(EXERCISES[1], stub="course/ch03_kv_block/exercises/nope.py"),
        dataclasses.replace(EXERCISES[3], nudges_zh=EXERCISES[3].nudges_zh[:1]),
        *EXERCISES[4:],
    ]  # 3.3 left out: its stub, solution and checks become orphans
    found = curriculum.problems(broken)
    assert "exercise 3.1 has an empty hint" in found
    assert "exercise 3.4a has 1 Chinese nudges for 2" in found
    assert "exercise 3.2: course/ch03_kv_block/exercises/nope.py does not exist" in found
    for rel in (EXERCISES[2].stub, EXERCISES[2].solution, *EXERCISES[2].checks):
        assert f"orphan file {rel}: no curriculum entry names it" in found


def test_the_readmes_that_list_the_exercises_and_lessons_name_every_one_in_the_curriculum():
    """The prose lists are checked against the curriculum and the lessons' files, not kept by
    hand."""
    for readme in (
        "README.md",
        "course/ch03_kv_block/README.md",
        "course/ch03_kv_block/README.zh.md",
    ):
        text = (REPO / readme).read_text(encoding="utf-8")
        missing = [
            e.id
            for e in EXERCISES
            if not re.search(rf"(?<![\d.]){re.escape(e.id)}(?![\d.a-z])", text)
        ]
        assert not missing, f"{readme} does not name the exercises {missing}"
    text = (REPO / "course/ch03_kv_block/README.md").read_text(encoding="utf-8")
    missing = [s for s in curriculum.sections() if f"pagedsim lesson {s}`" not in text]
    assert not missing, f"the course README's table has no row for the lessons {missing}"


def test_every_stub_has_one_todo_line_before_each_not_implemented_error():
    for ex in EXERCISES:
        lines = ex.path("stub").read_text().splitlines()
        raises = [i for i, line in enumerate(lines) if "raise NotImplementedError" in line]
        assert raises, f"{ex.stub} raises NotImplementedError nowhere"
        for i in raises:
            assert lines[i - 1].strip().startswith("# TODO(student): "), (
                f"{ex.stub}:{i + 1} lacks its TODO line"
            )
        assert "NotImplementedError" not in ex.path("solution").read_text(), (
            f"{ex.solution} is a stub"
        )


def test_stubs_and_solutions_define_the_same_public_names():
    def names(path):
        tree = ast.parse(path.read_text())
        return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}

    for ex in EXERCISES:
        assert names(ex.path("stub")) == names(ex.path("solution")), ex.id


def test_every_mutant_patch_applies_to_exactly_one_place_and_each_exercise_has_three():
    for ex in EXERCISES:
        ms = mutation.wrong_for(ex.id)
        assert len(ms) >= 3, f"exercise {ex.id} has only {len(ms)} mutants"
        source = ex.path("solution").read_text()
        for m in ms:
            assert m.apply(source) != source
    assert len({(m.exercise, m.name) for m in mutation.WRONG}) == len(mutation.WRONG)


def test_the_instructors_guide_lists_every_mutant_and_the_student_readmes_none():
    text = (REPO / "course/INSTRUCTORS.md").read_text(encoding="utf-8")
    missing = [m.name for m in mutation.WRONG if f"`{m.name}`" not in text]
    assert not missing, f"course/INSTRUCTORS.md does not list the mutants {missing}"
    for readme in ("README.md", "README.zh.md"):
        student = (REPO / "course/ch03_kv_block" / readme).read_text(encoding="utf-8")
        spoilers = [m.name for m in mutation.WRONG if f"`{m.name}`" in student]
        assert not spoilers, f"the student's {readme} gives away the mutants {spoilers}"


@pytest.mark.slow
def test_a_caught_mutant_is_reported_in_the_students_terms(tmp_path):
    ex = curriculum.find("3.4a")
    m = next(m for m in mutation.wrong_for("3.4a") if m.name == "free_ignores_the_count")
    bad = tmp_path / "mine.py"
    bad.write_text(m.apply(ex.path("solution").read_text()))
    run = pagedsim("check", "3.4a", "--impl", str(bad))
    assert run.returncode == 1
    assert (
        "FAIL 3.4a: freeing a block shared by two sequences returned it to the free list "
        "while seq B still uses it"
    ) in run.stdout
    assert "Traceback" not in run.stdout + run.stderr
    assert "need a hint? pagedsim hint 3.4a" in run.stdout and "hint:" not in run.stdout


@pytest.mark.slow
def test_every_stub_fails_its_checks_with_not_implemented_yet():
    run = pagedsim("check", "--all")
    assert run.returncode == 1
    for ex in EXERCISES:
        assert f"FAIL {ex.id}: not implemented yet: " in run.stdout, f"{ex.id}:\n{run.stdout}"
    assert "PASS" not in run.stdout and "Traceback" not in run.stdout + run.stderr
    assert f"0/{len(EXERCISES)} exercises pass" in run.stdout
    for ex in EXERCISES:  # an untouched stub passes none of its checks
        assert f"FAIL {ex.id}  0/" in run.stdout, f"the untouched stub of {ex.id} passes some check"


@pytest.mark.slow
def test_every_solution_passes_and_every_mutant_is_caught():
    run = pagedsim("check", "--mutants", timeout=2400)  # 100-odd mutants, the puzzles stepped
    assert run.returncode == 0, run.stdout + run.stderr
    n = len(EXERCISES)
    assert (
        f"{len(mutation.WRONG)}/{len(mutation.WRONG)} mutants caught; {n}/{n} solutions pass"
        in run.stdout
    )
    assert "NOT CAUGHT" not in run.stdout


def test_check_refuses_an_unknown_exercise_and_lists_them_without_one(capsys):
    assert cli.check_main(["9.9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pagedsim check: error: no exercise '9.9'") and err.count("\n") == 1
    assert cli.check_main([]) == 0
    assert "3.4a" in capsys.readouterr().out


@pytest.mark.parametrize("section", sorted({e.section for e in EXERCISES}, key=course_order))
def test_each_lesson_prints_its_text_and_runs_its_demo(section, tmp_path, capsys):
    assert cli.lesson_main([section, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"== {section} " in out and "-- demo --" in out and "pagedsim check 3." in out
    demo = re.split(r"\nexercise 3\.\w+: ", out.split("-- demo --", 1)[1])[0].strip().splitlines()
    assert demo[-1].startswith("verdict: ") and len(demo[-1]) > 60, (
        f"lesson {section} ends without a verdict"
    )
    if section == "3.3":  # the error printed is judged against a stated tolerance
        err = re.search(r"reference\| = (\S+)", out).group(1)
        assert f"max error {err} is within the tolerance 1e-05" in demo[-1], demo[-1]
    if section == "3.4":
        assert any(line.startswith("look at: ") for line in demo)
    if section == "3.7":
        assert "pending (no GPU was available)" in out
    if section == "3.6":
        assert len(list(Path(tmp_path).glob("step-*.png"))) == 8
