"""Gradescope's side of the autograder bundle (`pagedsim export-gradescope`): grade the one
submission in this container with the course's own checks and write Gradescope's
results.json.

    python -m course.autograder [--submission DIR] [--results FILE] [--exercise ID ...]
                                [--timeout S]

The defaults follow Gradescope's layout under $AUTOGRADER_ROOT (default /autograder). Each
exercise is one job of `pagedsim grade` (course/grade_job.py: `run_one`), worth its weight
(course/curriculum.toml) times the share of its checks passed; what isolates it there:
course/INSTRUCTORS.md, "Gradescope". Whatever happens, a results.json is written: a crash
here is one test that says so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

from pagedsim.testing import jail, walk

from . import curriculum, grade_job
from .grade_job import DEFAULT_TIMEOUT, READ_LIMITS, Mode, Run, read_handed, row, run_one, survey
from .grade_report import gradescope_results

STUDENT = "submission"  # the one student of a Gradescope run, as the rows name them
CODE = ("pagedsim", "course", "cuda_kernels")  # what a job's private copy holds


def installed_build(root: Path = curriculum.REPO_ROOT) -> dict:
    """{relative path: bytes} of the installed code (a student copy: no solutions), no caches."""
    build = {}
    for top in CODE:
        for e in walk.entries(root / top, walk.Bounds(depth=16, entries=50_000)):
            if e.kind == "file" and "__pycache__" not in e.rel and not e.rel.endswith(".pyc"):
                build[f"{top}/{e.rel}"] = (root / top / e.rel).read_bytes()
    return build


def grade_submission(folder: Path, exercises, timeout: float) -> list:
    """One Result per exercise for the submission in `folder`."""
    sandbox = jail.bwrap() is not None  # what works inside the container, on top of it
    how = Mode(sandbox, jail.can_run_as_user(sandbox))
    handed = survey(folder, exercises, READ_LIMITS)
    data = read_handed(folder, handed, exercises, READ_LIMITS)
    build = installed_build()
    rows = []
    with walk.temporary_folder("pagedsim-autograder-") as tmp:
        run = Run(build, grade_job.jobs_folder(Path(tmp)), how, timeout)
        jail.become_subreaper()
        for ex in exercises:
            got = data.get(ex.id)
            path = handed.path(folder, ex)
            if not isinstance(got, bytes):
                rows.append(row(STUDENT, ex.id, how, "error", [got or f"no file {path.name}"]))
                continue
            rows.append(run_one(STUDENT, ex.id, path, run, data=got))
    return rows


def main(argv: list[str] | None = None) -> int:
    top = Path(os.environ.get("AUTOGRADER_ROOT", "/autograder"))
    p = argparse.ArgumentParser(prog="python -m course.autograder", description=__doc__)
    p.add_argument("--submission", type=Path, default=top / "submission")
    p.add_argument("--results", type=Path, default=top / "results" / "results.json")
    p.add_argument("--exercise", nargs="+", metavar="ID", help="default: every exercise")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S")
    args = p.parse_args(argv)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    try:
        exercises = [curriculum.find(i) for i in args.exercise or ()] or curriculum.load()
        results = gradescope_results(grade_submission(args.submission, exercises, args.timeout))
    except Exception as e:  # the student still sees a result, and the instructor the cause
        where = traceback.extract_tb(e.__traceback__)[-3:]
        cause = f"{e!r} at " + " <- ".join(f"{f.filename}:{f.lineno}" for f in reversed(where))
        results = {
            "score": 0,
            "tests": [{"name": "autograder", "score": 0, "max_score": 0, "output": cause}],
        }
    args.results.write_text(json.dumps(results, indent=1))
    print(f"wrote {args.results}: score {results['score']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
