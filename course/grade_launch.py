"""A job's submission process, started and ended by the grader at its checker's request.

Under `pagedsim grade` as root, the checker runs as a uid of its own without capability
(grade_job.run_one): it can neither start a process as the job's uid nor signal one. The grader
does both for it, and nothing else, over a socketpair whose end the checker holds
($PAGEDSIM_LAUNCHER_FD, taken out of the environment on first use):

    the checker sends   the grader (`Launcher`, a thread per job)          answers
    b"start"            ends the submission's process if one runs, then    b"started N" + the new
                        starts the one fixed command (isolation.ChildSpec)  process's socket
                        on the job's file, as the job's uid, in its view    (SCM_RIGHTS)
    b"stop"             waits a second for it to end, then kills its        b"stopped N RC"
                        session, its descendants and its uid's processes

N numbers the requests, so a reply left unread after a time limit is told from the next one.
Anything else (an argument, a path, more than `REQUEST` bytes) ends the service: the process is
killed and the channel closed, so a subverted checker only loses its own submission."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
from collections.abc import Callable

from pagedsim.testing import jail

VAR = "PAGEDSIM_LAUNCHER_FD"
REQUEST = 16  # bytes of the longest request read
START, STOP, STARTED = b"start", b"stop", b"started"


class Launcher:
    """The grader's end for one job. `spawn(fd)` starts the submission's process serving on the
    socket `fd` (confined, as the job's uid); `end(pid)` kills what it may have left."""

    def __init__(
        self, spawn: Callable[[int], subprocess.Popen], end: Callable[[int], None]
    ) -> None:
        self.spawn, self.end = spawn, end
        self.ours, self.theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc: subprocess.Popen | None = None
        self.served = 0  # requests answered
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def fd(self) -> int:
        """The checker's end, to pass it (pass_fds) and name it in $PAGEDSIM_LAUNCHER_FD."""
        return self.theirs.fileno()

    def serve(self) -> None:
        """Once the checker started: its end leaves this process, and the service begins."""
        self.theirs.close()
        self.thread.start()

    def close(self) -> None:
        """At the job's end: the service ends, and so does the submission's process."""
        with contextlib.suppress(OSError):
            self.ours.shutdown(socket.SHUT_RDWR)
        if self.thread.is_alive():
            self.thread.join()
        else:
            self._stop()
        self.ours.close()

    def _serve(self) -> None:
        try:
            while True:
                request = self.ours.recv(REQUEST + 1)
                if request in (START, STOP):
                    self.served += 1
                if request == START:
                    self._start()
                elif request == STOP:
                    code = self._stop()
                    self.ours.send(f"stopped {self.served} {code}".encode())
                else:  # the checker ended (b""), or asked for something it never asks for
                    break
        except OSError:
            pass
        finally:
            self._stop()
            try:  # the checker reads the end of the service at once, not at the job's end
                self.ours.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _start(self) -> None:
        self._stop()
        mine, child = socket.socketpair()
        try:
            self.proc = self.spawn(child.fileno())
        except (OSError, subprocess.SubprocessError) as e:
            self.ours.send(f"failed {self.served} {type(e).__name__}".encode())
            return
        finally:
            child.close()
        try:
            socket.send_fds(
                self.ours, [f"{STARTED.decode()} {self.served}".encode()], [mine.fileno()]
            )
        finally:
            mine.close()

    def _stop(self) -> int | None:
        proc, self.proc = self.proc, None
        return None if proc is None else end_process(proc, lambda: self.end(proc.pid))


def end_process(proc: subprocess.Popen, kill: Callable[[], None], **tree) -> int | None:
    """A second for `proc` to end (a closed socket first, so a limit's signal is seen), then its
    session, descendants and `kill()`; its exit status. `tree`: more for jail.kill_tree."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=1)
    code = proc.returncode
    jail.kill_tree(proc.pid, sessions={proc.pid}, **tree)
    kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    return code


class Client:
    """The checker's end: `start()` gives the socket of a new submission process, `stop()` the
    exit status of the last one, once it and all it started are gone."""

    _taken: Client | None = None

    def __init__(self, fd: int) -> None:
        self.sock = socket.socket(fileno=fd)
        self.sock.set_inheritable(False)
        self.sent = 0  # requests sent

    @classmethod
    def taken(cls) -> Client | None:
        """This process's client, when `grade` named one (the variable is removed)."""
        text = os.environ.pop(VAR, None)
        if cls._taken is None and text and text.isdigit():
            try:
                cls._taken = cls(int(text))
            except OSError:
                return None
        return cls._taken

    def start(self) -> socket.socket:
        reply, fds = self._ask(START)
        if reply[:1] != [STARTED] or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise OSError(f"the grader did not start the submission's process: {reply!r}")
        return socket.socket(fileno=fds[0])

    def stop(self) -> int | None:
        try:
            reply, _ = self._ask(STOP)
        except OSError:
            return None
        code = reply[-1].decode(errors="replace") if len(reply) == 3 else ""
        return int(code) if code.lstrip("-").isdigit() else None

    def _ask(self, request: bytes) -> tuple[list[bytes], list[int]]:
        """Send `request`; its reply's words and fds (unread replies to earlier ones skipped)."""
        self.sent += 1
        self.sock.send(request)
        while True:
            data, fds, _, _ = socket.recv_fds(self.sock, 64, 1)
            words = data.split()
            if not data or len(words) > 1 and words[1] == str(self.sent).encode():
                return words, fds
            for fd in fds:
                os.close(fd)
