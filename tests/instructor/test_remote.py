"""The socket between the checks and the code under test (pagedsim/testing/remote.py,
course/isolation.py): what crosses by copy, what by handle, how exceptions come back, and
what the checker refuses to do for the child or to read from it."""

import os
import pickle
import socket
import struct
import threading
import time

import numpy as np
import pytest

from course.isolation import Submission
from pagedsim import BlockPool
from pagedsim.testing import remote

STUDENT = """
import os


class PoolError(ValueError):
    pass


def grow(table, n):
    table.extend(range(n))
    return table


def fill(arr):
    arr[:] = 7


def refuse(b):
    raise PoolError(f"block {b} is not yours")


def peek(pool, name):
    return getattr(pool, name)


def uses(pool):
    return pool.allocate(), pool.ref_count(0)


def leave():
    os._exit(3)


class Counter:
    def __init__(self):
        self.n = 0

    def bump(self):
        self.n += 1
        return self.n
"""


@pytest.fixture
def student(tmp_path):
    path = tmp_path / "student.py"
    path.write_text(STUDENT)
    with Submission(path, "3.1", scratch=tmp_path / "scratch") as sub:
        yield sub, sub.module(), path


def test_a_list_and_an_array_the_callee_changes_change_here_and_a_returned_argument_is_the_same_object(  # noqa: E501 -- "def NAME(" alone is 103 columns; renaming would change the node id
    student,
):
    _, mod, _ = student
    table = [9]
    assert mod.grow(table, 3) is table and table == [9, 0, 1, 2]
    arr = np.zeros(4, np.int32)
    mod.fill(arr)
    assert arr.tolist() == [7, 7, 7, 7]


def test_an_object_stays_in_the_child_and_its_methods_are_calls_there(student):
    sub, mod, _ = student
    c = mod.Counter()
    assert (c.bump(), c.bump(), c.n) == (1, 2, 2)
    assert sub.proc.poll() is None


def test_a_students_exception_class_comes_back_as_a_stand_in_with_its_base_and_its_line(student):
    _, mod, path = student
    with pytest.raises(mod.PoolError) as raised:
        mod.refuse(5)
    assert isinstance(raised.value, ValueError) and str(raised.value) == "block 5 is not yours"
    assert type(raised.value).__name__ == "PoolError"
    frames = [e for e in raised.traceback if str(e.path) == str(path)]
    assert (
        frames
        and frames[-1].lineno + 1
        == STUDENT.splitlines().index('    raise PoolError(f"block {b} is not yours")') + 1
    )


def test_the_checker_serves_the_child_public_methods_of_what_it_handed_over_and_nothing_private(
    student,
):
    _, mod, _ = student
    pool = BlockPool(4, 2)
    assert mod.uses(pool) == (0, 1) and pool.ref_count(0) == 1  # the call ran on this pool
    for name in ("_blocks", "_anything"):
        with pytest.raises(PermissionError):
            mod.peek(pool, name)


def test_a_raw_request_for_a_dunder_a_class_or_a_module_is_refused(student):
    """What a child that writes its own messages could ask for: never a way to the checker's
    code."""
    sub, _, _ = student
    pool = BlockPool(4, 2)
    for op, payload in [
        ("getattr", (pool, "__class__")),
        ("getattr", (pool.allocate, "__globals__")),
        ("getattr", (pool, "__init__")),
        ("call", (BlockPool, (1, 1), {})),
        ("getattr", (os, "system")),
        ("special", (pool, "__reduce__", ())),
        ("import_impl", ("/etc/passwd", "3.1")),
    ]:
        with pytest.raises(PermissionError):
            sub.ch.perform(op, payload)


def test_a_child_that_exits_during_a_call_is_a_child_died_and_the_next_use_starts_a_fresh_one(
    student,
):
    sub, mod, _ = student
    first = sub.proc.pid
    with pytest.raises(remote.ChildDied):
        mod.leave()
    sub.ch.dead = "stopped at a time limit"  # as after a time limit: the next use restarts it
    assert mod.Counter().bump() == 1 and sub.proc.pid != first


def _exploit(mark) -> bytes:
    """The pickle that ran code in the grader of d797fc2: numpy.dtypes + __builtins__.get
    gives `exec`, which the allow-list let through; then exec(touch MARK)."""

    def text(s):
        b = s.encode()
        return b"\x8c" + bytes([len(b)]) + b

    code = f"open({str(mark)!r}, 'w').close()"
    inner = (
        b"\x80\x04"
        + text("numpy.dtypes")
        + text("__builtins__.get")
        + b"\x93"
        + text("exec")
        + b"\x85R"
        + text(code)
        + b"\x85R."
    )
    return b"P" + pickle.dumps(("ok", 1, inner, {}), protocol=4)


def test_a_reply_that_would_run_code_here_is_refused_and_nothing_runs(tmp_path):
    """A crafted frame on the socket (the old pickle exploit) is refused unread: the reply is
    not JSON, so the conversation ends, the channel says why, and nothing ran."""
    mark = tmp_path / "ran"
    ours, theirs = socket.socketpair()
    ch = remote.Channel(ours, trusting=False)

    def child():
        head = theirs.recv(8)
        theirs.recv(struct.unpack("!Q", head)[0])
        body = _exploit(mark)
        theirs.sendall(struct.pack("!Q", len(body)) + body)

    threading.Thread(target=child, daemon=True).start()
    with pytest.raises(remote.ChildDied) as died:
        ch.request("getattr", None, "x")
    assert "not JSON" in str(died.value) and ch.refused
    time.sleep(0.2)
    assert not mark.exists()


def test_a_submission_that_writes_a_crafted_frame_at_import_gets_an_error_and_nothing_runs(
    tmp_path,
):
    """The attack end to end: the file writes the exploit on its own socket while imported."""
    mark = tmp_path / "ran"
    path = tmp_path / "evil.py"
    path.write_text(
        "import os, struct, sys\n"
        f"body = {_exploit(mark)!r}\n"
        "os.write(int(sys.argv[1]), struct.pack('!Q', len(body)) + body)\n"
    )
    with Submission(path, "3.1", scratch=tmp_path / "scratch") as sub:
        with pytest.raises(Exception, match="refused to read") as raised:
            sub.module()
    assert type(raised.value).__name__ == "ImportFailed"
    assert not mark.exists()


def test_a_reply_over_the_limit_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "big.py"
    path.write_text("def big():\n    return b'x' * (3 << 20)\n")
    with Submission(path, "3.1", scratch=tmp_path / "scratch", limit=1 << 20) as sub:
        with pytest.raises(remote.ChildDied):
            sub.module().big()
        sub.close()
        assert "over the limit of 1 MiB" in sub.refused
