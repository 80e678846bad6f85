"""Submissions that try to game `pagedsim grade`, and the verdict each one gets.

Each attacker is the untouched stub of exercise 3.5 (its checks fail) with one attack run at
import, appended: rewriting the checks through `course.__file__` (its own copy, and the
shared build),
an `atexit` hook that writes a fake pass line to fd 1, monkeypatching the runner's
`Outcome.status` and pytest's `TestReport.from_item_and_call`, exec-ing the solution's text,
handing in a symlink to it, writing into the submissions folder, and leaving a `setsid`
grandchild behind to write after `grade` returns. None may pass; a control student with a
correct file must, and a student graded after the attackers must see the usual checks.
"""

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from course import curriculum, grade
from pagedsim.testing import jail

EX = curriculum.find("3.5")
NAME = Path(EX.stub).name
STUB = EX.path("stub").read_text()
SOLUTION = EX.path("solution")
FAKE_PASS = json.dumps(
    {"exercise": "3.5", "status": "pass", "passed": 42, "total": 42, "failed": [], "messages": []}
)

REWRITE = """
import course, glob, pathlib
FAKE = "def test_everything_passes():\\n    pass\\n"
targets = list(pathlib.Path(course.__file__).parent.rglob("test_ex3_5_block_size.py"))
SHARED = "/tmp/pagedsim-grade-*/build/course/**/test_ex3_5*.py"
targets += [pathlib.Path(p) for p in glob.glob(SHARED,
                                               recursive=True)]
for p in targets:
    try:
        p.chmod(0o644)
        p.write_text(FAKE)
    except OSError:
        pass
"""
ATEXIT = f"""
import atexit, os
atexit.register(lambda: os.write(1, ({FAKE_PASS!r} + "\\n").encode()))
try:
    with open(f"/proc/{{os.getppid()}}/fd/1", "w") as out:  # the checker's own stdout, if reachable
        out.write({FAKE_PASS!r} + "\\n")
except OSError:
    pass
"""
PATCH_RUNNER = """
import course.runner
course.runner.Outcome.status = property(lambda self: "pass")
course.runner.Outcome.ok = property(lambda self: True)
"""
PATCH_PYTEST = """
import _pytest.reports
_pytest.reports.TestReport.from_item_and_call = classmethod(
    lambda cls, item, call: cls(item.nodeid, item.location, {}, "passed", None, call.when))
"""
EXEC_SOLUTION = f"exec(open({str(SOLUTION)!r}).read())\n"


def plant(folder: Path) -> str:
    return f"open({str(folder / 'planted.txt')!r}, 'w').write('x')\n"


def survivor(mark: Path) -> str:
    """A grandchild in a session of its own: notes its pid, waits for `mark`.go, writes `mark`."""
    return f"""
import subprocess, sys
subprocess.Popen([sys.executable, "-c", "import os, time\\nif os.fork(): os._exit(0)\\n"
                  "os.setsid()\\n"
                  "open({str(mark)!r} + '.pid', 'w').write(str(os.getpid()))\\n"
                  "for _ in range(2400):  # two minutes at most, should it escape\\n"
                  "    if os.path.exists({str(mark)!r} + '.go'): break\\n"
                  "    time.sleep(0.05)\\n"
                  "else: raise SystemExit\\n"
                  "open({str(mark)!r}, 'w').write('alive')"], start_new_session=True)
"""


def gone(pid: int) -> bool:
    """True once `pid` no longer runs (or is a zombie), within about 5 s."""
    for _ in range(50):
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.1)
    return False


def write(root: Path, files: dict) -> Path:
    for student, text in files.items():
        (root / student).mkdir(parents=True, exist_ok=True)
        (root / student / NAME).write_text(text)
    return root


def graded(root: Path, *, sandbox: bool) -> dict:
    """Graded under bubblewrap, or with no isolation at all (no uid of its own either: the
    attacks must then be found afterwards, by hash)."""
    # 300 s: a stub takes over 70 s on a loaded two-core machine
    mode = None if sandbox else grade.Mode(False, False)
    results = grade.grade(
        root, ["3.5"], timeout=300, workers=2, mode=mode or grade.decide_mode(sandbox)
    )
    return {r.student: r for r in results}


def assert_not_passed(got, who):
    assert got[who].status != "pass" and got[who].passed == 0, (who, got[who])


needs_bwrap = pytest.mark.skipif(
    jail.bwrap() is None,
    reason="bubblewrap (bwrap) is not installed or cannot "
    "create namespaces here: apt-get install bubblewrap",
)


