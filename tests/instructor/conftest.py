"""A stand-in checker for the grading tests that are about folders, reports and budgets
rather than the checks: it passes a file that says GOOD and fails any other, in well
under a second, so a test can grade many students without the real checks."""

import sys
import textwrap

import pytest

FAKE_CHECKER = textwrap.dedent("""
    import json, os, sys
    ex, path = sys.argv[1], sys.argv[2]
    ok = b"GOOD" in open(path, "rb").read()
    verdict = json.dumps({"status": "pass" if ok else "fail", "passed": 2 if ok else 1,
                          "total": 2, "failed": [] if ok else ["test_b"],
                          "messages": [] if ok else ["b is wrong"]})
    # the verdict channel grade opened for this job (course/verdict.py), never stdout
    os.write(int(os.environ["PAGEDSIM_VERDICT_FD"]), (verdict + "\\n").encode())
""")


@pytest.fixture
def fake_checker(tmp_path):
    """command= for course.grade.grade: the stand-in above."""
    script = tmp_path / "fake_checker.py"
    script.write_text(FAKE_CHECKER)
    return lambda ex_id, path, extra=(): [sys.executable, str(script), ex_id, str(path)]
