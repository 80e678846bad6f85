"""The checker (the process that talks to the submission) runs as a uid of its own, holding no
capability, under `pagedsim grade` as root (grade_job.run_one, course/grade_launch.py),
whether it starts cold or is forked from its worker's warm process (course/grade_warm.py).

Each probe below is an instructor's `--extra-checks` test: trusted code, but it runs in the
checker, so it stands for a payload that somehow got to run there (the escape of issue 39
ran exactly there). The checker's audit hook (pagedsim/testing/audit.py) would end such a
payload at its first write or process start, so the probes that test the operating
system's own barrier do their work in a subprocess, which has no hook: what is left is
what the uid, the capability sets and the mount namespace allow. Every probe is a check of
its own; a probe that finds a hole fails, and its message says what it reached.

The attacks, and what each must get:

    uid            the checker's uid, gid and groups are neither 0 nor the job's own
    caps           CapInh, CapPrm, CapEff, CapAmb and CapBnd are empty, NoNewPrivs is 1
    setuid         setresuid / setresgid / setgroups in a subprocess: EPERM
    signal_grader  kill(grader, 0): EPERM
    signal_other   kill(a process of another uid, as another job's would be, 0): EPERM
    signal_child   kill(its own submission's process, 0): EPERM (the grader starts and
                   kills it, the checker only asks)
    read_answers   the solutions folder, directly and through /proc/<grader>/root and
                   /proc/1/root: empty or refused
    proc_secrets   /proc/<grader>/environ, its fds (the other jobs' verdict pipes), its cwd:
                   refused
    writes         the job folder, the code copy, /tmp, /var/tmp, /dev/shm, $HOME, the
                   source tree: every write refused
    child_scratch  write into the submission's scratch (its uid's, 0700), or chmod / chown
                   it open: refused
    chown          give a scratch file to root or to another uid: EPERM
    userns         a user + mount namespace of its own, then unmount the blank over the
                   solutions: they stay hidden (locked mounts)
    ptrace         PTRACE_ATTACH to another uid's process or the grader: EPERM
    warm_socket    forked from a warm process (course/grade_warm.py), it holds no socket of
                   that process (which forks checkers as root): its only packet socket
                   is its launcher's
    launcher       its request channel to the grader takes only `start` and `stop`: a
                   command line is refused and the channel ends
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from course import curriculum, grade, grade_launch, grade_warm
from course.grade_job import Mode
from pagedsim.testing import jail

EX = curriculum.find("3.1")
NAME = Path(EX.stub).name
ANSWERS = EX.path("solution").parent
PLANT = Path(__file__).resolve().parent / f".planted-by-checker-{os.getpid()}"

PROBES = textwrap.dedent('''
    """Probes run in the checker (tests/instructor/test_checker_uid.py)."""
    import json, os, subprocess, sys

    from course.curriculum import REPO_ROOT
    from course.impl import load_impl

    VICTIM = int("VICTIM_PID")
    ANSWERS = "ANSWERS_DIR"
    PLANT = "PLANT_PATH"
    SCRATCH = os.environ["PAGEDSIM_SCRATCH"]
    GRADER = os.getppid()


    def status():
        return dict(line.split(":", 1) for line in open("/proc/self/status"))


    PRELUDE = """
    import json, os


    def worked(call):
        try:
            call()
            return True
        except OSError:
            return False
    """


    def outside(code):
        """Run `code` in a subprocess of the checker (no audit hook); its stdout as JSON."""
        argv = [sys.executable, "-S", "-c", PRELUDE + code]
        out = subprocess.run(argv, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-300:]
        return json.loads(out.stdout)


    def refused(call):
        try:
            call()
        except OSError:
            return True
        return False


    def test_probe_uid():
        ids = (os.getresuid(), os.getresgid(), os.getgroups())
        job = int(os.environ.get("PAGEDSIM_JOB_UID") or -1)
        flat = [*ids[0], *ids[1]]
        assert 0 not in flat and job not in flat and 0 not in ids[2], f"ids {ids}"


    def test_probe_caps():
        s = status()
        got = {k: int(s[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapAmb", "CapBnd")}
        assert not any(got.values()) and int(s["NoNewPrivs"]) == 1, (
            f"caps {got} NoNewPrivs {s['NoNewPrivs'].strip()}")


    def test_probe_setuid():
        got = outside("""
    calls = {"setresuid": lambda: os.setresuid(4242, 4242, 4242),
             "setresgid": lambda: os.setresgid(4242, 4242, 4242),
             "setgroups": lambda: os.setgroups([0])}
    print(json.dumps([name for name, call in calls.items() if worked(call)]))
    """)
        assert not got, f"switched: {got}"


    def test_probe_signal_grader():
        assert refused(lambda: os.kill(GRADER, 0)), "the grader could be signalled"


    def test_probe_signal_other():
        assert refused(lambda: os.kill(VICTIM, 0)), "another uid's process could be signalled"


    def test_probe_signal_child():
        impl = load_impl("3.1")  # the submission's process starts
        assert impl.__name__
        mine = os.getpid()
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != mine]
        children = []
        for p in pids:
            try:
                if b"child_main" in open(f"/proc/{p}/cmdline", "rb").read():
                    children.append(p)
            except OSError:
                pass
        assert children, "no submission process found"
        hit = [p for p in children if not refused(lambda p=p: os.kill(p, 0))]
        assert not hit, f"signalled the submission's process {hit}"


    def test_probe_read_answers():
        seen = []
        for base in ("", f"/proc/{GRADER}/root", "/proc/1/root"):
            try:
                found = os.listdir(base + ANSWERS)
            except OSError:
                continue
            if found:
                seen.append((base or "/", found[:2]))
        assert not seen, f"solutions visible: {seen}"


    def test_probe_proc_secrets():
        got = []
        for path in (f"/proc/{GRADER}/environ", f"/proc/{GRADER}/fd", f"/proc/{GRADER}/cwd"):
            try:
                (os.listdir if path.endswith(("fd", "cwd")) else lambda p: open(p).read())(path)
                got.append(path)
            except OSError:
                pass
        assert not got, f"read the grader's {got}"


    def test_probe_writes():
        targets = [os.path.dirname(SCRATCH), str(REPO_ROOT), "/tmp", "/var/tmp", "/dev/shm"]
        targets.append("/root")
        got = outside(f"""
    paths = [os.path.join(folder, "planted-by-checker") for folder in {targets!r}] + [{PLANT!r}]
    print(json.dumps([p for p in paths if worked(lambda p=p: open(p, "x").write("x"))]))
    """)
        assert not got, f"wrote outside scratch: {got}"


    def test_probe_child_scratch():
        child = os.path.join(SCRATCH, "child")  # made by the grader, the job uid's own
        got = outside(f"""
    calls = {{"write": lambda: open({child!r} + "/planted", "x").close(),
              "chmod": lambda: os.chmod({child!r}, 0o777),
              "chown": lambda: os.chown({child!r}, os.getuid(), -1)}}
    print(json.dumps([name for name, call in calls.items() if worked(call)]))
    """)
        assert os.stat(child).st_uid != os.getuid() and not got, f"into its scratch: {got}"


    def test_probe_chown():
        mine = os.path.join(SCRATCH, "mine.txt")
        with open(mine, "w") as f:
            f.write("x")
        got = outside(f"""
    given = [u for u in (0, {VICTIM_UID}) if worked(lambda u=u: os.chown({mine!r}, u, u))]
    print(json.dumps(given))
    """)
        assert not got, f"gave a file to uid {got}"


    def test_probe_userns():
        got = outside(f"""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    out = {{"unshare": libc.unshare(0x10000000 | 0x20000) == 0}}
    if out["unshare"]:
        out["umount"] = libc.umount2({ANSWERS!r}.encode(), 2) == 0
        try:
            out["seen"] = os.listdir({ANSWERS!r})
        except OSError:
            out["seen"] = []
    print(json.dumps(out))
    """)
        assert not got.get("seen"), f"solutions revealed: {got}"


    def test_probe_ptrace():
        got = outside(f"""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    out = []
    for pid in ({VICTIM}, {GRADER}):
        if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
            libc.ptrace(17, pid, None, None)  # PTRACE_DETACH at once
            out.append(pid)
    print(json.dumps(out))
    """)
        assert not got, f"attached to {got}"


    def test_probe_warm_socket():
        import socket
        from course.grade_launch import Client

        mine = Client.taken().sock.fileno()
        packets = []
        for fd in map(int, os.listdir("/proc/self/fd")):
            try:
                s = socket.socket(fileno=os.dup(fd))
            except OSError:
                continue
            if s.type == socket.SOCK_SEQPACKET and fd != mine:
                packets.append(fd)
            s.close()
        assert not packets, f"packet sockets {packets} besides the launcher's {mine}"


    def test_probe_launcher():
        from course.grade_launch import Client

        client = Client.taken()  # the one this checker's Submission uses
        assert client is not None, "no launcher channel"
        client.sock.send(b"/bin/sh -c id")
        reply = client.sock.recv(64)
        assert reply == b"", f"the launcher answered {reply!r} to a command line"
''')


def _victim(uid: int) -> subprocess.Popen:
    """A process of another uid, as another job's submission would be."""
    return subprocess.Popen(["sleep", "300"], preexec_fn=jail.become(uid), stdin=subprocess.DEVNULL)


