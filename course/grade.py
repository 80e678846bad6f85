"""`pagedsim grade DIR`: grade a folder of submissions, one process per student x exercise.

    DIR/
      alice/ex3_4a_free_list.py      files are named like the stubs (course/curriculum.toml),
      bob/hw3/ex3_4a_free_list.py    anywhere below the student's folder

Every (student, exercise) runs `pagedsim check ID --impl FILE --json` in a session of its own,
killed whole at `--timeout`, from a private build without the solutions (grade_job.py). Each
student's folder is walked once, bounded, and read into a private spool before the first job; DIR
is hashed after every job (`Watch`). Isolation (`decide_mode`): bubblewrap where it works, a uid
per job as root; with neither, grading is refused unless --no-sandbox, and every result is
`verified: false`. Exit status 0 when every result was produced, 2 for bad arguments (checked
before anything starts). The threat model and options: course/INSTRUCTORS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pagedsim.io.args import ArgParser, float_in, int_in
from pagedsim.testing import jail, walk

from . import curriculum, export, grade_warm
from . import grade_similarity as similarity
from .grade_job import (
    DEFAULT_TIMEOUT,
    READ_LIMITS,
    Mode,
    ReadLimits,
    Result,
    Run,
    jobs_folder,
    private_checks,
    read_handed,
    row,
    run_one,
    solutions_on_disk,
    stub_name,
    survey,
)
from .grade_report import as_csv, as_json, pairs_csv, printable, table, write_gradescope


def plan(root: Path, exercise_ids=None, limits: ReadLimits = READ_LIMITS):
    """({student: Handed}, the chosen exercises or those some student handed in)."""
    exercises = curriculum.load()
    names = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    handed = {s: survey(root / s, exercises, limits) for s in names}
    if exercise_ids:
        chosen = [curriculum.find(i, exercises) for i in exercise_ids]
    else:
        chosen = [ex for ex in exercises if any(stub_name(ex) in h.files for h in handed.values())]
    return handed, chosen


class Spool:
    """What every job grades, read before the first job starts (so no job can change another
    student's file) into a folder of the grader's own."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(mode=0o700)
        self.kept: dict = {}  # (student, exercise id) -> Path of the bytes, or why not read

    def fill(self, root: Path, handed: dict, exercises, limits: ReadLimits) -> None:
        for s, h in handed.items():
            for i, got in read_handed(root / s, h, exercises, limits).items():
                if isinstance(got, bytes):
                    path = self.folder / str(len(self.kept))
                    path.write_bytes(got)
                    got = path
                self.kept[s, i] = got

    def get(self, student: str, ex_id: str) -> bytes | str | None:
        """The bytes to grade, one line why there are none to grade, or None: no file."""
        got = self.kept.get((student, ex_id))
        return got.read_bytes() if isinstance(got, Path) else got

    def files(self) -> dict:
        """exercise id -> {student: path}: what the similarity report compares."""
        out: dict = {}
        for (s, i), got in self.kept.items():
            if isinstance(got, Path):
                out.setdefault(i, {})[s] = got
        return out


class Graded(list):
    """grade()'s answer: a Result per student x exercise, and the similarity report."""

    similarity: similarity.Report


class Watch:
    """Who changed a file under DIR: after each job, each student's folder is hashed again and
    every change is blamed on each job that ran since the last look (past
    ReadLimits.student_bytes, a file is known by its size, ctime and inode)."""

    def __init__(self, root: Path, limits: ReadLimits = READ_LIMITS):
        self.root, self.limits, self.lock = root, limits, threading.Lock()
        self.seen = self.look()
        self.running: set = set()
        self.since: set = set()  # jobs that ran since the last look
        self.blamed: dict = {}

    def look(self) -> dict:
        out = {}
        for p in sorted(self.root.iterdir()):
            if p.is_dir() and not p.is_symlink():
                found = jail.contents(p, hash_limit=self.limits.student_bytes)
                out.update({f"{p.name}/{rel}": h for rel, h in found.items()})
            else:  # never graded: known by what a write changes (ctime cannot be put back)
                st = p.lstat()
                out[p.name] = f"{st.st_mode}:{st.st_size}:{st.st_ctime_ns}:{st.st_ino}"
        return out

    def start(self, key) -> None:
        with self.lock:
            self.running.add(key)
            self.since.add(key)

    def end(self, key) -> None:
        with self.lock:
            self.running.discard(key)
            now = self.look()
            changed = jail.changed(self.seen, now)
            for job in self.since if changed else ():
                self.blamed.setdefault(job, []).extend(changed)
            self.seen, self.since = now, set(self.running)


def decide_mode(
    sandbox: bool | None, *, as_user: bool | None = None, limits=None, max_reply: int = 64 << 20
) -> Mode:
    """The isolation a run gets: bubblewrap when asked or where it works, and a uid per job
    whenever one can run Python here (`as_user` forces it); ValueError when none can be had."""
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
    mode: Mode | None = None,
    limits: ReadLimits = READ_LIMITS,
) -> Graded:
    """Grade every (student, exercise) of `root`; `command(ex_id, path, extra)` replaces the
    checker command (a test's fake); `mode` defaults to the best this machine offers."""
    root = Path(root).resolve()
    handed, exercises = plan(root, exercise_ids, limits)
    mode = mode or decide_mode(None)
    todo = [(s, ex.id, handed[s].path(root / s, ex)) for s in handed for ex in exercises]
    jail.become_subreaper()
    keep = jail.descendants(os.getpid())
    watch = Watch(root, limits)
    extra = tuple((Path(c).name, Path(c).read_bytes()) for c in extra_checks)  # none can change
    with walk.temporary_folder("pagedsim-grade-") as tmp:
        spool = Spool(Path(tmp) / "spool")  # never shared with a job
        spool.fill(root, handed, exercises, limits)
        build = _build(Path(tmp))
        # as root, verified, with the real checker: checkers fork from warm processes
        warm_fits = mode.warm and mode.verified and command is None and os.geteuid() == 0
        warm = _warm(Path(tmp), build, extra, workers) if warm_fits else None
        run = Run(build, jobs_folder(Path(tmp)), mode, timeout, extra, command, warm)
        try:
            results = Graded(_in_parallel(run, todo, spool, watch, workers))
        finally:
            if warm is not None:
                warm.close()
            jail.kill_tree(None, orphans_of_self=True, keep=keep)  # whatever escaped its session
        results.similarity = similarity.run(spool.files())
    for r in results:
        wrote = sorted(set(watch.blamed.get((r.student, r.exercise), ())))
        if wrote:
            names = ", ".join(wrote[:3]) + (" ..." if len(wrote) > 3 else "")
            r.status, r.passed = "error", 0
            r.messages.insert(0, f"changed files in the submissions folder while it ran: {names}")
        if r.status in ("pass", "fail"):
            r.similar = results.similarity.flags.get((r.student, r.exercise), "")
    return results


