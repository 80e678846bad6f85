"""`pagedsim grade DIR`: grade a folder of submissions, one process per student x exercise.

    DIR/
      alice/ex3_4a_free_list.py      files are named like the stubs (course/curriculum.toml)
      alice/ex3_4b_copy_on_write.py
      bob/ex3_4a_free_list.py         (or anywhere below bob/, e.g. bob/hw3/ex3_4a_free_list.py)

    pagedsim grade DIR [--exercise ID ...] [--timeout S] [--json] [--extra-checks PATH ...]
                       [--workers N] [--sandbox | --no-sandbox] [--csv FILE]
                       [--results-json FOLDER] [--memory-mib MIB] [--cpu-seconds S]
                       [--max-reply-mib MIB]

Every (student, exercise) runs `pagedsim check ID --impl FILE --json` in a new
process group; at the time limit the whole group is killed (SIGKILL), so an endless loop at
import or inside a check costs exactly `--timeout` seconds and is reported as
`timeout`. The checker runs from a private student build (`export-course`, code
only) made for the run, so the reference solutions are neither importable nor on
disk where `course.__file__` points (one job: grade_job.py; the reports: grade_report.py;
the similarity flag: grade_similarity.py). The files are read once, when grading begins,
and each job grades those bytes; DIR is hashed file by file after every job (`Watch`).
How a submission is isolated (`decide_mode`): bubblewrap where it works, a uid of its own
per job when the grader is root; with neither, grading is refused unless --no-sandbox,
and every result is then `verified: false` (the threat model: course/INSTRUCTORS.md).
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
result was produced (whatever the grades), 2 for bad arguments (checked before anything
is probed or started).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pagedsim.app.args import ArgParser, float_in, int_in
from pagedsim.testing import jail

from . import curriculum, export
from . import grade_similarity as similarity
from .grade_job import (  # noqa: F401 -- re-exported: one job's pieces keep their old names
    DEFAULT_TIMEOUT,
    STATUSES,
    Job,
    Mode,
    Result,
    child_command,
    find_submission,
    private_checks,
    refuse,
    run_one,
    solutions_on_disk,
    stub_name,
)
from .grade_report import as_csv, as_json, printable, table, write_gradescope


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


class Watch:
    """Who changed a file under DIR: after each job ends, DIR is hashed again (by content) and
    every change since the last look is blamed on each job that ran since then (the one job,
    with --workers 1). Files are graded from the bytes read when grading began, so a change
    never reaches the student whose file it was."""

    def __init__(self, root: Path):
        self.root, self.lock = root, threading.Lock()
        self.seen = jail.contents(root)
        self.running: set = set()
        self.since: set = set()  # jobs that ran since the last look
        self.blamed: dict = {}

    def start(self, key) -> None:
        with self.lock:
            self.running.add(key)
            self.since.add(key)

    def end(self, key) -> None:
        with self.lock:
            self.running.discard(key)
            now = jail.contents(self.root)
            changed = jail.changed(self.seen, now)
            for job in self.since:
                if changed:
                    self.blamed.setdefault(job, []).extend(changed)
            self.seen, self.since = now, set(self.running)


def decide_mode(
    sandbox: bool | None, *, as_user: bool | None = None, limits=None, max_reply: int = 64 << 20
) -> Mode:
    """The isolation a run gets: bubblewrap when asked or by default where it works, and a uid
    of its own per job whenever one can run Python here (`as_user` forces it). ValueError
    when the sandbox was asked for and does not work, or when nothing would isolate a
    submission and --no-sandbox was not given (then every result would be unverified)."""
    works = jail.bwrap() is not None
    if sandbox and not works:
        raise ValueError(
            "--sandbox needs bubblewrap (apt-get install bubblewrap), which does not work here"
        )
    use = works if sandbox is None else sandbox
    own = jail.can_run_as_user(use) if as_user is None else as_user
    if sandbox is None and not use and not own:
        raise ValueError(
            "no isolation is available here: bubblewrap does not work and no user "
            "of its own can run each job (the grader is not root, or Python sits "
            "in a folder only root may enter); install bubblewrap, or pass "
            "--no-sandbox to grade anyway with every result marked unverified"
        )
    return Mode(use, own, limits or jail.Limits(), max_reply)


def grade(
    root,
    exercise_ids=None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    extra_checks=(),
    workers: int = 2,
    command=None,
    sandbox: bool | None = None,
    mode: Mode | None = None,
) -> list[Result]:
    """Grade every (student, exercise) of `root`; `command(ex_id, path, extra)` replaces the
    checker command (tests use a fake). `mode` (default: `decide_mode(sandbox)`) says how each
    submission is isolated."""
    root = Path(root).resolve()
    students, exercises = plan(root, exercise_ids)
    mode = mode or decide_mode(sandbox)
    todo = [(s, ex.id, find_submission(root / s, ex)) for s in students for ex in exercises]
    originals = {}
    for s, i, p in todo:  # read once, now: what every job grades
        try:
            originals[s, i] = p.read_bytes() if p.is_file() and not p.is_symlink() else None
        except OSError:
            originals[s, i] = None
    jail.become_subreaper()
    keep = jail.descendants(os.getpid())
    watch = Watch(root)
    slots = queue.Queue()
    for n in range(max(1, workers)):
        slots.put(n)

    def one(s, i, p):
        slot = slots.get()
        watch.start((s, i))
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
                mode=mode,
                data=originals[s, i],
                uid=jail.job_uid(slot) if mode.own_uid else None,
            )
        finally:
            watch.end((s, i))
            slots.put(slot)

    with tempfile.TemporaryDirectory(prefix="pagedsim-grade-") as tmp:
        jobs = Path(tmp) / "jobs"  # outside every student's folder
        written = export.export(
            Path(tmp) / "build", prefixes=export.PACKAGES
        )  # the code without solutions
        build = {rel: (Path(tmp) / "build" / rel).read_bytes() for rel in written}
        shutil.rmtree(Path(tmp) / "build")
        jobs.mkdir()
        if mode.own_uid:  # each job's user may pass through (never list) to its own folder
            for d in (Path(tmp), jobs):
                d.chmod(0o711)
        extra = [
            (Path(c).name, Path(c).read_bytes()) for c in extra_checks
        ]  # no job can change them
        try:
            with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                results = [f.result() for f in [pool.submit(one, s, i, p) for s, i, p in todo]]
        finally:
            jail.kill_tree(None, orphans_of_self=True, keep=keep)  # whatever escaped its session
            jail.writable(Path(tmp))
    for r in results:
        wrote = sorted(set(watch.blamed.get((r.student, r.exercise), ())))
        if wrote:
            names = ", ".join(wrote[:3]) + (" ..." if len(wrote) > 3 else "")
            r.status, r.passed = "error", 0
            r.messages = [
                f"changed files in the submissions folder while it ran: {names}",
                *r.messages,
            ]
        data = originals.get((r.student, r.exercise))
        if data is not None and r.status in ("pass", "fail"):
            r.similar = similarity.flag(r.exercise, data)
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
        "folder, no network, its own PID namespace (default: on when bwrap works here). "
        "--no-sandbox grades even where nothing isolates a submission (results unverified)",
    )
    p.add_argument(
        "--csv", type=Path, metavar="FILE", help="also write one row per student x exercise to FILE"
    )
    p.add_argument(
        "--results-json",
        type=Path,
        metavar="FOLDER",
        help="also write FOLDER/STUDENT/results.json in Gradescope's format",
    )
    p.add_argument(
        "--memory-mib",
        type=int_in(64, 1 << 20),
        default=2048,
        metavar="MIB",
        help="address space of each submission's process (default 2048)",
    )
    p.add_argument(
        "--cpu-seconds",
        type=int_in(1, 86_400),
        default=300,
        metavar="S",
        help="CPU time of each submission's process (default 300)",
    )
    p.add_argument(
        "--max-reply-mib",
        type=int_in(1, 4096),
        default=64,
        metavar="MIB",
        help="the largest message a submission's process may send (default 64)",
    )
    return p


def main(argv: list[str]) -> int:
    p = parser()
    args = p.parse_args(argv)
    # every argument is checked before anything is probed or started
    if not args.dir.is_dir():
        p.error(f"{printable(args.dir)} is not a folder")
    missing = [printable(c) for c in args.extra_checks if not c.is_file()]
    if missing:
        p.error(f"no such check file: {', '.join(missing)}")
    try:
        for i in args.exercise or ():
            curriculum.find(i)
    except KeyError as e:
        p.error(str(e.args[0]))
    for out in filter(None, (args.csv, args.results_json)):
        if not out.absolute().parent.is_dir():
            p.error(
                f"no folder {printable(out.absolute().parent)} to write {printable(out.name)} in"
            )
    limits = jail.Limits(memory=args.memory_mib << 20, cpu=args.cpu_seconds)
    try:
        mode = decide_mode(args.sandbox, limits=limits, max_reply=args.max_reply_mib << 20)
    except ValueError as e:
        p.error(str(e))
    answers = solutions_on_disk()
    if answers and not mode.sandbox and args.sandbox is None:
        p.error(
            f"the reference solutions are on disk ({printable(answers[0].parent)}) and no sandbox "
            "can hide them from submissions: install bubblewrap, run from a copy made by "
            "`pagedsim export-course`, "
            "or pass --no-sandbox to accept it"
        )
    results = grade(
        args.dir,
        args.exercise,
        timeout=args.timeout,
        extra_checks=args.extra_checks,
        workers=args.workers,
        mode=mode,
    )
    if args.csv:
        args.csv.write_text(as_csv(results))
    if args.results_json:
        write_gradescope(results, args.results_json)
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
        print("\n" + describe(mode, answers))
    return 0


def describe(mode: Mode, answers) -> str:
    """The run's isolation, in one line under the table."""
    if mode.sandbox:
        what = (
            "sandbox: bubblewrap (read-only file system but scratch, no network, own PID namespace)"
        )
    elif mode.own_uid:
        what = "sandbox: off; each job ran as a user of its own (no access to the grader)"
    else:
        what = "sandbox: off and no user of its own: every result is UNVERIFIED"
    if not mode.sandbox and answers:
        what += (
            f"; the reference solutions under {printable(answers[0].parent)} were "
            "readable by submissions"
        )
    return what
