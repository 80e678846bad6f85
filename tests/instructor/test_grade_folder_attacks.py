"""Attacks on what `pagedsim grade` reads, compares and writes: a student's folder, the
similarity report, the exports, and the Gradescope autograder (issue 39, deliverables 4-6).

Each test is one attack, named for what it tries; the assertion is the outcome it must get.
The goal in each: end the run, slow or change another student's row, make the grader read
what it should not, or plant something in the exports. The checker is the stand-in of
conftest.py (GOOD passes), so these run in seconds; the folder handling is the real one.
"""

import csv
import io
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from course import autograder, grade, grade_report
from course import grade_similarity as similarity
from pagedsim.testing import jail, walk

NAME = "ex3_1_first_fit.py"
MODE = grade.Mode(sandbox=False, own_uid=False)


def classroom(tmp_path, **students):
    root = tmp_path / "class"
    root.mkdir(exist_ok=True)
    for name, text in students.items():
        (root / name).mkdir()
        (root / name / NAME).write_text(text)
    return root


def run(root, command, **kw):
    kw.setdefault("mode", MODE)
    return {(r.student, r.exercise): r for r in grade.grade(root, ["3.1"], command=command, **kw)}


def nest(folder, levels: int, leaf: str = NAME):
    """`levels` folders below `folder`, the stub-named file at the bottom."""
    here = os.getcwd()
    try:
        os.chdir(folder)
        for _ in range(levels):
            os.mkdir("d")
            os.chdir("d")
        with open(leaf, "w") as f:
            f.write("GOOD")
    finally:
        os.chdir(here)


# -- the student's folder ------------------------------------------------------------------
def test_folders_one_past_the_depth_bound_are_an_error_one_within_is_graded(tmp_path, fake_checker):
    root = classroom(tmp_path)
    depth = grade.READ_LIMITS.walk.depth
    for name, levels in (("within", depth - 1), ("past", depth + 1)):
        (root / name).mkdir()
        nest(root / name, levels)
    got = run(root, fake_checker)
    assert got["within", "3.1"].status == "pass"
    assert got["past", "3.1"].status == "error"
    assert "nested more than" in got["past", "3.1"].messages[0]


def test_a_link_named_like_the_stub_to_another_students_file_is_refused(tmp_path, fake_checker):
    root = classroom(tmp_path, ann="GOOD")
    (root / "mallory").mkdir()
    (root / "mallory" / NAME).symlink_to(root / "ann" / NAME)
    got = run(root, fake_checker)
    assert got["ann", "3.1"].status == "pass"
    assert got["mallory", "3.1"].status == "error"
    assert "symbolic link" in got["mallory", "3.1"].messages[0]


def test_a_link_to_root_inside_a_folder_is_never_entered_and_the_file_is_graded(
    tmp_path, fake_checker
):
    root = classroom(tmp_path, eve="GOOD")
    (root / "eve" / "everything").symlink_to("/")
    (root / "eve" / "proc").symlink_to("/proc")
    got = run(root, fake_checker)
    assert got["eve", "3.1"].status == "pass"


def test_a_file_nested_under_a_link_to_another_students_folder_is_not_found(tmp_path, fake_checker):
    root = classroom(tmp_path, ann="GOOD")
    (root / "mallory").mkdir()
    (root / "mallory" / "hw").symlink_to(root / "ann")
    got = run(root, fake_checker)
    assert got["mallory", "3.1"].messages == [f"no file {NAME}"]


def test_more_files_than_the_bound_is_an_error_that_says_so(tmp_path, fake_checker):
    root = classroom(tmp_path, ann="GOOD", flood="GOOD")
    bound = 50
    for i in range(bound + 1):
        (root / "flood" / f"junk{i}").touch()
    limits = grade.ReadLimits(walk=walk.Bounds(depth=4, entries=bound))
    got = run(root, fake_checker, limits=limits)
    assert got["ann", "3.1"].status == "pass"
    assert f"more than {bound} files" in got["flood", "3.1"].messages[0]