MODES = [
    pytest.param((Mode(False, True), 1), id="own uid, 1 worker"),
    pytest.param((Mode(False, True, warm=False), 1), id="own uid, cold, 1 worker"),
    pytest.param(
        (Mode(True, True), 2),
        id="both, 2 workers",
        marks=pytest.mark.skipif(not jail.can_run_as_user(True), reason="no bwrap"),
    ),
    pytest.param(
        (Mode(True, False), 1),
        id="bubblewrap, 1 worker",
        marks=pytest.mark.skipif(jail.bwrap() is None, reason="no bwrap"),
    ),
]
NAMES = [
    line.split("def test_probe_")[1].split("(")[0]
    for line in PROBES.splitlines()
    if line.startswith("def test_probe_")
]


@pytest.fixture(scope="module", params=MODES)
def graded(request, tmp_path_factory):
    """One `grade` run per mode: two students (a stub each) with the probes as extra checks."""
    if os.geteuid() != 0 or not jail.can_run_as_user(False):
        pytest.skip("the checker runs as a uid of its own only when the grader is root")
    mode, workers = request.param
    tmp = tmp_path_factory.mktemp("uid")
    victim_uid = jail.UID_BASE - 7  # no job's, no checker's
    victim = _victim(victim_uid)
    probes = (
        PROBES.replace("VICTIM_PID", str(victim.pid))
        .replace("VICTIM_UID", str(victim_uid))
        .replace("ANSWERS_DIR", str(ANSWERS))
        .replace("PLANT_PATH", str(PLANT))
    )
    extra = tmp / "test_probes.py"
    extra.write_text(probes)
    root = tmp / "class"
    for student in ("ann", "bo")[:workers]:
        (root / student).mkdir(parents=True)
        (root / student / NAME).write_text(EX.path("stub").read_text())
    try:
        got = grade.grade(
            root, ["3.1"], timeout=240, workers=workers, mode=mode, extra_checks=[extra]
        )
    finally:
        victim.kill()
        victim.wait()
        planted = PLANT.exists()
        PLANT.unlink(missing_ok=True)
    assert not planted, "a probe wrote into the source tree"
    return got


