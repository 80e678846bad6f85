"""Chapter 3's lessons, one module per section: `pagedsim lesson 3.1` ... `pagedsim lesson 3.8`.

Each section's text, in English and Chinese, with its figures' captions, is the Markdown page
beside its module (l3_4.md; course/lessons_text.py reads it). The module has demo(out_dir),
which runs the section's demonstration on the simulator, the kernels or the pictures and ends
with `verdict(...)`: one sentence, computed from the numbers it printed, that says what they
mean.

A demo that needs an exercise's code gets it from `reference(ID)`: the reference
solution, or, in a student build without the solutions (`pagedsim export-course`), the
student's own workspace file once it is written.
"""

from __future__ import annotations

import importlib
from pathlib import Path


def verdict(en: str, zh: str) -> str:
    """Print a demo's last line: its conclusion in one sentence, in the course's language."""
    from course.i18n import say

    line = say(f"verdict: {en}", f"结论：{zh}")
    print(line)
    return line


class NeedsExercise(RuntimeError):
    """This part of a demo needs an exercise's code, and neither the reference nor yours is
    there."""


def reference(exercise_id: str):
    from course import curriculum, workspace

    ex = curriculum.find(exercise_id)
    name = Path(ex.solution).with_suffix("").as_posix().replace("/", ".")
    try:
        return importlib.import_module(name)
    except ImportError:
        pass
    mine = workspace.find(ex)
    if mine is not None:
        from course.ch03_kv_block.capstone import YourCodeFailed, load_module

        try:
            return load_module(exercise_id, mine)
        except YourCodeFailed as e:  # a half-written file: say so
            raise NeedsExercise(
                f"this part of the demo runs exercise {exercise_id}'s code; {e}"
            ) from e
    raise NeedsExercise(
        f"this part of the demo runs exercise {exercise_id}'s code: write it in "
        f"{workspace.DEFAULT}/{Path(ex.stub).name} (this build has no reference solutions)"
    )
