"""English or Chinese for the tour, the playground and figure captions (`--lang en|zh`).

The language is `--lang` when given, else PAGEDSIM_LANG, else the locale: Chinese when
LC_ALL, LC_MESSAGES or LANG starts with "zh", English otherwise (the same rule as
course/i18n.py). `t(template, lang, **fields)` looks an English template up in a ZH
table and fills it; a template without a translation stays English, so nothing is lost.
Identifiers (seq ids, block ids, `allocate()`) are never translated.
"""

from __future__ import annotations

import os
import re

LANGS = ("en", "zh")


def detect(chosen: str | None = None) -> str:
    """`chosen` if given, else the environment's language ("en" or "zh")."""
    if chosen:
        if chosen not in LANGS:
            raise ValueError(f"lang must be one of {LANGS}, got {chosen!r}")
        return chosen
    env = os.environ.get("PAGEDSIM_LANG", "")
    if env in LANGS:
        return env
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(var)
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


def t(template: str, lang: str, table: dict, **fields) -> str:
    """`template` (English) in `lang`, looked up in `table`, with `fields` filled in."""
    text = table.get(template, template) if lang == "zh" else template
    return text.format(**fields) if fields else text


def display_width(text: str) -> int:
    """Terminal columns `text` takes: CJK characters are two columns wide."""
    return sum(2 if "\u2e80" <= ch <= "\uffef" else 1 for ch in text)


_TOKENS = re.compile(r"[\u2e80-\uffef]|[^\s\u2e80-\uffef]+|\s+")


def wrap(line: str, width: int, indent: str = "      ") -> list[str]:
    """`line` cut into lines of at most `width` terminal columns, at spaces or between CJK
    characters; continuation lines keep the line's indentation plus `indent`."""
    if display_width(line) <= width:
        return [line]
    lead = line[:len(line) - len(line.lstrip())]
    out, cur = [], lead
    for tok in _TOKENS.findall(line.strip()):
        start = lead if not out else lead + indent
        if tok.isspace():
            if cur != start:
                cur += " "
            continue
        while tok and display_width(tok) > width - display_width(start):  # a word longer than a line
            room = max(1, width - display_width(start))  # at least one character: a tiny width ends too
            if cur != start:
                out.append(cur.rstrip())
                cur = start = lead + indent
                room = max(1, width - display_width(start))
            out.append(start + tok[:room])
            tok, cur, start = tok[room:], lead + indent, lead + indent
        if display_width(cur) + display_width(tok) > width and cur.strip():
            out.append(cur.rstrip())
            cur = lead + indent
        cur += tok
    if cur.strip():
        out.append(cur.rstrip())
    return out
