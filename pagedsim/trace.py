"""The recorded history of a manager: typed events grouped into steps, plus snapshots.

The algorithm never draws. Each public call on `KVCacheManager` is one *step*; every
state change inside it is an *event* tagged with that step, and (optionally) a
*snapshot* of the whole state is kept after it. The renderer, the tour and the
course replay these records; nothing here knows about matplotlib.

Snapshots are plain frozen data, so stepping back to snapshot k shows exactly the
state after step k ("time travel"), and `to_dict` makes them JSON-ready.

A manager writes to a *sink*: a `Trace` when tracing is on, `NULL_SINK` when it is
off. The manager checks `sink.recording` before it builds an event, so with tracing
off no event object is ever made and the state change runs the same code either way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields


@dataclass(frozen=True)
class Event:
    step: int  # the manager step this change belongs to

    @property
    def kind(self) -> str:
        return _snake(type(self).__name__)

    def to_dict(self) -> dict:
        return {"kind": self.kind, **asdict(self)}


@dataclass(frozen=True)
class SequenceAdded(Event):
    seq_id: object  # the new sequence
    num_tokens: int  # its prompt length


@dataclass(frozen=True)
class TokensAppended(Event):
    seq_id: object
    first_position: int  # position of the first appended token
    slots: tuple  # slot of each appended token


@dataclass(frozen=True)
class SequenceForked(Event):
    parent: object
    child: object


@dataclass(frozen=True)
class SequenceFreed(Event):
    seq_id: object
    num_tokens: int  # tokens it held when it finished


@dataclass(frozen=True)
class BlockAllocated(Event):
    seq_id: object
    block: int  # physical block taken from the head of the free list
    logical: int  # the logical index it fills in the sequence's table


@dataclass(frozen=True)
class BlockShared(Event):
    seq_id: object  # the sequence that became an extra owner
    block: int
    ref_count: int  # count after the increment


@dataclass(frozen=True)
class BlockReleased(Event):
    seq_id: object  # the owner that let go
    block: int
    ref_count: int  # count after the decrement; 0 means it rejoined the free list


@dataclass(frozen=True)
class CopyOnWrite(Event):
    seq_id: object  # the writer that got a private copy
    src: int  # the shared block
    dst: int  # the writer's new private block
    src_ref_count: int  # count of src before the writer let go of it


@dataclass(frozen=True)
class AllocationFailed(Event):
    seq_id: object
    what: str  # the operation that was refused
    needed: int  # free blocks it needed
    available: int  # free blocks there were


@dataclass(frozen=True)
class PrefixCacheReset(Event):
    num_blocks: int  # cached free blocks forgotten (v1: reset_prefix_cache)


@dataclass(frozen=True)
class SeqState:
    seq_id: object
    blocks: tuple  # logical -> physical
    num_tokens: int


@dataclass(frozen=True)
class Snapshot:
    step: int
    caption: str  # the step's events in words
    events: tuple  # the events of this step
    num_blocks: int
    block_size: int
    free_list: tuple  # head first, in allocate() order
    ref_counts: tuple  # [num_blocks]
    block_fill: tuple  # [num_blocks] tokens held by each block (0 if free)
    sequences: tuple  # SeqState for every live sequence, in admission order
    pending_copies: tuple = ()  # (src, dst) pairs not yet drained
    cached_blocks: tuple = field(default=())  # free blocks that still hold reusable contents

    def owners(self, block: int) -> list:
        return [s.seq_id for s in self.sequences if block in s.blocks]

    def sequence(self, seq_id) -> SeqState:
        for s in self.sequences:
            if s.seq_id == seq_id:
                return s
        raise KeyError(seq_id)

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["events"] = [e.to_dict() for e in self.events]
        out["sequences"] = [asdict(s) for s in self.sequences]
        return out


class NullSink:
    """Where events go when tracing is off: nowhere (and nothing is built for it)."""

    recording = False
    keep_snapshots = False

    def emit(self, event: Event, first_of_step: bool = False) -> None:
        pass

    def end_step(self, snapshot_fn) -> None:
        pass


NULL_SINK = NullSink()


class Trace:
    """Events in order, and (if `keep_snapshots`) one snapshot per step, starting at step 0."""

    recording = True

    def __init__(self, keep_snapshots: bool = True):
        self.keep_snapshots = keep_snapshots
        self.events: list[Event] = []
        self.snapshots: list[Snapshot] = []
        self._step_start = 0  # index in events where the current step began

    def emit(self, event: Event, first_of_step: bool = False) -> None:
        """Record one event of the current step (`first_of_step`: put it ahead of the others)."""
        if first_of_step:
            self.events.insert(self._step_start, event)
        else:
            self.events.append(event)

    def end_step(self, snapshot_fn) -> None:
        """Close the current step; keep `snapshot_fn(events of the step)` if snapshots are on."""
        if self.keep_snapshots:
            self.snapshots.append(snapshot_fn(self.events[self._step_start:]))
        self._step_start = len(self.events)

    def to_dict(self) -> dict:
        return {
            "events": [e.to_dict() for e in self.events],
            "snapshots": [s.to_dict() for s in self.snapshots],
        }


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")


def _ids(blocks) -> str:
    blocks = list(blocks)
    return ("block " if len(blocks) == 1 else "blocks ") + ", ".join(map(str, blocks))


def describe(events) -> str:
    """One English sentence for the events of one step (the figure captions and the tour)."""
    events = list(events)
    if not events:
        return "nothing changed"
    head = events[0]
    allocated = [e for e in events if isinstance(e, BlockAllocated)]
    if isinstance(head, AllocationFailed):
        return (f"seq {head.seq_id} {head.what} needs {head.needed} free block(s) but only "
                f"{head.available} {'is' if head.available == 1 else 'are'} free: "
                f"OutOfBlocks, nothing changed")
    if isinstance(head, SequenceAdded):
        text = f"seq {head.seq_id} arrives with {head.num_tokens} tokens"
        shared = [e.block for e in events if isinstance(e, BlockShared)]
        if shared:  # a prefix-cache hit on blocks another sequence still holds
            text += f", shares cached {_ids(shared)}"
        if allocated:
            text += f" and takes {_ids(e.block for e in allocated)}"
        return text
    if isinstance(head, SequenceForked):
        shared = [e for e in events if isinstance(e, BlockShared)]
        counts = {e.ref_count for e in shared}
        counts = (f"count now {counts.pop()}" if len(counts) == 1 else
                  "counts now " + ", ".join(f"{e.block}: {e.ref_count}" for e in shared))
        return (f"seq {head.child} forks from seq {head.parent} and shares "
                f"{_ids(e.block for e in shared)} ({counts})" if shared else
                f"seq {head.child} forks from empty seq {head.parent}")
    if isinstance(head, SequenceFreed):
        released = [e for e in events if isinstance(e, BlockReleased)]
        back = [e.block for e in released if e.ref_count == 0]
        kept = [e for e in released if e.ref_count > 0]
        text = f"seq {head.seq_id} finishes"
        if back:
            text += f": {_ids(back)} {'returns' if len(back) == 1 else 'return'} to the free list"
        if kept:
            text += ("; " if back else ": ") + ", ".join(
                f"block {e.block} stays (count {e.ref_count})" for e in kept)
        return text
    appended = [e for e in events if isinstance(e, TokensAppended)]
    if len(appended) > 1:  # a decode step: one token for each of several sequences
        text = f"decode step: {len(appended)} sequences append one token each"
        cow = [e for e in events if isinstance(e, CopyOnWrite)]
        if cow:
            text += "; copy-on-write " + ", ".join(f"{e.src} -> {e.dst}" for e in cow)
        fresh = [e.block for e in allocated if e.block not in {c.dst for c in cow}]
        if fresh:
            text += f"; full last blocks take {_ids(fresh)}"
        return text
    if isinstance(head, TokensAppended):
        n = len(head.slots)
        where = (f"token {head.first_position} (slot {head.slots[0]})" if n == 1 else
                 f"tokens {head.first_position}..{head.first_position + n - 1}")
        text = f"seq {head.seq_id} appends {where}"
        cow = [e for e in events if isinstance(e, CopyOnWrite)]
        for e in cow:
            text += (f": block {e.src} is shared (count {e.src_ref_count}), so copy-on-write "
                     f"gives seq {e.seq_id} block {e.dst}")
        fresh = [e.block for e in allocated if e.block not in {c.dst for c in cow}]
        if fresh:
            text += f"{';' if cow else ':'} the last block is full, so it takes {_ids(fresh)}"
        dropped = [e.block for e in events if isinstance(e, BlockReleased)
                   and e.block not in {c.src for c in cow}]
        if dropped:  # a sliding window let go of blocks behind it
            text += f"; {_ids(dropped)} fell out of the window and {'is' if len(dropped) == 1 else 'are'} released"
        return text
    return "; ".join(e.kind for e in events)
