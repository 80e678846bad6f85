"""A contiguous KV allocator under continuous batching: first-fit placement, external
fragmentation.

Orca-style systems give each request one contiguous region of `size[i]` slots. This
replays one in `memory` slots, event by event: a request is admitted (FCFS) when first fit
finds a hole, is live for output_len steps, then freed; each span of k steps between events
adds k * (free slots in holes too small for every waiting request).
"""

from __future__ import annotations

import bisect
import heapq

import numpy as np
import numpy.typing as npt

from ..errors import count_arg


def _range_min_table(values: npt.NDArray[np.int64]) -> list[npt.NDArray[np.int64]]:
    """Sparse table: level j holds min(values[i : i + 2**j])."""
    table = [values]
    j = 1
    while (1 << j) <= len(values):
        prev = table[-1]
        half = 1 << (j - 1)
        table.append(np.minimum(prev[:-half], prev[half:]))
        j += 1
    return table


def _range_min(table: list[npt.NDArray[np.int64]], lo: int, hi: int) -> int:
    """min(values[lo:hi]) for hi > lo, in O(1)."""
    j = (hi - lo).bit_length() - 1
    return int(min(table[j][lo], table[j][hi - (1 << j)]))


def external_fragmentation(
    size: npt.ArrayLike,
    output_len: npt.ArrayLike,
    arrival: npt.ArrayLike,
    memory: int,
    queue: str = "fcfs",
) -> int:
    """Sum over steps of free slots no waiting request can use (first-fit placement);
    the bar is the queue head's size ("fcfs") or every waiting request's ("any")."""
    if queue not in ("fcfs", "any"):
        raise ValueError(f"queue must be 'fcfs' or 'any', got {queue!r}")
    memory = count_arg("memory", memory, 1)
    size, output_len, arrival = _requests(size, output_len, arrival, memory)
    if len(size) == 0:
        return 0
    order = np.argsort(arrival, kind="stable")
    return _replay(size[order], output_len[order], arrival[order], memory, queue)


def _requests(
    size: npt.ArrayLike, output_len: npt.ArrayLike, arrival: npt.ArrayLike, memory: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The three columns as int64 arrays, checked against each other and `memory`."""
    size, output_len, arrival = (
        _int_column(name, values)
        for name, values in (("size", size), ("output_len", output_len), ("arrival", arrival))
    )
    if not len(size) == len(output_len) == len(arrival):
        raise ValueError(
            f"size, output_len and arrival differ in length: "
            f"{len(size)}, {len(output_len)}, {len(arrival)}"
        )
    if len(size) and (size.min() < 1 or output_len.min() < 1 or arrival.min() < 0):
        raise ValueError("sizes and output lengths must be >= 1 and arrivals >= 0")
    if len(size) and int(size.max()) > memory:
        i = int(size.argmax())
        raise ValueError(
            f"request {i} needs {int(size[i])} contiguous slots but memory is {memory}"
        )
    return size, output_len, arrival


class _Regions:
    """The live contiguous regions of a memory of `memory` slots, placed first fit."""

    def __init__(self, memory: int):
        self.memory = memory
        self.starts: list[int] = []  # sorted start addresses of live regions
        self.ends: dict[int, int] = {}  # start -> end address
        self.finishing: list[tuple[int, int]] = []  # heap of (last step + 1, start)

    def free_finished(self, now: int) -> None:
        while self.finishing and self.finishing[0][0] <= now:
            _, start = heapq.heappop(self.finishing)
            self.starts.pop(bisect.bisect_left(self.starts, start))
            del self.ends[start]

    def place(self, need: int, until: int) -> bool:
        """Put a region of `need` slots, live until step `until`, in the first hole it fits."""
        at = next((s for s, length in self.holes() if length >= need), None)
        if at is None:
            return False
        bisect.insort(self.starts, at)
        self.ends[at] = at + need
        heapq.heappush(self.finishing, (until, at))
        return True

    def holes(self) -> list[tuple[int, int]]:
        return _holes(self.starts, self.ends, self.memory)

    def next_finish(self) -> int | None:
        return self.finishing[0][0] if self.finishing else None


def _replay(
    size: npt.NDArray[np.int64],
    output_len: npt.NDArray[np.int64],
    arrival: npt.NDArray[np.int64],
    memory: int,
    queue: str,
) -> int:
    """The event-by-event replay of requests sorted by arrival (see the module docstring)."""
    n, rmq, regions = len(size), _range_min_table(size), _Regions(memory)
    head = arrived = 0  # waiting requests are [head, arrived)
    now, total = 0, 0
    while head < n or regions.finishing:
        regions.free_finished(now)
        while arrived < n and arrival[arrived] <= now:
            arrived += 1
        while head < arrived and regions.place(int(size[head]), now + int(output_len[head])):
            head += 1  # FCFS admission, first fit
        nxt = regions.next_finish()
        if arrived < n and (nxt is None or arrival[arrived] < nxt):
            nxt = int(arrival[arrived])
        if nxt is None:  # nothing finishes or arrives: nothing waits either (all fit memory)
            break
        if head < arrived:
            smallest = int(size[head]) if queue == "fcfs" else _range_min(rmq, head, arrived)
            total += (nxt - now) * sum(length for _, length in regions.holes() if length < smallest)
        now = nxt
    return total


def _int_column(name: str, values: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """A 1-D int64 array of `values`; TypeError for anything that is not integers."""
    array = np.asarray(values)
    if array.ndim != 1 or not (array.size == 0 or np.issubdtype(array.dtype, np.integer)):
        raise TypeError(
            f"{name} must be a 1-D sequence of integers, got {array.dtype} with shape {array.shape}"
        )
    return array.astype(np.int64)


def _holes(starts: list[int], ends: dict[int, int], memory: int) -> list[tuple[int, int]]:
    """(start, length) of every free gap, in address order."""
    out: list[tuple[int, int]] = []
    cursor = 0
    for s in starts:
        if s > cursor:
            out.append((cursor, s - cursor))
        cursor = ends[s]
    if memory > cursor:
        out.append((cursor, memory - cursor))
    return out
