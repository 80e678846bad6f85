"""One student x exercise, graded in a process group of its own (see course/grade.py).

Invariants: every job runs `pagedsim check ID --impl FILE --json` from a private, read-only copy
of the code, the checks and the file (`Job`), hashed before and after: a job that changed them
is not graded. The whole session is killed at the end or the time limit; a `Result` comes out
for anything the student did, never an exception. As root, the checker runs confined as a uid of
its own with no capability (`Users`), and the grader starts and ends the submission's process at
its request (course/grade_launch.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pagedsim.testing import jail, walk

from . import checks_digest, curriculum, grade_launch, grade_warm, isolation, verdict
from .grade_report import utf8

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
    verified: bool = False  # whether it was kept from the grader and the other files (Mode)
    mode: str = "none"  # bubblewrap, own uid, both, or none
    limits: dict = field(default_factory=dict)  # the job's rlimits (jail.Limits)
    similar: str = ""  # a flag (never a fail): the reference solution with cosmetic changes


def stub_name(ex) -> str:
    return Path(ex.stub).name


@dataclass(frozen=True)
class ReadLimits:
    """What grading reads of one student's folder, checked before anything is read."""

    file_bytes: int = 1 << 20  # one handed-in file (the stubs are a few KB)
    student_bytes: int = 8 << 20  # all of one student's handed-in files together
    walk: walk.Bounds = walk.Bounds(depth=16, entries=5_000)


READ_LIMITS = ReadLimits()


@dataclass
class Handed:
    """One student's folder: the file chosen per stub name, or why it could not be walked."""

    files: dict  # stub name -> walk.Entry (a regular file, or a link that `read_handed` refuses)
    error: str = ""

    def path(self, folder: Path, ex) -> Path:
        e = self.files.get(stub_name(ex))
        return folder / (e.rel if e else stub_name(ex))


def survey(folder: Path, exercises, limits: ReadLimits = READ_LIMITS) -> Handed:
    """Walk a student's folder once (bounded, no link followed). Per exercise: the file directly
    in `folder`, else the first below it in sorted order; a link only where no file has the name."""
    try:
        found = walk.entries(folder, limits.walk)
    except walk.Stopped as e:
        return Handed({}, f"your folder was not graded: {e.args[0]}")
    names = {stub_name(ex) for ex in exercises}
    files: dict = {}
    rank = {"file": 0, "link": 1}
    for e in found:
        name = e.rel.rsplit("/", 1)[-1]
        if name not in names or e.kind not in rank:
            continue
        key = (e.rel != name, rank[e.kind], e.rel)  # direct first, files before links
        old = files.get(name)
        if old is None or key < (old.rel != name, rank[old.kind], old.rel):
            files[name] = e
    return Handed(files)


def read_handed(folder: Path, handed: Handed, exercises, limits: ReadLimits) -> dict:
    """{exercise id: bytes, or why not}: sizes checked before anything is read, never a link."""
    if handed.error:
        return {ex.id: handed.error for ex in exercises}
    chosen = {ex.id: handed.files.get(stub_name(ex)) for ex in exercises}
    total = sum(
        e.size
        for e in chosen.values()
        if e is not None and e.kind == "file" and e.size <= limits.file_bytes
    )
    if total > limits.student_bytes:
        why = f"your files hold {total:,} bytes, over the limit of {limits.student_bytes:,}"
        return {i: why for i, e in chosen.items() if e is not None}
    out: dict = {}
    for i, e in chosen.items():
        if e is None:
            continue
        if e.kind == "link":
            out[i] = f"{e.rel} is a symbolic link, not a file of your own: not graded"
            continue
        try:
            out[i] = walk.read(folder / e.rel, limits.file_bytes)
        except walk.Stopped as stop:
            out[i] = f"not graded: {stop.args[0]}"
    return out


def child_command(exercise_id: str, path: Path, extra_checks=()) -> list[str]:
    cmd = [sys.executable, "-m", "pagedsim.app.cli", "check", exercise_id, "--impl", str(path)]
    return cmd + _json_and_extra(extra_checks)


def _json_and_extra(extra_checks) -> list[str]:
    return ["--json"] + (["--extra-checks", *map(str, extra_checks)] if extra_checks else [])


@dataclass(frozen=True)
class Mode:
    """How the jobs of one run are kept apart from the grader and from each other."""

    sandbox: bool  # under bubblewrap (namespaces, read-only file system but scratch)
    own_uid: bool  # each job's child as a user of its own (the grader runs as root)
    limits: jail.Limits = jail.Limits()
    max_reply: int = 64 << 20  # bytes in one reply of the submission's process
    warm: bool = True  # as root: each worker's checker forked from a warm process (grade_warm)

    @property
    def verified(self) -> bool:
        """Whether a submission is kept from the grader and the other files: a verdict to trust."""
        return self.sandbox or self.own_uid

    @property
    def name(self) -> str:
        parts = (["bubblewrap"] if self.sandbox else []) + (["own uid"] if self.own_uid else [])
        return " + ".join(parts) or "none"


