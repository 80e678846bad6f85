"""Captions in every language: the Chinese template table and the language switch.

English is `pagedsim/captions_en.py` (the core tells stories with it); Chinese is in
captions.toml. `caption(snapshot, lang)` is what the tour, the playground and the figures
print; ids, counts and call names are never translated. To add a language: a table with
`EN`'s keys in `TABLES`, and its code in `lang.LANGS` (`tests/captions/test_story.py`
checks coverage).
"""

from __future__ import annotations

from collections.abc import Iterable

from .. import trace as tr
from ..captions_en import EN
from ..io import tables
from ..story import Phrasebook, story_of, tell

ZH: dict[str, str] = tables.beside(__file__)["zh"]  # captions.toml

TABLES = {"en": EN, "zh": ZH}


def book(lang: str) -> Phrasebook:
    """The phrasebook of `lang` ("en" or "zh")."""
    if lang not in TABLES:
        raise ValueError(f"lang must be one of {tuple(TABLES)}, got {lang!r}")
    return Phrasebook(TABLES[lang])


def caption(snapshot: tr.Snapshot, lang: str = "en") -> str:
    """The snapshot's caption in `lang`: its own words if it has some, else its story."""
    return story_of(snapshot).words(book(lang))


def describe(events: Iterable[tr.Event], lang: str = "en") -> str:
    """One sentence in `lang` for the events of one step."""
    return tell(events).words(book(lang))
