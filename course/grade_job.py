"""One student x exercise, graded in a process group of its own (see course/grade.py).

Invariants: every job runs `pagedsim check ID --impl FILE --json` (`child_command`) from a
private, read-only copy of the code and the checks and a read-only copy of the file, and
may write only in its scratch folder (`Job`); the copies are hashed before and after, so a
job that changed them is not graded; at the end (or at the time limit) the whole session
is killed; a `Result` is produced for anything the student did, never an exception. A
file that is a link or a byte-for-byte copy of a reference solution is refused unread.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from pagedsim.testing import jail

from . import curriculum

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
