"""What both schedulers share: the step on a workload, argument checks, the run loop (v0, v1).

`WorkloadScheduler.step()` is the one place schedule() and update_from_output() are joined
with the workload's tokens; `run()` refuses to spin when nothing can ever be scheduled.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence, Sized
from typing import TypeAlias, TypeVar

import numpy as np

from .config import CacheConfig, SchedulerConfig
from .errors import MAX_TOKEN_ID, bool_arg, count_arg, token_ids_arg
from .manager import KVCacheManager
from .policies.hybrid import HybridManager
from .scheduler_output import CachedRequestData, NewRequestData, ReqId, SchedulerOutput
from .workloads import Request, request_list

# one prompt's token ids, as a caller gives them: a list or tuple of ints, or a 1-D int array
TokenIds: TypeAlias = Sequence[int] | np.ndarray


def synthetic_token(*key: object) -> int:
    """A deterministic pseudo-random token id for (request, sample, position)."""
    return hash(("pagedsim", *key)) & ((1 << 62) - 1)


class WorkloadScheduler(ABC):
    """`schedule()` says what runs, `update_from_output` takes what the model sampled (as
    vLLM v1 and nano-vllm split it); `step()` joins them with the workload's tokens."""

    manager: KVCacheManager | HybridManager
    now: int  # steps taken
    max_stalled_steps: int = 1000  # steps without progress before run() gives up
    waiting: Sized
    # the output of the last schedule() until update_from_output() takes it
    _pending_output: SchedulerOutput | None = None
    _finished_req_ids: set[ReqId]  # finished since the last schedule()

    @property
    @abstractmethod
    def done(self) -> bool: ...  # nothing left to arrive, wait or run

    @property
    @abstractmethod
    def arrivals_pending(self) -> bool: ...

    @abstractmethod
    def schedule(self) -> SchedulerOutput: ...

    @abstractmethod
    def update_from_output(
        self, scheduler_output: SchedulerOutput, sampled: Mapping[ReqId, int]
    ) -> list[ReqId]: ...

    @abstractmethod
    def sampling_req_ids(self, scheduler_output: SchedulerOutput) -> list[ReqId]: ...

    @abstractmethod
    def workload_tokens(self, scheduler_output: SchedulerOutput) -> dict[ReqId, int]: ...

    def step(self) -> int:
        """One engine step with the model faked by the workload. Returns the tokens computed."""
        scheduler_output = self.schedule()
        self.update_from_output(scheduler_output, self.workload_tokens(scheduler_output))
        return scheduler_output.total_num_scheduled_tokens

    def run(self: W, max_steps: int = 10**7, check: bool = False) -> W:
        """Step until done (`check`: check_invariants after each step). RuntimeError after
        `max_steps`, or `max_stalled_steps` steps computing nothing with nothing to arrive."""
        stalled = 0
        while not self.done:
            if self.now >= max_steps:
                raise RuntimeError(f"not finished after {max_steps} steps")
            progress = self.step()
            if check:
                self.manager.check_invariants()
            stalled = 0 if progress or self.arrivals_pending else stalled + 1
            if stalled >= self.max_stalled_steps:
                raise RuntimeError(
                    f"no progress for {stalled} steps: {len(self.waiting)} waiting "
                    f"requests can never be scheduled"
                )
        return self

    def _output(
        self,
        new: list[NewRequestData],
        cached: CachedRequestData,
        num_scheduled_tokens: dict[ReqId, int],
        preempted_req_ids: set[ReqId],
    ) -> SchedulerOutput:
        """The step's output, pending until update_from_output() takes it."""
        out = SchedulerOutput(
            new,
            cached,
            num_scheduled_tokens,
            sum(num_scheduled_tokens.values()),
            preempted_req_ids,
            self._finished_req_ids,
        )
        self._finished_req_ids = set()
        self._pending_output = out
        return out

    def _start_step(self) -> None:
        if self._pending_output is not None:
            raise RuntimeError("schedule() again before update_from_output() of the last step")
        self.now += 1

    def _check_output(self, scheduler_output: object, sampled: object) -> dict[ReqId, int]:
        """`sampled` as {req_id: token} for exactly the step's sampling requests; raises
        (changing nothing) for another step's output or a wrong set of tokens."""
        if self._pending_output is None or scheduler_output is not self._pending_output:
            raise ValueError(
                "scheduler_output must be the output of this scheduler's last schedule(), "
                "not yet updated"
            )
        if not isinstance(sampled, Mapping):
            raise TypeError(
                f"sampled must be a mapping req_id -> token, got {type(sampled).__name__}"
            )
        want = self.sampling_req_ids(self._pending_output)
        if set(sampled) != set(want):
            raise ValueError(
                f"sampled must hold one token for each of {sorted(want)}, got "
                f"{sorted(sampled, key=repr)}"
            )
        return {rid: count_arg(f"sampled[{rid}]", sampled[rid], 0, MAX_TOKEN_ID) for rid in want}


W = TypeVar("W", bound=WorkloadScheduler)


def time_arg(name: str, value: object) -> float:
    """A finite, non-negative arrival time (v1's Request.arrival_time orders ties only)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if not 0 <= value < float("inf"):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


def check_scheduler_args(
    requests: Iterable[object],
    manager: object,
    record: object,
    kinds: tuple[type, ...] = (KVCacheManager,),
) -> list[Request]:
    """Requests (as a list), a manager (one of `kinds`) and a bool, checked (TypeError)."""
    if not isinstance(manager, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise TypeError(f"manager must be a {names}, got {type(manager).__name__}")
    bool_arg("record", record)
    return request_list(requests)


def check_configs(scheduler_config: object, cache_config: object) -> None:
    """TypeError unless they are a SchedulerConfig and a CacheConfig (both schedulers)."""
    for name, value, kind in (
        ("scheduler_config", scheduler_config, SchedulerConfig),
        ("cache_config", cache_config, CacheConfig),
    ):
        if not isinstance(value, kind):
            raise TypeError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")


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
