"""`pagedsim export-gradescope DIR`: a Gradescope autograder bundle for the course.

    DIR/setup.sh          run once to build the image: a venv in /autograder/venv with the
                          course installed from DIR/pagedsim
    DIR/run_autograder    per submission: python -m course.autograder into results.json
    DIR/pagedsim/         the student copy (`export-course`)
    DIR.zip               the same, zipped: what "Configure Autograder" uploads

Every path in both scripts can be moved by an AUTOGRADER_* variable, so the bundle runs outside
Gradescope too. One test per exercise, worth its weight in course/curriculum.toml. Isolation
there and under `pagedsim grade`: course/INSTRUCTORS.md."""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

from pagedsim.io.args import ArgParser, float_in

from . import curriculum, export
from .grade_job import DEFAULT_TIMEOUT

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image (Ubuntu). Written by
# `pagedsim export-gradescope`; every path may be moved by the variables below.
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SOURCE="${AUTOGRADER_SOURCE:-$ROOT/source}"
PYTHON="${AUTOGRADER_PYTHON:-python3}"
if ! "$PYTHON" -c "import venv, ensurepip" 2>/dev/null; then
    apt-get update && apt-get install -y python3 python3-venv python3-pip
fi
if command -v apt-get >/dev/null && ! command -v bwrap >/dev/null; then
    apt-get install -y bubblewrap || true  # a sandbox per job where the container allows one
fi
"$PYTHON" -m venv "$ROOT/venv"
"$ROOT/venv/bin/python" -m pip install --quiet "$SOURCE/pagedsim"
"$ROOT/venv/bin/python" -c "import course.autograder"  # fail the build, not the first student
"""

RUN = """#!/usr/bin/env bash
# Gradescope runs this once per submission, as root, in a fresh container from the image.
# Written by `pagedsim export-gradescope`; every path may be moved by the variables below.
set -uo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
exec "$ROOT/venv/bin/python" -m course.autograder \\
    --submission "${{AUTOGRADER_SUBMISSION:-$ROOT/submission}}" \\
    --results "${{AUTOGRADER_RESULTS:-$ROOT/results/results.json}}" \\
    --exercise {exercises} --timeout {timeout:g}
"""


def write_bundle(dest, exercise_ids=None, timeout: float = DEFAULT_TIMEOUT) -> Path:
    """Write the bundle into `dest` (new or empty, outside the project) and DEST.zip; returns the
    zip. ValueError for a bad destination, KeyError for an unknown exercise."""
    dest = export.check_destination(dest)
    ids = [curriculum.find(i).id for i in exercise_ids or ()] or [ex.id for ex in curriculum.load()]
    export.export(dest / "pagedsim")
    (dest / "setup.sh").write_text(SETUP)
    (dest / "run_autograder").write_text(
        RUN.format(exercises=" ".join(map(shlex.quote, ids)), timeout=timeout)
    )
    for script in ("setup.sh", "run_autograder"):
        (dest / script).chmod(0o755)
    return Path(shutil.make_archive(str(dest), "zip", dest))


def main(argv: list[str]) -> int:
    p = ArgParser(prog="pagedsim export-gradescope", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", help="where the bundle goes (a new or empty folder, outside the project)")
    p.add_argument("--exercise", nargs="+", metavar="ID", help="grade only these (default: all)")
    per = f"seconds per exercise before its job is killed (default {DEFAULT_TIMEOUT:g})"
    seconds = float_in(0, 86_400, open_low=True)
    p.add_argument("--timeout", type=seconds, default=DEFAULT_TIMEOUT, metavar="S", help=per)
    args = p.parse_args(argv)
    try:
        archive = write_bundle(args.dir, args.exercise, args.timeout)
    except ValueError as e:
        p.error(str(e))
    except KeyError as e:
        p.error(str(e.args[0]))
    print(f"wrote the bundle to {args.dir} and {archive}")
    print("upload the zip in Gradescope: Configure Autograder -> Zip file upload")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
