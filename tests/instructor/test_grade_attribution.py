"""A write under the submissions folder is blamed on the jobs that could have made it."""

import os

from course.grade import _attribute


def test_a_write_in_a_students_own_folder_blames_only_that_students_running_job(tmp_path):
    (tmp_path / "eve").mkdir()
    planted = tmp_path / "eve" / "planted.txt"
    planted.write_text("x")
    stamp = os.lstat(planted).st_mtime
    windows = {("ann", "3.1"): (stamp - 5, stamp + 5), ("eve", "3.1"): (stamp - 5, stamp + 5)}
    assert _attribute([str(planted)], windows, tmp_path) == {("eve", "3.1"): [str(planted)]}


def test_a_write_elsewhere_blames_every_job_that_was_running(tmp_path):
    stray = tmp_path / "stray.txt"
    stray.write_text("x")
    stamp = os.lstat(stray).st_mtime
    windows = {("ann", "3.1"): (stamp - 5, stamp + 5), ("eve", "3.1"): (stamp - 5, stamp + 5),
               ("bob", "3.1"): (stamp + 60, stamp + 70)}
    assert _attribute([str(stray)], windows, tmp_path) == {
        ("ann", "3.1"): [str(stray)], ("eve", "3.1"): [str(stray)]}
