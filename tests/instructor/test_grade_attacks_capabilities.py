"""Attacks on the capability boundary and the checker's privilege (issue 39), each refused.

Part one: a hostile submission in a real child process, handed one of each capability the
shipped checks hand out (a CountingArray, a BlockPool, a Method, a Cursor, a Callback), tries
to reach code in the checker: dunder, private and generator/frame/traceback attributes,
operators off the surface, raw requests it writes on its own channel (forged handles,
helper operations, operators outside the table), and answers that would carry a function,
a class or a dict of builtins. If any attack answered, it would write MARK from the checker.
Each must raise in the child, and MARK must never exist. (A dunder on a proxy is asked on
the wire with `ch.request`: the proxy's own dunders are the child's, not the checker's.)

Part two: end to end through `pagedsim grade` on exercise 3.4b (the checks hand the
student's functions a BlockPool), in every mode this machine offers (bubblewrap, a uid of
its own, both, and --no-sandbox, whose rows must say verified: false), with 1 and 2
workers: the attackers try the escapes above from inside fork(), forge a verdict on every
fd of the checker, read a solution and write outside their scratch. None may pass; a
control student with a correct file must.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

from course import curriculum, grade
from course.grade_job import Mode
from course.isolation import Submission
from pagedsim import BlockPool
from pagedsim.testing import jail
from pagedsim.testing.remote_caps import Callback, Cursor, Method

with warnings.catch_warnings():  # its pytestmark names the course's own marker
    warnings.simplefilter("ignore")
    from course.ch03_kv_block.checks.test_ex3_4a_free_list import CountingArray

HARNESS = '''
import builtins


def attack(snippet, arr, pool, cursor, method, callback, mark):
    """Run one attack here, in the child; what it got back, or how it was refused."""
    from pagedsim.testing.remote_proxy import Remote
    ch = object.__getattribute__(arr, "_ch")  # this process's own end of the socket
    cb = callback.__closure__[0].cell_contents  # the proxy behind the function it binds as
    scope = dict(arr=arr, pool=pool, cursor=cursor, method=method, callback=callback, cb=cb,
                 mark=mark, ch=ch, Remote=Remote, run=f"open({mark!r}, 'w').close()")
    try:
        exec(snippet, scope)
    except BaseException as e:  # noqa: BLE001
        return "refused: " + type(e).__name__
    return "ANSWERED: " + repr(scope.get("got"))[:200]
'''

# name -> what the submission tries; `run` is code that writes MARK if it ever runs
ATTACKS = {
    "generator frame builtins exec (the issue)": ("iter(arr).gi_frame.f_builtins['exec'](run)"),
    "generator code object": "got = iter(arr).gi_code",
    "generator send/throw": "got = iter(arr).send",
    "frame f_back f_globals": "got = iter(arr).gi_frame.f_back.f_globals",
    "dunder class of a capability": "got = ch.request('getattr', arr, '__class__')",
    "dunder dict of a capability": "got = ch.request('getattr', arr, '__dict__')",
    "private items of the array": "got = arr._items",
    "__getattr__ by name": "got = ch.request('getattr', arr, '__getattr__')",
    "bound method's __self__": "got = arr.count.__self__",
    "bound method's __func__ globals": "got = arr.count.__func__.__globals__",
    "Method's private object": "got = method._obj",
    "Method's __call__ wrapper": "got = ch.request('getattr', method, '__call__')",
    "BlockPool private counts": "got = pool._ref",
    "BlockPool __init__": "got = ch.request('getattr', pool, '__init__')",
    "BlockPool undeclared method": "got = pool._check_id",
    "Cursor's generator": "got = cursor._it",
    "Cursor frame": "got = cursor.gi_frame",
    "Callback's function": "got = cb._fn",
    "Callback's __get__": "got = ch.request('getattr', cb, '__get__')",
    "setattr on the pool": "pool.num_free_blocks = 10**6",
    "delitem off the surface": "del arr[0]",
    "operator off the surface (+)": "got = arr + arr",
    "raw: __getattribute__ as an operator": (
        "got = ch.request('special', arr, '__getattribute__', ('__class__',))"
    ),
    "raw: __reduce_ex__ as an operator": "got = ch.request('special', pool, '__reduce_ex__', (4,))",
    "raw: getattr with a non-text name": "got = ch.request('getattr', arr, 3)",
    "raw: call a capability that is not callable": "got = ch.request('call', pool, (), {})",
    "raw: asarray of the pool": "got = ch.request('asarray', pool)",
    "raw: the child's own helper op on the grader": (
        "got = ch.request('import_impl', '/etc/passwd', '3.1')"
    ),
    "raw: forged handle to an object never handed over": (
        "got = Remote(ch, 1234567, 'x').allocate()"
    ),
    "raw: forged handle to the grader's exception class": (
        "try:\n    callback(1)\nexcept Exception as e:\n    key = type(e).__dict__['_remote'][1]\n"
        "got = Remote(ch, key, 'cls')('x')"
    ),
    "answer: a Callback that returns a function": "got = callback('function')",
    "answer: a Callback that returns the builtins dict": "got = callback('builtins')",
    "answer: a Callback that returns a frame": "got = callback('frame')",
    "answer: a Callback that returns a module": "got = callback('module')",
    "answer: a Callback exception's frame attribute": (
        "try:\n    callback('raise')\nexcept Exception as e:\n    got = e.where.f_globals"
    ),
}


class GraderError(Exception):
    """An exception class of the checker's own (crosses as a stand-in: its key is forgeable)."""