def _env(job: Job, mode: Mode, users: Users | None) -> dict:
    """The checker's environment: its private code alone on the import path."""
    root, scratch = job.code, job.scratch
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEDSIM_")}
    env.update(
        MPLBACKEND="Agg",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONNOUSERSITE="1",
        PYTHONPATH=str(root),
        PAGEDSIM_SCRATCH=str(scratch),
        TMPDIR=str(scratch),  # the checker writes nowhere else (pagedsim/testing/audit.py)
        PAGEDSIM_SANDBOX="1" if mode.sandbox else "0",
        PAGEDSIM_LIMITS=json.dumps(mode.limits.as_json()),
        PAGEDSIM_MAX_REPLY=str(mode.max_reply),
        **{checks_digest.VAR: json.dumps(job.checks_digest())},
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",  # Hypothesis' plugin alone (course/runner.py)
    )
    env.update({k: os.environ[k] for k in jail.PASSED_ON if k in os.environ})
    if users is not None:
        env["HOME"] = str(scratch)
        if users.job is not None:
            env["PAGEDSIM_JOB_UID"] = str(users.job)
    return env


@dataclass(frozen=True)
class Users:
    """Who a job's processes run as when the grader is root: the checker as a uid without
    capability, the submission as another (or root in bubblewrap's namespaces)."""

    checker: int
    job: int | None

    @classmethod
    def of(cls, mode: Mode, slot: int) -> Users:
        return cls(jail.checker_uid(slot), jail.job_uid(slot) if mode.own_uid else None)

    @property
    def group(self) -> int:  # reads the job's code and file; both users are in it
        return self.job if self.job is not None else self.checker


def _hidden() -> list[Path]:
    """The reference solutions and the mutant catalogues of this installation."""
    answers = solutions_on_disk()
    chapter = [p.parent.parent for p in answers[:1]]
    return [p.parent for p in answers] + [
        c / name for c in chapter for name in ("mutants.toml", "equivalent_mutants.toml")
    ]


def _checker_view(job: Job, users: Users, *more: Path) -> tuple[dict, dict]:
    """The checker's view and account (jail.confined, jail.Account): only its job's folder of the
    shared temporary ones, no solutions or mutant catalogues, its own uid with no capability."""
    groups = [] if users.group == users.checker else [users.group]
    account = dict(uid=users.checker, groups=groups, cwd=str(job.scratch), bare=True)
    keep = [str(p) for p in (job.folder, *more)]
    return dict(keep=keep, writable=str(job.scratch), hide=[str(p) for p in _hidden()]), account


def _launcher(job: Job, mode: Mode, users: Users) -> grade_launch.Launcher:
    """The grader's end of the submission's process: a view like the checker's, as the job's uid."""
    spec = isolation.ChildSpec(job.submission, job.code, job.work, mode.sandbox)
    view = dict(keep=[job.folder], writable=job.work, hide=_hidden())
    if users.job is not None:
        account = jail.Account(users.job, limits=mode.limits, cwd=str(job.work))
        prepare = jail.confined(**view, account=account)
    else:  # bubblewrap as root (no uid of its own): it maps uid 0 into its namespace
        confine = jail.confined(**view)

        def prepare() -> None:
            confine()
            mode.limits.apply(False)

    def spawn(fd: int) -> subprocess.Popen:
        return spec.popen(fd, prepare, own_uid=users.job is not None)

    def end(pid: int) -> None:
        if users.job is not None:
            jail.kill_user(users.job)

    return grade_launch.Launcher(spawn, end)


def _start_cold(argv: list[str], job: Job, users: Users | None, env: dict, fds: list[int]):
    """The job's checker as a process of its own (confined, as its uid, with `users`)."""
    confine = None
    if users is not None:
        view, account = _checker_view(job, users)
        confine = jail.confined(**view, account=jail.Account(**account))
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        env=env,
        pass_fds=fds,
        start_new_session=True,
        cwd=None if users else job.scratch,  # as its uid, it enters scratch itself
        preexec_fn=confine,
    )


