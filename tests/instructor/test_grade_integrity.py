"""What `pagedsim grade` trusts and what it checks by content: the files it grades are the
bytes read when grading began; DIR and each job's private checks are hashed file by file;
nothing isolates a submission unless bubblewrap or a uid of its own does, and a run without
either is refused or marked unverified; and the reports (CSV, Gradescope) say so."""

import csv
import io
import json
import sys
import textwrap

import pytest

from course import checks_digest, curriculum, grade, grade_job, grade_report, grade_similarity
from pagedsim.testing import jail

NAME = "ex3_1_first_fit.py"

# A stand-in for the checker: it reports pass for a file that says GOOD; for one that says
# REWRITE it first rewrites bob's file at the same size and puts its mtime back (G3).
FAKE = textwrap.dedent("""
    import json, os, sys
    ex, path, root = sys.argv[1], sys.argv[2], sys.argv[3]
    text = open(path).read()
    if "REWRITE" in text:
        victim = os.path.join(root, "b_bob", "ex3_1_first_fit.py")
        st = os.stat(victim)
        open(victim, "w").write("BAAD")
        os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    ok = "GOOD" in text
    verdict = json.dumps({"status": "pass" if ok else "fail", "passed": 1 if ok else 0,
                          "total": 1, "failed": [] if ok else ["test_a"], "messages": []})
    os.write(int(os.environ["PAGEDSIM_VERDICT_FD"]), (verdict + "\\n").encode())
""")


@pytest.fixture
def fake(tmp_path):
    script = tmp_path / "fake_check.py"
    script.write_text(FAKE)
    root = tmp_path / "class"
    return root, lambda ex_id, path, extra=(): [
        sys.executable,
        str(script),
        ex_id,
        str(path),
        str(root),
    ]


def write(root, files):
    for student, text in files.items():
        (root / student).mkdir(parents=True, exist_ok=True)
        (root / student / NAME).write_text(text)


def test_a_rewrite_of_another_students_file_is_blamed_on_its_job_and_never_reaches_the_victim(fake):
    """G3: same size, mtime put back. d797fc2 saw nothing and graded bob's rewritten file."""
    root, command = fake
    write(root, {"a_eve": "REWRITE", "b_bob": "GOOD"})
    got = {
        r.student: r
        for r in grade.grade(
            root, ["3.1"], timeout=600, command=command, workers=1, mode=grade.decide_mode(False)
        )
    }
    assert got["b_bob"].status == "pass", got["b_bob"]
    assert got["a_eve"].status == "error"
    assert "b_bob/ex3_1_first_fit.py" in got["a_eve"].messages[0]


def test_the_checker_refuses_checks_that_changed_before_their_import(tmp_path, monkeypatch):
    """G4: a swap made while the job ran and put back before its end is caught at the import."""
    code = tmp_path / "code"
    (code / "course" / "checks").mkdir(parents=True)
    check = code / "course" / "checks" / "test_x.py"
    check.write_text("def test_a():\n    assert 1\n")
    monkeypatch.setenv("PAGEDSIM_CHECKS_DIGEST", json.dumps(jail.contents(code / "course")))
    assert checks_digest.verify_checks(code) is None
    check.write_text("def test_a():\n    assert 2\n")
    assert checks_digest.verify_checks(code) == "checks/test_x.py"


def test_each_job_gets_its_own_private_copy_of_the_checks_hashed_by_file(tmp_path):
    build = {"course/checks/test_x.py": b"def test_a():\n    pass\n", "course/__init__.py": b""}
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    run = grade_job.Run(build, jobs)
    one, _ = grade_job.Job.make(run, NAME, b"x = 1\n")
    two, _ = grade_job.Job.make(run, NAME, b"x = 2\n")
    assert one.code != two.code and not one.tampered() and not two.tampered()
    assert one.checks_digest() == {
        "checks/test_x.py": jail.contents(one.code / "course")["checks/test_x.py"],
        "__init__.py": jail.contents(one.code / "course")["__init__.py"],
    }
    for p in [two.code, *two.code.rglob("*")]:  # undo jail.read_only
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | 0o200)
    (two.code / "course" / "checks" / "test_x.py").write_bytes(b"def test_a():\n    pass\n#\n")
    assert two.tampered() == ["code/course/checks/test_x.py"] and not one.tampered()
    one.remove()
    two.remove()


