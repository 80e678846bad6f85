"""What one step did, as typed data: the one case analysis behind every caption.

`tell(events)` turns one manager step's events (`trace.py`) into a *story*, a small frozen
record such as `Arrival(seq_id="A", num_tokens=6, shared=(), taken=(0, 1))`. A story puts
its sentence together (`words(book)`) from a *phrasebook*, one template table per language
(`captions_en.EN`; Chinese: `pagedsim.text.captions`). `story_of(snapshot)` is a recorded
step's story; `caption` and `describe` tell it in English.

To add a story: a frozen dataclass with `words(book)`, a case in `tell`, and its keys in
every table (`tests/captions/test_story.py` renders every kind with every table).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import TypeVar

from . import trace as tr
from .captions_en import EN

E = TypeVar("E", bound=tr.Event)


class Phrasebook:
    """One language's templates. `say(key, *variants, **fields)` fills the first
    `key.variant` the table has, else `key` ("one" is asked for a count of 1, so English
    says "block 3 returns" and "blocks 3, 4 return"). `key.sep` (else `sep`) joins lists."""

    def __init__(self, table: Mapping[str, str]):
        self.table = table

    def say(self, key: str, *variants: str | None, **fields: object) -> str:
        template = next(
            (self.table[f"{key}.{v}"] for v in variants if v and f"{key}.{v}" in self.table), None
        )
        return (template if template is not None else self.table[key]).format(**fields)

    def join(self, key: str, items: Iterable[str]) -> str:
        return self.table.get(f"{key}.sep", self.table["sep"]).join(items)

    def items(self, key: str, rows: Iterable[Mapping[str, object]]) -> str:
        """Each row (a dict) through the template `key.item`, joined."""
        return self.join(key, [self.say(f"{key}.item", **row) for row in rows])

    def blocks(self, blocks: Iterable[int]) -> str:
        """'block 3' or 'blocks 3, 4' (in this language)."""
        listed = list(blocks)
        return self.say("blocks", one(listed), list=self.join("blocks", map(str, listed)))


def one(items: int | Sized) -> str | None:
    """The variant to ask for: "one" when `items` (a count or a collection) is exactly 1."""
    return "one" if (items if isinstance(items, int) else len(items)) == 1 else None


class Story:
    """A step's story; subclasses are frozen dataclasses."""

    def words(self, book: Phrasebook) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class PoolCreated(Story):
    num_gpu_blocks: int
    block_size: int

    def words(self, book: Phrasebook) -> str:
        return book.say("pool", **vars(self))


@dataclass(frozen=True)
class Quiet(Story):
    """A step with no events."""

    def words(self, book: Phrasebook) -> str:
        return book.say("quiet")


@dataclass(frozen=True)
class Custom(Story):
    """A caller's own words for a step (the playground's commands, the engine's batches)."""

    text: str

    def words(self, book: Phrasebook) -> str:
        return self.text


@dataclass(frozen=True)
class Refusal(Story):
    """An all-or-nothing refusal: OutOfBlocks, nothing changed."""

    seq_id: object
    what: str  # the refused operation
    needed: int  # free blocks it needed
    available: int  # free blocks there were

    def words(self, book: Phrasebook) -> str:
        return book.say("refused", one(self.available), **vars(self))


@dataclass(frozen=True)
class Arrival(Story):
    seq_id: object
    num_tokens: int  # prompt length
    shared: tuple[int, ...]  # blocks a prefix-cache hit shares with a live sequence
    taken: tuple[int, ...]  # blocks popped from the free list

    def words(self, book: Phrasebook) -> str:
        text = book.say("arrival", seq_id=self.seq_id, num_tokens=self.num_tokens)
        if self.shared:
            text += book.say("arrival.shared", blocks=book.blocks(self.shared))
        if self.taken:
            text += book.say("arrival.taken", blocks=book.blocks(self.taken))
        return text


@dataclass(frozen=True)
class Fork(Story):
    """Beam-search fork (v0): the child names every block of the parent."""

    parent: object
    child: object
    shared: tuple[tuple[int, int], ...]  # (block, ref count after the increment) per shared block

    def words(self, book: Phrasebook) -> str:
        if not self.shared:
            return book.say("fork.empty", parent=self.parent, child=self.child)
        distinct = {count for _, count in self.shared}
        counts = (
            book.say("fork.count", count=distinct.pop())
            if len(distinct) == 1
            else book.say(
                "fork.counts",
                items=book.items("fork.counts", [{"block": b, "count": c} for b, c in self.shared]),
            )
        )
        return book.say(
            "fork",
            parent=self.parent,
            child=self.child,
            blocks=book.blocks(b for b, _ in self.shared),
            counts=counts,
        )


@dataclass(frozen=True)
class Finish(Story):
    seq_id: object
    returned: tuple[int, ...]  # blocks whose count fell to 0: back on the free list
    kept: tuple[tuple[int, int], ...]  # (block, count) of blocks another owner still holds

    def words(self, book: Phrasebook) -> str:
        text = book.say("finish", seq_id=self.seq_id)
        if self.returned:
            text += book.say("finish.back", one(self.returned), blocks=book.blocks(self.returned))
        if self.kept:
            rows = [{"block": b, "count": c} for b, c in self.kept]
            text += book.say(
                "finish.kept",
                None if self.returned else "alone",
                items=book.items("finish.kept", rows),
            )
        return text