def test_a_fifo_named_like_the_stub_never_blocks_the_grader(tmp_path, fake_checker):
    root = classroom(tmp_path, ann="GOOD")
    (root / "fifo").mkdir()
    os.mkfifo(root / "fifo" / NAME)  # a read would wait for a writer forever
    got = run(root, fake_checker)
    assert got["ann", "3.1"].status == "pass"
    assert got["fifo", "3.1"].messages == [f"no file {NAME}"]


def test_a_file_over_the_per_file_limit_costs_only_that_exercise(tmp_path, fake_checker):
    root = classroom(tmp_path, big="GOOD")
    (root / "big" / "ex3_2_block_layout.py").write_text("GOOD" + " " * 200)
    limits = grade.ReadLimits(file_bytes=100, student_bytes=1000)
    got = {
        (r.student, r.exercise): r
        for r in grade.grade(root, ["3.1", "3.2"], command=fake_checker, mode=MODE, limits=limits)
    }
    assert got["big", "3.1"].status == "pass"
    assert "204 bytes, over the limit of 100" in got["big", "3.2"].messages[0]


def test_files_over_the_per_student_limit_together_are_refused_before_reading(
    tmp_path, fake_checker
):
    root = classroom(tmp_path, ann="GOOD", hoard="GOOD" + " " * 90)
    (root / "hoard" / "ex3_2_block_layout.py").write_text("GOOD" + " " * 90)
    limits = grade.ReadLimits(file_bytes=100, student_bytes=150)
    results = grade.grade(root, ["3.1", "3.2"], command=fake_checker, mode=MODE, limits=limits)
    got = {(r.student, r.exercise): r for r in results}
    assert got["ann", "3.1"].status == "pass"
    for ex in ("3.1", "3.2"):
        assert "188 bytes, over the limit of 150" in got["hoard", ex].messages[0]


def test_a_nested_decoy_cannot_displace_the_file_handed_in_directly(tmp_path, fake_checker):
    root = classroom(tmp_path, ann="GOOD")
    (root / "ann" / "a").mkdir()
    (root / "ann" / "a" / NAME).write_text("meh")  # sorts first, but is nested
    assert run(root, fake_checker)["ann", "3.1"].status == "pass"


REPLACER = textwrap.dedent("""
    import json, os, shutil, sys
    text = open(sys.argv[2]).read()
    if "SWAP" in text:  # replace bob's folder with a link to / while the run goes on
        bob = os.path.join(sys.argv[3], "b_bob")
        shutil.rmtree(bob)
        os.symlink("/", bob)
    ok = "GOOD" in text
    verdict = json.dumps({"status": "pass" if ok else "fail", "passed": int(ok), "total": 1})
    os.write(int(os.environ["PAGEDSIM_VERDICT_FD"]), (verdict + "\\n").encode())
""")


def test_a_job_that_swaps_another_folder_for_a_link_changes_no_other_row(tmp_path):
    root = classroom(tmp_path, a_eve="SWAP", b_bob="GOOD")
    script = tmp_path / "swap.py"
    script.write_text(REPLACER)
    got = run(
        root,
        lambda e, p, x=(): [sys.executable, str(script), e, str(p), str(root)],
        workers=1,
    )
    assert got["b_bob", "3.1"].status == "pass", got["b_bob", "3.1"]  # the bytes read at the start
    assert got["a_eve", "3.1"].status == "error"
    assert "changed files in the submissions folder" in got["a_eve", "3.1"].messages[0]


DEEP_SCRATCH = textwrap.dedent("""
    import json, os, sys
    if "NEST" in open(sys.argv[2]).read():
        for _ in range(1100):  # in its own scratch folder: shutil.rmtree would recurse
            os.mkdir("d")
            os.chdir("d")
    verdict = json.dumps({"status": "pass", "passed": 1, "total": 1})
    os.write(int(os.environ["PAGEDSIM_VERDICT_FD"]), (verdict + "\\n").encode())
""")


