"""The pagedsim course: lessons, exercises and checks that follow the chapter on KV blocks.

    course/curriculum.toml   the exercises in course order: the one list (curriculum.py loads it)
    course/runner.py         runs an exercise's checks and words each failure (impl.py: which file)
    course/cli.py            `pagedsim lesson 3.4` and `pagedsim check 3.4a`
    course/hints.py, progress.py, watch.py, workspace.py   the student's other commands
    course/grade*.py, export*.py, autograder.py            the instructor's (INSTRUCTORS.md)
    course/ch03_kv_block/    chapter 3: lessons, stubs, solutions, checks, mutants, the stepper

COMMANDS is what the course adds to the `pagedsim` command (pagedsim/app/cli.py merges it): name
-> (module:function, one-line help); a command whose module this build lacks (the student copy
has no grading or export) is left out. POOLS is what it adds to `pagedsim generate --pool`
(course/ch03_kv_block/capstone.py: the model served by the student's own 3.4a and 3.4b)."""

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
# name -> (module:function returning a factory (num_gpu_blocks, block_size) -> KVCacheManager, help)
POOLS = {
    "workspace": (
        "course.ch03_kv_block.capstone:workspace_pool",
        "your 3.4a free list and 3.4b copy-on-write, from your workspace",
    ),
}
