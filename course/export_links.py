"""Markdown links in a student copy that would point at a file the export left out.

`pagedsim export-course` leaves the instructor's pages out: `unlink_missing(dest)` makes every
relative Markdown link to a missing file plain text, and `drop_repo_only(dest)` cuts out each
section between `<!-- repo-only ... -->` and `<!-- /repo-only -->` (e.g. the README's test-suite
command, which needs the tests/ a student copy lacks).
"""

from __future__ import annotations

import re
from pathlib import Path

LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
NOTE = " (in the instructor's copy)"
REPO_ONLY = re.compile(r"<!-- repo-only\b.*?-->.*?<!-- /repo-only -->\n?", re.S)


def _missing(md: Path, target: str) -> bool:
    path = target.split("#", 1)[0]
    relative = not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) and not target.startswith("#")
    return bool(path) and relative and not (md.parent / path).exists()


def unlink_missing(dest: Path) -> list[str]:
    """Rewrite, in every .md file under `dest`, the relative links to missing files."""
    dest = Path(dest)
    rewritten = []
    for md in sorted(dest.rglob("*.md")):
        text = md.read_text(encoding="utf-8")

        def plain(m: re.Match, md=md) -> str:
            label, target = m.group(1), m.group(2)
            if not _missing(md, target):
                return m.group(0)
            rewritten.append(f"{md.relative_to(dest)}: {target}")
            return label + NOTE

        new = LINK.sub(plain, text)
        if new != text:
            md.write_text(new, encoding="utf-8")
    return rewritten


def drop_repo_only(dest: Path) -> list[str]:
    """Cut every repo-only section out of the .md files under `dest`; returns the files cut."""
    cut = []
    for md in sorted(Path(dest).rglob("*.md")):
        text = md.read_text(encoding="utf-8")
        new = REPO_ONLY.sub("", text)
        if new != text:
            md.write_text(new, encoding="utf-8")
            cut.append(str(md.relative_to(dest)))
    return cut
