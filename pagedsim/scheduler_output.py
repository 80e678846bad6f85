"""What one `schedule()` says runs this step, in vLLM v1's names (vllm/v1/core/sched/output.py).

Both schedulers split a step the way vLLM v1 (and nano-vllm) do:

    out = scheduler.schedule()               which requests compute how many tokens
    sampled = <run the model on out>         one token per request that caught up
    finished = scheduler.update_from_output(out, sampled)

    SchedulerOutput.scheduled_new_reqs      NewRequestData: requests admitted this step
                                            (new, or resumed after a preemption: v1 sends
                                            a resumed request in full, like a new one)
    SchedulerOutput.scheduled_cached_reqs   CachedRequestData: running requests scheduled
                                            again (their data is already with the runner)
    num_scheduled_tokens                    req_id -> tokens to compute this step
    total_num_scheduled_tokens              their sum
    preempted_req_ids                       preempted while this step was scheduled
    finished_req_ids                        finished since the previous schedule() (the
                                            runner drops their state)

A request id here is (request index, sample index): a parallel sample of v1 is its own
request, and a v0 sequence of a group (a beam, a sample) is scheduled on its own.
`num_computed_tokens` is the count *before* this step's tokens, as in v1: the runner
computes positions [num_computed_tokens, num_computed_tokens + num_scheduled_tokens).
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
    scheduled_new_reqs: list[NewRequestData]
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: dict[ReqId, int]
    total_num_scheduled_tokens: int
    preempted_req_ids: set[ReqId]
    finished_req_ids: set[ReqId]

    @property
    def num_reqs(self) -> int:
        """Requests scheduled this step."""
        return len(self.num_scheduled_tokens)
