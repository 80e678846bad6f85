"""A hostile submission against the isolation of `pagedsim grade` (course/isolation.py,
pagedsim/testing/jail.py): it reads the grader's environment, forks a chain, escapes with a
double fork and setsid, signals the grader, eats memory and CPU. Each attack is a few lines
of a student's file run in a real child process, in every mode this machine offers
(bubblewrap when it works, a uid of its own when the tests run as root and that user can
run this Python, and neither)."""

import os
import signal
import time

import pytest

from course.impl import ImportFailed
from course.isolation import Submission
from pagedsim.testing import jail

SECRET = "s3cret-token-of-the-instructor-7f3a"

MODES = [
    pytest.param(dict(sandbox=False), id="no sandbox"),
    pytest.param(
        dict(sandbox=True),
        id="bubblewrap",
        marks=pytest.mark.skipif(
            jail.bwrap() is None, reason="bubblewrap is not installed or cannot make namespaces"
        ),
    ),
]


def own_uid_works() -> bool:
    return jail.can_run_as_user(False)


UID_MODE = pytest.param(
    dict(sandbox=False, own_uid=True),
    id="own uid",
    marks=pytest.mark.skipif(
        not own_uid_works(),
        reason="needs root, and Python in folders a job's user may enter "
        "(a pyenv under a 0700 /root is not)",
    ),
)


def submission(tmp_path, text: str, *, sandbox=False, own_uid=False, **kw) -> Submission:
    """A Submission of `text`, laid out as `pagedsim grade` lays a job out when it has a uid."""
    folder = tmp_path / "job"
    (folder / "submission").mkdir(parents=True)
    path = folder / "submission" / "student.py"
    path.write_text(text)
    uid = None
    if own_uid:
        uid = jail.job_uid(40)
        jail.share_with(uid, path.parent)
        for d in (tmp_path, folder):
            d.chmod(0o711)
        for d in tmp_path.parents:  # pytest's own temporary folders: passable, not listable
            if str(d).startswith("/tmp/pytest-of-") and d.stat().st_mode & 0o001 == 0:
                d.chmod(d.stat().st_mode | 0o001)
    scratch = folder / "scratch"
    scratch.mkdir()
    scratch.chmod(0o711)
    return Submission(path, "3.1", scratch=scratch, sandbox=sandbox, uid=uid, **kw)


@pytest.mark.parametrize("mode", [*MODES, UID_MODE])
def test_a_secret_in_the_graders_environment_never_reaches_the_submission(
    tmp_path, monkeypatch, mode
):
    """G7: the file reads os.environ at import and in a call, and raises it in a message."""
    monkeypatch.setenv("INSTRUCTOR_TOKEN", SECRET)
    text = (
        "import os\nSEEN = dict(os.environ)\n"
        "def env():\n    return SEEN, dict(os.environ)\n"
        "def boom():\n    raise ValueError(repr(dict(os.environ)))\n"
    )
    with submission(tmp_path, text, **mode) as sub:
        mod = sub.module()
        seen, now = mod.env()
        with pytest.raises(ValueError) as raised:
            mod.boom()
    for text_out in (repr(seen), repr(now), str(raised.value)):
        assert SECRET not in text_out
    assert seen["LANG"] and seen["HOME"].endswith("child")
    assert set(seen) <= {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "PYTHONPATH",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONNOUSERSITE",
        "PYTHONHASHSEED",
        "MPLBACKEND",
        "MPLCONFIGDIR",
        "PWD",
        *jail.PASSED_ON,
    }, sorted(seen)


CHAIN = """
import os, sys, time
beat = os.path.join(os.getcwd(), "{name}")


def chain():
    {escape}
    end = time.time() + 120  # should it escape after all, it stops by itself
    while time.time() < end:
        with open(beat, "a") as f:
            f.write(str(os.getpid()) + "\\n")
        time.sleep(0.05)
        if os.fork():
            os._exit(0)  # the parent leaves: a chain of orphans, one step ahead


def start():
    if os.fork() == 0:
        chain()
    return True
"""


def _alive(beat) -> bool:
    """Whether anyone still writes `beat` (a survivor would), watched for a while."""
    size = beat.stat().st_size if beat.exists() else 0
    time.sleep(1.0)
    return (beat.stat().st_size if beat.exists() else 0) != size


@pytest.mark.parametrize(
    "escape",
    [
        pytest.param("pass", id="fork chain"),
        pytest.param("os.setsid()", id="setsid fork chain"),
        pytest.param("os.setsid()\n    if os.fork():\n        os._exit(0)", id="double fork"),
    ],
)
@pytest.mark.parametrize("mode", [*MODES, UID_MODE])
def test_no_process_of_a_submission_outlives_it(tmp_path, mode, escape):
    """G5: each of these was alive 45 s after its job on d797fc2 (no sandbox)."""
    with submission(tmp_path, CHAIN.format(name="beat", escape=escape), **mode) as sub:
        assert sub.module().start() is True
        beat = sub.scratch / "child" / "beat"
        end = time.monotonic() + 60  # a loaded machine (load 20 on two cores) starts it late
        while time.monotonic() < end:
            if beat.exists() and beat.stat().st_size > 20:
                break
            time.sleep(0.05)
        assert beat.exists(), "the chain never started"
    assert not _alive(beat)


