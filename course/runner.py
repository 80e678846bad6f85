"""Run one exercise's checks against one implementation file, and say what failed in words.

The checks are ordinary pytest files shipped in the package (tests/course/ch03/ runs
them against the solutions). Here pytest runs in-process with its terminal output
switched off and course/checks.ini as its only configuration, and a small plugin keeps,
for each failing check, the one sentence a student needs:

    not implemented yet: allocate            the stub still raises NotImplementedError
    <the assertion's message>                checks phrase every assert in the student's terms
    <check>: your code raised X: ... (line N) any other exception, with the line in the student's file
    ... (counterexample: allocate(); ...)    a Hypothesis failure: its shrunk example as calls

While any file but the reference solution is checked, the solutions cannot be
imported (course/guard.py), the file's import and every check run under a time limit
(course/impl.py), and an import that loops or crashes makes the outcome "timeout" or
"error" rather than a hang or a traceback.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from . import check_fixtures, i18n
from .curriculum import COURSE_DIR, REPO_ROOT, Exercise
from .guard import keep_first, solutions_hidden
from .impl import DEFAULT_SECONDS, CheckTimeout, ImportFailed, ImportTimeout, time_limit

INI = COURSE_DIR / "checks.ini"


@dataclass
class Failure:
    check: str  # the test function's name
    message: str  # one line, in the student's terms (may end with a counterexample line)
    kind: str = "assert"  # assert | raised | not_implemented | timeout | import


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

    @property
    def total(self) -> int:
        return self.passed + len(self.failures)

    @property
    def status(self) -> str:
        """pass | fail | timeout | error, as `pagedsim check --json` and `pagedsim grade` report it."""
        kinds = {f.kind for f in self.failures}
        if "timeout" in kinds:
            return "timeout"
        if self.error is not None or "import" in kinds:
            return "error"
        return "fail" if self.failures or not self.passed else "pass"

    def as_json(self) -> dict:
        messages = list(dict.fromkeys(f.message for f in self.failures))
        if self.error:
            messages.insert(0, self.error)
        return {"exercise": self.exercise.id, "status": self.status, "passed": self.passed,
                "total": self.total, "failed": [f.check for f in self.failures], "messages": messages}


def _first_line(text: str) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def counterexample(exc: BaseException) -> str:
    """Hypothesis's shrunk example as one short line: the calls of a state machine (its
    invariants, named agrees_* or check_*, left out, drawn values filled in), or the
    arguments of a property; or a check's own `exc.calls` (the testing kit's script,
    already in the student's terms). '' when there is none."""
    if isinstance(getattr(exc, "calls", None), str):
        return exc.calls
    notes = [line.strip() for n in getattr(exc, "__notes__", []) if isinstance(n, str) for line in n.splitlines()]
    calls, drawn, args, in_example = [], [], "", False
    for line in notes:
        if in_example:
            in_example = line != ")"
            args += " " + re.sub(r"\s*#.*$", "", line) if in_example else ")"
        elif line.startswith("Draw ") and ":" in line:
            drawn.append(re.sub(r"\s*#.*$", "", line.split(":", 1)[1]).strip())
        elif line.startswith("state.") and "(" in line:
            name, rest = line[len("state."):].split("(", 1)
            if name == "teardown" or name.startswith(("agrees_", "check_")):
                continue
            rest = rest[:-1] if rest.endswith(")") else rest
            rest = rest.replace("data=data(...)", ", ".join(drawn)).strip(", ")
            calls.append(f"{name}({rest})")
            drawn = []
        elif line.startswith(("Falsifying example:", "Failing test case:")) and "<state machine>" not in line:
            args = line.split(":", 1)[1].strip()
            in_example = args.endswith("(")
    if calls:
        return "; ".join(calls)
    m = re.match(r"\w+\((.*)\),?$", args)
    if not m:
        return ""
    text = re.sub(r"\bimpl=<module [^>]*>,?", "", m.group(1))
    text = re.sub(r"\s+", " ", text).replace("( ", "(").replace("[ ", "[").replace(", )", ")").replace(", ]", "]")
    return text.strip().rstrip(",")


