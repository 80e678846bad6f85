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
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

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
    """The command one grading process runs: `pagedsim check ID --impl FILE --json`, which
    prints one JSON object on its last stdout line and hides the reference solutions from
    the file it checks (course/guard.py)."""
    cmd = [sys.executable, "-m", "pagedsim.app.cli", "check", exercise_id, "--impl", str(path), "--json"]
    return cmd + (["--extra-checks", *map(str, extra_checks)] if extra_checks else [])


def _env(root: Path | None = None) -> dict:
    """The checker's environment: `root` (a student build) first on the import path."""
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
    root = str(root or curriculum.REPO_ROOT)
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def run_one(student: str, ex_id: str, path: Path, *, timeout: float, extra_checks=(),
            command=None, build: Path | None = None) -> Result:
    """Grade one file in its own process group; never raises for anything the student did."""
    if not path.is_file():
        return Result(student, ex_id, "error", messages=[f"no file {path.name}"])
    start = time.monotonic()
    scratch = tempfile.TemporaryDirectory(prefix="pagedsim-grade-")  # cwd: files a submission writes land here
    proc = subprocess.Popen((command or child_command)(ex_id, path, extra_checks), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(build),
                            start_new_session=True, cwd=scratch.name)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the student's loop and anything it started
        proc.communicate()
        return Result(student, ex_id, "timeout", seconds=round(time.monotonic() - start, 2),
                      messages=[f"killed after {timeout:g} s: an endless loop, or far too slow"])
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        scratch.cleanup()
    took = round(time.monotonic() - start, 2)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    try:
        data = json.loads(lines[-1]) if lines else None
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("status") in STATUSES:
        keep = {k: data[k] for k in ("status", "passed", "total", "failed", "messages") if k in data}
        return Result(student, ex_id, seconds=took, **keep)
    tail = (err.strip().splitlines() or ["(nothing on stderr)"])[-1]
    return Result(student, ex_id, "error", seconds=took,
                  messages=[f"the checker exited with code {proc.returncode} before reporting: {tail[:200]}"])


def plan(root: Path, exercise_ids=None) -> tuple[list[str], list]:
    """(students, exercises) to grade: every sub-folder, and the chosen or handed-in exercises."""
    exercises = curriculum.load()
    students = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if exercise_ids:
        chosen = [curriculum.find(i, exercises) for i in exercise_ids]
    else:
        chosen = [ex for ex in exercises if any(find_submission(root / s, ex).is_file() for s in students)]
    return students, chosen


def private_checks(build: Path, extra_checks) -> list[Path]:
    """Copies of the instructor's extra check files inside the private build, next to the
    course's own checks, whether git tracks them or not: run from there they import the
    build's `course` (never the source tree's, with its solutions), and a path given
    relative to where `grade` was started still works in the checker's scratch folder."""
    folder = build / Path(curriculum.load()[0].checks[0]).parent  # [build]/course/ch03_kv_block/checks
    copies = []
    for i, src in enumerate(map(Path, extra_checks)):
        dest = folder / src.name
        if dest.exists():  # never replace one of the course's checks
            dest = folder / f"test_extra_{i}_{src.name}"
        shutil.copyfile(src, dest)
        copies.append(dest)
    return copies


def grade(root, exercise_ids=None, *, timeout: float = DEFAULT_TIMEOUT, extra_checks=(), workers: int = 2,
          command=None) -> list[Result]:
    """Grade every (student, exercise) of `root`; `command(ex_id, path, extra)` replaces the
    checker command (tests use a fake)."""
    root = Path(root)
    students, exercises = plan(root, exercise_ids)
    jobs = [(s, ex.id, find_submission(root / s, ex).resolve()) for s in students for ex in exercises]
    with tempfile.TemporaryDirectory(prefix="pagedsim-grade-build-") as tmp:
        build = Path(tmp) / "build"  # the code without solutions: nothing to exec or import there
        export.export(build, prefixes=export.PACKAGES)
        extra = private_checks(build, extra_checks)
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            futures = [pool.submit(run_one, s, i, p, timeout=timeout, extra_checks=extra, command=command,
                                   build=build) for s, i, p in jobs]
            return [f.result() for f in futures]


def as_json(results) -> dict:
    out: dict = {}
    for r in results:
        row = asdict(r)
        out.setdefault(row.pop("student"), {})[row.pop("exercise")] = row
    return out


def table(results) -> str:
    students = list(dict.fromkeys(r.student for r in results))
    ids = list(dict.fromkeys(r.exercise for r in results))
    cell = {(r.student, r.exercise): (f"{r.passed}/{r.total}" if r.status in ("pass", "fail") else r.status.upper())
            for r in results}
    w0 = max([7, *map(len, students)])
    widths = [max(len(i), 7, *(len(cell[s, i]) for s in students)) for i in ids]
    lines = [f"{'student':<{w0}}  " + "  ".join(f"{i:>{w}}" for i, w in zip(ids, widths))]
    lines.append("-" * len(lines[0]))
    for s in students:
        lines.append(f"{s:<{w0}}  " + "  ".join(f"{cell[s, i]:>{w}}" for i, w in zip(ids, widths)))
    notes = [r for r in results if r.status != "pass"]
    if notes:
        lines.append("")
    for r in notes:
        what = ", ".join(r.failed) if r.status == "fail" and r.failed else (r.messages[0] if r.messages else "")
        lines.append(f"{r.student} {r.exercise} {r.status}: {what}"[:160])
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="pagedsim grade", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path, help="one folder per student, files named like the stubs")
    p.add_argument("--exercise", nargs="+", metavar="ID", help="grade only these exercises (e.g. 3.4a 3.4b)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S",
                   help=f"seconds per student x exercise before the process group is killed "
                        f"(default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--json", action="store_true", help="print {student: {exercise: result}} as JSON")
    p.add_argument("--extra-checks", nargs="+", default=[], type=Path, metavar="PATH",
                   help="the instructor's hidden pytest files, run with the exercise's own checks")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                   help="submissions graded at the same time (default: 2, or 1 on one core)")
    args = p.parse_args(argv)
    if not args.dir.is_dir():
        p.error(f"{args.dir} is not a folder")
    if args.timeout <= 0:
        p.error("--timeout must be positive")
    missing = [str(c) for c in args.extra_checks if not c.is_file()]
    if missing:
        p.error(f"no such check file: {', '.join(missing)}")
    try:
        results = grade(args.dir, args.exercise, timeout=args.timeout, extra_checks=args.extra_checks,
                        workers=args.workers)
    except KeyError as e:
        p.error(str(e.args[0]))
    if args.json:
        print(json.dumps(as_json(results), indent=1))
    elif not results:
        print(f"pagedsim grade: nothing to grade in {args.dir} (one folder per student, files named like "
              f"the stubs, e.g. alice/ex3_4a_free_list.py)")
    else:
        print(table(results))
    return 0
