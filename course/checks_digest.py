"""The checks a checker imports are the ones the grader hashed.

`pagedsim grade` hands each checker the digest of its private copy of the course
(grade_job.Job.checks_digest) in $PAGEDSIM_CHECKS_DIGEST; the checker (course/runner.py) calls
`verify_checks` right before pytest imports the checks. The checker's side alone.
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
