"""The pagedsim course: lessons, exercises and checks that follow the chapter on KV blocks.

    course/curriculum.toml   the exercises in course order (id, stub, solution, checks, hint):
                             the one list; markers, lessons and notebooks are derived from it
    course/curriculum.py     loads it (tomllib; tomli on Python 3.10) and validates it
    course/impl.py           which implementation a check loads: solution, stub, or any file
    course/runner.py         runs an exercise's checks in-process and words each failure
    course/cli.py            `pagedsim lesson 3.4` and `pagedsim check 3.4a`
    course/hints.py          `pagedsim hint 3.4a [--level 2|3]`: hints on request, gentlest first
    course/progress.py       `pagedsim progress` and `pagedsim solution 3.4a` (after a pass)
    course/watch.py          `pagedsim watch [3.4a]`: check on every save, move on after a pass
    course/ch03_kv_block/capstone.py  `pagedsim generate --pool workspace`: your 3.4a and 3.4b
                             serve the model (lesson 3.8)
    course/ch03_kv_block/    chapter 3: lessons, stubs, solutions, checks, mutants, the stepper

The checks themselves are pytest files in course/ch03_kv_block/checks/ (one marker per
section, registered from the curriculum); tests/course/ch03/ runs them on the solutions.

COMMANDS is what the course adds to the `pagedsim` command (pagedsim/app/cli.py merges it):
name -> (module:function, one-line help); POOLS, what it adds to `pagedsim generate --pool`
(course/ch03_kv_block/capstone.py: the model served by the student's own 3.4a and 3.4b).
A command whose module this build lacks (the student copy has no grading or export) is left
out, so it is never listed to crash.
"""

from importlib.util import find_spec

_ALL = {
    "lesson": ("course.cli:lesson_main", "print and run a chapter-3 lesson, e.g. `lesson 3.4`"),
    "check": ("course.cli:check_main", "check an exercise, e.g. `check 3.4a`"),
    "hint": ("course.hints:main", "a hint for an exercise, e.g. `hint 3.4a [--level 2]`"),
    "watch": ("course.watch:main", "check on every save, move on after a pass: `watch [3.4a]`"),
    "progress": ("course.progress:main", "exercises done and left, with each last result"),
    "solution": ("course.progress:solution_main", "the reference, after your own passes"),
    "workspace": (
        "course.workspace:main",
        "copy the exercise stubs to your own folder (default ./pagedsim-work)",
    ),
    "grade": (
        "course.grade:main",
        "grade a folder of submissions, one process each, with a time limit",
    ),
    "export-course": (
        "course.export:main",
        "write a student copy of the course without the solutions",
    ),
    "export-gradescope": (
        "course.export_gradescope:main",
        "write a Gradescope autograder bundle (setup.sh, run_autograder) for the course",
    ),
}
COMMANDS = {
    name: entry for name, entry in _ALL.items() if find_spec(entry[0].split(":")[0]) is not None
}
# POOLS is what the course adds to `pagedsim generate --pool` (pagedsim/app/cli.py reads it):
# name -> (module:function returning a factory (num_blocks, block_size) -> KVCacheManager, help)
POOLS = {
    "workspace": (
        "course.ch03_kv_block.capstone:workspace_pool",
        "your 3.4a free list and 3.4b copy-on-write, from your workspace",
    ),
}
