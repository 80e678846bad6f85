"""Captions in every language: the Chinese template table and the language switch.

English is `pagedsim/captions_en.py` (the core tells stories with it); Chinese is here.
`caption(snapshot, lang)` is what the tour, the playground and the figures print; ids,
counts and call names are never translated. To add a language: a table with `EN`'s keys
in `TABLES`, and its code in `lang.LANGS` (`tests/captions/test_story.py` checks coverage).
"""

from __future__ import annotations

from collections.abc import Iterable

from .. import trace as tr
from ..captions_en import EN
from ..story import Phrasebook, story_of, tell

ZH = {
    "sep": "、",
    "blocks": "块 {list}",
    "pool": "块池：{num_gpu_blocks} 块 x 每块 {block_size} 个 token，全部空闲",
    "quiet": "没有变化",
    "refused": (
        "序列 {seq_id} 的 {what} 需要 {needed} 个空闲块，但只有 {available} 个："
        "OutOfBlocks，没有任何改动"
    ),
    "arrival": "序列 {seq_id} 带着 {num_tokens} 个 token 到来",
    "arrival.shared": "，共享已缓存的{blocks}",
    "arrival.taken": "，取得{blocks}",
    "fork": "序列 {child} 从序列 {parent} 分叉，共享{blocks}（{counts}）",
    "fork.empty": "序列 {child} 从空序列 {parent} 分叉",
    "fork.count": "计数变为 {count}",
    "fork.counts": "计数：{items}",
    "fork.counts.item": "块 {block} 为 {count}",
    "finish": "序列 {seq_id} 结束",
    "finish.back": "：{blocks} 回到空闲链表",
    "finish.kept": "；{items}",
    "finish.kept.sep": "，",
    "finish.kept.item": "块 {block} 保留（计数 {count}）",
    "decode": "解码一步：{num_seqs} 个序列各追加一个 token",
    "decode.copies": "；写时复制 {items}",
    "decode.copies.item": "{src} -> {dst}",
    "decode.fresh": "；已满的最后一块取得{blocks}",
    "append": "序列 {seq_id} 追加 {where}",
    "append.where": "token {first}..{last}",
    "append.where.one": "token {first}（槽位 {slot}）",
    "append.copy": "：块 {src} 被共享（计数 {count}），写时复制给序列 {seq_id} 块 {dst}",
    "append.fresh": "；最后一块已满，取得{blocks}",
    "append.dropped": "；{blocks} 滑出窗口，被释放",
    "unnamed": "{items}",
    "unnamed.sep": "；",
}

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
