"""Exceptions a submission raises that try to reach past the check that failed: an argument
whose `__str__` raises or hangs (the runner reads `str(exc)` after the check's time limit),
an `.exceptions` that is not a group's, a `.raised_by` that is an object, an attribute named
like a method of the class. In the grader such an exception is inert data
(pagedsim/testing/remote_errors.py): reading it never calls the submission, and the runner
(course/runner.py's `_describe`) names it as a plain FAIL, never a crash of pytest. And a
message holding a lone surrogate (a str UTF-8 cannot write) keeps its verdict and points."""

import json
import socket
import sys
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from course import curriculum, grade, grade_report, runner
from pagedsim.testing import remote
from pagedsim.testing.remote_codec import dump_message, load_message
from pagedsim.testing.remote_proxy import Remote, RemoteModule

SOLUTION = curriculum.REPO_ROOT / "course/ch03_kv_block/solutions/ex3_1_first_fit.py"

# 3.1's solution, less its external_fragmentation: each call raises the next attack
ATTACKS = """

import pagedsim.testing.remote_errors as _errors

# the hostile side of the codec: its own str() of an exception is never asked again
_errors._text = lambda e, how=str: "attack"


class Evil:
    def __str__(self):
        raise ValueError("a __str__ that raises, called by the checker")

    __repr__ = __format__ = __str__


def _attacks():
    group = ValueError("not a group")
    group.exceptions = (5,)
    named = ValueError("named by an object")
    named.raised_by = Evil()
    return [group, AssertionError(Evil()), named]  # 3.1 has three checks that call it


_left = _attacks()


def external_fragmentation(holes):
    raise _left.pop(0) if _left else IndexError("no attack left")
"""


def test_a_submissions_lying_exceptions_are_plain_fails_never_a_crash_of_the_runner(tmp_path):
    """Before the fix: ERROR "pytest stopped with INTERNAL_ERROR" (the runner followed
    `.exceptions` to an int and formatted the raising `__str__` outside any check)."""
    source = SOLUTION.read_text().split("\ndef external_fragmentation")[0] + ATTACKS
    path = tmp_path / "ex3_1_first_fit.py"
    path.write_text(source)
    outcome = runner.run_checks(
        curriculum.find("3.1"), path, isolate=True, sandbox=False, seconds=60
    )
    assert outcome.error is None and outcome.status == "fail", outcome.as_json()
    kinds = [f.kind for f in outcome.failures]
    assert kinds == ["raised", "assert", "raised"] and outcome.passed == 5, outcome.failures
    assert "your code raised ValueError: not a group" in outcome.failures[0].message
    assert outcome.failures[1].message == "<Evil>"  # the object's name, never its __str__


@pytest.fixture(scope="module")
def grader():
    """The grader's end of a channel whose other end never answers: a call of the
    submission's object from here raises ChildDied at once."""
    ours, theirs = socket.socketpair()
    ch = remote.Channel(ours, trusting=False)
    ch.dead = "the test's submission never answers"
    yield ch
    ours.close()
    theirs.close()


def holds_handle(v, depth=0) -> bool:
    if isinstance(v, (Remote, RemoteModule)):
        return True
    if depth > 300:
        return True
    if isinstance(v, (list, tuple, set, frozenset)):
        return any(holds_handle(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return any(holds_handle(x, depth + 1) for x in [*v, *v.values()])
    if isinstance(v, slice):
        return any(holds_handle(x, depth + 1) for x in (v.start, v.stop, v.step))
    if isinstance(v, BaseException):
        return holds_handle(v.args, depth + 1) or holds_handle(vars(v), depth + 1)
    return False


handle = st.builds(lambda k, n: ["h", "object", k, n], st.integers(1, 5), st.text(max_size=6))
plain = st.one_of(st.none(), st.integers(), st.text(max_size=6), st.floats())
values = st.recursive(
    plain | handle,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda xs: ["l", xs]),
        st.lists(inner, max_size=3).map(lambda xs: ["t", xs]),
        st.lists(st.tuples(st.integers(), inner).map(list), max_size=3).map(lambda p: ["d", p]),
        st.tuples(inner, inner, inner).map(lambda t: ["sl", *t]),
    ),
    max_leaves=8,
)
classes = st.one_of(
    st.sampled_from(["ValueError", "KeyError", "AssertionError", "OSError", "ExceptionGroup"]).map(
        lambda n: ["kx", n]
    ),
    st.builds(lambda k, n: ["xc", k, n, ["KeyError"]], st.integers(10, 12), st.text(max_size=6)),
)
names = st.sampled_from(["exceptions", "raised_by", "calls", "add_note", "args", "block", "x"])


