"""What `pagedsim lesson` prints before the demo: the title, the text in one language, the figures.

A lesson module has TITLE, TEXT (English), TEXT_ZH (Chinese, optional: English is shown
when it is missing), FIGURES: (name in `pagedsim figures --list`, what to look at) and
FIGURES_ZH, the captions in Chinese in the same order (optional).
The notebooks (course/notebooks.py) use the same function, so text and notebook agree.
"""

from __future__ import annotations

import textwrap


def figure_lines(lesson, lang: str) -> list[str]:
    figures = getattr(lesson, "FIGURES", ())
    if not figures:
        return []
    head = (
        "figures for this lesson (draw them with the command shown):"
        if lang == "en"
        else "本节的图（用所示命令生成）："
    )
    captions = getattr(lesson, "FIGURES_ZH", None) if lang == "zh" else None
    lines = [head]
    for i, (name, what) in enumerate(figures):
        lines.append(f"  {name}: {captions[i] if captions and i < len(captions) else what}")
        lines.append(f"      pagedsim figures --only {name} --out DIR")
    return lines


def lesson_text(lesson, section: str, lang: str = "en") -> str:
    title = getattr(lesson, "TITLE_ZH", lesson.TITLE) if lang == "zh" else lesson.TITLE
    body = getattr(lesson, "TEXT_ZH", None) if lang == "zh" else None
    body = textwrap.dedent(body or lesson.TEXT).strip()
    lines = [f"== {section} {title} ==", "", body, "", *figure_lines(lesson, lang)]
    return "\n".join(lines).rstrip()
