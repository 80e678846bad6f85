"""`pagedsim grade`'s reports: JSON by student and exercise, a plain-text table, CSV, and a
Gradescope-style results.json per student.

Invariant: every name a student chose (a folder, a message) is printed through
`printable`, so control characters and ANSI escapes show as escapes and cannot move the
cursor or recolour the report.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from pathlib import Path


def as_json(results) -> dict:
    out: dict = {}
    for r in results:
        row = asdict(r)
        out.setdefault(row.pop("student"), {})[row.pop("exercise")] = row
    return out


def table(results) -> str:
    names = {r.student: printable(r.student) for r in results}
    students = list(dict.fromkeys(r.student for r in results))
    ids = list(dict.fromkeys(r.exercise for r in results))
    cell = {
        (r.student, r.exercise): (
            f"{r.passed}/{r.total}" if r.status in ("pass", "fail") else r.status.upper()
        )
        + ("" if r.verified else " unverified")
        for r in results
    }
    w0 = max([7, *(len(names[s]) for s in students)])
    widths = [max(len(i), 7, *(len(cell[s, i]) for s in students)) for i in ids]
    columns = list(zip(ids, widths, strict=True))
    lines = [f"{'student':<{w0}}  " + "  ".join(f"{i:>{w}}" for i, w in columns)]
    lines.append("-" * len(lines[0]))
    for s in students:
        lines.append(f"{names[s]:<{w0}}  " + "  ".join(f"{cell[s, i]:>{w}}" for i, w in columns))
    notes = [r for r in results if r.status != "pass"]
    if notes:
        lines.append("")
    for r in notes:
        what = (
            ", ".join(r.failed)
            if r.status == "fail" and r.failed
            else (r.messages[0] if r.messages else "")
        )
        lines.append(printable(f"{names[r.student]} {r.exercise} {r.status}: {what}")[:160])
    for r in results:
        if r.similar:
            lines.append(printable(f"{names[r.student]} {r.exercise} flagged: {r.similar}")[:160])
    return "\n".join(lines)


COLUMNS = (
    "student",
    "exercise",
    "status",
    "passed",
    "total",
    "seconds",
    "verified",
    "mode",
    "similar",
    "message",
)


def as_csv(results) -> str:
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(COLUMNS)
    for r in results:
        w.writerow(
            [
                printable(r.student),
                r.exercise,
                r.status,
                r.passed,
                r.total,
                r.seconds,
                r.verified,
                r.mode,
                r.similar,
                printable(r.messages[0] if r.messages else ""),
            ]
        )
    return out.getvalue()


def write_gradescope(results, folder: Path) -> list[Path]:
    """FOLDER/STUDENT/results.json: Gradescope's autograder format, one test per exercise
    (score = checks passed, max_score = checks run; an unverified run says so)."""
    by: dict = {}
    for r in results:
        by.setdefault(r.student, []).append(r)
    written = []
    for student, rows in by.items():
        tests = [
            {
                "name": f"exercise {r.exercise}",
                "score": r.passed,
                "max_score": r.total,
                "status": "passed" if r.status == "pass" else "failed",
                "output": "\n".join(
                    [
                        f"{r.status}",
                        *r.messages,
                        *(["unverified: no isolation"] if not r.verified else []),
                    ]
                ),
                "visibility": "visible",
            }
            for r in rows
        ]
        path = Path(folder) / _safe_name(student) / "results.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps({"score": sum(r.passed for r in rows), "tests": tests}, indent=1)
        )
        written.append(path)
    return written


def _safe_name(name: str) -> str:
    """A student's folder name as one path component here (no separators, no dot-dot)."""
    clean = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip(".")
    return clean or "_"


def printable(text: str) -> str:
    """`text` with control characters (ANSI escapes included) written as escapes: a folder name
    cannot move the cursor or recolour the report."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))
