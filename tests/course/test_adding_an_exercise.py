"""Adding an exercise is its files plus one curriculum entry: everything else is derived.

A throwaway exercise 3.9 (stub, solution, checks, lesson) is added to a temporary copy of
the `course` package with one [[exercise]] table appended to curriculum.toml; a fresh
interpreter that imports that copy must then see 3.9 in every derived list: the curriculum
check, the pytest markers (registered, so --strict-markers accepts ch3_9), the lessons,
the notebooks, the workspace, and `pagedsim check 3.9` itself.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

from course import curriculum

STUB = '''"""Exercise 3.9: a throwaway exercise, to prove the course derives its lists."""


def double(n: int) -> int:
    """2 * n."""
    # TODO(student): return twice n
    raise NotImplementedError("double")
'''
SOLUTION = '''"""Exercise 3.9: a throwaway exercise, to prove the course derives its lists."""


def double(n: int) -> int:
    """2 * n."""
    return 2 * n
'''
CHECKS = '''"""Checks for the throwaway exercise 3.9."""

import pytest

EXERCISE = "3.9"
pytestmark = pytest.mark.ch3_9


def test_double_doubles(impl):
    """double(21) is 42."""
    assert impl.double(21) == 42, f"double(21) gave {impl.double(21)}, expected 42"
'''
LESSON = '''"""Lesson 3.9: a throwaway lesson."""


def demo(out_dir) -> None:
    print("verdict: nothing happened, as planned")
'''
LESSON_TEXT = """# 3.9 A throwaway lesson

Nothing to learn here.

# 3.9 一节用完即弃的课

这里没什么可学的。
"""
ENTRY = """
[[exercise]]
id = "3.9"
section = "3.9"
title = "a throwaway exercise"
stub = "course/ch03_kv_block/exercises/ex3_9_double.py"
solution = "course/ch03_kv_block/solutions/ex3_9_double.py"
checks = ["course/ch03_kv_block/checks/test_ex3_9_double.py"]
marker = "ch3_9"
hint = "Multiply by two."
"""
PROBE = textwrap.dedent("""
    import json, pytest
    from course import cli, curriculum, notebooks, workspace
    from course.lessons_text import lesson_text
    from course.runner import INI, run_checks

    ex = curriculum.find("3.9")
    solution, stub = run_checks(ex, ex.path("solution")), run_checks(ex, ex.path("stub"))
    strict = pytest.main([str(curriculum.REPO_ROOT / ex.checks[0]), "-q", "-c", str(INI),
                          "-p", "course.check_fixtures", "-p", "no:cacheprovider",
                          "--strict-markers"])
    print(json.dumps({"course": curriculum.COURSE_DIR.as_posix(), "problems": curriculum.problems(),
                      "markers": list(curriculum.markers()), "lessons": list(cli.LESSONS),
                      "text": lesson_text("3.9", "zh"), "notebooks": list(notebooks.SECTIONS),
                      "workspace": [p.name for p in workspace.candidates(ex)],
                      "solution": solution.status,
                      "stub": [stub.passed, [f.kind for f in stub.failures]],
                      "strict": int(strict)}))
""")


def test_a_new_exercise_needs_only_its_files_and_one_curriculum_entry(tmp_path):
    copy = tmp_path / "course"
    shutil.copytree(
        curriculum.COURSE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "notebooks")
    )
    ch = copy / "ch03_kv_block"
    (ch / "exercises" / "ex3_9_double.py").write_text(STUB)
    (ch / "solutions" / "ex3_9_double.py").write_text(SOLUTION)
    (ch / "checks" / "test_ex3_9_double.py").write_text(CHECKS)
    (ch / "lessons" / "l3_9.py").write_text(LESSON)
    (ch / "lessons" / "l3_9.md").write_text(LESSON_TEXT, encoding="utf-8")
    with open(copy / "curriculum.toml", "a", encoding="utf-8") as f:
        f.write(ENTRY)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(curriculum.REPO_ROOT)]),
        "MPLBACKEND": "Agg",
    }
    env.pop("PAGEDSIM_IMPL", None)
    run = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["course"] == copy.as_posix(), (
        "the probe imported the repository's course, not the copy"
    )
    assert seen["problems"] == []
    assert seen["markers"][-1] == "ch3_9" and seen["strict"] == 0, (
        "ch3_9 is not registered as a marker"
    )
    assert seen["lessons"][-1] == "3.9" and seen["notebooks"][-1] == "3.9"
    assert seen["text"] == "== 3.9 一节用完即弃的课 ==\n\n这里没什么可学的。"
    assert "ex3_9_double.py" in seen["workspace"]
    assert seen["solution"] == "pass" and seen["stub"] == [0, ["not_implemented"]]
