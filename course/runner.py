"""Run one exercise's checks against one implementation file, and say what failed in words.

pytest runs in-process with its terminal output off and course/checks.ini as its only
configuration; a small plugin keeps, per failing check, the one sentence a student needs:

    not implemented yet: allocate            the stub still raises NotImplementedError
    <the assertion's message>                checks phrase every assert in the student's terms
    <check>: your code raised X: ... (line N) any other exception and its line in the student's file
    ... (counterexample: allocate(); ...)    a Hypothesis failure: its shrunk example as calls

Any file but the reference solution runs in a child process of its own (course/isolation.py):
every use of it is a message (pagedsim/testing/remote.py), so its prints, exits and monkeypatches
reach only its own process. The solutions cannot be imported there (course/guard.py), and every
check runs under a time limit (course/impl.py); `pagedsim grade` closes the rest."""

from __future__ import annotations

import contextlib
import importlib.machinery
import io
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import Phase, settings

from pagedsim.testing.remote_caps import Unregistered

from . import check_fixtures, i18n
from . import impl as impl_module
from .checks_digest import verify_checks
from .curriculum import COURSE_DIR, REPO_ROOT, Exercise
from .grade_report import printable, utf8
from .guard import keep_first, solutions_hidden
from .impl import (
    DEFAULT_SECONDS,
    CheckTimeout,
    ImportFailed,
    ImportTimeout,
    machine_scale,
    time_limit,
)

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
    hint_helps: bool = True  # False where no hint could help (the file is not there)

    @property
    def ok(self) -> bool:
        return not self.failures and self.error is None and self.passed > 0

    @property
    def total(self) -> int:
        return self.passed + len(self.failures)

    @property
    def status(self) -> str:
        """pass | fail | timeout | error, as `check --json` and `grade` report it."""
        kinds = {f.kind for f in self.failures}
        if "timeout" in kinds:
            return "timeout"
        if self.error is not None or "import" in kinds:
            return "error"
        return "fail" if self.failures or not self.passed else "pass"

    def as_json(self) -> dict:
        """The outcome for `--json`: one message per kind of failure, the error first."""
        messages = [message for message, _ in fold(self.failures)]
        if self.error:
            messages.insert(0, self.error)
        messages = [utf8(m) for m in messages]  # the file under test's text, in a JSON verdict
        return {
            "exercise": self.exercise.id,
            "status": self.status,
            "passed": self.passed,
            "total": self.total,
            "failed": [f.check for f in self.failures],
            "messages": messages,
        }


def template(message: str) -> str:
    """A message with its numbers blanked: messages differing only there are shown once."""
    blank = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", message)
    return re.sub(r"#(, #)+", "#", blank)  # lists of any length: [#] and [#, #] say the same


def fold(failures) -> list[tuple[str, list[str]]]:
    """[(message, its checks)] per `template` of a first line; a message with a counterexample
    line is kept over one without."""
    groups: dict[str, tuple[str, list[str]]] = {}
    for f in failures:
        key = template(f.message.splitlines()[0] if f.message else "")
        first, checks = groups.setdefault(key, (f.message, []))
        checks.append(f.check)
        if "\n" in f.message and "\n" not in first:
            groups[key] = (f.message, checks)
    return list(groups.values())


def print_report(outcome, *, verbose: bool, hint: bool) -> None:
    """`pagedsim check`'s text report: failures folded, four shown unless `verbose`. What the
    file under test said (a message, a name) is printed through `printable`, so an escape
    sequence in it cannot move the cursor over the verdict line."""
    ex, n = outcome.exercise, dict(passed=outcome.passed, total=outcome.total)
    if outcome.error:
        print(f"ERROR {ex.id}: {printable(outcome.error)}")
    elif outcome.ok:
        title = ex.title_in(i18n.lang())
        print(i18n.t("PASS {id}  {title} ({passed}/{total} checks)", id=ex.id, title=title, **n))
    else:
        status = outcome.status.upper()
        print(i18n.t("{status} {id}  {passed}/{total} checks pass", status=status, id=ex.id, **n))
    for reason in outcome.skipped:
        print(f"SKIP {ex.id}: {printable(reason)}")
    groups = fold(outcome.failures)
    for i, (message, checks) in enumerate(groups):
        if not verbose and i == 4:
            more = sum(len(checks) for _, checks in groups[4:])
            print("     " + i18n.t("{n} more failing check(s); --verbose shows them all", n=more))
            break
        many = i18n.t("  ({n} checks)", n=len(checks)) if len(checks) > 1 else ""
        head, _, tail = message.partition("\n")
        head, tail = printable(head), "\n".join(map(printable, tail.split("\n")))
        print(
            f"FAIL {ex.id}: {head}{many}"
            + (f"\n{tail}" if tail else "")
            + (f"\n      [{', '.join(checks)}]" if verbose else "")
        )
    if (outcome.failures or outcome.error) and hint and outcome.hint_helps:
        print(i18n.say(f"need a hint? pagedsim hint {ex.id}", f"需要提示？pagedsim hint {ex.id}"))


