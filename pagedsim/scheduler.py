"""A continuous-batching driver, as vLLM v0 or v1 schedules: `make_scheduler(mode=...)`.

    make_scheduler(requests, manager, ..., mode="v0")   scheduler_v0.SchedulerV0: whole-
        prompt admission, a watermark, group preemption by a policy (recompute or swap),
        fork and copy-on-write (vLLM v0's scheduler and block manager)
    make_scheduler(requests, manager, ..., mode="v1")   scheduler_v1.SchedulerV1: one
        token budget (`max_num_batched_tokens`), chunked prefill, recompute-only
        preemption, FCFS or priority policy (vLLM v1's scheduler)

What both share (schedule() + update_from_output() = step(), argument checks, the run
loop, synthetic ids) is in scheduler_common.py; what schedule() returns in scheduler_output.py.
"""

from __future__ import annotations

from typing import Any

from .policies.preemption import Group, RecomputePolicy
from .scheduler_v0 import VICTIMS, SchedulerV0, StepRecord
from .scheduler_v1 import SchedulerV1, V1StepRecord

MODES = ("v0", "v1")
SCHEDULERS = {"v0": SchedulerV0, "v1": SchedulerV1}  # mode -> class


def make_scheduler(
    requests: Any, manager: Any, *args: Any, mode: str = "v0", **kwargs: Any
) -> SchedulerV0 | SchedulerV1:
    """The scheduler of a vLLM version over `manager`; the other arguments are its own
    (SchedulerV0: policy, victim, watermark ...; SchedulerV1: max_num_batched_tokens,
    max_num_seqs, policy ...)."""
    if not isinstance(mode, str):
        raise TypeError(f"mode must be a str, got {type(mode).__name__}")
    if mode not in SCHEDULERS:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    scheduler: SchedulerV0 | SchedulerV1 = SCHEDULERS[mode](requests, manager, *args, **kwargs)
    return scheduler


__all__ = [
    "make_scheduler",
    "SchedulerV0",
    "SchedulerV1",
    "StepRecord",
    "V1StepRecord",
    "Group",
    "RecomputePolicy",
    "VICTIMS",
    "MODES",
    "SCHEDULERS",
]