def _fork_warm(
    pool: grade_warm.Pool, slot: int, job: Job, users: Users, argv: list[str], env: dict
) -> grade_warm.Job:
    """The job's checker forked from its worker's warm process, confined as a cold one."""
    argv = argv + _json_and_extra(pool.extra)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    fds = {"stdout": out_w, "stderr": err_w, verdict.VAR: int(env.pop(verdict.VAR))}
    if grade_launch.VAR in env:
        fds[grade_launch.VAR] = int(env.pop(grade_launch.VAR))
    view, account = _checker_view(job, users, pool.build)
    try:
        got = pool.slots[slot].start(argv, env, view, account, fds)
    except OSError:
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
    got.read(out_r, err_r)
    return got


@dataclass
class Job:
    """One student x exercise: a private folder for this job alone."""

    folder: Path
    code: Path  # the build (code and checks, no solutions): read-only, hashed before and after
    submission: Path  # a read-only copy of the student's file
    scratch: Path  # the checker's scratch; the child's is scratch/child (`work`)
    digest: dict = field(default_factory=dict)  # relative path -> sha256, code and file

    @property
    def work(self) -> Path:
        return self.scratch / "child"

    @classmethod
    def make(
        cls, run: Run, name: str, data: bytes, users: Users | None = None
    ) -> tuple[Job, list[Path]]:
        """Write the build and the file into a new private folder (with `users`: their group's)."""
        jobs, build, extra_checks = run.jobs, run.build, run.extra_checks
        folder = Path(tempfile.mkdtemp(prefix="job-", dir=jobs))
        job = cls(folder, folder / "code", folder / "submission" / name, folder / "scratch")
        for rel, body in build.items():
            (job.code / rel).parent.mkdir(parents=True, exist_ok=True)
            (job.code / rel).write_bytes(body)
        extra = private_checks(job.code, extra_checks)
        job.submission.parent.mkdir()
        job.submission.write_bytes(data)
        job.scratch.mkdir()
        job.work.mkdir()
        jail.read_only(job.code)
        jail.read_only(job.submission.parent)
        if users is not None:
            jail.share_with(users.group, job.code)
            jail.share_with(users.group, job.submission.parent)
            jail.give_to(users.checker, job.scratch)
            if users.job is not None:
                jail.give_to(users.job, job.work)
            for d in (folder, job.scratch):
                d.chmod(0o711)
        job.digest = job.contents()
        return job, extra

    def contents(self) -> dict:
        return {
            **{f"code/{k}": v for k, v in jail.contents(self.code).items()},
            **{f"submission/{k}": v for k, v in jail.contents(self.submission.parent).items()},
        }

    def checks_digest(self) -> dict:
        ours = "code/course/"
        return {k.removeprefix(ours): v for k, v in self.digest.items() if k.startswith(ours)}

    def tampered(self) -> list[str]:
        return jail.changed(self.digest, self.contents())

    def remove(self) -> None:
        walk.remove_tree(self.folder)  # however deep the job nested its scratch


def row(student: str, ex_id: str, mode: Mode, status: str, messages=(), **kw) -> Result:
    """A Result that says how the run was isolated (`mode`)."""
    how = dict(sandbox=mode.sandbox, verified=mode.verified, mode=mode.name)
    how["limits"] = mode.limits.as_json()
    return Result(student, ex_id, status, messages=list(messages), **how, **kw)


def jobs_folder(tmp: Path) -> Path:
    """tmp/jobs for the jobs' folders; as root, passable (never listable) by each job's users."""
    (tmp / "jobs").mkdir()
    if os.geteuid() == 0:
        for d in (tmp, tmp / "jobs"):
            d.chmod(0o711)
    return tmp / "jobs"


@dataclass(frozen=True)
class Run:
    """What every job of one `grade` run shares."""

    build: dict  # relative path -> bytes: the code and the checks, no solutions
    jobs: Path  # where each job's private folder is made (outside every student's)
    mode: Mode = Mode(False, False)
    timeout: float = DEFAULT_TIMEOUT  # seconds per job
    extra_checks: tuple = ()  # the instructor's extra check files: (name, bytes) or paths
    command: Callable | None = None  # (ex_id, path, extra) -> argv: a test's fake checker
    warm: grade_warm.Pool | None = None  # the run's warm checkers (as root, Mode.warm)


