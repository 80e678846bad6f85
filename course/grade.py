"""`pagedsim grade DIR`: grade a folder of submissions, one process per student x exercise.

    DIR/
      alice/ex3_4a_free_list.py      files are named like the stubs (course/curriculum.toml)
      alice/ex3_4b_copy_on_write.py
      bob/ex3_4a_free_list.py         (or anywhere below bob/, e.g. bob/hw3/ex3_4a_free_list.py)

    pagedsim grade DIR [--exercise ID ...] [--timeout S] [--json] [--extra-checks PATH ...]
                       [--workers N]

Every (student, exercise) runs `pagedsim check ID --impl FILE --json` in a new
process group; at the time limit the whole group is killed (SIGKILL), so an endless loop at
import or inside a check costs exactly `--timeout` seconds and is reported as
`timeout`. The checker runs from a private student build (`export-course`, code
only) made for the run, so the reference solutions are neither importable nor on
disk where `course.__file__` points (one job: grade_job.py; the reports: grade_report.py).
The statuses:

    pass     every check passed
    fail     the file imports and runs, some checks fail (their names are listed)
    timeout  killed at the time limit
    error    the file is missing, does not parse, crashes or calls sys.exit at
             import, imports the reference solution, or the checker itself died

`--extra-checks` adds the instructor's own pytest files (hidden from students): each
test in them must call `course.impl.load_impl(ID)` to get the submission. Without
`--exercise`, every exercise that at least one student handed in is graded, and a
student without that file gets `error` ("no file ..."). Exit status: 0 when every
result was produced (whatever the grades), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pagedsim.app.args import ArgParser, float_in, int_in
from pagedsim.testing import jail

from . import curriculum, export
from .grade_job import (  # noqa: F401 -- re-exported: one job's pieces keep their old names
    DEFAULT_TIMEOUT,
    STATUSES,
    Job,
    Result,
    child_command,
    find_submission,
    private_checks,
    refuse,
    run_one,
    solutions_on_disk,
    stub_name,
)
from .grade_report import as_json, printable, table


def plan(root: Path, exercise_ids=None) -> tuple[list[str], list]:
    """(students, exercises) to grade: every sub-folder, and the chosen or handed-in exercises."""
    exercises = curriculum.load()
    students = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if exercise_ids:
        chosen = [curriculum.find(i, exercises) for i in exercise_ids]
    else:
        chosen = [
            ex for ex in exercises if any(find_submission(root / s, ex).is_file() for s in students)
        ]
    return students, chosen


def _attribute(writes: list[str], windows: dict, root=None) -> dict:
    """{(student, exercise): [paths]}: each file written under DIR, blamed on the jobs that ran
    when it was last modified (one job when they ran one at a time). A file inside a
    student's own folder is blamed on that student's running jobs alone, when there are any."""
    blamed: dict = {}
    for path in writes:
        try:
            when = os.lstat(path).st_mtime
        except OSError:
            when = None  # removed: every job could have
        running = [key for key, (t0, t1) in windows.items()
                   if when is None or t0 - 1 <= when <= t1 + 1]
        own = [key for key in running if root is not None
               and Path(os.path.abspath(Path(root, key[0]))) in Path(os.path.abspath(path)).parents]
        for key in own or running:
            blamed.setdefault(key, []).append(path)
    return blamed


def grade(
    root,
    exercise_ids=None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    extra_checks=(),
    workers: int = 2,
    command=None,
    sandbox: bool | None = None,
) -> list[Result]:
    """Grade every (student, exercise) of `root`; `command(ex_id, path, extra)` replaces the
    checker command (tests use a fake). `sandbox` (default: when bubblewrap works here) runs
    each submission under bubblewrap."""
    root = Path(root).resolve()
    sandbox = jail.bwrap() is not None if sandbox is None else sandbox
    if sandbox and jail.bwrap() is None:
        raise ValueError(
            "--sandbox needs bubblewrap (apt-get install bubblewrap), which is not available here"
        )
    students, exercises = plan(root, exercise_ids)
    todo = [(s, ex.id, find_submission(root / s, ex)) for s in students for ex in exercises]
    jail.become_subreaper()
    keep = jail.descendants(os.getpid())
    before = jail.snapshot(root)
    windows: dict = {}

    def one(s, i, p):
        t0 = time.time()
        try:
            return run_one(
                s,
                i,
                p,
                timeout=timeout,
                extra_checks=extra,
                command=command,
                build=build,
                jobs=jobs,
                sandbox=sandbox,
            )
        finally:
            windows[s, i] = (t0, time.time())

    with tempfile.TemporaryDirectory(prefix="pagedsim-grade-") as tmp:
        jobs = Path(tmp) / "jobs"  # outside every student's folder
        written = export.export(
            Path(tmp) / "build", prefixes=export.PACKAGES
        )  # the code without solutions
        build = {rel: (Path(tmp) / "build" / rel).read_bytes() for rel in written}
        shutil.rmtree(Path(tmp) / "build")
        jobs.mkdir()
        extra = [
            (Path(c).name, Path(c).read_bytes()) for c in extra_checks
        ]  # no job can change them
        try:
            with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                results = [f.result() for f in [pool.submit(one, s, i, p) for s, i, p in todo]]
        finally:
            jail.kill_tree(None, orphans_of_self=True, keep=keep)  # whatever escaped its session
            jail.writable(Path(tmp))
    blamed = _attribute(jail.changed(before, jail.snapshot(root)), windows, root)
    for r in results:
        wrote = blamed.get((r.student, r.exercise))
        if wrote:
            names = ", ".join(os.path.relpath(w, root) for w in wrote[:3]) + (
                " ..." if len(wrote) > 3 else ""
            )
            r.status, r.passed = "error", 0
            r.messages = [
                f"wrote outside its scratch folder, in the submissions folder: {names}",
                *r.messages,
            ]
    return results


def parser() -> ArgParser:
    p = ArgParser(prog="pagedsim grade", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path, help="one folder per student, files named like the stubs")
    p.add_argument(
        "--exercise", nargs="+", metavar="ID", help="grade only these exercises (e.g. 3.4a 3.4b)"
    )
    p.add_argument(
        "--timeout",
        type=float_in(0, 86_400, open_low=True),
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"seconds per student x exercise before its session is killed "
        f"(default {DEFAULT_TIMEOUT:g})",
    )
    p.add_argument(
        "--json", action="store_true", help="print {student: {exercise: result}} as JSON"
    )
    p.add_argument(
        "--extra-checks",
        nargs="+",
        default=[],
        type=Path,
        metavar="PATH",
        help="the instructor's hidden pytest files, run with the exercise's own checks",
    )
    p.add_argument(
        "--workers",
        type=int_in(1, 64),
        default=min(2, os.cpu_count() or 1),
        help="submissions graded at the same time (default: 2, or 1 on one core)",
    )
    p.add_argument(
        "--sandbox",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run each submission under bubblewrap: read-only file system but its scratch "
        "folder, no network, its own PID namespace (default: on when bwrap works here)",
    )
    return p


def main(argv: list[str]) -> int:
    p = parser()
    args = p.parse_args(argv)
    if not args.dir.is_dir():
        p.error(f"{printable(args.dir)} is not a folder")
    missing = [printable(c) for c in args.extra_checks if not c.is_file()]
    if missing:
        p.error(f"no such check file: {', '.join(missing)}")
    sandbox = jail.bwrap() is not None if args.sandbox is None else args.sandbox
    if args.sandbox and jail.bwrap() is None:
        p.error("--sandbox needs bubblewrap (apt-get install bubblewrap), which does not work here")
    answers = solutions_on_disk()
    if answers and not sandbox and args.sandbox is None:
        p.error(
            f"the reference solutions are on disk ({printable(answers[0].parent)}) and no sandbox "
            "can hide them from submissions: install bubblewrap, run from a copy made by "
            "`pagedsim export-course`, "
            "or pass --no-sandbox to accept it"
        )
    try:
        results = grade(
            args.dir,
            args.exercise,
            timeout=args.timeout,
            extra_checks=args.extra_checks,
            workers=args.workers,
            sandbox=sandbox,
        )
    except KeyError as e:
        p.error(str(e.args[0]))
    if args.json:
        print(json.dumps(as_json(results), indent=1))
    elif not results:
        print(
            f"pagedsim grade: nothing to grade in {printable(args.dir)} (one folder per student, "
            "files named "
            f"like the stubs, e.g. alice/ex3_4a_free_list.py)"
        )
    else:
        print(table(results))
        print(
            "\n"
            + (
                "sandbox: bubblewrap (read-only file system but scratch, no network, "
                "own PID namespace)"
                if sandbox
                else "sandbox: off"
                + (
                    f"; the reference solutions under "
                    f"{printable(answers[0].parent)} were readable by "
                    "submissions"
                    if answers
                    else ""
                )
            )
        )
    return 0
