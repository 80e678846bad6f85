"""The v1 scheduler's waiting queue, in its two orders (vLLM v1 core/sched/request_queue.py).

"fcfs": arrival order, a preempted request back at the front; "priority": a heap on
(priority, arrival_time, arrival), a preempted request rejoining it. Both iterate and
index (`waiting[0]` is next) in admission order.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Generic, Protocol, TypeAlias, TypeVar

from .errors import choice_arg

SCHEDULING_POLICIES = ("fcfs", "priority")


class QueuedRequest(Protocol):
    """What the priority order reads from a request (v1's Request has the same fields)."""

    @property
    def priority(self) -> int: ...  # smaller is admitted first
    @property
    def arrival_time(self) -> float: ...  # ties in priority: earlier first
    @property
    def arrival(self) -> int: ...  # request index: ties in arrival time
    @property
    def request_id(self) -> tuple[int, int]: ...  # (request, sample): every key distinct


R = TypeVar("R", bound=QueuedRequest)


class FCFSRequestQueue(Generic[R]):
    """Arrival order; preempted requests in front."""

    def __init__(self) -> None:
        self._queue: deque[R] = deque()  # front = next to admit

    def add_request(self, req: R) -> None:
        self._queue.append(req)

    def prepend_request(self, req: R) -> None:
        self._queue.appendleft(req)

    def peek_request(self) -> R:
        return self._queue[0]

    def pop_request(self) -> R:
        return self._queue.popleft()

    def remove_requests(self, reqs: Iterable[R]) -> None:
        """Drop these requests (v1's remove_requests: an abort); the rest keep their order."""
        gone = set(map(id, reqs))
        self._queue = deque(r for r in self._queue if id(r) not in gone)

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[R]:
        return iter(list(self._queue))

    def __getitem__(self, i: int) -> R:
        return self._queue[i]


class PriorityRequestQueue(Generic[R]):
    """A heap on (priority, arrival_time, arrival); preempted requests rejoin it."""

    def __init__(self) -> None:
        # (priority, arrival_time, arrival, request_id, request)
        self._heap: list[tuple[int, float, int, tuple[int, int], R]] = []

    def add_request(self, req: R) -> None:
        heapq.heappush(
            self._heap, (req.priority, req.arrival_time, req.arrival, req.request_id, req)
        )  # the ids make every key distinct

    prepend_request = add_request  # v1: a preempted request is ordered like any other

    def peek_request(self) -> R:
        return self._heap[0][-1]

    def pop_request(self) -> R:
        return heapq.heappop(self._heap)[-1]

    def remove_requests(self, reqs: Iterable[R]) -> None:
        """Drop these requests (v1's remove_requests: an abort); the heap is rebuilt."""
        gone = set(map(id, reqs))
        self._heap = [e for e in self._heap if id(e[-1]) not in gone]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[R]:
        return iter(self._in_order())

    def __getitem__(self, i: int) -> R:
        return self._in_order()[i]

    def _in_order(self) -> list[R]:
        return [entry[-1] for entry in sorted(self._heap, key=lambda e: e[:4])]


# either queue: the scheduler calls only what both answer
RequestQueue: TypeAlias = FCFSRequestQueue[R] | PriorityRequestQueue[R]


def make_request_queue(policy: str) -> RequestQueue[R]:
    """The waiting queue for a scheduling policy: "fcfs" or "priority"."""
    choice_arg("policy", policy, SCHEDULING_POLICIES)
    return PriorityRequestQueue() if policy == "priority" else FCFSRequestQueue()