def test_a_job_that_nests_1100_folders_in_its_scratch_does_not_end_the_run(tmp_path):
    root = classroom(tmp_path, ann="GOOD", eve="NEST")
    script = tmp_path / "nest.py"
    script.write_text(DEEP_SCRATCH)
    got = run(root, lambda e, p, x=(): [sys.executable, str(script), e, str(p)])
    assert {r.status for r in got.values()} == {"pass"} and len(got) == 2


def test_a_folder_of_large_files_is_hashed_by_the_watch_only_up_to_its_budget(tmp_path):
    folder = tmp_path / "eve"
    folder.mkdir()
    with open(folder / "a_notes.bin", "wb") as f:
        f.truncate(1 << 30)  # one 1 GiB file
    for i in range(3):
        (folder / f"b{i}.bin").write_bytes(b"x" * 400)  # and many small ones: 1,200 bytes
    got = jail.contents(folder, hash_limit=1000)
    assert got["a_notes.bin"].startswith("large:1073741824:")
    assert [got[f"b{i}.bin"].startswith("large:") for i in range(3)] == [False, False, True]
    before = got["b2.bin"]
    time.sleep(0.05)  # past the file system's clock tick (a few ms), as any later job is
    (folder / "b2.bin").write_bytes(b"y" * 400)  # same size, a write: ctime moves
    assert jail.contents(folder, hash_limit=1000)["b2.bin"] != before


# -- the similarity report -----------------------------------------------------------------
def test_a_file_nested_100000_brackets_deep_is_not_compared_and_breaks_nothing(tmp_path):
    files = {"eve": tmp_path / "eve.py", "ann": tmp_path / "ann.py"}
    files["eve"].write_text("x = " + "(" * 30_000 + ")" * 30_000 + "\n")  # under the cap
    files["ann"].write_text("x = 1\n")
    report = similarity.run({"3.1": files})
    assert report.problem == "" and report.flags == {}


def test_student_names_that_look_like_json_or_formulas_survive_the_pairs_report(tmp_path):
    same = "def f(a, b):\n    c = a * b + 3\n    return [c] * len(str(a)) + list(range(b))\n" * 3
    names = ['x", "y', "=1+1", "\u202etxt.exe"]
    files = {}
    for i, n in enumerate(names):
        files[n] = tmp_path / f"{i}.py"
        files[n].write_text(same if i < 2 else f"z = {i}\n")
    report = similarity.run({"3.1": files})
    assert report.pairs["3.1"][0][:2] == ('x", "y', "=1+1")
    for row in csv.reader(io.StringIO(grade_report.pairs_csv(report.pairs))):
        assert not any(c.startswith(("=", "+", "-", "@")) for c in row), row


def test_a_file_whose_tree_overflows_the_childs_memory_is_too_large_to_compare(tmp_path):
    files = {"ann": tmp_path / "ann.py", "eve": tmp_path / "eve.py"}
    files["ann"].write_text("x = 1\n")
    files["eve"].write_text("x = [" + "(1, 2), " * 7_000 + "]\n")  # 56 KB: under the cap
    assert similarity.run({"3.1": files}).flags == {}
    report = similarity.run({"3.1": files}, memory=24 << 20)
    assert report.problem == "" and report.flags == {("eve", "3.1"): "too large to compare"}


# -- the exports ---------------------------------------------------------------------------
def test_a_checker_message_that_is_a_formula_is_text_in_the_csv(tmp_path, fake_checker):
    root = classroom(tmp_path, ann="meh")
    results = grade.grade(root, ["3.1"], command=fake_checker, mode=MODE)
    results[0].messages = ["-2+3+cmd|' /C calc'!A0"]
    results[0].similar = "@SUM(A1:A9)"
    (row,) = list(csv.DictReader(io.StringIO(grade_report.as_csv(results))))
    assert row["message"] == "'-2+3+cmd|' /C calc'!A0" and row["similar"] == "'@SUM(A1:A9)"


