"""The submission's process: started, asked, restarted after a time limit, and always killed.

    with Submission(path, exercise_id, scratch=..., sandbox=False) as sub:
        mod = sub.module()    # the file, imported in the child (pagedsim/testing/remote.py)
        mod.allocate(...)     # every use is a message; nothing of the file runs here

The child (`child_main`) has stdin, stdout and stderr on /dev/null, cannot import the reference
solutions (course/guard.py), and serves requests until the socket closes. It runs in its own
session, and closing the Submission kills the child, its session and every descendant
(pagedsim/testing/jail.py). Under `pagedsim grade` as root the grader starts and ends it for us
(course/grade_launch.py: the same `ChildSpec`, as the job's uid)."""

from __future__ import annotations

import errno
import importlib
import importlib.util
import os
import socket
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

from pagedsim.testing import audit, jail, remote

from . import grade_launch, verdict
from .guard import _Blocker

IMPORT_EXITED = "your file ended its own process while being imported ({why})"
REFUSED = "your code's process sent a message the grader refused to read: {why}"
HIDE = (
    "course/ch03_kv_block/solutions",
    "course/ch03_kv_block/mutants.toml",
    "course/ch03_kv_block/equivalent_mutants.toml",
)  # never mounted in the sandbox


class Submission:
    """`limit`: the most bytes of one reply (default $PAGEDSIM_MAX_REPLY, else 64 MiB); `uid`
    (default $PAGEDSIM_JOB_UID): the child's user, whose processes are all killed at the end;
    `limits` (default $PAGEDSIM_LIMITS): its rlimits. `refused` and `limit_hit` say why a reply
    was not read, or which limit the child hit."""

    def __init__(
        self,
        path,
        exercise_id: str,
        *,
        scratch,
        code_root=None,
        sandbox: bool = False,
        limit: int | None = None,
        uid: int | None = None,
        limits=None,
    ):
        self.path, self.exercise_id = Path(path).resolve(), exercise_id
        self.scratch, self.sandbox = Path(scratch), sandbox
        self.code_root = Path(code_root) if code_root else Path(__file__).resolve().parent.parent
        self.limit = limit or int(os.environ.get("PAGEDSIM_MAX_REPLY") or remote.DEFAULT_LIMIT)
        env_uid = os.environ.get("PAGEDSIM_JOB_UID")
        self.uid = uid if uid is not None else int(env_uid) if env_uid else None
        self.limits = limits or jail.Limits.from_json(os.environ.get("PAGEDSIM_LIMITS"))
        self.proc = self.ch = None
        self.keep = jail.descendants(os.getpid())  # processes of ours that are not the child's
        self.refused: str | None = None
        self.limit_hit: str | None = None
        self._module = None
        self.launcher = grade_launch.Client.taken()  # under `grade` as root: ask the grader
        jail.become_subreaper()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def start(self) -> remote.Channel:
        # before the first call into the submission: the checker's own audit hook
        # (pagedsim/testing/audit.py); under `grade` it may write only in its scratch folder
        audit.install(scratch=self.scratch if verdict.is_open() else None, on_breach=verdict.breach)
        if self.launcher is not None:  # under `grade` as root: the grader starts it
            ours = self.launcher.start()
        else:
            ours = self._spawn()
        self.ch = remote.Channel(ours, trusting=False, on_dead=self._kill, limit=self.limit)
        self.ch.impl_file = str(self.path)
        self.ch.on_error = self._saw
        return self.ch

    def spec(self) -> ChildSpec:
        more = tuple(filter(None, [os.environ.get("PYTHONPATH")]))
        return ChildSpec(self.path, self.code_root, self.scratch / "child", self.sandbox, more)

    def _spawn(self) -> socket.socket:
        ours, theirs = socket.socketpair()
        spec = self.spec()
        spec.work.mkdir(parents=True, exist_ok=True)
        if self.uid is not None:
            jail.give_to(self.uid, spec.work)
            reach = jail.runtime_paths(self.code_root, self.path.parent, spec.work)
            prepare = jail.become(self.uid, reach=reach, limits=self.limits, cwd=spec.work)
        else:
            prepare = lambda: self.limits.apply(False)  # noqa: E731
        orphaned = jail.dies_with_parent()  # a checker killed from outside takes its child along
        try:
            self.proc = spec.popen(
                theirs.fileno(), lambda: (prepare(), orphaned()), own_uid=self.uid is not None
            )
        finally:
            theirs.close()
        return ours

    def _saw(self, exc: BaseException) -> None:
        """An exception from the child that a limit caused names the limit."""
        for _ in range(remote.DEPTH + 1):
            self._limit_of(exc)
            exc = exc.__cause__ or exc.__context__
            if exc is None:
                return

    def _limit_of(self, exc: BaseException) -> None:
        if isinstance(exc, MemoryError):
            self.limit_hit = self.limit_hit or jail.memory_reason(self.limits)
        elif isinstance(exc, OSError) and exc.errno == errno.EMFILE:
            self.limit_hit = self.limit_hit or f"open files limit {self.limits.open_files}"
        elif isinstance(exc, OSError) and exc.errno == errno.EAGAIN and self.uid is not None:
            self.limit_hit = self.limit_hit or f"processes limit {self.limits.processes}"

    def _kill(self) -> None:
        code = self._stop()
        self.limit_hit = self.limit_hit or self.limits.why(code)

    def _stop(self) -> int | None:
        """End the child and all it started; its exit status."""
        if self.launcher is not None:
            return self.launcher.stop()
        if self.proc is None:
            return None
        return grade_launch.end_process(
            self.proc, self._kill_user, orphans_of_self=True, keep=self.keep
        )

    def _kill_user(self) -> None:
        if self.uid is not None:
            jail.kill_user(self.uid)

    def module(self):
        """The student's module: imported in the child on first use, again after a time limit."""
        self.current()
        return _Live(self)

    def current(self):
        """The module in a live child; raises ImportFailed (or a time limit) as load_impl does."""
        from .impl import ImportFailed

        if self.ch is None or self.ch.dead:
            self.close()
            self.start()
            try:
                self._module = remote.ask(self.ch, "import_impl", str(self.path), self.exercise_id)
            except remote.ChildDied as e:
                code = self._stop()
                why = f"exit status {code}" if code is not None else str(e)
                self.close()
                if self.refused:
                    raise ImportFailed(REFUSED.format(why=self.refused)) from None
                raise ImportFailed(IMPORT_EXITED.format(why=why)) from None
        return self._module

    def close(self) -> None:
        if self.ch is not None:
            self.refused = self.refused or self.ch.refused
        if self.ch is not None and not self.ch.dead:
            self.ch.kill("closed")
        elif self.proc is not None or self.launcher is not None:
            self._kill()
        if self.launcher is None:  # a setsid and a fork chain came back to us: their subreaper
            jail.kill_tree(
                None,
                orphans_of_self=True,
                keep=self.keep,
                sessions={self.proc.pid} if self.proc else set(),
            )
            self._kill_user()
        self.ch = None


