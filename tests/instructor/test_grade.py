"""`pagedsim grade`: one process per student x exercise, a hard time limit, statuses that cannot
be gamed.

The first tests replace the checker with a tiny fake (`command=`), so they exercise the
process handling alone: the JSON contract, the kill of the whole process group, a
checker that dies. The last ones grade real files with the real `pagedsim check --json`.
"""

import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

from course import curriculum, grade, grade_job
from pagedsim.testing import jail

FAKE = textwrap.dedent("""
    import json, os, subprocess, sys, time
    ex, path, notes = sys.argv[1], sys.argv[2], sys.argv[3]
    text = open(path).read()
    if "LOOP" in text:  # a child that outlives us unless the whole group is killed
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open(os.path.join(notes, "loop.pid"), "w").write(str(child.pid))
        while True:
            time.sleep(0.05)
    if "DIE" in text:
        sys.stderr.write("Segmentation fault (pretend)\\n")
        sys.exit(3)
    print("noise from the student's prints")
    ok = "GOOD" in text
    verdict = json.dumps({"exercise": ex, "status": "pass" if ok else "fail",
                          "passed": 2 if ok else 1, "total": 2, "failed": [] if ok else ["test_b"],
                          "messages": [] if ok else ["b is wrong"]})
    print(verdict.replace("fail", "pass"))  # stdout is never read as a verdict
    os.write(int(os.environ["PAGEDSIM_VERDICT_FD"]), (verdict + "\\n").encode())
""")


@pytest.fixture
def fake(tmp_path):
    script = tmp_path / "fake_check.py"
    script.write_text(FAKE)
    return lambda ex_id, path, extra=(): [
        sys.executable,
        str(script),
        ex_id,
        str(path),
        str(tmp_path),
    ]


def submissions(root: Path, files: dict) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_each_file_gets_the_status_its_checker_reported_and_a_missing_file_is_an_error(
    tmp_path, fake
):
    root = submissions(
        tmp_path / "class",
        {
            "ann/ex3_1_first_fit.py": "GOOD",
            "ben/ex3_1_first_fit.py": "meh",
            "ann/upload/hw/ex3_2_block_layout.py": "GOOD",
        },
    )
    results = grade.grade(root, timeout=300, command=fake)
    got = {(r.student, r.exercise): (r.status, r.passed, r.total, r.failed) for r in results}
    assert got == {
        ("ann", "3.1"): ("pass", 2, 2, []),
        ("ben", "3.1"): ("fail", 1, 2, ["test_b"]),
        ("ann", "3.2"): ("pass", 2, 2, []),
        ("ben", "3.2"): ("error", 0, 0, []),
    }
    assert next(r for r in results if r.student == "ben" and r.exercise == "3.2").messages == [
        "no file ex3_2_block_layout.py"
    ]


def test_a_byte_for_byte_copy_of_the_reference_solution_is_an_error_and_never_runs(tmp_path, fake):
    root = submissions(tmp_path / "class", {"ann/ex3_1_first_fit.py": solution_text("3.1")})
    (r,) = grade.grade(root, timeout=300, command=fake)  # the fake would say "fail"
    assert (r.status, r.messages) == (
        "error",
        ["ex3_1_first_fit.py is a copy of the reference solution: not graded"],
    )


def test_a_loop_is_killed_at_the_limit_with_everything_it_started(tmp_path, fake):
    root = submissions(tmp_path / "class", {"cat/ex3_1_first_fit.py": "LOOP"})
    (result,) = grade.grade(root, timeout=1.5, command=fake)
    assert result.status == "timeout" and "killed after 1.5 s" in result.messages[0]
    pid = int((tmp_path / "loop.pid").read_text())
    assert wait_until_gone(pid), f"the loop's child {pid} survived the kill"


def wait_until_gone(pid: int, tries: int = 50) -> bool:
    """True once `pid` no longer runs (gone, or a zombie waiting for its reaper)."""
    for _ in range(tries):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


def test_a_checker_that_dies_without_a_result_is_an_error_that_quotes_its_last_words(
    tmp_path, fake
):
    root = submissions(tmp_path / "class", {"dan/ex3_1_first_fit.py": "DIE"})
    (result,) = grade.grade(root, timeout=300, command=fake)
    assert result.status == "error"
    assert "exited with code 3" in result.messages[0] and "Segmentation fault" in result.messages[0]