def test_a_newline_in_a_folder_name_cannot_add_a_csv_row(tmp_path, fake_checker):
    root = classroom(tmp_path, **{"ann\nmallory,pass,2,2": "meh"})
    results = grade.grade(root, ["3.1"], command=fake_checker, mode=MODE)
    rows = list(csv.reader(io.StringIO(grade_report.as_csv(results))))
    assert len(rows) == 2 and rows[1][2] == "fail"


def test_a_student_named_manifest_json_cannot_clobber_the_manifest(tmp_path, fake_checker):
    root = classroom(tmp_path, **{"manifest.json": "GOOD", "ann": "GOOD"})
    results = grade.grade(root, ["3.1"], command=fake_checker, mode=MODE)
    grade_report.write_gradescope(results, tmp_path / "gs")
    manifest = json.loads((tmp_path / "gs" / "manifest.json").read_text())
    assert manifest["manifest.json"] == "manifest.json-2/results.json"


def test_names_that_clean_to_nothing_or_to_each_other_get_a_file_each(tmp_path, fake_checker):
    root = classroom(tmp_path, **{"~": "GOOD", "_": "GOOD", "?": "GOOD", "*": "meh"})
    results = grade.grade(root, ["3.1"], command=fake_checker, mode=MODE)
    written = grade_report.write_gradescope(results, tmp_path / "gs")
    assert len(set(written)) == 4
    manifest = json.loads((tmp_path / "gs" / "manifest.json").read_text())
    scores = {
        s: json.loads((tmp_path / "gs" / f).read_text())["score"] for s, f in manifest.items()
    }
    assert scores["*"] < scores["?"] == scores["_"] == scores["~"]


# -- the Gradescope autograder -------------------------------------------------------------
def test_a_submission_that_is_a_link_to_root_still_gets_a_results_json(tmp_path):
    (tmp_path / "submission").symlink_to("/")
    out = tmp_path / "results" / "results.json"
    autograder.main(["--submission", str(tmp_path / "submission"), "--results", str(out)])
    results = json.loads(out.read_text())
    assert results["score"] == 0 and results["tests"]
    assert all("symbolic link" in t["output"] for t in results["tests"])


def test_a_deep_submission_gets_a_results_json_with_the_reason(tmp_path):
    sub = tmp_path / "submission"
    sub.mkdir()
    nest(sub, 1100)
    out = tmp_path / "results.json"
    try:
        autograder.main(["--submission", str(sub), "--results", str(out), "--exercise", "3.1"])
    finally:
        subprocess.run(["rm", "-rf", str(sub)], check=True)
    (test,) = json.loads(out.read_text())["tests"]
    assert test["score"] == 0 and "nested more than" in test["output"]


@pytest.mark.parametrize("name", ["3.1; rm -rf /", "$(touch pwned)"])
def test_an_exercise_id_is_never_shell_text_in_run_autograder(tmp_path, name):
    from course import export_gradescope

    with pytest.raises(KeyError):
        export_gradescope.write_bundle(tmp_path / "b", [name])


def test_a_folder_name_that_is_not_utf8_is_graded_and_written_everywhere(tmp_path, fake_checker):
    root = classroom(tmp_path, ann="GOOD")
    odd = os.fsdecode(b"bad\xff\xfename")  # lone surrogates once decoded
    (root / odd).mkdir()
    (root / odd / NAME).write_text("GOOD")
    results = grade.grade(root, ["3.1"], command=fake_checker, mode=MODE)
    assert {r.student: r.status for r in results} == {"ann": "pass", odd: "pass"}
    sheet = grade_report.as_csv(results)
    assert "bad\\udcff\\udcfename" in sheet
    grade_report.write_gradescope(results, tmp_path / "gs")
    manifest = json.loads((tmp_path / "gs" / "manifest.json").read_text())
    assert manifest[odd] == "bad__name/results.json"
    assert "bad\\udcff" in grade_report.table(results, {"3.1": [(odd, "ann", 1.0)]})
