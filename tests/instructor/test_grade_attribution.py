"""A change under the submissions folder is found by content and blamed on the jobs that ran
since the last look (course/grade.py's Watch)."""

import os

from course.grade import Watch


def test_a_same_size_rewrite_with_its_mtime_put_back_is_blamed_on_the_job_that_ran(tmp_path):
    """G3: the old snapshot compared size and mtime only, so this rewrite went unseen."""
    victim = tmp_path / "bob" / "ex.py"
    victim.parent.mkdir()
    victim.write_text("right = 1\n")
    stamp = os.stat(victim)
    watch = Watch(tmp_path)
    watch.start(("eve", "3.1"))
    victim.write_text("wrong = 1\n")
    os.utime(victim, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    watch.end(("eve", "3.1"))
    assert watch.blamed == {("eve", "3.1"): ["bob/ex.py"]}


def test_a_change_blames_every_job_that_ran_since_the_last_look_and_no_later_one(tmp_path):
    watch = Watch(tmp_path)
    watch.start(("ann", "3.1"))
    watch.start(("eve", "3.1"))
    (tmp_path / "stray.txt").write_text("x")
    watch.end(("eve", "3.1"))
    watch.start(("bob", "3.1"))  # started after the look that found the change
    watch.end(("bob", "3.1"))
    watch.end(("ann", "3.1"))
    assert watch.blamed == {("ann", "3.1"): ["stray.txt"], ("eve", "3.1"): ["stray.txt"]}
