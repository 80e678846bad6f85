"""Run one exercise's checks against one implementation file, and say what failed in words.

The checks are ordinary pytest files shipped in the package (tests/course/ch03/ runs
them against the solutions). Here pytest runs in-process with its terminal output
switched off and course/checks.ini as its only configuration, and a small plugin keeps,
for each failing check, the one sentence a student needs:

    not implemented yet: allocate            the stub still raises NotImplementedError
    <the assertion's message>                checks phrase every assert in the student's terms
    <check>: your code raised X: ... (line N) any other exception and its line in the student's file
    ... (counterexample: allocate(); ...)    a Hypothesis failure: its shrunk example as calls

Any file but the reference solution runs in a child process of its own
(course/isolation.py): the checks and pytest stay here, every use of the file is a
message (pagedsim/testing/remote.py), and so its prints, exits, atexit hooks and
monkeypatches reach only its own process; the verdict is computed here alone. matplotlib, which a
drawing exercise and its checks share, is the child's too (`_ChildModules`). In there
the solutions cannot be imported (course/guard.py); the file's import and every check
run under a time limit (course/impl.py), and an import that loops or crashes makes the
outcome "timeout" or "error" rather than a hang or a traceback. What this does not do
alone: keep a file from reading the solutions on disk or writing outside its folder;
`pagedsim grade` adds a solution-free build and, where bubblewrap exists, a sandbox.
"""

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

from pagedsim.testing.remote_caps import Unregistered

from . import check_fixtures, i18n
from . import impl as impl_module
from .checks_digest import verify_checks
from .curriculum import COURSE_DIR, REPO_ROOT, Exercise
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
        """pass | fail | timeout | error, as `pagedsim check --json` and `pagedsim grade` report
        it."""
        kinds = {f.kind for f in self.failures}
        if "timeout" in kinds:
            return "timeout"
        if self.error is not None or "import" in kinds:
            return "error"
        return "fail" if self.failures or not self.passed else "pass"

    def as_json(self) -> dict:
        """The outcome for `--json`: `messages` holds one message per kind of failure (folded
        by `template`, as the text report folds them), the error first."""
        messages = [message for message, _ in fold(self.failures)]
        if self.error:
            messages.insert(0, self.error)
        return {
            "exercise": self.exercise.id,
            "status": self.status,
            "passed": self.passed,
            "total": self.total,
            "failed": [f.check for f in self.failures],
            "messages": messages,
        }


def template(message: str) -> str:
    """A message with its numbers (seeds, block ids, counts) blanked: messages that differ only
    there say the same thing and are shown once."""
    blank = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", message)
    return re.sub(r"#(, #)+", "#", blank)  # lists of any length: [#] and [#, #] say the same


def fold(failures) -> list[tuple[str, list[str]]]:
    """[(message, the checks that failed with it)], one entry per template of a message's first
    line, in the order first seen; the message kept is the first one that carries a
    counterexample (a second line), else the first."""
    groups: dict[str, tuple[str, list[str]]] = {}
    for f in failures:
        key = template(f.message.splitlines()[0] if f.message else "")
        first, checks = groups.setdefault(key, (f.message, []))
        checks.append(f.check)
        if "\n" in f.message and "\n" not in first:
            groups[key] = (f.message, checks)
    return list(groups.values())


def print_report(outcome, *, verbose: bool, hint: bool) -> None:
    """`pagedsim check`'s text report of one outcome: PASS / FAIL lines, failures folded by
    `fold` (four kinds shown unless `verbose`), and the exercise's hint when asked."""
    ex = outcome.exercise
    if outcome.error:
        print(f"ERROR {ex.id}: {outcome.error}")
    elif outcome.ok:
        print(
            i18n.t(
                "PASS {id}  {title} ({passed}/{total} checks)",
                id=ex.id,
                title=ex.title_in(i18n.lang()),
                passed=outcome.passed,
                total=outcome.total,
            )
        )
    else:
        print(
            i18n.t(
                "{status} {id}  {passed}/{total} checks pass",
                status=outcome.status.upper(),
                id=ex.id,
                passed=outcome.passed,
                total=outcome.total,
            )
        )
    for reason in outcome.skipped:
        print(f"SKIP {ex.id}: {reason}")
    groups = fold(outcome.failures)
    for i, (message, checks) in enumerate(groups):
        if not verbose and i == 4:
            print(
                "     "
                + i18n.t(
                    "{n} more failing check(s); --verbose shows them all",
                    n=sum(len(checks) for _, checks in groups[4:]),
                )
            )
            break
        many = i18n.t("  ({n} checks)", n=len(checks)) if len(checks) > 1 else ""
        head, _, tail = message.partition("\n")
        print(
            f"FAIL {ex.id}: {head}{many}"
            + (f"\n{tail}" if tail else "")
            + (f"\n      [{', '.join(checks)}]" if verbose else "")
        )
    if (outcome.failures or outcome.error) and hint and outcome.hint_helps:
        print(i18n.say(f"need a hint? pagedsim hint {ex.id}", f"需要提示？pagedsim hint {ex.id}"))


def _first_line(text: str) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def _summary(doc: str) -> str:
    """A check's message: the first paragraph of its docstring, wrapped lines joined."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def counterexample(exc: BaseException) -> str:
    """Hypothesis's shrunk example as one short line: the calls of a state machine (its
    invariants, named agrees_* or check_*, left out, drawn values filled in), or the
    arguments of a property; or a check's own `exc.calls` (the testing kit's script,
    already in the student's terms). '' when there is none."""
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
    text = re.sub(r"\bimpl=<module [^>]*>,?", "", m.group(1))
    text = (
        re.sub(r"\s+", " ", text)
        .replace("( ", "(")
        .replace("[ ", "[")
        .replace(", )", ")")
        .replace(", ]", "]")
    )
    return text.strip().rstrip(",")


