"""A lesson's text, read from its Markdown file, and what `pagedsim lesson` prints before the demo.

Each lesson's prose lives beside its demo (`ch03_kv_block/lessons/l3_4.py` -> `l3_4.md`), a
page a student can open on GitHub: two language sections, English then Chinese, each

    # 3.4 <title>
    <the text>
    ## Figures   (## 图 in the Chinese section; optional, always last)
    - `<name in pagedsim figures --list>`: <what to look at>

with the same figures in the same order in both. Anything before the first `# ` line (an HTML
comment for editors) is ignored. A missing or malformed file is a ValueError of one line that
names the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import curriculum

LANGS = ("en", "zh")  # the order of the sections in a lesson file
FIGURES_HEADING = {"en": "## Figures", "zh": "## 图"}
FIGURE_ITEM = re.compile(r"- `([^`]+)`: (.+)")


@dataclass(frozen=True)
class LessonText:
    """One language's section of a lesson file."""

    title: str
    body: str  # the text, stripped
    figures: tuple[tuple[str, str], ...]  # (figure name, caption), in the lesson's order


def _section(lines: list[str], lang: str, section: str, where: str) -> LessonText:
    head = lines[0][2:]
    if not head.startswith(f"{section} ") or not head[len(section) :].strip():
        raise ValueError(f"{where}: the heading {lines[0]!r} is not '# {section} <title>'")
    rest = lines[1:]
    cut = rest.index(FIGURES_HEADING[lang]) if FIGURES_HEADING[lang] in rest else len(rest)
    body = "\n".join(rest[:cut]).strip()
    if not body:
        raise ValueError(f"{where}: the {lang} section of {section} has no text")
    figures = []
    for line in (line for line in rest[cut + 1 :] if line.strip()):
        item = FIGURE_ITEM.fullmatch(line)
        if item is None:
            raise ValueError(f"{where}: {line!r} is not a figure item '- `name`: caption'")
        figures.append((item[1], item[2]))
    return LessonText(head[len(section) :].strip(), body, tuple(figures))


def read(section: str) -> dict[str, LessonText]:
    """The lesson's text in each language, from `lessons/l<section>.md`."""
    path = curriculum.LESSONS_DIR / f"l{section.replace('.', '_')}.md"
    where = f"lesson file {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{where} cannot be read ({type(e).__name__})") from None
    return parse(text, section, where)


def parse(text: str, section: str, where: str) -> dict[str, LessonText]:
    """A lesson page's sections by language; ValueError("{where}: ...") when it is malformed."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("# ")]
    if len(starts) != len(LANGS):
        raise ValueError(
            f"{where} has {len(starts)} '# {section} <title>' section(s), not 2 (English, then "
            "Chinese)"
        )
    ends = [*starts[1:], len(lines)]
    out = {
        lang: _section(lines[start:end], lang, section, where)
        for lang, start, end in zip(LANGS, starts, ends, strict=True)
    }
    if [name for name, _ in out["en"].figures] != [name for name, _ in out["zh"].figures]:
        raise ValueError(f"{where}: the two sections list different figures")
    return out


FIGURES_HEAD = {
    "en": "figures for this lesson (draw them with the command shown):",
    "zh": "本节的图（用所示命令生成）：",
}


def lesson_text(section: str, lang: str = "en") -> str:
    lesson = read(section)[lang]
    lines = [f"== {section} {lesson.title} ==", "", lesson.body, ""]
    lines += [FIGURES_HEAD[lang]] if lesson.figures else []
    for name, caption in lesson.figures:
        lines += [f"  {name}: {caption}", f"      pagedsim figures --only {name} --out DIR"]
    return "\n".join(lines).rstrip()
