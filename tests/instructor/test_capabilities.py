"""The capability boundary (pagedsim/testing/remote_caps.py): what the checker hands to the
code under test is a fixed surface, never an object to explore.

The first test is the exploit of issue 39, end to end through a real child process:
`iter(grader_obj).gi_frame.f_builtins["exec"](code)` ran `code` in the checker. Then
Hypothesis drives the checker's side of the socket directly, as a submission that writes its
own messages would: every type the shipped checks hand out, arbitrary attribute names and
operators, chains of up to 6 steps through whatever came back, calls with arbitrary data.
Nothing beyond the registered surface may answer, and an audit hook fails the test on any
exec, compile, import, open or process start in this process while it serves. Last, every
shipped check runs against the reference solution in a child process: a check that hands
over an unregistered type fails there, in CI, not in a student's run.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from course import curriculum, runner
from course.isolation import Submission
from pagedsim import BlockPool
from pagedsim.testing import jail, remote
from pagedsim.testing.remote_caps import (
    NEVER,
    SURFACES,
    Callback,
    Cursor,
    Method,
    Unregistered,
    register,
    surface_of,
)
from pagedsim.testing.remote_values import SPECIAL

with warnings.catch_warnings():  # its pytestmark names the course's own marker
    warnings.simplefilter("ignore")
    from course.ch03_kv_block.checks.test_ex3_4a_free_list import CountingArray

EXPLOIT = """
def take(grader_obj, code):
    return iter(grader_obj).gi_frame.f_builtins["exec"](code)
"""


def test_the_issues_exploit_through_a_generator_frame_runs_nothing_in_the_checker(tmp_path):
    """Issue 39: a CountingArray's __iter__ is a generator; its frame's builtins gave `exec`."""
    mark = tmp_path / "ran"
    path = tmp_path / "mallory.py"
    path.write_text(EXPLOIT)
    with Submission(path, "3.4a", scratch=tmp_path / "scratch") as sub:
        with pytest.raises(Exception) as raised:  # noqa: PT011 - the refusal crosses as the child's error
            sub.module().take(CountingArray([1, 2, 3]), f"open({str(mark)!r}, 'w').close()")
    assert not mark.exists(), "the submission ran code in the checker"
    assert "gi_frame" in str(raised.value) or "not serve" in str(raised.value), raised.value


# -- Hypothesis drives the server ------------------------------------------------------------

EVENTS: list[str] = []  # what the audit hook saw while ARMED
ARMED = [False]
FORBIDDEN = ("exec", "compile", "import", "open", "subprocess.", "os.system", "os.exec")
FORBIDDEN += ("os.posix_spawn", "os.spawn", "os.fork", "os.kill", "ctypes.")


def _audit(event: str, args) -> None:
    if ARMED[0] and event.startswith(FORBIDDEN):
        EVENTS.append(event)


sys.addaudithook(_audit)  # for this process's life; it records only while ARMED


def _spy(*args):
    return len(args)


def handed_out():
    """One of each type the shipped checks hand to a submission (and the wrappers)."""
    pool = BlockPool(4, 2)
    return [
        CountingArray([3, 1, 2]),
        pool,
        Method(pool, "allocate"),
        Cursor(iter(CountingArray([5, 6]))),
        Callback(_spy),
    ]


class Server:
    """The checker's end of a socket, and a raw view of the other end."""

    def __init__(self):
        self.ours, self.theirs = socket.socketpair()
        self.ch = remote.Channel(self.ours, trusting=False)
        self.seq = 0

    def ask(self, op: str, payload_node: list):
        """Serve one raw request; the reply as plain JSON (["P", kind, seq, value, back])."""
        self.seq += 1
        ARMED[0] = True
        try:
            self.ch._serve(["R", self.seq, op, payload_node])
        finally:
            ARMED[0] = False
        n = struct.unpack("!Q", self.theirs.recv(8, socket.MSG_WAITALL))[0]
        return json.loads(self.theirs.recv(n, socket.MSG_WAITALL))

    def close(self):
        self.ours.close()
        self.theirs.close()


def handles(node) -> list[int]:
    """Keys of the ["h", ...] handles anywhere in a reply node."""
    if type(node) is not list or not node:
        return []
    if node[0] == "h" and len(node) == 4:
        return [node[2]]
    return [k for part in node[1:] for k in handles(part)]


def allowed(obj, op: str, name) -> bool:
    surface = surface_of(obj)
    if surface is None or type(name) is not str:
        return False
    if op == "getattr":
        return name in surface.attributes or name in surface.methods
    if op == "setattr":
        return name in surface.settable
    if op == "special":
        return name in surface.operations and name in SPECIAL
    return name in surface.operations  # call -> __call__, asarray