@pytest.mark.slow
@pytest.mark.parametrize("probe", NAMES)
def test_a_payload_in_the_checker_gets_nothing_past_its_own_uid(graded, probe):
    for r in graded:
        assert r.status in ("pass", "fail") and r.verified, (r.status, r.messages)
        bad = [m for m in r.messages if f"probe_{probe}" in m or m.startswith(probe)]
        assert f"test_probe_{probe}" not in r.failed, (r.student, r.failed, r.messages, bad)
        assert r.total >= len(NAMES), (r.total, r.failed, r.messages)  # every probe ran


def test_every_probe_is_named_in_the_docstring():
    documented = {line.split()[0] for line in __doc__.splitlines() if line.startswith("    ")}
    assert set(NAMES) <= documented, set(NAMES) - documented


# -- the grader's end of the launcher, alone (course/grade_launch.py) --------------------------
SERVE = (
    "import socket, sys; s = socket.socket(fileno=int(sys.argv[1])); s.sendall(b'hi'); s.recv(1)"
)


@pytest.fixture
def launcher():
    """A Launcher whose child echoes `hi` on its socket and lives until it closes; `ended`
    lists the pids its `end` was called with."""
    ended: list[int] = []

    def spawn(fd: int) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-S", "-c", SERVE, str(fd)], pass_fds=[fd], start_new_session=True
        )

    got = grade_launch.Launcher(spawn, ended.append)
    client = grade_launch.Client(os.dup(got.fd()))
    got.serve()
    yield got, client, ended
    got.close()


