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
disk where `course.__file__` points. The statuses:

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
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pagedsim.app.cli import ArgParser, float_in, int_in
from pagedsim.testing import jail

from . import curriculum, export

STATUSES = ("pass", "fail", "timeout", "error")
DEFAULT_TIMEOUT = 120.0  # seconds per student x exercise: the checks take ~2-5 s on a slow core


@dataclass
class Result:
    student: str
    exercise: str
    status: str  # one of STATUSES
    passed: int = 0
    total: int = 0
    failed: list = field(default_factory=list)  # names of the failing checks
    messages: list = field(default_factory=list)  # one line each, in the student's terms
    seconds: float = 0.0
    sandbox: bool = False  # whether the submission ran under bubblewrap


def stub_name(ex) -> str:
    return Path(ex.stub).name


def find_submission(folder: Path, ex) -> Path:
    """The student's file for `ex`: directly in `folder`, else the first one below it (LMS
    downloads nest folders); a path that does not exist when there is none."""
    direct = folder / stub_name(ex)
    if direct.is_file():
        return direct
    nested = sorted(p for p in folder.rglob(stub_name(ex)) if p.is_file())
    return nested[0] if nested else direct


def child_command(exercise_id: str, path: Path, extra_checks=()) -> list[str]:
    """The command one grading process runs: `pagedsim check ID --impl FILE --json`. It runs the
    checks itself and the file in a child process of its own (course/isolation.py), then prints
    one JSON object on its last stdout line, after that child and all it started are dead."""
    cmd = [
        sys.executable,
        "-m",
        "pagedsim.app.cli",
        "check",
        exercise_id,
        "--impl",
        str(path),
        "--json",
    ]
    return cmd + (["--extra-checks", *map(str, extra_checks)] if extra_checks else [])


def _env(root: Path, scratch: Path, sandbox: bool) -> dict:
    """The checker's environment: its private copy of the code (`root`) alone on the import path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEDSIM_")}
    env.update(
        MPLBACKEND="Agg",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONNOUSERSITE="1",
        PYTHONPATH=str(root),
        PAGEDSIM_SCRATCH=str(scratch),
        PAGEDSIM_SANDBOX="1" if sandbox else "0",
    )
    return env


@dataclass
class Job:
    """One student x exercise: a private folder outside every student's, made for this job alone."""

    folder: Path
    code: Path  # the build (code and checks, no solutions): read-only, hashed before and after
    submission: Path  # a read-only copy of the student's file
    scratch: Path  # the only place the job may write
    digest: str = ""

    @classmethod
    def make(cls, jobs: Path, build: dict, path: Path, extra_checks=()) -> tuple[Job, list[Path]]:
        """Write the build (held in memory, so no job can change another's) and the file."""
        folder = Path(tempfile.mkdtemp(prefix="job-", dir=jobs))
        job = cls(folder, folder / "code", folder / "submission" / path.name, folder / "scratch")
        for rel, data in build.items():
            (job.code / rel).parent.mkdir(parents=True, exist_ok=True)
            (job.code / rel).write_bytes(data)
        extra = private_checks(job.code, extra_checks)
        job.submission.parent.mkdir()
        shutil.copyfile(path, job.submission)
        job.scratch.mkdir()
        jail.read_only(job.code)
        jail.read_only(job.submission.parent)
        job.digest = jail.tree_hash(job.code) + jail.tree_hash(job.submission.parent)
        return job, extra

    def tampered(self) -> bool:
        return jail.tree_hash(self.code) + jail.tree_hash(self.submission.parent) != self.digest

    def remove(self) -> None:
        jail.writable(self.folder)
        shutil.rmtree(self.folder, ignore_errors=True)


