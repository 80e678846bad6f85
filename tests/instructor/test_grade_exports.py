"""Exports an instructor can open safely (issue 39, deliverable 6) and weights per exercise
(issue 42, deliverable 4).

Before: a folder named `=2+5+cmd|'calc'!A0` was the first cell of its CSV row as written, and
`bob smith/` and `bob_smith/` both became `bob_smith/results.json`, one silently lost.
"""

import csv
import io
import json

from hypothesis import given
from hypothesis import strategies as st

from course import curriculum, grade, grade_report
from course.grade_job import Result

NAME = "ex3_1_first_fit.py"
MODE = grade.Mode(sandbox=False, own_uid=False)
FORMULAS = ["=2+5+cmd|'calc'!A0", "@SUM(1+1)", "+1+cmd", "-1+cmd", "\tfoo", "\rbar"]
STARTS = ("=", "+", "-", "@", "\t", "\r")  # what OWASP lists: a spreadsheet may run it


def classroom(tmp_path, names, text="GOOD"):
    root = tmp_path / "class"
    for name in names:
        (root / name).mkdir(parents=True)
        (root / name / NAME).write_text(text)
    return root


def test_formula_like_folder_names_are_text_in_every_csv_cell(tmp_path, fake_checker):
    root = classroom(tmp_path, FORMULAS + ["ann"])
    results = grade.grade(root, ["3.1"], command=fake_checker, mode=MODE)
    results[0].messages = ['=HYPERLINK("http://evil")']  # a message a student's code chose
    cells = [c for row in csv.reader(io.StringIO(grade_report.as_csv(results))) for c in row]
    assert not [c for c in cells if c.startswith(STARTS)], cells
    students = [row["student"] for row in csv.DictReader(io.StringIO(grade_report.as_csv(results)))]
    assert "'=2+5+cmd|'calc'!A0" in students and "'@SUM(1+1)" in students and "ann" in students


@given(st.text(max_size=20))
def test_no_cell_starts_like_a_formula_and_a_plain_one_is_unchanged(text):
    out = grade_report.cell(text)
    assert not out.startswith(STARTS)
    if text.isprintable() and not text.startswith(STARTS):
        assert out == text


def test_folders_that_make_the_same_file_name_get_one_file_each_and_a_manifest(
    tmp_path, fake_checker
):
    root = classroom(tmp_path, ["bob smith", "bob_smith", "bob_smith-2", "Bob_Smith"])
    (root / "bob smith" / NAME).write_text("meh")  # a different result: the files differ
    results = grade.grade(root, ["3.1"], command=fake_checker, mode=MODE)
    out = tmp_path / "gs"
    written = grade_report.write_gradescope(results, out)
    assert len(written) == len(set(written)) == 4
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(manifest) == ["Bob_Smith", "bob smith", "bob_smith", "bob_smith-2"]
    assert len({v.lower() for v in manifest.values()}) == 4  # a case-blind file system too
    for student, rel in manifest.items():
        want = 2 if student != "bob smith" else 1
        tests = json.loads((out / rel).read_text())["tests"]
        assert tests[0]["score"] == want / 2 * curriculum.find("3.1").weight, (student, tests)


def test_weights_from_the_curriculum_make_the_scores_everywhere(tmp_path, fake_checker):
    root = tmp_path / "class"
    (root / "ann").mkdir(parents=True)
    (root / "ann" / NAME).write_text("GOOD")
    (root / "ann" / "ex3_2_block_layout.py").write_text("meh")  # 1 of 2 checks
    results = grade.grade(root, ["3.1", "3.2"], command=fake_checker, mode=MODE)
    w = curriculum.weights()
    assert w["3.1"] != w["3.2"]  # so a swap would show
    want = {"3.1": w["3.1"], "3.2": w["3.2"] / 2}
    rows = list(csv.DictReader(io.StringIO(grade_report.as_csv(results))))
    assert {r["exercise"]: float(r["score"]) for r in rows} == want
    assert {r["exercise"]: float(r["weight"]) for r in rows} == {i: w[i] for i in want}
    got = grade_report.as_json(results)["ann"]
    assert {i: got[i]["score"] for i in want} == want
    sheet = json.loads(grade_report.write_gradescope(results, tmp_path / "gs")[0].read_text())
    assert sheet["score"] == sum(want.values())
    assert {t["name"]: t["max_score"] for t in sheet["tests"]} == {
        f"exercise {i}": w[i] for i in want
    }
    assert f"{sum(want.values()):g}/{w['3.1'] + w['3.2']:g}" in grade_report.table(results)


def test_a_weight_that_is_not_a_number_is_a_curriculum_problem(tmp_path):
    text = curriculum.CURRICULUM.read_text().replace("weight = 10", 'weight = "ten"', 1)
    bad = tmp_path / "curriculum.toml"
    bad.write_text(text)
    problems = curriculum.problems(curriculum.load(bad))
    assert any("weight 'ten' is not a number" in p for p in problems), problems


def test_a_cut_row_of_the_table_says_so_and_how_many_checks_failed():
    from course.grade_job import Result

    failed = [f"test_check_number_{i}_of_a_long_list" for i in range(9)]
    r = Result("bob", "3.1", "fail", passed=0, total=9, failed=failed)
    row = grade_report.table([r]).splitlines()[-1]
    assert row.startswith("bob 3.1 fail: 9 failed: test_check_number_0")
    assert len(row) == 160 and row.endswith("\u2026"), row
    short = grade_report.table([Result("ann", "3.1", "fail", failed=["test_one"])])
    assert short.splitlines()[-1] == "ann 3.1 fail: 1 failed: test_one"


def test_two_folders_of_255_bytes_that_clean_alike_both_get_a_results_json(tmp_path):
    """Before the fix the second one's name took a -2 past the 255 bytes a file name may have,
    and writing every student's results.json ended on `File name too long`."""
    names = ["a" * 254 + " ", "a" * 254 + "_", "\u00e9" * 127]
    rows = [Result(n, "3.1", "pass", 1, 1, verified=True) for n in names]
    written = grade_report.write_gradescope(rows, tmp_path / "gs")
    manifest = json.loads((tmp_path / "gs" / "manifest.json").read_text())
    assert len(set(written)) == 3 and sorted(manifest) == sorted(names)
    assert all(len(p.parent.name.encode()) <= 255 for p in written)