def _build(tmp: Path) -> dict:
    """{relative path: bytes} of the code without solutions (`export-course`)."""
    written = export.export(tmp / "build", prefixes=export.PACKAGES)
    build = {rel: (tmp / "build" / rel).read_bytes() for rel in written}
    shutil.rmtree(tmp / "build")
    return build


def _warm(tmp: Path, build: dict, extra, workers: int) -> grade_warm.Pool:
    folder = tmp / "warm"
    for rel, body in build.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(body)
    paths = private_checks(folder, extra)
    jail.read_only(folder)
    return grade_warm.Pool(folder, paths, workers)


def _in_parallel(run: Run, todo, spool: Spool, watch: Watch, workers: int) -> list[Result]:
    """One Result per (student, exercise, path) of `todo`, in order, `workers` at a time; each
    job holds a slot (its uids, as root) while it runs."""
    slots: queue.Queue = queue.Queue()
    for n in range(max(1, workers)):
        slots.put(n)

    def one(s: str, i: str, p: Path) -> Result:
        data = spool.get(s, i)
        if data is None or isinstance(data, str):  # not read: its one line says why
            return row(s, i, run.mode, "error", [data or f"no file {p.name}"])
        slot = slots.get()
        watch.start((s, i))
        try:
            return run_one(s, i, p, run, data=data, slot=slot)
        finally:
            watch.end((s, i))
            slots.put(slot)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return [f.result() for f in [pool.submit(one, s, i, p) for s, i, p in todo]]


