"""`pagedsim grade`'s two reports: JSON by student and exercise, and a plain-text table.

Invariant: every name a student chose (a folder, a message) is printed through
`printable`, so control characters and ANSI escapes show as escapes and cannot move the
cursor or recolour the report.
"""

from __future__ import annotations

from dataclasses import asdict


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
    return "\n".join(lines)


def printable(text: str) -> str:
    """`text` with control characters (ANSI escapes included) written as escapes: a folder name
    cannot move the cursor or recolour the report."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))
