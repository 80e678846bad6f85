"""What one engine step did to the blocks, for the step log (`PagedEngine.log`).

`trace_counts` reads blocks allocated, shared, copied on write and freed from a manager's
trace events; `TableCounts` reads the same from the block tables, with each KV cache
group's blocks in use (the v1 window managers keep no per-block event list).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..block_table import NULL_BLOCK, BlockTable
from ..manager import SeqId
from ..trace import BlockReleased, Trace

EVENTS = ("allocated", "shared", "copied", "freed")
COUNTED = {"block_allocated": "allocated", "block_shared": "shared", "copy_on_write": "copied"}


def trace_counts(trace: Trace | None, mark: int) -> tuple[dict[str, int], int]:
    """(counts of block events after event `mark`, the new mark); zeros without a trace."""
    counts = dict.fromkeys(EVENTS, 0)
    if trace is None:
        return counts, mark
    for e in trace.events[mark:]:
        if e.kind in COUNTED:
            counts[COUNTED[e.kind]] += 1
        elif isinstance(e, BlockReleased) and e.ref_count == 0:
            counts["freed"] += 1
    return counts, len(trace.events)


class TableCounts:
    """Blocks that entered and left the live tables since the last call, per group too."""

    def __init__(self, groups: tuple[str, ...], tables: Callable[[SeqId], tuple[BlockTable, ...]]):
        self.groups = groups  # each KV cache group's name: ("full", "window") or ("window",)
        self.tables = tables  # seq -> one block table per group
        self._named: set[int] = set()  # blocks the tables named at the last call

    def blocks_in_use(self, seqs: Iterable[SeqId]) -> dict[str, int]:
        """Blocks each group's tables name right now (the hybrid saving is read here)."""
        per_seq = [self.tables(s) for s in seqs]
        return {
            name: sum(sum(1 for b in t[g].blocks if b != NULL_BLOCK) for t in per_seq)
            for g, name in enumerate(self.groups)
        }

    def since_mark(self, seqs: Iterable[SeqId]) -> dict[str, int]:
        seqs = list(seqs)
        named = {b for s in seqs for t in self.tables(s) for b in t.blocks if b != NULL_BLOCK}
        counts = dict(
            allocated=len(named - self._named), shared=0, copied=0, freed=len(self._named - named)
        )
        self._named = named
        counts.update({f"{g}_blocks": n for g, n in self.blocks_in_use(seqs).items()})
        return counts
