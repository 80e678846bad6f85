"""Which implementation a check is looking at: the solution, the student's file, or any file.

The checks never import an exercise module by name: `load_impl("3.4a")` (or the `impl` fixture)
reads $PAGEDSIM_IMPL (the file) and $PAGEDSIM_EXERCISE (the exercise it implements), set by
`pagedsim check`; unset (or naming another exercise), the reference solution is loaded.

A file is imported once per (path, mtime, size), under a time limit ($PAGEDSIM_CHECK_SECONDS): a
failed import fails the same way at every later check. While the runner checks a file in its own
process (`_remote`, course/isolation.py), load_impl returns that process's module."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from . import curriculum, i18n

DEFAULT_SECONDS = 60.0
_cache: dict = {}  # (path, mtime, size) -> module, or the BaseException its import raised
_remote = None  # a course.isolation.Submission while the runner checks a file in its own process


class CheckTimeout(BaseException):
    """Raised in code that ran too long; a BaseException so Hypothesis does not retry it."""


class ImportFailed(Exception):
    """The implementation file could not be imported (syntax error, exception, sys.exit)."""


class ImportTimeout(ImportFailed):
    """Importing the implementation file ran past the time limit (a loop at module level)."""


def _import_failure(e: BaseException, path: Path) -> ImportFailed:
    if isinstance(e, SyntaxError):
        what = i18n.t("your file does not parse: line {line}: {msg}", line=e.lineno, msg=e.msg)
    elif isinstance(e, SystemExit):
        what = i18n.t("your file called sys.exit({code}) while being imported", code=repr(e.code))
    else:
        frames = traceback.walk_tb(e.__traceback__)
        lines = [n for f, n in frames if Path(f.f_code.co_filename).resolve() == path]
        at = i18n.t(" (line {line} of your file)", line=lines[-1]) if lines else ""
        what = i18n.t(
            "importing your file raised {name}: {what}{at}", name=type(e).__name__, what=e, at=at
        )
    failed = ImportFailed(what)
    failed.__cause__ = e
    return failed


def machine_scale() -> float:
    """The load per core, at least 1: a busy machine gives every check a longer limit."""
    try:
        return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    except OSError:
        return 1.0


def _calls_so_far():
    """Calls answered by the student's process so far (None when the file runs in here)."""
    ch = getattr(_remote, "ch", None) if _remote is not None else None
    return getattr(ch, "seq", None) if ch is not None else None


PATIENCE = 4  # a check still making progress gets up to this many limits before it is stopped
ENDLESS = "{what} ran for over {seconds:g} s: is there an endless loop?"
TOO_SLOW = (
    "{what} ran for over {seconds:g} s, still making progress but far too slowly: "
    "something does much more work than it needs (a loop over every block?)"
)
STUCK = (
    "{what} ran for over {seconds:g} s without progress (one call into your code never "
    "returned): is there an endless loop?"
)


@contextlib.contextmanager
def time_limit(seconds: float, what: str):
    """Raise CheckTimeout in the main thread if the block runs too long. A check whose calls into
    the student's process are still answered is slow, not stuck: it gets up to PATIENCE limits."""
    state = {"seen": _calls_so_far(), "rounds": 0, "start": time.monotonic()}

    def tick():
        now = _calls_so_far()
        state["rounds"] += 1
        moved = now is not None and now != state["seen"]
        state["seen"] = now
        spent = round(time.monotonic() - state["start"], 1)
        if moved and state["rounds"] < PATIENCE:
            return None  # keep going: re-armed below
        if moved:
            why, shown = TOO_SLOW, spent
        elif now is None:
            why, shown = ENDLESS, spent
        else:
            why, shown = STUCK, seconds
        return CheckTimeout(i18n.t(why, what=what, seconds=shown))

    with alarm_with_patience(seconds, tick):
        yield


@contextlib.contextmanager
def alarm_with_patience(seconds, tick):
    """Every `seconds`, ask tick(): an exception to raise in the body, or None to go on."""
    usable = (
        seconds
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def on_alarm(signum, frame):
        error = tick()
        if error is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            raise error

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def impl_path(exercise_id: str) -> Path:
    chosen = os.environ.get("PAGEDSIM_IMPL")
    if chosen and os.environ.get("PAGEDSIM_EXERCISE", exercise_id) == exercise_id:
        return Path(chosen).resolve()
    return curriculum.find(exercise_id).path("solution")


def check_seconds() -> float:
    return float(os.environ.get("PAGEDSIM_CHECK_SECONDS") or DEFAULT_SECONDS)


def load_impl(exercise_id: str):
    """Import the implementation file for `exercise_id` as a fresh module."""
    path = impl_path(exercise_id)
    if _remote is not None and path == _remote.path:
        key: tuple = ("remote", id(_remote))
        if key not in _cache:
            _cache[key] = _import_remote(_remote)
    else:
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        if key not in _cache:
            _cache[key] = _import_here(path, f"_course_impl_{exercise_id.replace('.', '_')}")
    found = _cache[key]
    if isinstance(found, BaseException):
        raise found
    return found


def _import_remote(sub):
    """The submission's module in its own process (course/isolation.py), under the same limit."""
    try:
        with time_limit(check_seconds(), i18n.t("importing your file")):
            return sub.module()
    except CheckTimeout as e:
        sub.close()
        return ImportTimeout(str(e))
    except ImportFailed as e:
        return e


def _import_here(path: Path, name: str):
    """The module, or the exception its import raised."""
    name = f"{name}_{len(_cache)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        with time_limit(check_seconds(), i18n.t("importing your file")):
            spec.loader.exec_module(module)
        return module
    except BaseException as e:  # noqa: BLE001 - SystemExit and timeouts included, re-raised later
        sys.modules.pop(name, None)
        if isinstance(e, KeyboardInterrupt):
            raise
        return ImportTimeout(str(e)) if isinstance(e, CheckTimeout) else _import_failure(e, path)


def child_module(name: str):
    """The module `name` where the checked file runs (its own process, or here)."""
    if _remote is None:
        return importlib.import_module(name)
    from pagedsim.testing.remote import ask

    _remote.current()
    return ask(_remote.ch, "import_module", name)
