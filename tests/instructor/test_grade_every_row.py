"""Every student gets a row, whatever their folder holds (issue 39, deliverable 4).

Each of the first tests is an attack that, on the grader before the bounded walk, ended the
whole run or took the grader's memory: a folder 1,100 levels deep (RecursionError), a
student folder that is a link to / (Errno 22 from /proc), a 1 GiB sparse file (read whole:
1,078 MiB). Now that student's rows say why in one line and everyone else is graded.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from course import grade
from pagedsim.testing import walk

NAME = "ex3_1_first_fit.py"
MODE = grade.Mode(sandbox=False, own_uid=False)  # the fake checker runs nothing of theirs


def classroom(tmp_path, **students):
    root = tmp_path / "class"
    for name, text in students.items():
        (root / name).mkdir(parents=True)
        (root / name / NAME).write_text(text)
    return root


def rows(results):
    return {(r.student, r.exercise): r for r in results}


def test_a_folder_1100_deep_is_that_students_error_and_the_others_are_graded(
    tmp_path, fake_checker
):
    root = classroom(tmp_path, ann="GOOD", ben="meh")
    deep = root / "deep"
    deep.mkdir()
    here = os.getcwd()
    try:
        os.chdir(deep)
        for _ in range(1100):  # through chdir: the path itself would be too long to name
            os.mkdir("d")
            os.chdir("d")
        with open(NAME, "w") as f:
            f.write("GOOD")
    finally:
        os.chdir(here)
    try:
        got = rows(grade.grade(root, ["3.1"], timeout=300, command=fake_checker, mode=MODE))
    finally:
        subprocess.run(["rm", "-rf", str(deep)], check=True)  # shutil.rmtree recurses too
    assert got["ann", "3.1"].status == "pass" and got["ben", "3.1"].status == "fail"
    (why,) = got["deep", "3.1"].messages
    assert got["deep", "3.1"].status == "error" and "nested more than" in why, why


def test_a_student_folder_that_is_a_link_to_root_is_refused_unwalked(tmp_path, fake_checker):
    root = classroom(tmp_path, ann="GOOD")
    (root / "mallory").symlink_to("/")
    got = rows(grade.grade(root, ["3.1"], timeout=300, command=fake_checker, mode=MODE))
    assert got["ann", "3.1"].status == "pass"
    (why,) = got["mallory", "3.1"].messages
    assert got["mallory", "3.1"].status == "error" and "symbolic link" in why, why


GRADE_AND_MEASURE = textwrap.dedent("""
    import json, resource, sys
    from course import grade
    results = grade.grade(sys.argv[1], ["3.1"], timeout=300, mode=grade.Mode(False, False),
                          command=lambda e, p, x=(): [sys.executable, "-c", "print('{}')"])
    print(json.dumps({"rows": {r.student: r.messages for r in results},
                      "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10}))
""")


@pytest.mark.slow
def test_a_1_gib_sparse_file_is_refused_by_its_size_and_never_read_into_memory(tmp_path):
    root = classroom(tmp_path, ann="GOOD")
    (root / "huge").mkdir()
    with open(root / "huge" / NAME, "wb") as f:
        f.truncate(1 << 30)  # sparse: 1 GiB by its size, nothing on disk
    out = subprocess.run(
        [sys.executable, "-c", GRADE_AND_MEASURE, str(root)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    got = json.loads(out.stdout.splitlines()[-1])
    # the grader's own peak: ~420 MiB of imports and jobs; reading the 1 GiB file would be > 1,024
    assert got["rss_mib"] < 512, got
    (why,) = got["rows"]["huge"]
    assert "1,073,741,824 bytes, over the limit" in why, why


HOSTILE = ("deep", "link_to_root", "link_to_ann", "fifo", "huge", "many", "folder_named_like_it")


def make_hostile(folder, kinds, ann_file):
    folder.mkdir()
    for kind in kinds:
        if kind == "deep":
            here = folder / "deep"
            here.mkdir()
            for _ in range(20):
                here = here / "d"
                here.mkdir()
        elif kind == "link_to_root":
            (folder / "root").symlink_to("/")
        elif kind == "link_to_ann":
            (folder / "ann").symlink_to(ann_file.parent)
        elif kind == "fifo":
            os.mkfifo(folder / "pipe")
        elif kind == "huge":
            with open(folder / NAME, "wb") as f:
                f.truncate(2 << 20)
        elif kind == "many":
            (folder / "many").mkdir()
            for i in range(201):
                (folder / "many" / str(i)).touch()
        else:
            (folder / "nested" / NAME).mkdir(parents=True)


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kinds=st.lists(st.sampled_from(HOSTILE), min_size=1, max_size=3, unique=True))
def test_no_folder_of_one_student_changes_another_students_row_or_ends_the_run(
    tmp_path_factory, fake_checker, kinds
):
    root = classroom(tmp_path_factory.mktemp("class"), ann="GOOD")
    make_hostile(root / "eve", kinds, root / "ann" / NAME)
    limits = grade.ReadLimits(walk=walk.Bounds(depth=16, entries=200))
    got = rows(grade.grade(root, ["3.1"], command=fake_checker, mode=MODE, limits=limits))
    ann = got["ann", "3.1"]
    assert (ann.status, ann.passed, ann.total, ann.messages) == ("pass", 2, 2, [])
    eve = got["eve", "3.1"]
    assert eve.status == "error" and len(eve.messages) == 1 and "\n" not in eve.messages[0]
