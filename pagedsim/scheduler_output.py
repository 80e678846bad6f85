"""What one `schedule()` says runs this step, in vLLM v1's names (vllm/v1/core/sched/output.py).

    out = scheduler.schedule()               which requests compute how many tokens
    sampled = <run the model on out>         one token per request that caught up
    finished = scheduler.update_from_output(out, sampled)

A request id is (request index, sample index). `num_computed_tokens` is the count *before*
this step's tokens, as in v1; a request resumed after a preemption is sent in full (v1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ReqId = tuple[int, int]  # (request index, sample index)


@dataclass(frozen=True)
class NewRequestData:
    """A request scheduled for the first time (or again, after a preemption)."""

    req_id: ReqId
    prompt_token_ids: tuple[int, ...]
    block_ids: tuple[int, ...]  # its block table after this step's allocation
    num_computed_tokens: int  # served by the prefix cache (or kept by a swap)


@dataclass(frozen=True)
class CachedRequestData:
    """Running requests scheduled again; the i-th entry of each list is req_ids[i]'s."""

    req_ids: list[ReqId] = field(default_factory=list)
    num_computed_tokens: list[int] = field(default_factory=list)
    num_output_tokens: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class SchedulerOutput:
    scheduled_new_reqs: list[NewRequestData]  # admitted this step (new or resumed)
    scheduled_cached_reqs: CachedRequestData  # running ones, already with the runner
    num_scheduled_tokens: dict[ReqId, int]  # tokens each computes this step
    total_num_scheduled_tokens: int
    preempted_req_ids: set[ReqId]  # preempted while this step was scheduled
    finished_req_ids: set[ReqId]  # finished since the previous schedule() (runner drops them)