def test_json_and_table_output(tmp_path, fake, capsys, monkeypatch):
    root = submissions(
        tmp_path / "class", {"ann/ex3_1_first_fit.py": "GOOD", "ben/ex3_1_first_fit.py": "meh"}
    )
    monkeypatch.setattr(grade_job, "child_command", fake)  # what run_one starts
    monkeypatch.setattr(jail, "can_run_as_user", lambda sandbox: False)  # same on any machine
    assert grade.main([str(root), "--json", "--timeout", "20", "--no-sandbox"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ben"]["3.1"]["status"] == "fail" and data["ben"]["3.1"]["failed"] == ["test_b"]
    assert set(data["ann"]["3.1"]) >= {
        "status",
        "passed",
        "total",
        "failed",
        "messages",
        "verified",
        "mode",
        "limits",
    }
    assert data["ann"]["3.1"]["verified"] is False and data["ann"]["3.1"]["mode"] == "none"
    assert data["ann"]["3.1"]["limits"]["memory"] == 2 << 30
    assert grade.main([str(root), "--timeout", "20", "--no-sandbox"]) == 0
    table = capsys.readouterr().out.splitlines()
    weight = f"{curriculum.find('3.1').weight:g}"  # the last column: points of the weights
    assert table[0].split() == ["student", "3.1", "score"]
    assert table[2].split() == ["ann", "2/2", "unverified", f"{weight}/{weight}"]
    assert table[3].split() == ["ben", "1/2", "unverified", f"{float(weight) / 2:g}/{weight}"]
    assert "ben 3.1 fail: 1 failed: test_b" in table
    assert table[-1].startswith("sandbox: off and no user of its own: every result is UNVERIFIED")


@pytest.mark.parametrize("bwrap", [None, "/usr/bin/bwrap"], ids=["no bwrap", "bwrap"])
def test_bad_arguments_are_refused_before_the_sandbox_is_probed(
    tmp_path, capsys, monkeypatch, bwrap
):
    """Issue 33: the unknown exercise is named whether or not bubblewrap works here and whether
    or not the solutions are on disk (the probe is never reached)."""
    monkeypatch.setattr(jail, "bwrap", lambda: bwrap)
    monkeypatch.setattr(jail, "can_run_as_user", lambda sandbox: False)
    monkeypatch.setattr(grade, "solutions_on_disk", lambda: [tmp_path / "solution.py"])
    with pytest.raises(SystemExit):
        grade.main([str(tmp_path / "nowhere")])
    assert "not a folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        grade.main([str(tmp_path), "--timeout", "0"])
    capsys.readouterr()
    with pytest.raises(SystemExit):
        grade.main([str(tmp_path), "--exercise", "9.9"])
    err = capsys.readouterr().err
    assert "9.9" in err and "sandbox" not in err
    with pytest.raises(SystemExit):
        grade.main([str(tmp_path), "--csv", str(tmp_path / "nowhere" / "marks.csv")])
    assert "no folder" in capsys.readouterr().err


# ---- the real checker --------------------------------------------------------
def solution_text(ex_id: str) -> str:
    return curriculum.find(ex_id).path("solution").read_text()


HIDDEN = """from course.impl import load_impl


def test_hidden_first_fit_hands_out_offset_zero_first():
    assert load_impl("3.1").FirstFit(16).allocate(4) == 0
"""


def test_extra_checks_are_copied_into_the_private_build_next_to_the_course_checks(
    tmp_path, monkeypatch
):
    """Tracked by git or not, anywhere on disk: the build gets a copy, and a clash is renamed."""
    checks = tmp_path / "build" / Path(curriculum.find("3.1").checks[0]).parent
    checks.mkdir(parents=True)
    (checks / "test_ex3_1_first_fit.py").write_text("# the course's own check\n")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "test_ex3_1_first_fit.py").write_text(HIDDEN)
    (tmp_path / "mine" / "hidden_more.py").write_text(HIDDEN)
    monkeypatch.chdir(tmp_path / "mine")
    copies = grade.private_checks(
        tmp_path / "build", [Path("test_ex3_1_first_fit.py"), Path("hidden_more.py")]
    )
    assert [c.parent for c in copies] == [checks, checks] and all(c.is_absolute() for c in copies)
    assert [c.name for c in copies] == ["test_extra_0_test_ex3_1_first_fit.py", "hidden_more.py"]
    assert all(c.read_text() == HIDDEN for c in copies)
    assert (checks / "test_ex3_1_first_fit.py").read_text() == "# the course's own check\n"


@pytest.mark.slow
def test_real_grading_passes_the_correct_file_and_fails_the_stub_and_the_reference_import(
    tmp_path, monkeypatch
):
    """One run with the instructor's hidden check added (an untracked file, given by a relative
    path): it counts, and its name is reported."""
    ex = curriculum.find("3.1")
    name = Path(ex.stub).name
    hidden = tmp_path / "hidden_checks.py"
    hidden.write_text(HIDDEN)
    root = submissions(
        tmp_path / "class",
        {
            f"right/{name}": solution_text("3.1") + "\n# my own copy\n",
            f"stub/{name}": ex.path("stub").read_text(),
            f"thief/{name}": "from course.ch03_kv_block.solutions.ex3_1_first_fit import *\n",
            f"reader/{name}": (
                "import course, pathlib\nexec((pathlib.Path(course.__file__).parent / "
                "'ch03_kv_block/solutions/ex3_1_first_fit.py').read_text())\n"
            ),
        },
    )
    # the checker runs in its own scratch folder: the path must still work
    monkeypatch.chdir(tmp_path)
    got = {
        r.student: r
        for r in grade.grade(root, ["3.1"], timeout=240, extra_checks=[Path(hidden.name)])
    }
    assert got["right"].status == "pass" and got["right"].passed == got["right"].total > 1
    assert (
        got["stub"].status == "fail"
        and "test_hidden_first_fit_hands_out_offset_zero_first" in got["stub"].failed
    )
    assert got["stub"].total == got["right"].total
    for cheat in ("thief", "reader"):  # importing the reference, or executing its file's text
        assert got[cheat].status in ("fail", "error") and got[cheat].passed == 0, got[cheat]


@pytest.mark.slow
def test_real_grading_times_out_a_loop_at_import(tmp_path):
    root = submissions(tmp_path / "class", {"looper/ex3_1_first_fit.py": "while True:\n    pass\n"})
    (result,) = grade.grade(root, ["3.1"], timeout=4)
    assert result.status == "timeout"