def _first_line(text: str) -> str:
    return next(iter((text or "").strip().splitlines()), "")


def counterexample(exc: BaseException) -> str:
    """Hypothesis's shrunk example as one line: a state machine's calls (invariants left out,
    drawn values filled in), a property's arguments, or a check's own `exc.calls`; or ''."""
    if isinstance(getattr(exc, "calls", None), str):
        return exc.calls
    notes = [
        line.strip()
        for n in getattr(exc, "__notes__", [])
        if isinstance(n, str)
        for line in n.splitlines()
    ]
    calls, drawn, args, in_example = [], [], "", False
    for line in notes:
        if in_example:
            in_example = line != ")"
            args += " " + re.sub(r"\s*#.*$", "", line) if in_example else ")"
        elif line.startswith("Draw ") and ":" in line:
            drawn.append(re.sub(r"\s*#.*$", "", line.split(":", 1)[1]).strip())
        elif line.startswith("state.") and "(" in line:
            name, rest = line[len("state.") :].split("(", 1)
            if name == "teardown" or name.startswith(("agrees_", "check_")):
                continue
            rest = rest[:-1] if rest.endswith(")") else rest
            rest = rest.replace("data=data(...)", ", ".join(drawn)).strip(", ")
            calls.append(f"{name}({rest})")
            drawn = []
        elif (
            line.startswith(("Falsifying example:", "Failing test case:"))
            and "<state machine>" not in line
        ):
            args = line.split(":", 1)[1].strip()
            in_example = args.endswith("(")
    if calls:
        return "; ".join(calls)
    m = re.match(r"\w+\((.*)\),?$", args)
    if not m:
        return ""
    text = re.sub(r"\s+", " ", re.sub(r"\bimpl=<module [^>]*>,?", "", m.group(1)))
    for spaced, tight in (("( ", "("), ("[ ", "["), (", )", ")"), (", ]", "]")):
        text = text.replace(spaced, tight)
    return text.strip().rstrip(",")


def no_addresses(text: str) -> str:
    """<pagedsim.block_pool.BlockPool object at 0x7f...> as <BlockPool>."""
    return re.sub(r"<(?:[\w]+\.)*(\w+) object at 0x[0-9a-fA-F]+>", r"<\1>", text or "")