def _describe(item, excinfo, impl: Path) -> Failure:
    func = getattr(item, "function", None)
    doc = _first_line(getattr(func, "__doc__", None) or "").rstrip(".") or item.name.replace("_", " ")
    exc = excinfo.value
    while isinstance(getattr(exc, "exceptions", None), tuple) and exc.exceptions:  # an ExceptionGroup
        exc = exc.exceptions[0]
    chain, seen = exc, set()
    while chain is not None and id(chain) not in seen:  # NotImplementedError may be wrapped
        seen.add(id(chain))
        if isinstance(chain, NotImplementedError):
            tb, where = chain.__traceback__, []
            while tb is not None:
                if Path(tb.tb_frame.f_code.co_filename).resolve() == impl:
                    where.append(tb.tb_frame.f_code.co_name)
                tb = tb.tb_next
            what = re.sub(r"^tid=\[.*?\] ctaid=\[.*?\]: ", "", _first_line(str(chain)))  # simulator prefix
            what = what or (where[-1] if where else i18n.t("a function"))
            return Failure(item.name, i18n.t("not implemented yet: {what}", what=what), "not_implemented")
        chain = chain.__cause__ or chain.__context__
    if isinstance(exc, CheckTimeout):
        return Failure(item.name, f"{doc}: {exc}", "timeout")
    if isinstance(exc, ImportTimeout):
        return Failure(item.name, str(exc), "timeout")
    if isinstance(exc, ImportFailed):
        return Failure(item.name, str(exc), "import")
    example = counterexample(exc)
    tail = "\n      " + i18n.t("counterexample: {example}", example=example) if example else ""
    if isinstance(exc, (AssertionError, pytest.fail.Exception)):
        msg = _first_line(str(exc))
        if not msg or msg.startswith("assert "):
            msg = doc
        return Failure(item.name, msg + tail)
    doc = getattr(exc, "raised_by", None) or doc  # the student's call that raised (check_fixtures.traced)
    where = [e for e in excinfo.traceback if Path(str(e.path)).resolve() == impl]
    at = i18n.t(" (line {line} of your file)", line=where[-1].lineno + 1) if where else ""
    return Failure(item.name, i18n.t("{doc}: your code raised {name}: {what}{at}", doc=doc,
                                     name=type(exc).__name__, what=_first_line(str(exc)), at=at) + tail, "raised")


class _Collector:
    def __init__(self, outcome: Outcome, seconds: float):
        self.outcome, self.seconds = outcome, seconds

    @pytest.hookimpl(trylast=True)
    def pytest_configure(self, config):
        keep_first()  # pytest's assertion rewriter went in front of the solutions' blocker

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
    def pytest_runtest_setup(self, item):
        """The `impl` fixture imports the file here: the import is under the limit too."""
        with time_limit(self.seconds, i18n.t("this check")):
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        """Stop a check that runs too long (an endless loop in the student's code)."""
        with time_limit(self.seconds, i18n.t("this check")):
            yield

    def pytest_collectreport(self, report):
        if report.failed:
            self.outcome.error = f"could not collect {report.nodeid}: {_first_line(str(report.longrepr))}"


def run_checks(ex: Exercise, impl: Path | str, *, stop_at_first: bool = False, seconds: float | None = None,
               extra_checks=(), markers: str | None = None) -> Outcome:
    """Run `ex`'s checks (and any extra pytest files) against the file `impl`; nothing is printed."""
    impl = Path(impl).resolve()
    outcome = Outcome(ex, impl)
    if not impl.is_file():
        outcome.error = i18n.t("no such file: {path}", path=impl)
        return outcome
    seconds = float(seconds or DEFAULT_SECONDS)
    args = [str(REPO_ROOT / c) for c in ex.checks] + [str(Path(p).resolve()) for p in extra_checks]
    args += ["-c", str(INI), "--rootdir", str(COURSE_DIR), "-p", "no:terminal", "-p", "no:cacheprovider",
             "-p", "no:randomly", "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    if markers:
        args += ["-m", markers]
    if stop_at_first:
        args.append("-x")
    env = dict(PAGEDSIM_IMPL=str(impl), PAGEDSIM_EXERCISE=ex.id, MPLBACKEND="Agg",
               PAGEDSIM_CHECK_SECONDS=str(seconds))
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    reference = impl == ex.path("solution").resolve()
    hide = contextlib.nullcontext() if reference else solutions_hidden()
    try:
        with hide, contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = pytest.main(args, plugins=[_Collector(outcome, seconds), check_fixtures])
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED) \
            and outcome.error is None:
        outcome.error = f"pytest stopped with {pytest.ExitCode(code).name}"
    return outcome