def run_one(
    student: str, ex_id: str, path: Path, run: Run, *, data: bytes, slot: int = 0
) -> Result:
    """Grade one file in its own session; never raises for anything the student did. `data`: the
    bytes read (bounded, never through a link: read_handed) when grading began; `slot`: the
    worker (its uids)."""
    mode = run.mode
    if any(data == p.read_bytes() for p in solutions_on_disk()):
        why = f"{path.name} is a copy of the reference solution: not graded"
        return row(student, ex_id, mode, "error", [why])
    # as root, the checker runs as a uid of its own and the grader starts its submission
    confine = run.command is None and mode.verified and os.geteuid() == 0  # a test's fake: as is
    users = Users.of(mode, slot) if confine else None
    legacy_uid = jail.job_uid(slot) if mode.own_uid and not confine else None
    job, extra = Job.make(run, path.name, data, users)
    launcher = _launcher(job, mode, users) if users is not None else None
    start = time.monotonic()
    ours, theirs = os.pipe()  # the verdict's channel (course/verdict.py), named before it runs
    env = {**_env(job, mode, users), verdict.VAR: str(theirs)}
    if legacy_uid is not None:
        env["PAGEDSIM_JOB_UID"] = str(legacy_uid)
    fds = [theirs]
    if launcher is not None:
        env[grade_launch.VAR] = str(launcher.fd())
        fds.append(launcher.fd())
    try:
        proc = None
        if users is not None and run.warm is not None:
            try:
                proc = _fork_warm(
                    run.warm, slot, job, users, [ex_id, "--impl", str(job.submission)], dict(env)
                )
            except OSError:  # the warm process is gone: this job starts cold
                proc = None
        if proc is None:
            argv = (run.command or child_command)(ex_id, job.submission, extra)
            proc = _start_cold(argv, job, users, env, fds)
    finally:
        os.close(theirs)
        if launcher is not None:
            launcher.serve()
    receiver = verdict.Receiver(ours)
    out, err, timed_out = _wait(proc, run.timeout, launcher, users, legacy_uid)
    took = round(time.monotonic() - start, 2)
    got, why = receiver.verdict()  # never stdout: anything may print there
    tampered = job.tampered()
    job.remove()
    return _judge(
        row(student, ex_id, mode, "error", seconds=took),
        Ended(got, why, tampered, timed_out, proc.returncode, err),
        run.timeout,
    )


def _wait(proc, timeout: float, launcher, users, legacy_uid) -> tuple[str, str, bool]:
    """(stdout, stderr, timed out) of the checker, once every process of the job is dead."""
    timed_out = False
    out = err = ""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        # every time: the checker, the student, their children, and all of the job's uids
        jail.kill_tree(proc.pid, sessions={proc.pid})
        if launcher is not None:
            launcher.close()
        for uid in filter(None, [legacy_uid, *(() if users is None else (users.checker,))]):
            jail.kill_user(uid)
    if timed_out:
        out, err = proc.communicate()
    return out, err, timed_out


@dataclass(frozen=True)
class Ended:
    """How a job's checker ended, as the grader saw it."""

    verdict: dict | None  # what came on the verdict channel
    refused: str  # why that was not a verdict, if it was not
    tampered: list  # files of the private copy that changed
    timed_out: bool
    returncode: int | None
    stderr: str


def _judge(base: Result, end: Ended, timeout: float) -> Result:
    """The job's row, from `base` (an error, with the job's seconds) and how it ended."""
    if end.tampered:
        more = " and more" if len(end.tampered) > 1 else ""
        base.messages = [f"the job changed its private copy of {end.tampered[0]}{more}: not graded"]
    elif end.timed_out:
        base.status = "timeout"
        base.messages = [f"killed after {timeout:g} s: an endless loop, or far too slow"]
    elif end.refused:
        base.messages = [f"the checker's verdict was refused: {end.refused}"]
    elif isinstance(end.verdict, dict) and end.verdict.get("status") in STATUSES:
        got = end.verdict
        keep = {k: got[k] for k in ("passed", "total", "failed") if k in got}
        base.status, base.messages = got["status"], list(map(utf8, got.get("messages", ())))
        for k, v in keep.items():
            setattr(base, k, v)
    else:
        tail = (end.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        base.messages = [
            f"the checker exited with code {end.returncode} before reporting: {tail[:200]}"
        ]
    return base


def solutions_on_disk() -> list[Path]:
    """The reference solutions this installation holds (readable unless a sandbox hides them)."""
    return [p for ex in curriculum.load() if (p := ex.path("solution")).is_file()]


def private_checks(build: Path, extra_checks) -> list[Path]:
    """Copies of the instructor's extra check files next to the course's own checks in a private
    build, so that they import the build's `course`, never the source tree's."""
    folder = build / Path(curriculum.load()[0].checks[0]).parent  # course/ch03_kv_block/checks
    copies = []
    for i, src in enumerate(extra_checks):  # a path, or (name, bytes) read when grading began
        name, data = src if isinstance(src, tuple) else (Path(src).name, Path(src).read_bytes())
        dest = folder / name
        if dest.exists():  # never replace one of the course's checks
            dest = folder / f"test_extra_{i}_{name}"
        dest.write_bytes(data)
        copies.append(dest)
    return copies
