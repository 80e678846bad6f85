"""The checker's verdict, on a channel of its own: a pipe that `pagedsim grade` opens and names.

    grade (grade_job.run_one)     r, w = os.pipe(); the checker gets w (pass_fds), its number
                                  in $PAGEDSIM_VERDICT_FD; `Receiver(r)` reads it
    checker (pagedsim check)      `take()` first thing: the fd leaves the environment and is not
                                  inherited by the submission's process; `send(obj)` writes one
                                  JSON line and closes it

`grade` reads nothing else: stdout and stderr are never a verdict, and a channel that carries
anything but exactly one JSON object on one line (two verdicts, junk, over `LIMIT` bytes) gives
none. The audit hook (pagedsim/testing/audit.py) ends the checker through `breach`."""

from __future__ import annotations

import json
import os
import threading

VAR = "PAGEDSIM_VERDICT_FD"
LIMIT = 1 << 20  # bytes of one verdict
BREACH_EXIT = 70  # the checker's exit status after a breach

_FD: list[int] = []  # the write end, while this process holds it


def take() -> bool:
    """In the checker, before anything else runs: hold the fd $PAGEDSIM_VERDICT_FD names."""
    text = os.environ.pop(VAR, None)
    if not text or not text.isdigit():
        return False
    fd = int(text)
    try:
        os.set_inheritable(fd, False)
    except OSError:
        return False
    _FD[:] = [fd]
    return True


def is_open() -> bool:
    return bool(_FD)


def send(obj) -> bool:
    """Write `obj` as the one verdict and close the channel; False when there is none."""
    if not _FD:
        return False
    fd = _FD.pop()
    data = (json.dumps(obj, ensure_ascii=False) + "\n").encode()
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return True


def breach(why: str) -> None:
    """The audit hook's answer: under `grade` an `error` verdict, and the checker ends; elsewhere
    `Breach`."""
    from pagedsim.testing.audit import Breach

    message = f"the checker was stopped: it attempted {why}"
    if send({"status": "error", "passed": 0, "total": 0, "failed": [], "messages": [message]}):
        os._exit(BREACH_EXIT)
    raise Breach(why)


class Receiver:
    """grade's end: reads at most LIMIT + 1 bytes in a thread of its own (never blocking)."""

    def __init__(self, fd: int):
        self.fd, self.data = fd, b""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        parts, size = [], 0
        try:
            while size <= LIMIT:
                part = os.read(self.fd, 1 << 16)
                if not part:
                    break
                parts.append(part)
                size += len(part)
        except OSError:
            pass
        self.data = b"".join(parts)

    def verdict(self, seconds: float = 10.0) -> tuple[dict | None, str]:
        """(the one verdict, '') or (None, why there is none); once every writer is gone."""
        self.thread.join(seconds)
        if self.thread.is_alive():  # a writer outlived the job: its fd is left to it, unread
            return None, "its verdict channel stayed open"
        os.close(self.fd)
        data = self.data
        if len(data) > LIMIT:
            return None, "its verdict was too long"
        if not data:
            return None, ""
        if data.count(b"\n") != 1 or not data.endswith(b"\n"):
            return None, "it sent more than one verdict"
        try:
            obj = json.loads(data)
        except ValueError:
            return None, "its verdict was not JSON"
        return (obj, "") if isinstance(obj, dict) else (None, "its verdict was not an object")
