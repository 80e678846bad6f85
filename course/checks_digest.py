"""The checks a checker imports are the ones the grader hashed.

`pagedsim grade` hashes each job's private copy of the course (grade_job.Job.checks_digest)
and hands the digest to the checker in $PAGEDSIM_CHECKS_DIGEST. Right before pytest imports
the checks, the checker (course/runner.py) calls `verify_checks`: a file changed since the
grader hashed it ends the job as an error. This module is the checker's side alone, so the
checker needs nothing of the grader's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pagedsim.testing import jail

VAR = "PAGEDSIM_CHECKS_DIGEST"


def verify_checks(root: Path) -> str | None:
    """The name of a file under `root`/course whose content is not what the grader hashed
    ($PAGEDSIM_CHECKS_DIGEST), if any; None outside `pagedsim grade`."""
    want = json.loads(os.environ.get(VAR) or "{}")
    if not want:
        return None
    return next(iter(jail.changed(want, jail.contents(Path(root) / "course"))), None)