OUTPUTS = (  # the report files: option, metavar, what it writes
    ("--csv", "FILE", "one row per student x exercise to FILE"),
    (
        "--results-json",
        "FOLDER",
        "FOLDER/STUDENT/results.json in Gradescope's format, and FOLDER/manifest.json (each "
        "student folder -> its file)",
    ),
    ("--pairs", "FILE", "the most similar student pairs per exercise to FILE (CSV)"),
)
LIMITS = (  # each submission's process: option, lowest, highest, default, metavar, what
    ("--memory-mib", 64, 1 << 20, 2048, "MIB", "address space of each submission's process"),
    ("--cpu-seconds", 1, 86_400, 300, "S", "CPU time of each submission's process"),
    ("--max-reply-mib", 1, 4096, 64, "MIB", "the largest message a submission's process may send"),
)


def parser() -> ArgParser:
    p = ArgParser(prog="pagedsim grade", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path, help="one folder per student, files named like the stubs")
    only = "grade only these exercises (e.g. 3.4a 3.4b)"
    p.add_argument("--exercise", nargs="+", metavar="ID", help=only)
    per = (
        f"seconds per student x exercise before its session is killed (default {DEFAULT_TIMEOUT:g})"
    )
    seconds = float_in(0, 86_400, open_low=True)
    p.add_argument("--timeout", type=seconds, default=DEFAULT_TIMEOUT, metavar="S", help=per)
    p.add_argument(
        "--json", action="store_true", help="print {student: {exercise: result}} as JSON"
    )
    extra = "the instructor's hidden pytest files, run with the exercise's own checks"
    p.add_argument("--extra-checks", nargs="+", default=[], type=Path, metavar="PATH", help=extra)
    workers = "submissions graded at the same time (default: 2, or 1 on one core)"
    default = min(2, os.cpu_count() or 1)
    p.add_argument("--workers", type=int_in(1, 64), default=default, help=workers)
    sandbox = (
        "run each submission under bubblewrap: read-only file system but its scratch folder, no "
        "network, its own PID namespace (default: on when bwrap works here). --no-sandbox grades "
        "even where nothing isolates a submission (results unverified)"
    )
    p.add_argument("--sandbox", action=argparse.BooleanOptionalAction, default=None, help=sandbox)
    for name, metavar, what in OUTPUTS:
        p.add_argument(name, type=Path, metavar=metavar, help=f"also write {what}")
    for name, low, high, default, metavar, what in LIMITS:
        said = f"{what} (default {default})"
        p.add_argument(name, type=int_in(low, high), default=default, metavar=metavar, help=said)
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
    for out in filter(None, (args.csv, args.results_json, args.pairs)):
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
        where = printable(answers[0].parent)
        p.error(
            f"the reference solutions are on disk ({where}) and no sandbox can hide them from "
            "submissions: install bubblewrap, run from a copy made by `pagedsim export-course`, "
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
    if args.pairs:
        args.pairs.write_text(pairs_csv(results.similarity.pairs))
    if args.json:
        print(json.dumps(as_json(results), indent=1))
    elif not results:
        how = "one folder per student, files named like the stubs, e.g. alice/ex3_4a_free_list.py"
        print(f"pagedsim grade: nothing to grade in {printable(args.dir)} ({how})")
    else:
        print(table(results, results.similarity.pairs))
        print("\n" + describe(mode, answers))
        if results.similarity.problem:
            print(results.similarity.problem)
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
        where = printable(answers[0].parent)
        what += f"; the reference solutions under {where} were readable by submissions"
    return what