@pytest.mark.slow
def test_without_a_sandbox_every_attack_is_a_fail_or_an_error_and_nothing_outlives_grading(
    tmp_path,
):
    root = tmp_path / "class"
    mark = tmp_path / "survivor-wrote-this"
    write(
        root,
        {
            "a_rewrite": STUB + REWRITE,
            "b_forge": STUB + ATEXIT + PATCH_RUNNER + PATCH_PYTEST,
            "e_plant": STUB + plant(root / "e_plant"),
            "f_survivor": STUB + survivor(mark),
            "g_good": SOLUTION.read_text() + "\n# mine\n",
            "z_later": STUB,
        },
    )
    (root / "h_link").mkdir()
    (root / "h_link" / NAME).symlink_to(SOLUTION)
    got = graded(root, sandbox=False)
    assert got["g_good"].status == "pass" and got["g_good"].passed == got["g_good"].total > 5, got[
        "g_good"
    ]
    for who in ("a_rewrite", "b_forge", "e_plant", "f_survivor", "h_link"):
        assert_not_passed(got, who)
    assert (
        got["a_rewrite"].status == "error"
        and "changed its private copy" in got["a_rewrite"].messages[0]
    )
    assert (
        got["e_plant"].status == "error"
        and "changed files in the submissions folder" in got["e_plant"].messages[0]
    )
    assert "symbolic link" in got["h_link"].messages[0]
    later = got["z_later"]
    assert later.status == "fail" and later.total == got["g_good"].total, later
    assert all(not r.sandbox for r in got.values())
    pid = int(Path(str(mark) + ".pid").read_text())
    Path(str(mark) + ".go").write_text("")  # a survivor would write `mark` now
    assert gone(pid), f"the setsid grandchild {pid} outlived grade"
    time.sleep(0.5)
    assert not mark.exists(), "a setsid grandchild wrote after grade returned"


@needs_bwrap
@pytest.mark.slow
def test_in_the_sandbox_the_solution_is_not_on_disk_and_writes_fail(tmp_path):
    root = tmp_path / "class"
    write(
        root,
        {
            "a_all": STUB + REWRITE + ATEXIT + PATCH_RUNNER + plant(root / "a_all"),
            "c_exec": STUB + EXEC_SOLUTION,
            "g_good": SOLUTION.read_text() + "\n# mine\n",
            "z_later": STUB,
        },
    )
    got = graded(root, sandbox=True)
    assert got["g_good"].status == "pass" and got["g_good"].sandbox, got["g_good"]
    for who in ("a_all", "c_exec"):
        assert_not_passed(got, who)
    assert "No such file" in got["c_exec"].messages[0], got["c_exec"]
    assert not (root / "a_all" / "planted.txt").exists()
    assert got["z_later"].status == "fail" and got["z_later"].total == got["g_good"].total


PROBE = """
import os, socket
facts = []
try:
    socket.create_connection(("1.1.1.1", 80), timeout=2)
    facts.append("net=open")
except OSError:
    facts.append("net=none")
for name, path in (("fs", {outside!r}), ("scratch", "here.txt")):
    try:
        open(path, "w").write("x")
        facts.append(name + "=writable")
    except OSError:
        facts.append(name + "=readonly")
facts.append("solutions=" + str(os.path.exists({solution!r})))
facts.append("pid=" + str(os.getpid()))
raise RuntimeError(" ".join(facts))
"""


@needs_bwrap
@pytest.mark.slow
def test_the_sandbox_has_no_network_a_read_only_file_system_but_scratch_and_its_own_pids(tmp_path):
    root = write(
        tmp_path / "class",
        {"probe": PROBE.format(outside=str(tmp_path / "outside.txt"), solution=str(SOLUTION))},
    )
    (result,) = grade.grade(root, ["3.5"], timeout=300, mode=grade.decide_mode(True))
    facts = dict(
        f.split("=")
        for f in result.messages[0].split("RuntimeError: ")[1].split(" (line")[0].split()
    )
    assert (
        facts["net"] == "none" and facts["fs"] == "readonly" and facts["scratch"] == "writable"
    ), facts
    assert facts["solutions"] == "False" and int(facts["pid"]) < 10, facts
    assert not (tmp_path / "outside.txt").exists()


def test_grade_refuses_to_run_unsandboxed_while_the_solutions_are_on_disk(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(jail, "bwrap", lambda: None)
    monkeypatch.setattr(jail, "can_run_as_user", lambda sandbox: True)  # isolated, not hidden
    write(tmp_path / "class", {"ann": STUB})
    with pytest.raises(SystemExit) as stop:
        grade.main([str(tmp_path / "class")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "reference solutions are on disk" in err and "Traceback" not in err


@pytest.mark.slow
def test_check_impl_ignores_a_forged_pass_line_and_a_patched_runner(tmp_path):
    import subprocess

    forged = tmp_path / NAME
    forged.write_text(STUB + ATEXIT + PATCH_RUNNER)
    env = dict(os.environ, PYTHONPATH=str(curriculum.REPO_ROOT))
    run = subprocess.run(
        [sys.executable, "-m", "pagedsim.app.cli", "check", "3.5", "--impl", str(forged), "--json"],
        capture_output=True,
        text=True,
        timeout=600,  # a loaded machine: the checker alone took over 70 s
        env=env,
        cwd=tmp_path,
    )
    last = json.loads(run.stdout.strip().splitlines()[-1])
    assert run.returncode == 1 and last["status"] == "fail" and last["passed"] == 0, run.stdout[
        -500:
    ]
    assert FAKE_PASS not in run.stdout
    shutil.rmtree(tmp_path, ignore_errors=True)