@dataclass(frozen=True)
class DecodeStep(Story):
    """One token for each of several sequences (`decode_step`)."""

    num_seqs: int
    copies: tuple[tuple[int, int], ...]  # (src, dst) copy-on-write pairs
    fresh: tuple[int, ...]  # blocks taken because a last block was full

    def words(self, book: Phrasebook) -> str:
        text = book.say("decode", num_seqs=self.num_seqs)
        if self.copies:
            text += book.say(
                "decode.copies",
                items=book.items("decode.copies", [{"src": s, "dst": d} for s, d in self.copies]),
            )
        if self.fresh:
            text += book.say("decode.fresh", blocks=book.blocks(self.fresh))
        return text


@dataclass(frozen=True)
class Append(Story):
    seq_id: object
    first_position: int  # position of the first appended token
    slots: tuple[int, ...]  # slot of each appended token
    # (src, src count before, writer, dst) per copy-on-write
    copies: tuple[tuple[int, int, object, int], ...]

    fresh: tuple[int, ...]  # blocks taken because the last block was full
    dropped: tuple[int, ...]  # blocks a sliding window released

    def words(self, book: Phrasebook) -> str:
        n = len(self.slots)
        where = book.say(
            "append.where",
            one(n),
            first=self.first_position,
            last=self.first_position + n - 1,
            slot=self.slots[0] if n else None,
        )
        text = book.say("append", seq_id=self.seq_id, where=where)
        for src, count, writer, dst in self.copies:
            text += book.say("append.copy", src=src, count=count, seq_id=writer, dst=dst)
        if self.fresh:
            text += book.say(
                "append.fresh", None if self.copies else "alone", blocks=book.blocks(self.fresh)
            )
        if self.dropped:
            text += book.say("append.dropped", one(self.dropped), blocks=book.blocks(self.dropped))
        return text


@dataclass(frozen=True)
class Unnamed(Story):
    """Events no story covers yet: their kinds, in order."""

    kinds: tuple[str, ...]

    def words(self, book: Phrasebook) -> str:
        return book.say("unnamed", items=book.join("unnamed", self.kinds))


def _of(events: Iterable[tr.Event], cls: type[E]) -> list[E]:
    return [e for e in events if isinstance(e, cls)]


def _taken(events: Sequence[tr.Event]) -> tuple[int, ...]:
    return tuple(e.block for e in _of(events, tr.BlockAllocated))


def _decode(events: Sequence[tr.Event]) -> Story:
    cow = _of(events, tr.CopyOnWrite)
    copied = {c.dst for c in cow}
    return DecodeStep(
        len(_of(events, tr.TokensAppended)),
        tuple((c.src, c.dst) for c in cow),
        tuple(b for b in _taken(events) if b not in copied),
    )


def _append(head: tr.TokensAppended, events: Sequence[tr.Event]) -> Story:
    cow = _of(events, tr.CopyOnWrite)
    copied, sources = {c.dst for c in cow}, {c.src for c in cow}
    return Append(
        head.seq_id,
        head.first_position,
        tuple(head.slots),
        tuple((c.src, c.src_ref_count, c.seq_id, c.dst) for c in cow),
        tuple(b for b in _taken(events) if b not in copied),
        tuple(e.block for e in _of(events, tr.BlockReleased) if e.block not in sources),
    )


def tell(events: Iterable[tr.Event]) -> Story:
    """The story of one step's events."""
    events = tuple(events)
    if not events:
        return Quiet()
    head = events[0]
    # the step's first event -> its story (checked in order, before the decode rule)
    match head:
        case tr.AllocationFailed():
            return Refusal(head.seq_id, head.what, head.needed, head.available)
        case tr.SequenceAdded():
            shared = tuple(e.block for e in _of(events, tr.BlockShared))
            return Arrival(head.seq_id, head.num_tokens, shared, _taken(events))
        case tr.SequenceForked():
            counts = tuple((e.block, e.ref_count) for e in _of(events, tr.BlockShared))
            return Fork(head.parent, head.child, counts)
        case tr.SequenceFreed():
            released = _of(events, tr.BlockReleased)
            back = tuple(e.block for e in released if e.ref_count == 0)
            kept = tuple((e.block, e.ref_count) for e in released if e.ref_count > 0)
            return Finish(head.seq_id, back, kept)
    if len(_of(events, tr.TokensAppended)) > 1:
        return _decode(events)
    if isinstance(head, tr.TokensAppended):
        return _append(head, events)
    return Unnamed(tuple(e.kind for e in events))


def story_of(snapshot: tr.Snapshot) -> Story:
    """The story of a recorded step: its own words, the new pool (step 0), or its events."""
    if snapshot.custom_caption is not None:
        return Custom(snapshot.custom_caption)
    if snapshot.step == 0 and not snapshot.events:
        return PoolCreated(snapshot.num_gpu_blocks, snapshot.block_size)
    return tell(snapshot.events)


def english(story: Story) -> str:
    """`story` told with the English table."""
    return story.words(Phrasebook(EN))


def caption(snapshot: tr.Snapshot) -> str:
    """A recorded step in English words (other languages: `pagedsim.text.captions.caption`)."""
    return english(story_of(snapshot))


def describe(events: Iterable[tr.Event]) -> str:
    """One English sentence for the events of one step."""
    return english(tell(events))
