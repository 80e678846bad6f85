"""English or Chinese for every app and the course (`--lang en|zh`): the one language rule.

The language is `--lang` when given, else PAGEDSIM_LANG, else the locale (Chinese when
LC_ALL, LC_MESSAGES or LANG starts with "zh"). `t` looks an English template up (untranslated:
stays English); `wrap` wraps mixed English/CJK text. Identifiers are never translated.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

LANGS = ("en", "zh")
ENV = "PAGEDSIM_LANG"  # the variable `set_lang` exports and `detect` reads first


def detect(chosen: str | None = None) -> str:
    """`chosen` if given, else the environment's language ("en" or "zh")."""
    if chosen:
        if chosen not in LANGS:
            raise ValueError(f"lang must be one of {LANGS}, got {chosen!r}")
        return chosen
    env = os.environ.get(ENV, "")
    if env in LANGS:
        return env
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(var)
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


def set_lang(chosen: str | None = None, argument: str = "lang") -> str:
    """Decide the language (`chosen`, else `detect()`) and export it in PAGEDSIM_LANG.
    ValueError naming `argument` (e.g. "--lang") for anything but "en", "zh" or None;
    the environment is then left as it was."""
    if chosen is not None and chosen not in LANGS:
        raise ValueError(f"{argument} must be one of {', '.join(LANGS)}, got {chosen!r}")
    os.environ[ENV] = chosen or detect()
    return os.environ[ENV]


def say(en: str, zh: str, lang: str | None = None) -> str:
    """`zh` when the language (`lang`, else `detect()`) is Chinese, else `en`."""
    return zh if detect(lang) == "zh" else en


def t(template: str, lang: str, table: Mapping[str, str], **fields: object) -> str:
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
    lead = line[: len(line) - len(line.lstrip())]
    out: list[str] = []
    cur = lead
    for tok in _TOKENS.findall(line.strip()):
        start = lead if not out else lead + indent
        if tok.isspace():
            if cur != start:
                cur += " "
            continue
        # a word longer than a line; at least one character per line, so a tiny width ends too
        while tok and display_width(tok) > width - display_width(start):
            room = max(1, width - display_width(start))
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