@dataclass(frozen=True)
class ChildSpec:
    """The submission's process, whoever starts it: always this one command, on the file."""

    path: Path  # the student's file
    code_root: Path  # the code it imports (a job's private copy under `grade`)
    work: Path  # its scratch folder: its HOME, its cwd, the one place it may write
    sandbox: bool  # under bubblewrap
    pythonpath: tuple[str, ...] = ()  # more folders to import from, after `code_root`

    def popen(self, fd: int, prepare, *, own_uid: bool) -> subprocess.Popen:
        """Start it on the socket `fd`; `prepare` is its preexec_fn (a uid, limits, a view)."""
        serve = "import sys; from course.isolation import child_main; child_main(int(sys.argv[1]))"
        argv = [sys.executable, "-c", serve, str(fd)]
        path = dict.fromkeys([str(self.code_root), *self.pythonpath])
        env = jail.child_env(home=self.work, pythonpath=os.pathsep.join(path))
        if self.sandbox:
            argv = jail.sandbox_argv(
                argv,
                code_root=self.code_root,
                files=[self.path],
                scratch=self.work,
                hide=HIDE,
                env=env,
            )
        return subprocess.Popen(
            argv,
            pass_fds=[fd],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=None if own_uid else self.work,
            start_new_session=True,
            preexec_fn=prepare,
        )


class _Live(types.ModuleType):
    """Stands for the student's module across restarts of its process."""

    def __init__(self, sub: Submission):
        super().__init__(f"your file {sub.path.name}")
        self.__dict__["_sub"] = sub

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(self.__dict__["_sub"].current(), name)

    def __repr__(self):
        return f"<module {self.__dict__['_sub'].path.name!r} (run in its own process)>"


# -- the child ------------------------------------------------------------------------------
def _import_impl(path: str, exercise_id: str):
    from .impl import _import_failure

    name = f"_course_impl_{exercise_id.replace('.', '_')}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as e:  # noqa: BLE001 - SystemExit included: it becomes the grader's ImportFailed
        sys.modules.pop(name, None)
        raise _import_failure(e, Path(path).resolve()) from None
    _STATE["impl"] = str(Path(path).resolve())
    return module


def _stepper_run(kernel, schedule, timeout, num_threads, arrays, names):
    from .ch03_kv_block.interleaver import Stepper

    log = Stepper(schedule, timeout).run(kernel, num_threads, *arrays, names=names)
    return log, arrays


_STATE: dict = {}


def child_main(fd: int) -> None:
    sys.meta_path.insert(0, _Blocker())  # the reference solutions stay unimportable in here
    remote.serve(
        fd,
        dict(
            import_impl=_import_impl,
            import_module=importlib.import_module,
            stepper_run=_stepper_run,
            impl_path=lambda: _STATE.get("impl"),
        ),
    )