@pytest.mark.parametrize("mode", [UID_MODE])
def test_with_a_uid_of_its_own_the_child_can_neither_signal_nor_write_to_the_grader(tmp_path, mode):
    """G2: no SIGKILL for its parent (the checker), no write into /proc/<checker>/fd."""
    text = (
        "import os, signal\n"
        "def attack():\n"
        "    out = []\n"
        "    try:\n        os.kill(os.getppid(), signal.SIGKILL)\n"
        "        out.append('killed')\n"
        "    except PermissionError:\n        out.append('no signal')\n"
        "    try:\n"
        "        open(f'/proc/{os.getppid()}/fd/1', 'w').write('{\"status\": \"pass\"}')\n"
        "        out.append('wrote')\n"
        "    except OSError:\n        out.append('no write')\n"
        "    return out\n"
    )
    with submission(tmp_path, text, **mode) as sub:
        assert sub.module().attack() == ["no signal", "no write"]
    assert os.getpid()  # still here


@pytest.mark.parametrize("mode", MODES)
def test_a_submission_past_its_memory_limit_is_an_error_naming_the_limit(tmp_path, mode):
    text = "hog = bytearray(600 << 20)\n"
    limits = jail.Limits(memory=512 << 20)
    with submission(tmp_path, text, limits=limits, **mode) as sub:
        with pytest.raises(ImportFailed):
            sub.module()
        assert sub.limit_hit == "memory limit 512 MiB"


@pytest.mark.parametrize("mode", MODES)
def test_a_submission_past_its_cpu_limit_is_an_error_naming_the_limit(tmp_path, mode):
    limits = jail.Limits(cpu=1)
    with submission(tmp_path, "while True:\n    pass\n", limits=limits, **mode) as sub:
        with pytest.raises(ImportFailed):
            sub.module()
        sub.close()
        assert sub.limit_hit == "cpu time limit 1 s"


def test_limits_are_applied_in_the_child_and_name_what_ended_it():
    limits = jail.Limits(memory=1 << 30, cpu=7, file_size=3 << 20, open_files=99, processes=5)
    assert limits.why(-signal.SIGXCPU) == "cpu time limit 7 s"
    assert limits.why(-signal.SIGXFSZ) == "file size limit 3 MiB"
    assert limits.why(0) is None and limits.why(-signal.SIGKILL) is None
    assert jail.memory_reason(limits) == "memory limit 1 GiB"
    assert jail.Limits.from_json('{"memory": 5, "cpu": 6}') == jail.Limits(memory=5, cpu=6)


PROBES = """
import socket


class FirstFit:
    def __init__(self, capacity):
        self.capacity, self.holes = capacity, [(0, capacity)]

    def allocate(self, size):
        seen = []
        for what in TRIES:
            try:
                seen.append(f"{what}: {'GOT ' + repr(probe(what))}")
            except OSError as e:
                seen.append(f"{what}: {type(e).__name__}")
        raise ValueError(" | ".join(seen))


def probe(what):
    if isinstance(what, str):  # a path
        with open(what, "rb") as f:
            return f.read(20)
    with socket.socket(what[0], socket.SOCK_STREAM) as s:
        s.settimeout(2)
        s.connect(what[1])
        return "connected"
"""


def graded_alone(tmp_path, tries) -> tuple[bool, str]:
    """Whether one student's row of PROBES on `tries`, graded with a uid of its own and no
    bubblewrap, is verified, and its messages as one text."""
    from course import grade
    from course.grade_job import Mode

    student = tmp_path / "class" / "mallory"
    student.mkdir(parents=True)
    (student / "ex3_1_first_fit.py").write_text(f"TRIES = {tries!r}\n" + PROBES)
    mode = Mode(sandbox=False, own_uid=True)
    rows = grade.grade(tmp_path / "class", ["3.1"], mode=mode, workers=1, timeout=120)
    return rows[0].verified, " ".join(rows[0].messages)


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid of its own per job needs root")
def test_with_a_uid_of_its_own_and_no_bubblewrap_the_child_sees_no_source_checkout(tmp_path):
    """The grader's own checkout (its .git holds every solution, its course/ the mutants) and
    any other folder outside the system's are empty in the child's view, as under bubblewrap.
    Before the fix the child read /work/main's solutions and .git in this mode."""
    from course.curriculum import REPO_ROOT

    paths = [str(REPO_ROOT / name) for name in ("pyproject.toml", ".git", "README.md")]
    verified, said = graded_alone(tmp_path, paths)
    assert verified and all(p in said for p in paths), said
    assert ": GOT " not in said, said


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid of its own per job needs root")
def test_with_a_uid_of_its_own_and_no_bubblewrap_the_child_has_no_network(tmp_path):
    """A service on the grader's machine (here a localhost port and an abstract unix socket the
    test listens on; elsewhere another job's socket, a database, a cloud metadata endpoint) is
    out of the child's reach, as under bubblewrap. Before the fix both connections succeeded."""
    import socket

    name = f"\0pagedsim-test-{os.getpid()}"
    with socket.socket() as tcp, socket.socket(socket.AF_UNIX) as unix:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        unix.bind(name)
        unix.listen()
        tries = [
            (int(socket.AF_INET), ("127.0.0.1", tcp.getsockname()[1])),
            (int(socket.AF_UNIX), name),
        ]
        verified, said = graded_alone(tmp_path, tries)
    assert verified and "127.0.0.1" in said, said
    assert ": GOT " not in said, said
