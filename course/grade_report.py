"""`pagedsim grade`'s reports: JSON by student and exercise, a plain-text table, CSV, and a
Gradescope-style results.json per student.

Invariant: every name a student chose (a folder, a message) is printed through
`printable`, so control characters and ANSI escapes show as escapes and cannot move the
cursor or recolour the report; and every CSV cell goes through `cell`, so none that a
student named starts like a spreadsheet formula.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from pathlib import Path

from . import curriculum


def _rows(results) -> list[dict]:
    """Each Result's fields, with its score and weight."""
    weights = curriculum.weights()
    return [
        {**asdict(r), "score": score(r, weights), "weight": weights.get(r.exercise, 1.0)}
        for r in results
    ]


def as_json(results) -> dict:
    """{student: {exercise: the Result's fields, with its score and weight}}."""
    out: dict = {}
    for row in _rows(results):
        out.setdefault(row.pop("student"), {})[row.pop("exercise")] = row
    return out


def table(results, pairs: dict | None = None) -> str:
    """The grid (student x exercise, and each student's weighted score), a line per result that
    is not a pass, the flags, and the most similar pairs per exercise."""
    names = {r.student: printable(r.student) for r in results}
    students = list(dict.fromkeys(r.student for r in results))
    ids = list(dict.fromkeys(r.exercise for r in results))
    weights, points, shown = curriculum.weights(), dict.fromkeys(students, 0.0), {}
    for r in results:
        got = f"{r.passed}/{r.total}" if r.status in ("pass", "fail") else r.status.upper()
        shown[r.student, r.exercise] = got + ("" if r.verified else " unverified")
        points[r.student] += score(r, weights)
    most = sum(weights.get(i, 1.0) for i in ids)
    for s in students:
        shown[s, "score"] = f"{points[s]:g}/{most:g}"
    w0 = max([7, *(len(names[s]) for s in students)])
    widths = [max(len(i), 7, *(len(shown[s, i]) for s in students)) for i in [*ids, "score"]]
    columns = list(zip([*ids, "score"], widths, strict=True))
    lines = [f"{'student':<{w0}}  " + "  ".join(f"{i:>{w}}" for i, w in columns)]
    lines.append("-" * len(lines[0]))
    for s in students:
        lines.append(f"{names[s]:<{w0}}  " + "  ".join(f"{shown[s, i]:>{w}}" for i, w in columns))
    notes = [r for r in results if r.status != "pass"]
    if notes:
        lines.append("")
    for r in notes:
        if r.status == "fail" and r.failed:
            what = f"{len(r.failed)} failed: " + ", ".join(r.failed)
        else:
            what = r.messages[0] if r.messages else ""
        lines.append(_cut(printable(f"{names[r.student]} {r.exercise} {r.status}: {what}")))
    for r in results:
        if r.similar:
            lines.append(_cut(printable(f"{names[r.student]} {r.exercise} flagged: {r.similar}")))
    if pairs:
        lines += ["", "most similar pairs (normalised syntax trees; a flag, never a fail):"]
    for ex, rows in (pairs or {}).items():
        for a, b, share in rows:
            lines.append(printable(f"  {ex}  {names.get(a, a)}  {names.get(b, b)}  {share:.0%}"))
    return "\n".join(lines)


def _cut(line: str, width: int = 160) -> str:
    """`line`, ending in an ellipsis where it had to be cut to `width` characters."""
    return line if len(line) <= width else line[: width - 1] + "…"


COLUMNS = "student exercise status passed total score weight seconds verified mode similar message"
COLUMNS = tuple(COLUMNS.split())

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet may run as a formula


def cell(value) -> str:
    """A CSV cell a spreadsheet shows as text: one that starts like a formula gets a leading
    quote (OWASP, "CSV Injection")."""
    text = printable(value) if isinstance(value, str) else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def csv_text(header, rows) -> str:
    """CSV with every cell through `cell`."""
    out = io.StringIO()
    w = csv.writer(out)
    for values in (header, *rows):
        w.writerow([cell(v) for v in values])
    return out.getvalue()


def as_csv(results) -> str:
    rows = [{**row, "message": (row["messages"] or [""])[0]} for row in _rows(results)]
    return csv_text(COLUMNS, ([row[c] for c in COLUMNS] for row in rows))


def pairs_csv(pairs: dict) -> str:
    """The most similar student pairs per exercise (grade_similarity.Report.pairs)."""
    return csv_text(
        ("exercise", "student", "other", "share"),
        ([ex, a, b, share] for ex, rows in pairs.items() for a, b, share in rows),
    )


def score(r, weights: dict) -> float:
    """An exercise's points: its weight times the share of checks passed; 0 for an error or
    timeout."""
    if r.status not in ("pass", "fail") or not r.total:
        return 0.0
    return round(weights.get(r.exercise, 1.0) * r.passed / r.total, 4)


def write_gradescope(results, folder: Path) -> list[Path]:
    """FOLDER/NAME/results.json per student (Gradescope's format) and FOLDER/manifest.json:
    {student folder: its results.json}. NAME is the folder name made safe; names that collide
    (`bob smith`, `bob_smith`) get -2, -3."""
    by: dict = {}
    for r in results:
        by.setdefault(r.student, []).append(r)
    written, manifest, taken = [], {}, {"manifest.json"}
    for student, rows in by.items():
        name = _safe_name(student)
        n = 1
        while name.lower() in taken:  # lower: a case-insensitive file system too
            n += 1
            name = f"{_safe_name(student)}-{n}"
        taken.add(name.lower())
        path = Path(folder) / name / "results.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(gradescope_results(rows), indent=1))
        manifest[student] = f"{name}/results.json"
        written.append(path)
    (Path(folder) / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return written


def gradescope_results(rows) -> dict:
    """One submission's results.json (Gradescope's format): a test per exercise."""
    weights = curriculum.weights()
    tests = []
    for r in rows:
        output = [r.status, *r.messages] + ([] if r.verified else ["unverified: no isolation"])
        tests.append(
            {
                "name": f"exercise {r.exercise}",
                "score": score(r, weights),
                "max_score": weights.get(r.exercise, 1.0),
                "status": "passed" if r.status == "pass" else "failed",
                "output": "\n".join(output),
                "visibility": "visible",
            }
        )
    return {"score": round(sum(t["score"] for t in tests), 4), "tests": tests}


NAME_BYTES = 200  # of a results.json folder's name: room for a -N suffix under NAME_MAX (255)


def _safe_name(name: str) -> str:
    """A student's folder name as one path component here (no separators, no dot-dot), at most
    NAME_BYTES long in UTF-8 (a 255-byte folder name and a suffix would not fit)."""
    clean = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    clean = clean.encode()[:NAME_BYTES].decode(errors="ignore").strip(".")
    return clean or "_"


def utf8(text: object) -> str:
    """`text` as a str that UTF-8 can write: each lone surrogate (a submission's text, or a name
    decoded from bytes that were not UTF-8) written as its escape, as `printable` writes it."""
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


def printable(text: str) -> str:
    """`text` with control characters (ANSI escapes included) written as escapes."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))
