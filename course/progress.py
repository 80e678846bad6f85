"""`pagedsim progress` and `pagedsim solution ID`: where a student stands, and the reference
after a pass (as Exercism shows it once solved).

Every `pagedsim check` of a workspace file records its result in the workspace's
.pagedsim-progress.json: {exercise id: {"status", "passed", "total", "file", "sha256"}}; a result
is stale once the file's hash changes. `solution` prints the reference only after the current
file passed, unless --force."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pagedsim.io.args import ArgParser

from . import curriculum, i18n, workspace

NAME = ".pagedsim-progress.json"


def folder() -> Path | None:
    """The workspace in use (course/workspace.py's order), or None when there is none."""
    found = next(filter(None, map(workspace.find, curriculum.load())), None)
    return found.parent if found else None


def digest(path: Path) -> str:
    """The file's sha256, or '' when it cannot be read."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return ""


def load(where: Path | None) -> dict:
    if where is None or not (where / NAME).is_file():
        return {}
    try:
        data = json.loads((where / NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record(outcome) -> None:
    """Keep `outcome` (a course.runner.Outcome) when its file lies in a workspace."""
    where = Path(outcome.impl).parent
    if not (where / workspace.MARKER).is_file():
        return
    data = load(where)
    data[outcome.exercise.id] = {
        "status": outcome.status,
        "passed": outcome.passed,
        "total": outcome.total,
        "file": Path(outcome.impl).name,
        "sha256": digest(outcome.impl),
    }
    (where / NAME).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def state(ex, data: dict, where: Path | None) -> str:
    """pass | fail | timeout | error | changed (checked, edited since) | not checked."""
    got = data.get(ex.id)
    if not got:
        return "not checked"
    mine = where / got.get("file", "") if where else None
    if mine is None or digest(mine) != got.get("sha256"):
        return "changed"
    return str(got.get("status"))


def main(argv: list[str]) -> int:
    p = ArgParser(prog="pagedsim progress", description="done and left, with each last result")
    p.parse_args(argv)
    where = folder()
    if where is None:
        print("no workspace here: run `pagedsim workspace` first (or set PAGEDSIM_WORKSPACE)")
        return 1
    data, done, exercises = load(where), 0, curriculum.load()
    print(f"workspace: {where}")
    for ex in exercises:
        now = state(ex, data, where)
        got = data.get(ex.id, {})
        score = f" ({got.get('passed')}/{got.get('total')} checks)" if got else ""
        mark = "done" if now == "pass" else "left"
        done += now == "pass"
        print(f"  {mark:<4}  {ex.id:<5} {now:<11}{score}  {ex.title_in(i18n.lang())}")
    print(f"\n{done}/{len(exercises)} exercises done")
    left = [ex for ex in exercises if state(ex, data, where) != "pass"]
    if left:
        print(f"next: pagedsim check {left[0].id}   (or `pagedsim watch {left[0].id}`)")
    return 0


def solution_main(argv: list[str]) -> int:
    what = "the reference solution, once your own passes its checks"
    p = ArgParser(prog="pagedsim solution", description=what)
    p.add_argument("exercise", help="an exercise id such as 3.4a")
    p.add_argument("--force", action="store_true", help="show it before you have passed")
    args = p.parse_args(argv)
    ex = named_or_current(p, args.exercise, curriculum.load())
    path = ex.path("solution")
    if not path.is_file():
        print(f"this copy of the course has no reference solution for {ex.id}")
        return 1
    where = folder()
    now = state(ex, load(where), where)
    if now != "pass" and not args.force:
        why = {
            "not checked": "you have not checked it yet",
            "changed": "your file changed since its last check",
        }
        why = why.get(now, f"its last check: {now}")
        print(
            f"{ex.id} has not passed ({why}). Reading the reference first takes away the "
            f"exercise; try `pagedsim hint {ex.id}`, or show it anyway with "
            f"`pagedsim solution {ex.id} --force`"
        )
        return 1
    print(f"# the reference for {ex.id}, to compare with yours ({path.name})\n")
    print(path.read_text(encoding="utf-8"))
    return 0


def current(exercises):
    """The first exercise in course order not passed (None when all are)."""
    where = folder()
    data = load(where)
    return next((ex for ex in exercises if state(ex, data, where) != "pass"), None)


def named_or_current(p, exercise_id: str | None, exercises):
    """The exercise named on `p`'s command line (an unknown id is a usage error), else `current`."""
    try:
        return curriculum.find(exercise_id, exercises) if exercise_id else current(exercises)
    except KeyError as e:
        p.error(e.args[0])
