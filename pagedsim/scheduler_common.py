"""What both schedulers share: argument checks, the run loop, synthetic token ids (v0 and v1).

    check_scheduler_args   requests (a list of `Request`), a manager, `record`: TypeErrors
    run_steps              step until done; refuse to spin when nothing can ever be scheduled
    prompt_ids             token ids given for a prompt (`TokenIds`), checked once when a
                           scheduler is built
    synthetic_token        deterministic ids for prompts and outputs nobody gave
    time_arg, fraction     a finite non-negative time; a real number in [0, high]

The v0 scheduler is in scheduler_v0.py, the v1 scheduler in scheduler_v1.py, and
`make_scheduler(mode=...)` (scheduler.py) builds either.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence, Sized
from typing import Protocol, TypeAlias, TypeVar

import numpy as np

from .errors import token_ids_arg
from .manager import KVCacheManager
from .workloads import Request

# one prompt's token ids, as a caller gives them: a list or tuple of ints, or a 1-D int array
TokenIds: TypeAlias = Sequence[int] | np.ndarray


def synthetic_token(*key: object) -> int:
    """A deterministic pseudo-random token id for (request, sample, position)."""
    return hash(("pagedsim", *key)) & ((1 << 62) - 1)


class Steppable(Protocol):
    """What `run_steps` drives: either scheduler."""

    @property
    def manager(self) -> KVCacheManager: ...
    @property
    def now(self) -> int: ...  # steps taken
    @property
    def max_stalled_steps(self) -> int: ...
    @property
    def waiting(self) -> Sized: ...
    @property
    def done(self) -> bool: ...
    @property
    def arrivals_pending(self) -> bool: ...
    def step(self) -> int: ...  # tokens computed this step


S = TypeVar("S", bound=Steppable)


def run_steps(sched: S, max_steps: int, check: bool) -> S:
    """Step `sched` until done; `check` runs check_invariants after each step. Raises
    RuntimeError after `max_steps` steps, or after `sched.max_stalled_steps` steps that
    computed nothing while nothing was left to arrive (what waits can never fit)."""
    stalled = 0
    while not sched.done:
        if sched.now >= max_steps:
            raise RuntimeError(f"not finished after {max_steps} steps")
        progress = sched.step()
        if check:
            sched.manager.check_invariants()
        stalled = 0 if progress or sched.arrivals_pending else stalled + 1
        if stalled >= sched.max_stalled_steps:
            raise RuntimeError(
                f"no progress for {stalled} steps: {len(sched.waiting)} waiting "
                f"requests can never be scheduled"
            )
    return sched


def time_arg(name: str, value: object) -> float:
    """A finite, non-negative arrival time (v1's Request.arrival_time orders ties only)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if not 0 <= value < float("inf"):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


def check_scheduler_args(
    requests: Iterable[object], manager: object, record: object
) -> list[Request]:
    """The arguments both schedulers share: Requests (returned as a list), a manager and a
    bool; TypeError if not."""
    if not isinstance(manager, KVCacheManager):
        raise TypeError(f"manager must be a KVCacheManager, got {type(manager).__name__}")
    if not isinstance(record, bool):
        raise TypeError(f"record must be a bool, got {type(record).__name__}")
    if isinstance(requests, (str, bytes)) or not hasattr(requests, "__iter__"):
        raise TypeError(f"requests must be an iterable of Request, got {type(requests).__name__}")
    checked: list[Request] = []
    for i, r in enumerate(list(requests)):
        if not isinstance(r, Request):
            raise TypeError(f"requests[{i}] must be a Request, got {type(r).__name__} {r!r}")
        checked.append(r)
    return checked


def prompt_ids(value: object, n: int | None, name: str) -> tuple[int, ...]:
    """Token ids (a list, tuple or 1-D integer array) as a tuple of exactly n ints (None: any)."""
    return token_ids_arg(name, value.tolist() if hasattr(value, "tolist") else value, n)


def fraction(name: str, value: object, high: float) -> float:
    """A real number in [0, high] (TypeError for a non-number or bool, ValueError otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value) or not 0.0 <= value <= high:
        raise ValueError(f"{name} must be in [0, {high:g}], got {value!r}")
    return value