def _describe(item, excinfo, impl: Path) -> Failure:
    func = getattr(item, "function", None)
    # a check's message: the first paragraph of its docstring, wrapped lines joined
    doc = " ".join((getattr(func, "__doc__", None) or "").strip().split("\n\n")[0].split())
    doc = doc.rstrip(".") or item.name.replace("_", " ")
    exc = excinfo.value
    # an ExceptionGroup (an exception of the file under test may carry any data as .exceptions)
    while isinstance(inner := getattr(exc, "exceptions", None), tuple) and inner:
        if not isinstance(inner[0], BaseException):
            break
        exc = inner[0]
    stub = _in_chain(exc, NotImplementedError)  # it may be wrapped
    if stub is not None:
        tb, where = stub.__traceback__, []
        while tb is not None:
            if Path(tb.tb_frame.f_code.co_filename).resolve() == impl:
                where.append(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        # the simulator's prefix
        what = re.sub(r"^tid=\[.*?\] ctaid=\[.*?\]: ", "", _first_line(str(stub)))
        what = what or (where[-1] if where else i18n.t("a function"))
        return Failure(
            item.name, i18n.t("not implemented yet: {what}", what=what), "not_implemented"
        )
    if isinstance(exc, CheckTimeout):
        return Failure(item.name, f"{doc}: {exc}", "timeout")
    if isinstance(exc, ImportTimeout):
        return Failure(item.name, str(exc), "timeout")
    if isinstance(exc, ImportFailed):
        return Failure(item.name, str(exc), "import")
    example = no_addresses(counterexample(exc))
    tail = "\n      " + i18n.t("counterexample: {example}", example=example) if example else ""
    if isinstance(exc, (AssertionError, pytest.fail.Exception)):
        msg = _first_line(str(exc))
        if not msg or msg.startswith("assert "):
            msg = doc
        return Failure(item.name, msg + tail)
    # the student's call that raised (check_fixtures.traced)
    raised_by = getattr(exc, "raised_by", None)
    doc = raised_by if isinstance(raised_by, str) and raised_by else doc
    where = [e for e in excinfo.traceback if Path(str(e.path)).resolve() == impl]
    at = i18n.t(" (line {line} of your file)", line=where[-1].lineno + 1) if where else ""
    said = dict(doc=doc, name=type(exc).__name__, what=_first_line(str(exc)), at=at)
    message = i18n.t("{doc}: your code raised {name}: {what}{at}", **said)
    return Failure(item.name, message + tail, "raised")


def _in_chain(exc: BaseException | None, cls: type[BaseException]) -> BaseException | None:
    """The first `cls` in `exc`'s chain of causes and contexts, if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, cls):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


class _Collector:
    def __init__(self, outcome: Outcome, seconds: float):
        self.outcome, self.seconds = outcome, seconds

    @pytest.hookimpl(trylast=True)
    def pytest_configure(self, config):
        keep_first()  # pytest's assertion rewriter went in front of the solutions' blocker
        # The terminal plugin that would register --tb is off, and `_describe` reads each
        # exception itself: pytest's own traceback (source lines, arguments, every frame of
        # the chain) would be formatted for nobody, at a third of a stub's check time.
        config.option.tbstyle = "no"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        rep = (yield).get_result()
        bug = _in_chain(call.excinfo.value, Unregistered) if call.excinfo is not None else None
        if rep.failed and bug is not None:  # a bug in the checks, not the file
            self.outcome.error = self.outcome.error or f"{item.name}: {_first_line(str(bug))}"
        elif rep.failed and call.excinfo is not None:
            self.outcome.failures.append(_describe(item, call.excinfo, self.outcome.impl))
        elif rep.skipped and call.excinfo is not None:
            self.outcome.skipped.append(f"{item.name}: {_first_line(str(call.excinfo.value))}")
        elif rep.passed and rep.when == "call":
            self.outcome.passed += 1

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        """Stop a check that runs too long (an endless loop in the student's code)."""
        with time_limit(self.seconds, i18n.t("this check")):
            yield

    pytest_runtest_setup = pytest_runtest_call  # where the `impl` fixture imports the file

    def pytest_collectreport(self, report):
        if report.failed:
            why = _first_line(str(report.longrepr))
            self.outcome.error = f"could not collect {report.nodeid}: {why}"


SHARED = ("matplotlib",)  # libraries whose objects the submission makes and the checks read


class _ChildModules:
    """A finder that makes `import matplotlib...` here give the child's modules."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in SHARED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return impl_module.child_module(spec.name)  # installed only while _remote is the child

    def exec_module(self, module):
        pass


@contextlib.contextmanager
def _in_child(sub, check_files):
    """While the checks run: load_impl and matplotlib are the child's; check modules are fresh."""

    def purge():
        files = {str(Path(f).resolve()) for f in check_files}
        return {
            k: sys.modules.pop(k)
            for k, m in list(sys.modules.items())
            if k.split(".")[0] in SHARED
            or k.startswith("course.ch03_kv_block.checks")
            or str(getattr(m, "__file__", None) or "") in files
        }

    saved, finder = purge(), _ChildModules()
    impl_module._remote = sub
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        impl_module._remote = None
        for key in [k for k in impl_module._cache if k[0] == "remote"]:
            del impl_module._cache[key]
        sub.close()
        purge()
        sys.modules.update(saved)


@contextlib.contextmanager
def _without_explain():
    """Hypothesis's profile less its explain phase (its comments, which `counterexample` drops,
    cost half a stub's property time)."""
    before = settings.get_current_profile_name()
    parent = settings.get_profile(before)
    phases = [p for p in parent.phases if p is not Phase.explain]
    settings.register_profile("pagedsim-check", parent=parent, phases=phases)
    settings.load_profile("pagedsim-check")
    try:
        yield
    finally:
        settings.load_profile(before)


def _pytest_args(checks: list[str], scratch: Path, markers: str | None, stop_at_first: bool):
    """pytest's command line for one run of the checks, its output and caches off."""
    args = [*checks, "--basetemp", str(scratch / "pytest"), "-c", str(INI)]
    # no:unraisableexception and no:threadexception turn an exception in a __del__ or a thread
    # into a warning no one reads here, and end every run with a full gc.collect()
    plugins = "terminal cacheprovider randomly unraisableexception threadexception"
    for name in plugins.split():
        args += ["-p", f"no:{name}"]
    args += ["--rootdir", str(COURSE_DIR), "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):  # `grade`'s checker: Hypothesis' plugin
        args += ["-p", "_hypothesis_pytestplugin"]  # alone (benchmarks/profile_grade_job.py)
    if markers:
        args += ["-m", markers]
    if stop_at_first:
        args.append("-x")
    return args


def run_checks(
    ex: Exercise,
    impl: Path | str,
    *,
    stop_at_first: bool = False,
    seconds: float | None = None,
    extra_checks=(),
    markers: str | None = None,
    isolate: bool | None = None,
    sandbox: bool | None = None,
) -> Outcome:
    """Run `ex`'s checks (and any extra pytest files) against `impl`, printing nothing. `isolate`
    (default: all but the reference solution): in a child process; `sandbox` (default:
    $PAGEDSIM_SANDBOX is 1): under bubblewrap."""
    impl = Path(impl).resolve()
    outcome = Outcome(ex, impl)
    if not impl.is_file():
        outcome.error = i18n.t("no such file: {path}", path=impl)
        outcome.hint_helps = False
        return outcome
    # the default limit grows with the machine's load; a limit the caller chose is kept
    seconds = float(seconds or DEFAULT_SECONDS * machine_scale())
    checks = [str(REPO_ROOT / c) for c in ex.checks]
    checks += [str(Path(p).resolve()) for p in extra_checks]
    reference = impl == ex.path("solution").resolve()
    isolate = not reference if isolate is None else isolate
    scratch = Path(os.environ.get("PAGEDSIM_SCRATCH") or tempfile.mkdtemp(prefix="pagedsim-check-"))
    own_scratch = not os.environ.get("PAGEDSIM_SCRATCH")
    args = _pytest_args(checks, scratch, markers, stop_at_first)
    env = dict(PAGEDSIM_IMPL=str(impl), PAGEDSIM_EXERCISE=ex.id, MPLBACKEND="Agg")
    env["PAGEDSIM_CHECK_SECONDS"] = str(seconds)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    hide = contextlib.nullcontext() if reference else solutions_hidden()
    sub = None
    if isolate:
        from .isolation import Submission

        sandbox = os.environ.get("PAGEDSIM_SANDBOX") == "1" if sandbox is None else sandbox
        sub = Submission(impl, ex.id, scratch=scratch, code_root=REPO_ROOT, sandbox=sandbox)
    child = _in_child(sub, checks) if sub is not None else contextlib.nullcontext()
    code = None
    try:
        changed = verify_checks(REPO_ROOT)  # under `pagedsim grade`: right before the import
        if changed:
            outcome.error = f"the job's private copy of course/{changed} changed: not graded"
            return outcome
        quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
        with hide, child, quiet[0], quiet[1], _without_explain():
            code = pytest.main(args, plugins=[_Collector(outcome, seconds), check_fixtures])
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        if own_scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return _ended(outcome, sub, code)


def _ended(outcome: Outcome, sub, code) -> Outcome:
    """`outcome` once pytest returned `code`: a limit the child hit, or a refused reply, is the
    error."""
    if sub is not None and sub.limit_hit:  # e.g. "memory limit 2 GiB"
        outcome.error = sub.limit_hit
    if sub is not None and sub.refused and outcome.error is None:  # a reply it would not read
        from .isolation import REFUSED

        outcome.error = REFUSED.format(why=sub.refused)
    ok = (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED)
    if code is not None and code not in ok and outcome.error is None:
        outcome.error = f"pytest stopped with {pytest.ExitCode(code).name}"
    return outcome