def run_one(
    student: str,
    ex_id: str,
    path: Path,
    *,
    timeout: float,
    extra_checks=(),
    command=None,
    build: dict,
    jobs: Path,
    sandbox: bool = False,
) -> Result:
    """Grade one file in its own session, from its own copy of the checks; never raises for
    anything the student did. The session and every descendant are killed when it ends."""
    if not path.is_file():
        return Result(student, ex_id, "error", messages=[f"no file {path.name}"], sandbox=sandbox)
    refused = refuse(path)
    if refused:
        return Result(student, ex_id, "error", messages=[refused], sandbox=sandbox)
    job, extra = Job.make(jobs, build, path, extra_checks)
    start = time.monotonic()
    proc = subprocess.Popen(
        (command or child_command)(ex_id, job.submission, extra),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        env=_env(job.code, job.scratch, sandbox),
        start_new_session=True,
        cwd=job.scratch,
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        jail.kill_tree(
            proc.pid, sessions={proc.pid}
        )  # every time: the checker, the student, their children
    if timed_out:
        out, err = proc.communicate()
    took = round(time.monotonic() - start, 2)
    tampered = job.tampered()
    job.remove()

    def refused(status: str, message: str) -> Result:  # a verdict the checker did not write
        return Result(student, ex_id, status, seconds=took, sandbox=sandbox, messages=[message])

    if tampered:
        return refused(
            "error",
            "the job changed its private copy of the checks or of the submission: not graded",
        )
    if timed_out:
        return refused("timeout", f"killed after {timeout:g} s: an endless loop, or far too slow")
    lines = [ln for ln in out.splitlines() if ln.strip()]
    try:
        data = json.loads(lines[-1]) if lines else None
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("status") in STATUSES:
        keep = {
            k: data[k] for k in ("status", "passed", "total", "failed", "messages") if k in data
        }
        return Result(student, ex_id, seconds=took, sandbox=sandbox, **keep)
    tail = (err.strip().splitlines() or ["(nothing on stderr)"])[-1]
    return refused(
        "error", f"the checker exited with code {proc.returncode} before reporting: {tail[:200]}"
    )


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


def private_checks(build: Path, extra_checks) -> list[Path]:
    """Copies of the instructor's extra check files inside a private build, next to the
    course's own checks, whether git tracks them or not: run from there they import the
    build's `course` (never the source tree's, with its solutions), and a path given
    relative to where `grade` was started still works in the checker's scratch folder."""
    folder = (
        build / Path(curriculum.load()[0].checks[0]).parent
    )  # [build]/course/ch03_kv_block/checks
    copies = []
    for i, src in enumerate(extra_checks):  # a path, or (name, bytes) read when grading began
        name, data = (
            (src[0], src[1]) if isinstance(src, tuple) else (Path(src).name, Path(src).read_bytes())
        )
        dest = folder / name
        if dest.exists():  # never replace one of the course's checks
            dest = folder / f"test_extra_{i}_{name}"
        dest.write_bytes(data)
        copies.append(dest)
    return copies


def refuse(path: Path) -> str:
    """Why a handed-in file is not graded at all: a link (to the solution, or anywhere), or a
    byte-for-byte copy of a reference solution; '' when it is graded."""
    if path.is_symlink() or path.resolve() != path.absolute():
        return f"{path.name} is (or is under) a symbolic link, not a file of your own: not graded"
    data = path.read_bytes()
    if any(data == p.read_bytes() for p in solutions_on_disk()):
        return f"{path.name} is a copy of the reference solution: not graded"
    return ""


def solutions_on_disk() -> list[Path]:
    """The reference solutions that this installation (a checkout, an editable or a plain
    install) holds: readable by any process of this user unless a sandbox hides them."""
    return [p for ex in curriculum.load() if (p := ex.path("solution")).is_file()]


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


def as_json(results) -> dict:
    out: dict = {}
    for r in results:
        row = asdict(r)
        out.setdefault(row.pop("student"), {})[row.pop("exercise")] = row
    return out


def table(results) -> str:
    names = {r.student: printable(r.student) for r in results}
    students = list(dict.fromkeys(r.student for r in results))
    ids = list(dict.fromkeys(r.exercise for r in results))
    cell = {
        (r.student, r.exercise): (
            f"{r.passed}/{r.total}" if r.status in ("pass", "fail") else r.status.upper()
        )
        for r in results
    }
    w0 = max([7, *(len(names[s]) for s in students)])
    widths = [max(len(i), 7, *(len(cell[s, i]) for s in students)) for i in ids]
    columns = list(zip(ids, widths, strict=True))
    lines = [f"{'student':<{w0}}  " + "  ".join(f"{i:>{w}}" for i, w in columns)]
    lines.append("-" * len(lines[0]))
    for s in students:
        lines.append(f"{names[s]:<{w0}}  " + "  ".join(f"{cell[s, i]:>{w}}" for i, w in columns))
    notes = [r for r in results if r.status != "pass"]
    if notes:
        lines.append("")
    for r in notes:
        what = (
            ", ".join(r.failed)
            if r.status == "fail" and r.failed
            else (r.messages[0] if r.messages else "")
        )
        lines.append(printable(f"{names[r.student]} {r.exercise} {r.status}: {what}")[:160])
    return "\n".join(lines)


def printable(text: str) -> str:
    """`text` with control characters (ANSI escapes included) written as escapes: a folder name
    cannot move the cursor or recolour the report."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))


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
