"""kill_tree leaves no zombie behind in a subreaper.

A grader (or a pytest worker) that is the subreaper of its jobs' orphans must also collect
them: a process killed in kill_tree's last sweep dies a moment later, is handed to us, and
would otherwise stay a zombie for the life of the process. Thousands of jobs then exhaust
the system's pids (the CUDA simulator's threads were the first to fail). Each case runs in
a fresh interpreter so this test's own process never becomes a subreaper.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from pagedsim.testing import jail

    assert jail.become_subreaper()
    me = str(os.getpid())

    def count(session):  # zombies handed to us; live ones in `session` or handed to us
        zombies = survivors = 0
        for e in os.listdir("/proc"):
            if e.isdigit():
                try:
                    f = open(f"/proc/{e}/stat").read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                zombies += f[0] == "Z" and f[1] == me
                survivors += f[0] != "Z" and (int(f[4]) == session or f[1] == me)
        return zombies, survivors

    code = sys.argv[1]
    zombies = survivors = 0
    for _ in range(int(sys.argv[2])):
        keep = jail.descendants(os.getpid())
        proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
        time.sleep(0.3)  # let it fork
        jail.kill_tree(proc.pid, sessions={proc.pid}, orphans_of_self=True, keep=keep)
        proc.wait()
        time.sleep(0.2)  # anything killed late has reached us by now
        z, s = count(proc.pid)
        zombies, survivors = zombies + z, survivors + s
    print(zombies, survivors)
    """
)

# Each ends by itself within a minute, should kill_tree miss it (or this test be interrupted
# before kill_tree runs): the chain lives in a session of its own, out of reach of the
# killpg below, and an unbounded one would spin on the machine for good.
CHAINS = {
    "orphans that sleep": "import os, time\\nfor _ in range(20):\\n    if os.fork() == 0:\\n"
    "        os.setsid(); time.sleep(60)\\n        os._exit(0)\\ntime.sleep(60)",
    "a fork chain": "import os, time\\nend = time.time() + 60\\nwhile time.time() < end:\\n"
    "    if os.fork():\\n        os._exit(0)",
    "a fork tree": "import os, time\\nfor _ in range(6):\\n    os.fork()\\ntime.sleep(60)",
}


@pytest.mark.parametrize("code", list(CHAINS.values()), ids=list(CHAINS))
def test_kill_tree_collects_every_process_it_killed(code: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, code.encode().decode("unicode_escape"), "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
        cwd=ROOT,
        start_new_session=True,  # the script itself, killed below (its chains are bounded above)
    )
    try:
        out, err = proc.communicate(timeout=1800)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    assert proc.returncode == 0, err
    zombies, survivors = map(int, out.split())
    assert zombies == 0, f"zombies left in the subreaper: {zombies}"
    assert survivors == 0, f"processes of the killed session still running: {survivors}"


OTHER_CHILD = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from pagedsim.testing import jail

    jail.become_subreaper()
    other = subprocess.Popen([sys.executable, "-c", "raise SystemExit(7)"])  # another job's
    while jail._stat(other.pid)[0] != "Z":  # it has ended, not yet collected by its Popen
        time.sleep(0.01)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              start_new_session=True)
    jail.kill_tree(victim.pid, sessions={victim.pid})
    victim.wait()
    print(other.wait())
    """
)


def test_kill_tree_never_collects_another_threads_child() -> None:
    """kill_tree once called waitpid(-1): killing one job's tree could collect another job's
    checker, whose Popen then read exit status 0 (a crash taken for success)."""
    out = subprocess.run(
        [sys.executable, "-c", OTHER_CHILD],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["7"], "another child's exit status was lost"


def _children(pid: int) -> list[int]:
    out = []
    for e in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{e}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(e))
        except OSError:
            continue
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_checker_stopped_by_sigterm_leaves_no_sleeping_submission_behind(tmp_path):
    """`timeout 60 pagedsim check 3.1 --impl FILE` on a file that sleeps in allocate: the
    checker dies on SIGTERM without running its clean-up; before the fix its child, in a
    session of its own, slept on as an orphan (a loop would have burnt a core for good)."""
    from course import curriculum

    stub = curriculum.find("3.1").path("stub").read_text()
    sleeper = tmp_path / "ex3_1_first_fit.py"
    sleeper.write_text(
        stub.replace('raise NotImplementedError("allocate")', "__import__('time').sleep(600)")
    )
    argv = [sys.executable, "-m", "pagedsim", "check", "3.1", "--impl", str(sleeper), "--json"]
    checker = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = None
    try:
        for _ in range(600):  # its child: started for the import, then asleep in allocate
            found = _children(checker.pid)
            if found:
                child = found[0]
                break
            time.sleep(0.1)
        assert child is not None, "the checker started no child"
        time.sleep(3)
        checker.send_signal(signal.SIGTERM)
        checker.wait(30)
        for _ in range(100):
            if not _alive(child):
                break
            time.sleep(0.1)
        assert not _alive(child), "the submission outlived its checker"
    finally:
        if checker.poll() is None:
            checker.kill()
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)
