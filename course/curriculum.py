"""Load `course/curriculum.toml` and check that it tells the truth about the files."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib

COURSE_DIR = Path(__file__).resolve().parent
REPO_ROOT = COURSE_DIR.parent  # the repository, or site-packages
CURRICULUM = COURSE_DIR / "curriculum.toml"
FIELDS = ("id", "section", "title", "stub", "solution", "checks", "marker", "hint")
# Folders whose every .py file must be named by some entry (orphans are refused).
OWNED_DIRS = {
    "stub": "course/ch03_kv_block/exercises",
    "solution": "course/ch03_kv_block/solutions",
    "checks": "course/ch03_kv_block/checks",
}


@dataclass(frozen=True)
class Exercise:
    id: str  # "3.4a"
    section: str  # "3.4": the lesson it belongs to
    title: str
    stub: str  # path (relative to REPO_ROOT) of the stub copied to the student's workspace
    solution: str  # path of the reference solution
    checks: tuple  # paths of the pytest files, shipped in the package
    marker: str  # pytest marker, e.g. "ch3_4"
    hint: str
    hint_zh: str = ""  # the hint in Chinese (optional; English is shown when empty)
    nudges: tuple = ()  # hints before `hint`, gentlest first: `pagedsim hint ID --level 1, 2`
    nudges_zh: tuple = ()  # the nudges in Chinese (optional; English is shown when empty)
    title_zh: str = ""  # the title in Chinese (optional, likewise)
    weight: float = 1.0  # points in grading: weight x the share of checks passed

    def hint_levels(self, lang: str) -> list[str]:
        """The nudges (what to look at), then the full hint (the recipe)."""
        zh = lang == "zh"
        nudges = self.nudges_zh if zh and self.nudges_zh else self.nudges
        return [*nudges, self.hint_zh if zh and self.hint_zh else self.hint]

    def title_in(self, lang: str) -> str:
        return self.title_zh if lang == "zh" and self.title_zh else self.title

    def path(self, field: str) -> Path:
        return REPO_ROOT / getattr(self, field)


def load(path: Path = CURRICULUM) -> list[Exercise]:
    text = Path(path).read_text(encoding="utf-8")
    data = tomllib.loads(text)
    out = []
    for i, entry in enumerate(data.get("exercise", [])):
        missing = [f for f in FIELDS if f not in entry]
        if missing:
            raise ValueError(f"curriculum entry {i + 1} lacks {missing}")
        known = {k: v for k, v in entry.items() if k in Exercise.__dataclass_fields__}
        lists = {k: tuple(known[k]) for k in ("checks", "nudges", "nudges_zh") if k in known}
        out.append(Exercise(**{**known, **lists}))
    return out


def weights(exercises: list[Exercise] | None = None) -> dict[str, float]:
    """Each exercise's points in grading, by id."""
    return {ex.id: ex.weight for ex in (load() if exercises is None else exercises)}


def find(exercise_id: str, exercises: list[Exercise] | None = None) -> Exercise:
    exercises = load() if exercises is None else exercises
    for ex in exercises:
        if ex.id == exercise_id:
            return ex
    raise KeyError(f"no exercise {exercise_id!r}; known: {', '.join(e.id for e in exercises)}")


LESSONS_DIR = COURSE_DIR / "ch03_kv_block" / "lessons"


def sections() -> list[str]:
    """Every lesson in course order, from its file: ch03_kv_block/lessons/l3_1.py is "3.1"."""
    found = [f.stem[1:].replace("_", ".") for f in LESSONS_DIR.glob("l*_*.py")]
    return sorted(found, key=lambda s: tuple(int(part) for part in s.split(".")))


def lesson_module(section: str) -> str:
    """The import name of a section's lesson."""
    return f"course.ch03_kv_block.lessons.l{section.replace('.', '_')}"


def markers(exercises: list[Exercise] | None = None) -> dict[str, str]:
    """Each section's pytest marker -> its section, in course order: what pytest registers."""
    exercises = load() if exercises is None else exercises
    return {ex.marker: ex.section for ex in exercises}


def _hint_problems(ex: Exercise) -> list[str]:
    out = [] if ex.hint.strip() else [f"exercise {ex.id} has an empty hint"]
    if not all(isinstance(n, str) and n.strip() for n in ex.nudges):
        out.append(f"exercise {ex.id} has an empty nudge (a hint level before the hint)")
    if ex.nudges_zh and len(ex.nudges_zh) != len(ex.nudges):
        out.append(f"exercise {ex.id} has {len(ex.nudges_zh)} Chinese nudges for {len(ex.nudges)}")
    return out


def problems(exercises: list[Exercise] | None = None) -> list[str]:
    """Everything wrong with the curriculum, one sentence each; [] means it is sound."""
    exercises = load() if exercises is None else exercises
    out, named, ids = [], set(), set()
    for ex in exercises:
        if ex.id in ids:
            out.append(f"exercise {ex.id} is listed twice")
        ids.add(ex.id)
        out += _hint_problems(ex)
        number = isinstance(ex.weight, (int, float)) and not isinstance(ex.weight, bool)
        if not number or not 0 <= ex.weight <= 1000:
            out.append(f"exercise {ex.id}: weight {ex.weight!r} is not a number from 0 to 1000")
        if not ex.title.strip():
            out.append(f"exercise {ex.id} has an empty title")
        want = "ch" + ex.section.replace(".", "_")
        if not re.fullmatch(r"ch\d+_\d+", ex.marker) or ex.marker != want:
            out.append(
                f"exercise {ex.id}: marker {ex.marker!r} does not match section {ex.section}"
            )
        if not ex.checks:
            out.append(f"exercise {ex.id} lists no checks")
        for rel in (ex.stub, ex.solution, *ex.checks):
            named.add(rel)
            if not (REPO_ROOT / rel).is_file():
                out.append(f"exercise {ex.id}: {rel} does not exist")
        if ex.stub == ex.solution:
            out.append(f"exercise {ex.id}: the stub and the solution are the same file")
        if ex.section not in sections():
            lesson = f"{LESSONS_DIR.name}/l{ex.section.replace('.', '_')}.py"
            out.append(f"exercise {ex.id}: section {ex.section} has no lesson ({lesson})")
    for folder in OWNED_DIRS.values():
        for f in sorted((REPO_ROOT / folder).glob("*.py")):
            rel = f.relative_to(REPO_ROOT).as_posix()
            if f.name == "__init__.py" or f.name.startswith(("_", "conftest")):
                continue
            if rel not in named:
                out.append(f"orphan file {rel}: no curriculum entry names it")
    return out