def test_with_no_isolation_grading_is_refused_unless_no_sandbox_and_then_unverified(
    fake, monkeypatch, capsys
):
    """G2: no bubblewrap and no uid of its own: refused; --no-sandbox grades, marked."""
    root, command = fake
    write(root, {"ann": "GOOD"})
    monkeypatch.setattr(jail, "bwrap", lambda: None)
    monkeypatch.setattr(jail, "can_run_as_user", lambda sandbox: False)
    with pytest.raises(ValueError, match="no isolation is available here"):
        grade.decide_mode(None)
    with pytest.raises(SystemExit):
        grade.main([str(root)])
    assert "--no-sandbox" in capsys.readouterr().err
    (r,) = grade.grade(root, ["3.1"], timeout=600, command=command, mode=grade.decide_mode(False))
    assert r.status == "pass" and r.verified is False and r.mode == "none"
    assert r.limits == jail.Limits().as_json()
    assert "unverified" in grade_report.table([r]).splitlines()[2]
    assert grade.decide_mode(False, as_user=True).verified
    monkeypatch.setattr(jail, "bwrap", lambda: "/usr/bin/bwrap")
    assert grade.decide_mode(None).verified and grade.decide_mode(None).sandbox


def test_csv_and_gradescope_results_have_a_row_per_student_and_exercise(fake, tmp_path):
    root, command = fake
    write(root, {"ann": "GOOD", "b\x1b[31mob": "meh"})
    results = grade.grade(
        root, ["3.1"], timeout=600, command=command, mode=grade.Mode(sandbox=False, own_uid=False)
    )
    rows = list(csv.DictReader(io.StringIO(grade_report.as_csv(results))))
    assert [(r["student"], r["status"], r["passed"]) for r in rows] == [
        ("ann", "pass", "1"),
        ("b\\x1b[31mob", "fail", "0"),
    ]
    written = grade_report.write_gradescope(results, tmp_path / "gs")
    assert sorted(p.parent.name for p in written) == ["ann", "b__31mob"]
    ann = json.loads((tmp_path / "gs" / "ann" / "results.json").read_text())
    weight = curriculum.find("3.1").weight  # all of it: 1 check of 1 passed
    assert ann["score"] == weight and ann["tests"][0] == {
        "name": "exercise 3.1",
        "score": weight,
        "max_score": weight,
        "status": "passed",
        "output": "pass\nunverified: no isolation",
        "visibility": "visible",
    }


def test_the_reference_solution_renamed_and_recommented_is_flagged_and_the_stub_is_not(tmp_path):
    ex = curriculum.find("3.1")
    solution = ex.path("solution").read_text()
    if not solution:
        pytest.skip("no reference solution in this installation")
    disguised = "# my own work\n" + solution.replace("free_list", "holes_i_keep").replace(
        "    ", "  "
    )
    files = {"eve": disguised.encode(), "bob": ex.path("stub").read_bytes(), "zed": b"def f(:"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    paths = {name: str(tmp_path / name) for name in files}
    flags = grade_similarity.compare({"3.1": paths})["flags"].get("3.1", {})
    assert "the reference solution once names" in flags["eve"]
    assert "bob" not in flags and "zed" not in flags


def test_a_refused_write_is_reported_in_the_row_that_made_it(tmp_path):
    """Under bubblewrap all but the scratch folder is read-only; with a uid of its own the
    submissions folder is not writable: the OSError the file got is its row's message."""
    if jail.bwrap() is None:
        pytest.skip("bubblewrap is not installed or cannot make namespaces here")
    from course.runner import run_checks

    victim = tmp_path / "bob.py"
    victim.write_text("x = 1\n")
    evil = tmp_path / "eve" / NAME
    evil.parent.mkdir()
    evil.write_text(f"open({str(victim)!r}, 'w').write('stolen')\n")
    out = run_checks(curriculum.find("3.1"), evil, stop_at_first=True, sandbox=True)
    assert victim.read_text() == "x = 1\n"
    assert out.status == "error" and any(
        "Read-only file system" in m or "No such file" in m or "Permission denied" in m
        for m in out.as_json()["messages"]
    ), (out.as_json(), out.failures)