def exception_node(cls, args, attrs, cause=None):
    return ["x", cls, args, "text", [], [list(a) for a in attrs], cause, ["a note"], ""]


exceptions = st.recursive(
    st.builds(
        exception_node,
        classes,
        st.lists(values, max_size=3),
        st.lists(st.tuples(names, values), max_size=3),
    ),
    lambda inner: st.builds(
        exception_node,
        classes,
        st.lists(values | inner, max_size=2),
        st.lists(st.tuples(names, values | inner), max_size=2),
        st.none() | inner,
    ),
    max_leaves=4,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node=exceptions)
def test_whatever_exception_arrives_reading_it_never_calls_the_submission(grader, node):
    try:
        exc = grader.decode(load_message(dump_message(node)))
    except remote.RemoteError:
        return  # refused as a whole, e.g. ExceptionGroup's constructor with other arguments
    assert isinstance(exc, BaseException)
    chain = [exc]
    while chain[-1].__cause__ is not None:
        chain.append(chain[-1].__cause__)
    for e in chain:
        assert not holds_handle(e), (node, e.args, vars(e))
        str(e), repr(e)  # a dead channel: any call of the submission's object raises here
        assert not isinstance(getattr(e, "add_note", None), (Remote, RemoteModule))
    item = types.SimpleNamespace(function=None, name="test_x")
    try:
        raise exc
    except BaseException:  # noqa: BLE001 - the check's failure, as pytest hands it over
        info = pytest.ExceptionInfo.from_current()
    failure = runner._describe(item, info, SOLUTION)
    assert failure.message and failure.kind in ("assert", "raised", "not_implemented")


# -- text that UTF-8 cannot write --------------------------------------------------------------
SURROGATE = """

def external_fragmentation(holes):
    raise ValueError("bad \\ud800 text")  # a lone surrogate: a str, but not UTF-8
"""


def test_a_lone_surrogate_in_a_submissions_message_keeps_its_fail_and_its_points(tmp_path):
    """Before the fix `check --json` could not encode its verdict, and `grade` gave this file
    an ERROR worth 0 instead of its 5 of 8 checks."""
    path = tmp_path / "ex3_1_first_fit.py"
    path.write_text(SOLUTION.read_text().split("\ndef external_fragmentation")[0] + SURROGATE)
    outcome = runner.run_checks(
        curriculum.find("3.1"), path, isolate=True, sandbox=False, seconds=60
    )
    verdict = outcome.as_json()
    assert (verdict["status"], verdict["passed"], verdict["total"]) == ("fail", 5, 8)
    json.dumps(verdict, ensure_ascii=False).encode()
    assert "bad \\ud800 text" in verdict["messages"][0]  # written as printable() writes it


any_text = st.text(st.characters(exclude_categories=()) | st.sampled_from("\ud800\udfff\x1b"))


@given(messages=st.lists(any_text, max_size=4), error=st.none() | any_text)
def test_whatever_text_an_outcome_holds_its_verdict_is_utf8(messages, error):
    outcome = runner.Outcome(curriculum.find("3.1"), SOLUTION, passed=1, error=error)
    outcome.failures = [runner.Failure(f"test_{i}", m) for i, m in enumerate(messages)]
    verdict = outcome.as_json()
    json.dumps(verdict, ensure_ascii=False).encode()  # UnicodeEncodeError before the fix
    assert len(verdict["messages"]) == len(runner.fold(outcome.failures)) + bool(error)


def test_a_verdict_with_a_lone_surrogate_still_writes_every_report(tmp_path):
    """`grade` writes its CSV and results.json in UTF-8 whatever text a checker's verdict
    carries (here a stand-in checker that sends one)."""
    checker = tmp_path / "checker.py"
    checker.write_text(
        "import json, os\n"
        'v = {"status": "fail", "passed": 1, "total": 2, "failed": ["t"],\n'
        '     "messages": ["\\ud800"]}\n'
        'os.write(int(os.environ["PAGEDSIM_VERDICT_FD"]), (json.dumps(v) + "\\n").encode())\n'
    )
    root = tmp_path / "class"
    (root / "ann").mkdir(parents=True)
    (root / "ann" / "ex3_1_first_fit.py").write_text("x = 1\n")
    mode = grade.Mode(sandbox=False, own_uid=False)
    command = lambda ex_id, path, extra=(): [sys.executable, str(checker), ex_id, str(path)]  # noqa: E731
    results = grade.grade(root, ["3.1"], command=command, mode=mode)
    (row,) = results
    assert (row.status, row.passed, row.total, row.messages) == ("fail", 1, 2, ["\\ud800"])
    (tmp_path / "out.csv").write_text(grade_report.as_csv(results), encoding="utf-8")
    grade_report.write_gradescope(results, tmp_path / "results")