def _alive(pid: int) -> bool:
    try:
        return not Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def test_start_hands_the_checker_a_socket_to_a_new_process_and_a_second_start_ends_the_first(
    launcher,
):
    got, client, ended = launcher
    first = client.start()
    assert first.recv(2) == b"hi"
    pid = got.proc.pid
    second = client.start()
    assert second.recv(2) == b"hi" and got.proc.pid != pid
    assert not _alive(pid) and ended == [pid]


def test_stop_gives_the_exit_status_once_the_process_and_its_uid_are_gone(launcher):
    got, client, ended = launcher
    sock = client.start()
    assert sock.recv(2) == b"hi"
    pid = got.proc.pid
    sock.close()  # its socket closed: it ends on its own, status 0
    assert client.stop() == 0 and ended == [pid] and not _alive(pid)
    assert client.stop() is None  # nothing runs: nothing to stop


@pytest.mark.parametrize(
    "request_", [b"/bin/sh -c id", b"start" + b"x" * 64, b"stop\0", b"START", b"\xff" * 16]
)
def test_any_other_request_ends_the_service_and_its_process(launcher, request_):
    got, client, ended = launcher
    assert client.start().recv(2) == b"hi"
    pid = got.proc.pid
    client.sock.send(request_)
    assert client.sock.recv(64) == b""  # the channel is closed at once
    got.thread.join(10)
    assert not got.thread.is_alive() and not _alive(pid) and ended == [pid]
    with pytest.raises(OSError):
        client.start()


def test_the_checker_takes_its_channel_out_of_the_environment_once(monkeypatch):
    a, b = socket.socketpair()
    monkeypatch.setattr(grade_launch.Client, "_taken", None)
    monkeypatch.setenv(grade_launch.VAR, str(os.dup(b.fileno())))
    client = grade_launch.Client.taken()
    assert client is not None and grade_launch.VAR not in os.environ
    assert not os.get_inheritable(client.sock.fileno())
    assert grade_launch.Client.taken() is client
    a.close()
    b.close()
    client.sock.close()


def test_a_reply_left_unread_by_an_interrupted_request_is_skipped(launcher):
    got, client, ended = launcher
    for request in (grade_launch.START, grade_launch.STOP):  # sent, as `_ask` sends them,
        client.sent += 1  # but a time limit struck before their replies were read
        client.sock.send(request)
    sock = client.start()
    assert sock.recv(2) == b"hi" and got.proc is not None
    sock.close()
    assert client.stop() == 0 and got.proc is None and len(ended) == 2


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="warm checkers run only when the grader is root")
def test_a_job_whose_warm_process_is_gone_starts_cold_and_is_graded(tmp_path, monkeypatch):
    tried = []

    def gone(self, *args):
        tried.append(self)
        raise OSError("the warm process is gone")

    monkeypatch.setattr(grade_warm.Warm, "start", gone)
    (tmp_path / "ann").mkdir()
    (tmp_path / "ann" / NAME).write_text(EX.path("stub").read_text())
    (got,) = grade.grade(tmp_path, ["3.1"], timeout=240, workers=1, mode=Mode(False, True))
    assert tried and got.status == "fail" and got.total > 0 and got.verified, got