def no_addresses(text: str) -> str:
    """An object's default repr (<pagedsim.block_pool.BlockPool object at 0x7f...>) as its class
    (<BlockPool>): a student replays the calls, not the addresses."""
    return re.sub(r"<(?:[\w]+\.)*(\w+) object at 0x[0-9a-fA-F]+>", r"<\1>", text or "")


def _describe(item, excinfo, impl: Path) -> Failure:
    func = getattr(item, "function", None)
    doc = _summary(getattr(func, "__doc__", None) or "").rstrip(".") or item.name.replace("_", " ")
    exc = excinfo.value
    # an ExceptionGroup
    while isinstance(getattr(exc, "exceptions", None), tuple) and exc.exceptions:
        exc = exc.exceptions[0]
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
    doc = getattr(exc, "raised_by", None) or doc
    where = [e for e in excinfo.traceback if Path(str(e.path)).resolve() == impl]
    at = i18n.t(" (line {line} of your file)", line=where[-1].lineno + 1) if where else ""
    return Failure(
        item.name,
        i18n.t(
            "{doc}: your code raised {name}: {what}{at}",
            doc=doc,
            name=type(exc).__name__,
            what=_first_line(str(exc)),
            at=at,
        )
        + tail,
        "raised",
    )


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
        if rep.failed and call.excinfo is not None and _in_chain(call.excinfo.value, Unregistered):
            self.outcome.error = self.outcome.error or (  # a bug in the checks, not the file
                f"{item.name}: {_first_line(str(_in_chain(call.excinfo.value, Unregistered)))}"
            )
        elif rep.failed and call.excinfo is not None:
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
            self.outcome.error = (
                f"could not collect {report.nodeid}: {_first_line(str(report.longrepr))}"
            )


SHARED = ("matplotlib",)  # libraries whose objects the submission makes and the checks read


class _ChildModules:
    """A finder that makes `import matplotlib...` here give the child's modules (a figure the
    student drew is read where it lives)."""

    def __init__(self, sub):
        self.sub = sub

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in SHARED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        from pagedsim.testing.remote import ask

        self.sub.current()
        return ask(self.sub.ch, "import_module", spec.name)

    def exec_module(self, module):
        pass


@contextlib.contextmanager
def _in_child(sub, check_files):
    """While the checks run: load_impl gives the child's module, matplotlib is the child's, and the
    check modules are imported afresh (so none holds a module of an earlier run)."""

    def purge():
        files = {str(Path(f).resolve()) for f in check_files}
        return {
            k: sys.modules.pop(k)
            for k, m in list(sys.modules.items())
            if k.split(".")[0] in SHARED
            or k.startswith("course.ch03_kv_block.checks")
            or str(getattr(m, "__file__", None) or "") in files
        }

    saved, finder = purge(), _ChildModules(sub)
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
    """Hypothesis's current profile less its explain phase, while the checks run: that phase
    re-runs a shrunk failing example many times over to add `# or any other generated
    value` comments, which `counterexample` drops; for a stub it is half of a property's
    time. (pagedsim.testing.run's settings leave it out for the same reason.)"""
    from hypothesis import Phase, settings

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
    args = checks + ["--basetemp", str(scratch / "pytest")]
    args += [
        "-c",
        str(INI),
        "--rootdir",
        str(COURSE_DIR),
        "-p",
        "no:terminal",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        # these two turn an exception in a __del__ or a thread into a warning, which no one
        # reads here, and end every run with a full gc.collect() of this process
        "-p",
        "no:unraisableexception",
        "-p",
        "no:threadexception",
        "-W",
        "ignore::pytest.PytestAssertRewriteWarning",
    ]
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):  # as `grade`'s checker runs
        # then of the installed pytest plugins only Hypothesis' own loads: no xdist or anyio,
        # and no pytest11 package's modules marked for assertion rewriting (seconds of a
        # job's cold start: benchmarks/profile_grade_job.py)
        args += ["-p", "_hypothesis_pytestplugin"]
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
    """Run `ex`'s checks (and any extra pytest files) against the file `impl`; nothing is printed.

    `isolate` (default: every file but the reference solution) runs the file in a child
    process; `sandbox` (default: $PAGEDSIM_SANDBOX is 1, as `pagedsim grade` sets it) runs
    that child under bubblewrap."""
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
    env = dict(
        PAGEDSIM_IMPL=str(impl),
        PAGEDSIM_EXERCISE=ex.id,
        MPLBACKEND="Agg",
        PAGEDSIM_CHECK_SECONDS=str(seconds),
    )
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
    """`outcome` once pytest returned `code`: a limit the submission's process ran into, or a
    reply it sent that was refused, is the error (and the run says nothing more)."""
    if sub is not None and sub.limit_hit:  # e.g. "memory limit 2 GiB"
        outcome.error = sub.limit_hit
    if sub is not None and sub.refused and outcome.error is None:  # a reply it would not read
        from .isolation import REFUSED

        outcome.error = REFUSED.format(why=sub.refused)
    ok = (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED)
    if code is not None and code not in ok and outcome.error is None:
        outcome.error = f"pytest stopped with {pytest.ExitCode(code).name}"
    return outcome
