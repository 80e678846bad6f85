"""The checker holds no more than it needs: its verdict leaves on a channel `grade` named
(course/verdict.py), and an audit hook stops it the moment a submission makes it exec,
compile, import, open a file or start a process (pagedsim/testing/audit.py).

The audit hook is defence in depth behind the capability boundary, so to see it act these
tests register a deliberately leaky capability (a check's own class whose method execs
its argument): the boundary lets the call through, the hook must not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from course import curriculum, grade, verdict
from course.isolation import Submission
from pagedsim.testing import audit, jail
from pagedsim.testing.remote_caps import register


class Leaky:
    """A capability a careless check might register: `run` execs whatever it is given."""

    def run(self, code):
        exec(code)  # noqa: S102 - the hole the audit hook must close


register(Leaky, methods=("run",))

CALLER = """
def use(cap, code):
    return cap.run(code)
"""


def test_a_leaky_capability_still_runs_nothing_while_the_checker_serves(tmp_path):
    """Through a real child: the exec is refused by the hook (Breach, no verdict channel
    here), so the mark is never written."""
    mark = tmp_path / "ran"
    path = tmp_path / "mallory.py"
    path.write_text(CALLER)
    with Submission(path, "3.1", scratch=tmp_path / "scratch") as sub:
        with pytest.raises(Exception, match="(exec|compile) while serving"):
            sub.module().use(Leaky(), f"open({str(mark)!r}, 'w').close()")
    assert audit.installed() and not mark.exists()


def test_outside_the_served_calls_the_checkers_own_work_is_untouched(tmp_path):
    """The hook acts only while serving: the checks may still read files and compile."""
    assert audit.installed() or Submission  # installed by any Submission started above
    with audit.serving():
        with pytest.raises(audit.Breach):
            compile("1", "x", "eval")
    assert eval(compile("1 + 1", "x", "eval")) == 2  # noqa: S307 - the checks' own, unserved
    assert (tmp_path / "x").write_text("ok") == 2


LEAKY_CHECK = """
from course.impl import load_impl
from pagedsim.testing.remote_caps import register


class Leaky:
    def run(self, code):
        exec(code)


register(Leaky, methods=("run",))


def test_hands_over_a_leaky_capability():
    impl = load_impl("3.1")
    impl.use(Leaky(), "print('pwned')")
"""


@pytest.mark.slow
def test_under_grade_a_breach_ends_the_job_as_an_error_with_its_reason(tmp_path):
    """The checker's hook sends one `error` verdict and exits; grade reports it."""
    root = tmp_path / "class"
    (root / "mallory").mkdir(parents=True)
    (root / "mallory" / "ex3_1_first_fit.py").write_text(CALLER)
    extra = tmp_path / "test_leaky.py"
    extra.write_text(LEAKY_CHECK)
    (got,) = grade.grade(root, ["3.1"], timeout=240, workers=1, extra_checks=[extra])
    assert got.status == "error" and "compile while serving" in " ".join(got.messages), got


FORGER = textwrap.dedent("""
    import json, os, sys
    good = json.dumps({"status": "pass", "passed": 9, "total": 9, "failed": [], "messages": []})
    print(good)  # stdout: never read as a verdict
    fd = int(os.environ["PAGEDSIM_VERDICT_FD"])
    if "TWICE" in open(sys.argv[2]).read():
        os.write(fd, (good + "\\n" + good + "\\n").encode())
""")


@pytest.mark.parametrize(
    ("text", "why"), [("NONE", "before reporting"), ("TWICE", "more than one")]
)
def test_a_pass_on_stdout_or_two_verdicts_on_the_channel_is_an_error(tmp_path, text, why):
    script = tmp_path / "forger.py"
    script.write_text(FORGER)
    root = tmp_path / "class"
    (root / "eve").mkdir(parents=True)
    (root / "eve" / "ex3_1_first_fit.py").write_text(text)
    command = lambda ex_id, path, extra=(): [sys.executable, str(script), ex_id, str(path)]  # noqa: E731
    (got,) = grade.grade(root, ["3.1"], timeout=60, workers=1, command=command)
    assert got.status == "error" and why in got.messages[0], got


def test_the_verdict_fd_is_taken_out_of_the_environment_and_not_inherited(monkeypatch):
    r, w = os.pipe()
    os.set_inheritable(w, True)
    monkeypatch.setenv(verdict.VAR, str(w))
    assert verdict.take() and verdict.VAR not in os.environ and not os.get_inheritable(w)
    receiver = verdict.Receiver(r)
    assert verdict.send({"status": "pass"}) and not verdict.send({"status": "pass"})
    assert receiver.verdict() == ({"status": "pass"}, "")


PROBE = """
import os, sys
mine, other, answers, planted = sys.argv[1:]


def writes(path):
    try:
        with open(path, "w") as f:
            f.write("x")
        return True
    except OSError:
        return False


caps = int(dict(line.split(":") for line in open("/proc/self/status"))["CapEff"], 16)
hidden = len(os.listdir(answers)) if os.path.isdir(answers) else 0  # a tree in /tmp: gone
print(os.path.exists(mine), os.path.exists(other), hidden,
      writes(os.path.join(os.path.dirname(mine), "scratch.txt")), writes(planted),
      writes(os.path.join(sys.prefix, "planted.txt")), bool(caps & (1 << 21)),
      bool(caps & (1 << 1)))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace of its own needs root")
def test_the_confined_checker_sees_only_its_job_in_tmp_and_no_reference_solution(tmp_path):
    """jail.confined with no account, as `grade` starts a submission's bubblewrap that has no
    uid of its own: of /tmp only its job's folder (no other job, no student folder), the
    solutions on disk empty, every file system read-only but its scratch, and root's powers
    cut to what bubblewrap needs (ROOT_CAPS). The checker itself runs as a uid of its own:
    test_checker_uid.py."""
    job, other = tmp_path / "job", tmp_path / "other-job"
    job.mkdir()
    other.mkdir()
    (job / "mine.py").write_text("x")
    answers = curriculum.find("3.1").path("solution").parent
    planted = Path("/tmp") / f"planted-by-checker-{os.getpid()}"
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(job / "mine.py"), str(other), str(answers), str(planted)],
        preexec_fn=jail.confined(keep=[job], writable=job, hide=[answers]),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    # sees its job, not the other; no solutions; writes its scratch only; no sys_admin, no
    # dac_override (it could otherwise remount, or write what it does not own)
    want = ["True", "False", "0", "True", "False", "False", "False", "False"]
    assert out.stdout.split() == want, out.stdout
    assert not planted.exists() and len(os.listdir(answers)) > 1  # the host is unchanged
    assert not Path(sys.prefix, "planted.txt").exists()
