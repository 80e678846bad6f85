"""Run one exercise's checks against one implementation file, and say what failed in words.

The checks are ordinary pytest files (they also run in the normal test suite, against
the solutions). Here pytest runs in-process with its terminal output switched off,
and a small plugin keeps, for each failing check, the one sentence a student needs:

    not implemented yet: allocate          (the stub still raises NotImplementedError)
    <the assertion's message>              (checks phrase every assert in the student's terms)
    <check docstring>: your code raised X  (any other exception)
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .curriculum import REPO_ROOT, Exercise

CHECK_SECONDS = 60  # one check running longer than this is stopped and reported


class CheckTimeout(BaseException):
    """Raised in a check that ran too long; a BaseException so Hypothesis does not retry it."""


@dataclass
class Failure:
    check: str  # the test function's name
    message: str  # one line, in the student's terms
    not_implemented: bool = False


@dataclass
class Outcome:
    exercise: Exercise
    impl: Path
    passed: int = 0
    failures: list = field(default_factory=list)
    skipped: list = field(default_factory=list)  # reasons
    error: str | None = None  # the checks themselves could not run

    @property
    def ok(self) -> bool:
        return not self.failures and self.error is None and self.passed > 0


def _first_line(text: str) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def _describe(item, excinfo, impl: Path) -> Failure:
    doc = _first_line(getattr(item, "function", None).__doc__ or "").rstrip(".") or item.name.replace("_", " ")
    exc = excinfo.value
    chain, seen = exc, set()
    while chain is not None and id(chain) not in seen:  # NotImplementedError may be wrapped
        seen.add(id(chain))
        if isinstance(chain, NotImplementedError):
            where = [e.name for e in excinfo.traceback if Path(str(e.path)).resolve() == impl]
            what = re.sub(r"^tid=\[.*?\] ctaid=\[.*?\]: ", "", _first_line(str(chain)))  # simulator prefix
            what = what or (where[-1] if where else "a function")
            return Failure(item.name, f"not implemented yet: {what}", True)
        chain = chain.__cause__ or chain.__context__
    if isinstance(exc, SyntaxError) and exc.filename and Path(exc.filename).resolve() == impl:
        return Failure(item.name, f"your file does not parse: line {exc.lineno}: {exc.msg}")
    if isinstance(exc, CheckTimeout):
        return Failure(item.name, f"{doc}: {exc}")
    if isinstance(exc, AssertionError):
        msg = _first_line(str(exc))
        if not msg or msg.startswith("assert "):
            msg = doc
        return Failure(item.name, msg)
    where = [e for e in excinfo.traceback if Path(str(e.path)).resolve() == impl]
    at = f" (line {where[-1].lineno + 1} of your file)" if where else ""
    return Failure(item.name, f"{doc}: your code raised {type(exc).__name__}: "
                              f"{_first_line(str(exc))}{at}")


class _Collector:
    def __init__(self, outcome: Outcome):
        self.outcome = outcome

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        rep = (yield).get_result()
        if rep.failed and call.excinfo is not None:
            self.outcome.failures.append(_describe(item, call.excinfo, self.outcome.impl))
        elif rep.skipped and call.excinfo is not None:
            self.outcome.skipped.append(f"{item.name}: {_first_line(str(call.excinfo.value))}")
        elif rep.passed and rep.when == "call":
            self.outcome.passed += 1

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        """Stop a check that runs too long (an endless loop in the student's code)."""
        if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
            yield
            return

        def too_long(signum, frame):
            raise CheckTimeout(f"this check ran for over {CHECK_SECONDS} s: is there an endless loop?")
        previous = signal.signal(signal.SIGALRM, too_long)
        signal.setitimer(signal.ITIMER_REAL, CHECK_SECONDS)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def pytest_collectreport(self, report):
        if report.failed:
            self.outcome.error = f"could not collect {report.nodeid}: {_first_line(str(report.longrepr))}"


def run_checks(ex: Exercise, impl: Path | str, *, stop_at_first: bool = False) -> Outcome:
    """Run `ex`'s checks against the file `impl`; nothing is printed."""
    impl = Path(impl).resolve()
    outcome = Outcome(ex, impl)
    if not impl.is_file():
        outcome.error = f"no such file: {impl}"
        return outcome
    args = [str(REPO_ROOT / c) for c in ex.checks]
    args += ["-p", "no:terminal", "-p", "no:cacheprovider", "-o", "addopts=",
             "--rootdir", str(REPO_ROOT), "-m", ex.marker]
    if stop_at_first:
        args.append("-x")
    saved = {k: os.environ.get(k) for k in ("PAGEDSIM_IMPL", "PAGEDSIM_EXERCISE", "MPLBACKEND")}
    os.environ.update(PAGEDSIM_IMPL=str(impl), PAGEDSIM_EXERCISE=ex.id, MPLBACKEND="Agg")
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = pytest.main(args, plugins=[_Collector(outcome)])
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) and outcome.error is None:
        outcome.error = f"pytest stopped with {pytest.ExitCode(code).name}"
    return outcome
