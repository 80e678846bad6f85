"""An audit hook in the process that talks to untrusted code: defence in depth behind the
capability boundary (remote_caps.py).

Whatever the submission makes the checker do happens while the checker's `Channel` serves
its requests or reads its replies (remote.py arms `serving()` there). While serving, none
of these may happen, whatever asked for it: exec or compile (but the frame template of
remote_errors.py), importing a module not imported before, opening any file, starting a
process (subprocess, os.system, exec*, spawn*, posix_spawn, fork), ctypes or sockets.
Under `pagedsim grade` (a `scratch` folder given) the checker may at no time open a file
for writing outside its scratch. A breach calls `on_breach(why)`: under `grade` it sends
the job's verdict and ends the checker (course/verdict.py), elsewhere it raises `Breach`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from .remote_errors import is_frame

# audit event names (prefixes) refused while serving
FORBIDDEN = tuple(
    """exec compile import open subprocess. os.system os.exec os.spawn os.posix_spawn os.fork
    os.forkpty pty. ctypes. socket. sys.addaudithook sys.setprofile sys.settrace""".split()
)
WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class Breach(RuntimeError):
    """The checker was made to do what it never does for a submission."""


def _raise(why: str) -> None:
    raise Breach(why)


_STATE: dict[str, Any] = {
    "serving": 0,
    "scratch": None,
    "on_breach": _raise,
    "installed": False,
    "breaching": False,
}


def install(
    *, scratch: str | os.PathLike[str] | None = None, on_breach: Callable[[str], None] | None = None
) -> None:
    """Add the hook (once per process; later calls only update `scratch` and `on_breach`)."""
    if scratch is not None:
        _STATE["scratch"] = os.path.realpath(scratch)
    if on_breach is not None:
        _STATE["on_breach"] = on_breach
    if not _STATE["installed"]:
        _STATE["installed"] = True
        sys.addaudithook(_hook)


def installed() -> bool:
    return bool(_STATE["installed"])


@contextlib.contextmanager
def serving() -> Iterator[None]:
    """While the checker serves the submission or reads what it sent."""
    _STATE["serving"] += 1
    try:
        yield
    finally:
        _STATE["serving"] -= 1


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if _STATE["breaching"]:
        return
    if _STATE["serving"]:
        if event == "exec" and args and is_frame(args[0]):
            return
        if event.startswith(FORBIDDEN):
            _breach(f"{event} while serving the submission's requests")
    elif event == "open" and _STATE["scratch"] and _writes(args):
        path = args[0]
        if isinstance(path, (str, bytes)) and not _inside(path, _STATE["scratch"]):
            _breach(f"a write to {os.fsdecode(path)[:200]} outside the checker's scratch folder")


def _breach(why: str) -> None:
    _STATE["breaching"] = True  # what on_breach does (send a verdict, end) is not audited
    try:
        _STATE["on_breach"](why)
    finally:
        _STATE["breaching"] = False


def _writes(args: tuple[Any, ...]) -> bool:
    """Whether an `open` event opens for writing (open()'s mode text, or os.open's flags)."""
    mode, flags = (args + (None, None))[1:3]
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & WRITES)


def _inside(path: str | bytes, folder: str) -> bool:
    real = os.path.realpath(os.fsdecode(path))
    return real == os.devnull or real == folder or real.startswith(folder + os.sep)