NAMES = st.one_of(
    st.sampled_from(
        [
            "gi_frame",
            "f_builtins",
            "f_globals",
            "f_back",
            "f_locals",
            "tb_frame",
            "cr_frame",
            "__class__",
            "__dict__",
            "__globals__",
            "__func__",
            "__self__",
            "__closure__",
            "__init__",
            "__reduce_ex__",
            "__getattribute__",
            "__subclasses__",
            "_items",
            "_obj",
            "_fn",
            "_it",
            "_ref",
            "allocate",
            "free",
            "num_gpu_blocks",
            "count",
            "copy",
            "send",
            "throw",
            "close",
            "mro",
            "__iter__",
            "__next__",
            "__len__",
            "__getitem__",
            "__repr__",
            "__call__",
            "__eq__",
        ]
    ),
    st.text(max_size=12),
    st.from_regex(r"__[a-z]{1,10}__", fullmatch=True),
    st.integers(),
    st.none(),
)
DATA = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3).map(lambda v: ["l", v]),
    max_leaves=6,
)
STEP = st.tuples(
    st.sampled_from(["getattr", "setattr", "call", "special", "asarray", "import_impl", "zz"]),
    NAMES,
    st.lists(DATA, max_size=3),
    st.integers(0, 10**6),  # which known object: modulo their number
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(start=st.integers(0, 4), chain=st.lists(STEP, min_size=1, max_size=6))
def test_nothing_beyond_the_registered_surface_answers_and_nothing_runs_here(start, chain):
    server = Server()
    try:
        known = []
        for obj in handed_out():
            known.append(server.ch.export(obj))
        target = known[start]
        for op, name, args, pick in chain:
            obj = server.ch.exports[target]
            if op in ("getattr", "special"):
                payload = [name, ["t", args]] if op == "special" else [name]
            elif op == "setattr":
                payload = [name, args[0] if args else None]
            elif op == "call":
                payload = [["t", args], ["d", []]]
            else:
                payload = [name]
            reply = server.ask(op, ["t", [["y", target], *payload]])
            assert reply[0] == "P" and reply[1] in ("ok", "err"), reply
            label = {"call": "__call__", "asarray": "asarray"}.get(op, name)
            if reply[1] == "ok":
                assert allowed(obj, op, label), (type(obj).__name__, op, name, reply)
            for key in handles(reply[3]):
                got = server.ch.exports[key]
                assert type(got) in SURFACES, (type(got), op, name)
                known.append(key)
            target = known[pick % len(known)]
        assert not EVENTS, f"the checker ran {EVENTS} while serving"
    finally:
        EVENTS.clear()
        server.close()


def test_the_registered_surface_answers_with_data_and_capabilities():
    """The boundary is not a wall: what the checks need is served (so the test above is not
    vacuous)."""
    server = Server()
    try:
        array, pool = server.ch.export(CountingArray([7, 8])), server.ch.export(BlockPool(4, 2))
        assert server.ask("special", ["t", [["y", array], "__len__", ["t", []]]])[3] == 2
        cursor = server.ask("special", ["t", [["y", array], "__iter__", ["t", []]]])[3]
        assert cursor[0] == "h" and type(server.ch.exports[cursor[2]]) is Cursor
        step = server.ask("special", ["t", [["y", cursor[2]], "__next__", ["t", []]]])
        assert step[1:4:2] == ["ok", 7]
        method = server.ask("getattr", ["t", [["y", pool], "allocate"]])[3]
        assert type(server.ch.exports[method[2]]) is Method
        reply = server.ask("call", ["t", [["y", method[2]], ["t", []], ["d", []]]])
        assert reply[1:4:2] == ["ok", 0]
        assert server.ask("getattr", ["t", [["y", pool], "num_free_blocks"]])[3] == 3
    finally:
        server.close()


def test_a_generator_a_frame_a_function_and_a_dict_of_builtins_are_never_handed_over():
    """The encoder's gate: each of these as a reply (or an argument) is refused, a generator
    becomes a Cursor whose only operation is `next`."""
    server = Server()
    try:

        def gen():
            yield sys._getframe()

        frame = next(gen())
        for value in [frame, frame.f_builtins, _spy, server.close, sys, type, print, {"x": print}]:
            with pytest.raises(Unregistered):
                server.ch.encode(value)
        node = server.ch.encode(gen())
        cursor = server.ch.exports[node[2]]
        assert type(cursor) is Cursor and surface_of(cursor).methods == frozenset()
        assert server.ask("getattr", ["t", [["y", node[2]], "gi_frame"]])[1] == "err"
    finally:
        server.close()


def test_a_check_cannot_register_a_type_that_leads_to_code_or_a_private_name():
    class Widget:
        pass

    for bad in NEVER[:5]:
        with pytest.raises(ValueError):
            register(bad)
    for name in ("_items", "__class__", "gi frame", 3):
        with pytest.raises(ValueError):
            register(Widget, methods=(name,))
    with pytest.raises(ValueError):
        register(Widget, operations={"__getattribute__"})
    assert Widget not in SURFACES


def test_an_unregistered_hand_over_in_a_check_is_the_checks_error_not_the_students(tmp_path):
    """A check that hands over a generator function fails loudly as an error of the checks."""
    ex = curriculum.find("3.1")
    extra = tmp_path / "test_leaky_extra.py"
    extra.write_text(
        "from course.impl import load_impl\n\n"
        "def test_hands_over_a_function():\n"
        "    impl = load_impl('3.1')\n"
        "    impl.external_fragmentation(lambda: 0)\n"
    )
    outcome = runner.run_checks(
        ex, ex.path("solution"), isolate=True, extra_checks=[extra], markers="not ch3_1"
    )
    assert outcome.status == "error" and "does not hand a function" in outcome.error, outcome


# Every shipped check, against the reference solution, in a child process (sandboxed where
# bubblewrap works, as `grade` runs it): each check's hand-overs are then encoded by the
# untrusting channel, so an unregistered one fails here, as does a check that needs the
# child to reach the checker's files.
SHIPPED = [ex.id for ex in curriculum.load() if not ex.id.startswith("3.k")]


@pytest.mark.slow
@pytest.mark.parametrize("exercise", SHIPPED)
def test_every_shipped_check_hands_over_only_data_and_registered_capabilities(exercise, tmp_path):
    ex = curriculum.find(exercise)
    mine = tmp_path / Path(ex.stub).name  # a student's copy: the sandbox hides the solutions
    mine.write_text(ex.path("solution").read_text() + "\n# mine\n")
    outcome = runner.run_checks(ex, mine, isolate=True, sandbox=jail.bwrap() is not None)
    assert outcome.error is None and outcome.status == "pass", outcome.as_json()
