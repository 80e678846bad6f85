"""Which implementation a check is looking at: the solution, the student's file, or any file.

The checks never import an exercise module by name. They call `load_impl("3.4a")`
(or take the `impl` fixture), which reads two environment variables set by
`pagedsim check`:

    PAGEDSIM_IMPL      path of the implementation file to load
    PAGEDSIM_EXERCISE  the exercise that path implements

When they are unset (or name another exercise), the reference solution is loaded, so
a plain `pytest` run checks the solutions and stays green.

A file is imported once per (path, mtime, size). Its import runs under a time limit
(PAGEDSIM_CHECK_SECONDS, 60 s by default), so a loop at module level ends as a
CheckTimeout; an import that failed fails the same way again at every later check
instead of being re-run.

While the runner checks a file in its own process (`_remote`, course/isolation.py),
load_impl returns that process's module instead: nothing of the file runs here.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from pagedsim.testing.contract import alarm

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
        tb, line = e.__traceback__, None
        while tb is not None:
            if Path(tb.tb_frame.f_code.co_filename).resolve() == path:
                line = tb.tb_lineno
            tb = tb.tb_next
        at = i18n.t(" (line {line} of your file)", line=line) if line else ""
        what = i18n.t("importing your file raised {name}: {what}{at}",
                      name=type(e).__name__, what=e, at=at)
    failed = ImportFailed(what)
    failed.__cause__ = e
    return failed


def check_seconds() -> float:
    return float(os.environ.get("PAGEDSIM_CHECK_SECONDS") or DEFAULT_SECONDS)


def time_limit(seconds: float, what: str):
    """Raise CheckTimeout in the main thread if the block runs longer than `seconds`."""
    return alarm(seconds, lambda: CheckTimeout(i18n.t(
        "{what} ran for over {seconds:g} s: is there an endless loop?",
        what=what, seconds=seconds)))


def impl_path(exercise_id: str) -> Path:
    chosen = os.environ.get("PAGEDSIM_IMPL")
    if chosen and os.environ.get("PAGEDSIM_EXERCISE", exercise_id) == exercise_id:
        return Path(chosen).resolve()
    return curriculum.find(exercise_id).path("solution")


def _load_remote(sub):
    """The submission's module in its own process (course/isolation.py), under the same limit."""
    key = ("remote", id(sub))
    if key not in _cache:
        try:
            with time_limit(check_seconds(), i18n.t("importing your file")):
                _cache[key] = sub.module()
        except CheckTimeout as e:
            sub.close()
            _cache[key] = ImportTimeout(str(e))
        except ImportFailed as e:
            _cache[key] = e
    found = _cache[key]
    if isinstance(found, BaseException):
        raise found
    return found


def load_impl(exercise_id: str):
    """Import the implementation file for `exercise_id` as a fresh module."""
    path = impl_path(exercise_id)
    if _remote is not None and path == _remote.path:
        return _load_remote(_remote)
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _cache:
        name = f"_course_impl_{exercise_id.replace('.', '_')}_{len(_cache)}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses and pickling look the module up by name
        try:
            with time_limit(check_seconds(), i18n.t("importing your file")):
                spec.loader.exec_module(module)
            _cache[key] = module
        except BaseException as e:  # noqa: BLE001 - SystemExit and timeouts included, re-raised below
            sys.modules.pop(name, None)
            if isinstance(e, KeyboardInterrupt):
                raise
            _cache[key] = (ImportTimeout(str(e)) if isinstance(e, CheckTimeout)
                           else _import_failure(e, path))
    found = _cache[key]
    if isinstance(found, BaseException):
        raise found
    return found


def child_module(name: str):
    """The module `name` as imported where the checked file runs: in its own process while the
    runner isolates it (course/isolation.py), else here. A check uses it to run a few lines next
    to the student's code, e.g. keep results across calls (checks/_keep.py)."""
    if _remote is None:
        return importlib.import_module(name)
    from pagedsim.testing.remote import ask

    _remote.current()
    return ask(_remote.ch, "import_module", name)
