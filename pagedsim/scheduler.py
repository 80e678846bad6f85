"""A continuous-batching driver, as vLLM v0 or v1 schedules: `make_scheduler(mode=...)`.

mode="v0" builds scheduler_v0.SchedulerV0, mode="v1" scheduler_v1.SchedulerV1; what both
share is in scheduler_common.py, what schedule() returns in scheduler_output.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .config import CacheConfig, SchedulerConfig
from .errors import choice_arg
from .policies.preemption import RecomputePolicy
from .scheduler_v0 import DEFAULT_SCHEDULER_CONFIG as V0_SCHEDULER_CONFIG
from .scheduler_v0 import SchedulerV0, V0Settings
from .scheduler_v1 import DEFAULT_SCHEDULER_CONFIG, RequestColumns, SchedulerV1

MODES = ("v0", "v1")
SCHEDULERS = {"v0": SchedulerV0, "v1": SchedulerV1}  # mode -> class


def make_scheduler(
    requests: Any, manager: Any, *args: Any, mode: str = "v0", **kwargs: Any
) -> SchedulerV0 | SchedulerV1:
    """The scheduler of a vLLM version over `manager`; the other arguments are its own, or,
    as keywords, the fields of its configs (and V0Settings or RequestColumns)."""
    choice_arg("mode", mode, MODES)
    if mode == "v1" and not args:
        return _v1(requests, manager, kwargs)
    if mode == "v0" and len(args) <= 1 and not isinstance(args and args[0], SchedulerConfig):
        return _v0(requests, manager, *args, **kwargs)
    scheduler: SchedulerV0 | SchedulerV1 = SCHEDULERS[mode](requests, manager, *args, **kwargs)
    return scheduler


def _v0(
    requests: Any,
    manager: Any,
    policy: str | RecomputePolicy | None = "recompute",
    *,
    num_cpu_blocks: int = 0,
    tokens: Any = None,
    record: bool = True,
    max_num_seqs: int = V0_SCHEDULER_CONFIG.max_num_seqs,
    **kwargs: Any,
) -> SchedulerV0:
    """SchedulerV0 from keywords: `policy` (a preemption_mode or a policy object)."""
    unknown = sorted(set(kwargs) - set(V0Settings._fields))
    if unknown:
        raise TypeError(f"mode='v0' takes no {', '.join(unknown)} (a v1 setting?)")
    settings = V0Settings(**kwargs)
    mode = policy if isinstance(policy, str) else V0_SCHEDULER_CONFIG.preemption_mode
    scheduler_config = dataclasses.replace(
        V0_SCHEDULER_CONFIG, preemption_mode=mode, max_num_seqs=max_num_seqs
    )
    cache_config = CacheConfig(num_cpu_blocks=num_cpu_blocks)
    return SchedulerV0(
        requests,
        manager,
        scheduler_config,
        cache_config,
        policy=None if isinstance(policy, str) else policy,
        settings=settings,
        tokens=tokens,
        record=record,
    )


def _v1(requests: Any, manager: Any, kwargs: dict[str, Any]) -> SchedulerV1:
    """SchedulerV1 from keywords: config fields, RequestColumns fields, the rest."""

    def take(names: Any) -> dict[str, Any]:
        return {name: kwargs.pop(name) for name in names if name in kwargs}

    fields = [f.name for f in dataclasses.fields(DEFAULT_SCHEDULER_CONFIG)]
    scheduler_config = dataclasses.replace(DEFAULT_SCHEDULER_CONFIG, **take(fields))
    cache_config = CacheConfig(**take(["enable_prefix_caching"]))
    columns = RequestColumns(**take(RequestColumns._fields))
    return SchedulerV1(requests, manager, scheduler_config, cache_config, columns=columns, **kwargs)
