"""The recorded history of a manager: typed events grouped into steps, plus snapshots.

The algorithm never draws. Each public call on `KVCacheManager` is one *step*; each state
change in it is an *event* tagged with that step, and a *snapshot* of the whole state may
be kept after it: plain frozen data, so showing snapshot k is time travel. Snapshots hold
no sentences: `story.caption` tells a step, unless it was given words (`custom_caption`).
With tracing off a manager builds no event object at all and runs the same state change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace


@dataclass(frozen=True)
class Event:
    step: int  # the manager step this change belongs to

    @property
    def kind(self) -> str:
        return _snake(type(self).__name__)

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, **asdict(self)}


@dataclass(frozen=True)
class SequenceAdded(Event):
    seq_id: object  # the new sequence
    num_tokens: int  # its prompt length


@dataclass(frozen=True)
class TokensAppended(Event):
    seq_id: object
    first_position: int  # position of the first appended token
    slots: tuple[int, ...]  # slot of each appended token


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
    num_forgotten: int  # cached free blocks forgotten (v1: reset_prefix_cache)


@dataclass(frozen=True)
class SeqState:
    seq_id: object
    blocks: tuple[int, ...]  # logical -> physical
    num_tokens: int


@dataclass(frozen=True)
class Snapshot:
    step: int
    custom_caption: str | None  # a caller's own words for the step; None: told from the events
    events: tuple[Event, ...]  # the events of this step
    num_gpu_blocks: int
    block_size: int
    free_list: tuple[int, ...]  # head first, in allocate() order
    ref_counts: tuple[int, ...]  # [num_gpu_blocks]
    block_fill: tuple[int, ...]  # [num_gpu_blocks] tokens held by each block (0 if free)
    sequences: tuple[SeqState, ...]  # SeqState for every live sequence, in admission order
    pending_copies: tuple[tuple[int, int], ...] = ()  # (src, dst) pairs not yet drained
    cached_blocks: tuple[int, ...] = ()  # free blocks that still hold reusable contents

    def with_caption(self, text: str) -> Snapshot:
        """This snapshot, captioned with `text` in every language instead of its story."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return replace(self, custom_caption=text)

    def owners(self, block: int) -> list[object]:
        return [s.seq_id for s in self.sequences if block in s.blocks]

    def sequence(self, seq_id: object) -> SeqState:
        for s in self.sequences:
            if s.seq_id == seq_id:
                return s
        raise KeyError(seq_id)


# what a sink calls at the end of a step: the events of the step -> the snapshot after it
SnapshotFn = Callable[[Sequence[Event]], "Snapshot"]


class Trace:
    """Events in order, and (if `keep_snapshots`) one snapshot per step, starting at step 0."""

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

    def end_step(self, snapshot_fn: SnapshotFn) -> None:
        """Close the current step; keep `snapshot_fn(events of the step)` if snapshots are on."""
        if self.keep_snapshots:
            self.snapshots.append(snapshot_fn(self.events[self._step_start :]))
        self._step_start = len(self.events)


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")
