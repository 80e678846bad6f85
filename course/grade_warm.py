"""One warm checker per worker: its imports done once, a fresh confined child per job.

A cold job (grade_job.run_one) imports NumPy, pytest, Hypothesis and pagedsim anew
(benchmarks/profile_grade_job.py). `Warm` keeps per worker slot one process (the grader's own
code, never in touch with a submission) that imported them once. Per job it forks a child that
closes everything but the fds it was sent, becomes the job's checker exactly as a cold one
(jail.confined, then the checker's uid without capability) and runs `pagedsim check`
in-process. The child never holds the warm process's socket, so it cannot ask for another fork.

    the grader sends                             the warm process answers
    {"argv", "env", "view", "account"} + fds     b"pid N" once forked; b"exit STATUS" when
    (stdout, stderr, verdict, launcher)          the child ended (the grader may kill it)"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import socket
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from pagedsim.testing import jail

PRELOAD = ("numpy", "pytest", "hypothesis", "pagedsim", "course.cli", "course.runner")
MESSAGE = 1 << 20  # bytes of one request at most


class Warm:
    """The grader's handle on one warm process, started on first use from `build`."""

    def __init__(self, build: Path) -> None:
        self.build = build
        self.sock: socket.socket | None = None
        self.proc: subprocess.Popen | None = None

    def _ensure(self) -> socket.socket:
        if self.sock is None or self.proc is None or self.proc.poll() is not None:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            env = {**os.environ, "PYTHONPATH": str(self.build), "PYTHONDONTWRITEBYTECODE": "1"}
            env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
            code = "import sys; from course.grade_warm import serve; serve(int(sys.argv[1]))"
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                cwd=self.build,
            )
            theirs.close()
            self.sock = ours
        return self.sock

    def start(self, argv: list[str], env: dict, view: dict, account: dict, fds: dict) -> Job:
        """Fork the job's checker: `view` and `account` for jail.confined and jail.Account, `fds`
        {name: fd} as named in `env`."""
        sock = self._ensure()
        names = sorted(fds)
        request = json.dumps(
            {"argv": argv, "env": env, "view": view, "account": account, "fds": names}
        ).encode()
        socket.send_fds(sock, [request], [fds[n] for n in names])
        reply = sock.recv(64).split()
        if len(reply) != 2 or reply[0] != b"pid":
            raise OSError(f"the warm checker did not start the job: {reply!r}")
        return Job(int(reply[1]), sock)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Pool:
    """A `grade` run's warm processes, one per worker slot (`extra`: the instructor's checks)."""

    def __init__(self, build: Path, extra: list[Path], workers: int) -> None:
        self.build, self.extra = build, extra
        self.slots = [Warm(build) for _ in range(max(1, workers))]

    def close(self) -> None:
        for w in self.slots:
            w.close()


class Job:
    """A forked checker, as much of a Popen as run_one uses: `pid`, `returncode`, `communicate`."""

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid, self.sock = pid, sock
        self.returncode: int | None = None
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        self.readers: list[threading.Thread] = []

    def read(self, out_fd: int, err_fd: int) -> None:
        for fd, into in ((out_fd, self.out), (err_fd, self.err)):
            t = threading.Thread(target=_drain, args=(fd, into), daemon=True)
            t.start()
            self.readers.append(t)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        if self.returncode is None:
            self.sock.settimeout(timeout)
            try:
                reply = self.sock.recv(64).split()
            except TimeoutError:
                raise subprocess.TimeoutExpired("warm checker", timeout or 0) from None
            finally:
                self.sock.settimeout(None)
            self.returncode = int(reply[1]) if len(reply) == 2 and reply[0] == b"exit" else -1
        for t in self.readers:
            t.join(10)
        text = [b"".join(b).decode(errors="replace") for b in (self.out, self.err)]
        return text[0], text[1]


def _drain(fd: int, into: list[bytes]) -> None:
    try:
        while len(into) < 1 << 12:  # at most 256 MiB kept
            part = os.read(fd, 1 << 16)
            if not part:
                break
            into.append(part)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- the warm process -------------------------------------------------------------------------
def serve(fd: int) -> None:
    """Import what every checker imports, then fork a checker per request until EOF."""
    for name in PRELOAD:
        importlib.import_module(name)
    sock = socket.socket(fileno=fd)
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, MESSAGE, 8)
        except OSError:
            return
        if not data:
            return
        request = json.loads(data)
        pid = os.fork()
        if pid == 0:
            _child(request, dict(zip(request["fds"], fds, strict=True)), sock.fileno())
        for f in fds:
            os.close(f)
        sock.send(f"pid {pid}".encode())
        _, status = os.waitpid(pid, 0)
        sock.send(f"exit {os.waitstatus_to_exitcode(status)}".encode())


def _child(request: dict[str, Any], fds: dict[str, int], control: int) -> None:
    """In the fork: the job's checker. Never returns."""
    code = 70
    try:
        os.setsid()
        os.close(control)  # the warm process's own socket: never the checker's
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fds.pop("stdout"), 1)
        os.dup2(fds.pop("stderr"), 2)
        keep = set(fds.values()) | {0, 1, 2}
        for fd in map(int, os.listdir("/proc/self/fd")):
            if fd not in keep:
                with contextlib.suppress(OSError):
                    os.close(fd)
        view, account = request["view"], request["account"]
        jail.confined(**view, account=jail.Account(**account))()
        env = dict(request["env"])
        env.update({name: str(fd) for name, fd in fds.items()})  # their numbers in here
        os.environ.clear()
        os.environ.update(env)
        from course.cli import check_main

        code = check_main(list(request["argv"]))
        sys.stdout.flush()
        sys.stderr.flush()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - the grader reads it as the checker's stderr
        traceback.print_exc()
    finally:
        os._exit(code)