def _hands_back(what):
    """The check-side function behind the Callback: returns what an attacker would want."""
    if what == "function":
        return _hands_back
    if what == "builtins":
        return (
            vars(__builtins__) if isinstance(__builtins__, dict) else vars(sys.modules["builtins"])
        )
    if what == "frame":
        return sys._getframe()
    if what == "module":
        return sys
    error = GraderError("no")
    error.where = sys._getframe()
    raise error


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    folder = tmp_path_factory.mktemp("attacks")
    path = folder / "mallory.py"
    path.write_text(HARNESS)
    with Submission(path, "3.4a", scratch=folder / "scratch") as sub:
        yield sub.module(), folder


@pytest.mark.parametrize("snippet", list(ATTACKS.values()), ids=list(ATTACKS))
def test_each_attack_on_a_capability_is_refused_and_runs_nothing(child, snippet):
    mod, folder = child
    mark = folder / "ran"
    pool = BlockPool(4, 2)
    got = mod.attack(
        snippet,
        CountingArray([1, 2, 3]),
        pool,
        Cursor(iter(CountingArray([4, 5]))),
        Method(pool, "allocate"),
        Callback(_hands_back),
        str(mark),
    )
    assert got.startswith("refused"), got
    assert not mark.exists(), "an attack ran code in the checker"


def test_the_legitimate_surface_still_works_from_the_child(child):
    """Control: the same harness, using only the surface, gets data (the attacks above fail
    because of the boundary, not because the harness cannot reach the checker at all)."""
    mod, folder = child
    pool = BlockPool(4, 2)
    snippet = "got = (len(arr), list(arr), arr.count(2), pool.allocate(), pool.num_free_blocks)"
    got = mod.attack(
        snippet,
        CountingArray([1, 2, 2]),
        pool,
        Cursor(iter([])),
        Method(pool, "allocate"),
        Callback(_hands_back),
        str(folder / "ran"),
    )
    assert got == "ANSWERED: (3, [1, 2, 2], 2, 0, 3)", got


# -- end to end through `pagedsim grade` -----------------------------------------------------------
EX = curriculum.find("3.4b")
NAME = Path(EX.stub).name
STUB = EX.path("stub").read_text()
SOLUTION = EX.path("solution")

ESCAPES = """
import glob, json, os

def _escape(pool, mark):
    tries = [
        lambda: pool.allocate.__func__.__globals__["__builtins__"]["exec"],
        lambda: pool.__class__.__init__.__globals__["__builtins__"]["exec"],
        lambda: pool.ref_count.__self__._ref,
        lambda: iter(pool).gi_frame.f_builtins["exec"],
    ]
    for t in tries:
        try:
            t()(f"import sys; open({mark!r}, 'w').write(' '.join(sys.argv))")  # whose argv?
        except BaseException:
            pass
    good = json.dumps({"status": "pass", "passed": 99, "total": 99, "failed": [], "messages": []})
    for fd in glob.glob(f"/proc/{os.getppid()}/fd/*"):  # the checker's own, if it can see them
        try:
            out = os.open(fd, os.O_WRONLY | os.O_APPEND)
            os.write(out, (good + "\\n").encode())
            os.close(out)
        except OSError:
            pass
    print(good)  # stdout: never a verdict
    try:
        open(mark + ".read", "w").write(open(SOLUTION).read()[:10])
    except OSError:
        pass

_fork = fork
def fork(pool, parent):
    _escape(pool, MARK)
    return _fork(pool, parent)
"""


def attackers(root: Path, mark: Path) -> Path:
    files = {
        "mallory": STUB
        + ESCAPES.replace("MARK", repr(str(mark))).replace("SOLUTION", repr(str(SOLUTION))),
        "good": SOLUTION.read_text() + "\n# mine\n",
    }
    for student, text in files.items():
        (root / student).mkdir(parents=True, exist_ok=True)
        (root / student / NAME).write_text(text)
    return root


def _bwrap():
    return pytest.mark.skipif(jail.bwrap() is None, reason="bubblewrap does not work here")


MODES = [
    pytest.param(Mode(False, False), 2, id="no sandbox, 2 workers"),
    pytest.param(Mode(True, False), 1, id="bubblewrap, 1 worker", marks=_bwrap()),
    pytest.param(
        Mode(False, True),
        2,
        id="own uid, 2 workers",
        marks=pytest.mark.skipif(not jail.can_run_as_user(False), reason="not root"),
    ),
    pytest.param(
        Mode(True, True),
        2,
        id="both, 2 workers",
        marks=pytest.mark.skipif(not jail.can_run_as_user(True), reason="not root or no bwrap"),
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "workers"), MODES)
def test_grade_in_every_mode_gives_the_attacker_no_pass_and_nothing_escapes(
    tmp_path, mode, workers
):
    mark = tmp_path / "escaped"
    root = attackers(tmp_path / "class", mark)
    got = {
        r.student: r for r in grade.grade(root, ["3.4b"], timeout=300, workers=workers, mode=mode)
    }
    assert got["good"].status == "pass" and got["good"].passed == got["good"].total > 5, got
    assert got["mallory"].status != "pass" and got["mallory"].passed < got["good"].total, got
    # the child's own exec may write it where nothing confines the child (no sandbox); the
    # checker's (argv: pagedsim/app/cli.py check ...) never
    assert not mark.exists() or "cli" not in mark.read_text(), "code ran in the checker"
    assert not mark.exists() or not mode.verified, "a sandboxed child wrote outside its scratch"
    assert all(r.verified == mode.verified for r in got.values())
    if mode.verified:
        assert not Path(str(mark) + ".read").exists(), "a sandboxed job read the solution"
    else:
        assert not any(r.verified for r in got.values()), "--no-sandbox rows must be unverified"
