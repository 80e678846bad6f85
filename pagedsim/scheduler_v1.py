"""vLLM v1's scheduler: one token budget, chunked prefill, recompute-only preemption (v1).

The reference is vLLM v1's core/sched/scheduler.py. There are no prefill and decode
phases: each request has `num_computed_tokens` and `num_tokens` (prompt + sampled), and
each step gives tokens, running requests first, then (only if nothing was preempted)
waiting ones in queue order (request_queue.py), until `max_num_batched_tokens` is spent.
When `allocate_slots` returns None the last running request (under "priority", the
largest (priority, arrival_time)) is preempted: freed, its full blocks staying cached,
and back to waiting with num_computed_tokens = 0.

A request longer than `max_model_len`, or whose blocks could never fit, is refused when
the scheduler is built (ValueError). No watermark, swap or beam search; parallel samples
are independent requests that share the prompt's full blocks through the prefix cache.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from .config import CacheConfig, SchedulerConfig
from .errors import OutOfBlocks, bool_arg, count_arg
from .manager import KVCacheManager
from .policies.hybrid import HybridManager
from .policies.prefix_cache import PrefixCachingManager
from .policies.sliding_window import SlidingWindowManager
from .request_queue import RequestQueue, make_request_queue
from .scheduler_common import (
    TokenIds,
    WorkloadScheduler,
    check_configs,
    check_scheduler_args,
    prompt_ids,
    synthetic_token,
    time_arg,
)
from .scheduler_output import CachedRequestData, NewRequestData, ReqId, SchedulerOutput
from .workloads import Request


@dataclass(eq=False)
class V1Request:
    """One request as v1's scheduler sees it (parallel samples are separate requests)."""

    request_id: tuple[int, int]  # (request index, sample index): also the manager's sequence id
    prompt: tuple[int, ...]  # prompt token ids
    output_len: int  # tokens to sample
    outputs: tuple[int, ...]  # ids it will sample, in order (length output_len)
    arrival: int  # request index: ties in priority order
    priority: int = 0
    sampled: list[int] = field(default_factory=list)  # ids sampled so far
    num_computed_tokens: int = 0  # tokens whose KV is computed (or scheduled this step)
    high: int = 0  # most tokens ever computed (to count recomputation)
    unsent: list[int] = field(default_factory=list)  # sampled ids not yet given to the manager
    arrival_time: float = 0  # its arrival step, or the arrival_times given (v1's name)
    num_preemptions: int = 0  # times it was preempted (v1's name): its lookups count apart
    stop_token_ids: tuple[int, ...] = ()  # sampling one of these finishes it (v1's check_stop)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.sampled)

    def token_ids(self) -> tuple[int, ...]:
        return self.prompt + tuple(self.sampled)


class RequestColumns(NamedTuple):
    """The workload's per-request columns (None: not given)."""

    tokens: Sequence[TokenIds] | None = None
    output_tokens: Sequence[TokenIds] | None = None
    priorities: Sequence[int] | None = None
    arrival_times: Sequence[float] | None = None


# SchedulerV1's own defaults: a 2048-token budget (the rest are vLLM's)
DEFAULT_SCHEDULER_CONFIG = SchedulerConfig(max_num_batched_tokens=2048)
DEFAULT_CACHE_CONFIG = CacheConfig()
NO_COLUMNS = RequestColumns()


@dataclass(frozen=True)
class V1StepRecord:
    step: int
    running: int  # running requests after the step's scheduling
    waiting: int  # waiting requests (new and preempted)
    blocks_used: int
    scheduled_tokens: int  # prefill_tokens + decode_tokens <= max_num_batched_tokens
    prefill_tokens: int  # prompt (or recomputed) tokens computed this step
    decode_tokens: int  # one per request computing only its latest sampled token
    preempted: int  # requests preempted this step


class SchedulerV1(WorkloadScheduler):
    mode = "v1"

    def __init__(
        self,
        requests: Iterable[Request],
        manager: KVCacheManager | HybridManager,
        scheduler_config: SchedulerConfig = DEFAULT_SCHEDULER_CONFIG,
        cache_config: CacheConfig = DEFAULT_CACHE_CONFIG,
        *,
        columns: RequestColumns = NO_COLUMNS,
        record: bool = True,
        num_lookahead_tokens: int = 0,
        slide_after_update: bool = False,
    ) -> None:
        """As vLLM v1's Scheduler, configured by `scheduler_config` and `cache_config`."""
        requests = check_scheduler_args(requests, manager, record, (KVCacheManager, HybridManager))
        check_configs(scheduler_config, cache_config)
        if not isinstance(columns, RequestColumns):
            raise TypeError(f"columns must be a RequestColumns, got {type(columns).__name__}")
        self.scheduler_config, self.cache_config = scheduler_config, cache_config
        self.max_num_batched_tokens = scheduler_config.max_num_batched_tokens
        # v1: a prefill chunk of one request is capped at this many tokens (0: no cap)
        self.long_prefill_token_threshold = scheduler_config.long_prefill_token_threshold
        self._threshold = 0  # the cap in force this step (lifted for a lone request)
        self.max_model_len = scheduler_config.max_model_len
        self.max_num_seqs = scheduler_config.max_num_seqs
        # slots reserved past each request's tokens (v1: speculative tokens); blocks only
        self.num_lookahead_tokens = count_arg("num_lookahead_tokens", num_lookahead_tokens)
        # the manager when it has v1's calls (get_computed_blocks, allocate_slots), else None
        self._cache = (
            manager if isinstance(manager, (PrefixCachingManager, HybridManager)) else None
        )
        # off: nothing looked up or hashed (v1: KVCacheManager(enable_caching=False))
        self.enable_prefix_caching = cache_config.enable_prefix_caching and self._cache is not None
        if self._cache is not None and not cache_config.enable_prefix_caching:
            for group in manager.groups if isinstance(manager, HybridManager) else (manager,):
                assert isinstance(group, PrefixCachingManager), "a manager with v1's calls"
                group.enable_caching = False
        bool_arg("slide_after_update", slide_after_update)
        # a model reads the window during the step: slide at the next allocate_slots (v1's
        # remove_skipped_blocks(request.num_computed_tokens) inside allocate_slots)
        if slide_after_update:
            window = manager.window if isinstance(manager, HybridManager) else manager
            if isinstance(window, SlidingWindowManager):
                window.slide_on_allocate = True
        if self.num_lookahead_tokens and self._cache is None:
            raise ValueError("num_lookahead_tokens needs allocate_slots (a PrefixCachingManager)")
        self.waiting: RequestQueue[V1Request] = make_request_queue(scheduler_config.policy)
        self.policy = scheduler_config.policy
        self.manager = manager
        self.record = record
        self.requests = requests
        self._pending = deque(self._fan_out(columns))
        if isinstance(manager, KVCacheManager):
            manager.reclaimer = None  # v1 preempts in the scheduler, never inside an allocation
        self.running: list[V1Request] = []
        self.records: list[V1StepRecord] = []
        self.now = 0
        self.finished = 0  # requests (all samples) finished
        self.finished_seqs = 0
        self.preemptions = 0
        self.recomputed_tokens = 0  # tokens computed again after a preemption, net of cache hits
        self.discarded_tokens = 0  # computed tokens freed by preemption
        self.prefill_tokens = 0
        self.decode_tokens = 0
        self._left = [r.num_seqs for r in self.requests]  # unfinished samples per request
        self._by_id = {req.request_id: req for _, req in self._pending}
        self._finished_req_ids: set[ReqId] = set()  # finished since the last schedule()

    def _fan_out(self, columns: RequestColumns) -> list[tuple[int, V1Request]]:
        """(arrival step, request) for every sample of every request, in arrival order."""
        for name, column in columns._asdict().items():
            if column is None:
                continue
            if isinstance(column, (str, bytes, dict, set, frozenset)) or not hasattr(
                column, "__getitem__"
            ):
                raise TypeError(
                    f"{name} must be a sequence with one entry per request, got "
                    f"{type(column).__name__}"
                )
            if len(column) != len(self.requests):
                raise ValueError(
                    f"{name} has {len(column)} entries for {len(self.requests)} requests"
                )
        tokens, output_tokens, priorities, arrival_times = columns
        out = list[tuple[int, V1Request]]()
        for i, r in enumerate(self.requests):
            if r.beam_width > 1:
                raise ValueError(
                    f"request {i} uses beam search; vLLM v1 runs it at the entry "
                    f"point, not in the scheduler (use mode='v0')"
                )
            too_long = f"request {i} ({r.total_len} tokens) is longer than max_model_len"
            self._check_fits(i, r, too_long)
            prompt = (
                tuple(synthetic_token(i, "p", p) for p in range(r.prompt_len))
                if tokens is None
                else prompt_ids(tokens[i], r.prompt_len, f"tokens[{i}]")
            )
            given = (
                None
                if output_tokens is None
                else prompt_ids(output_tokens[i], None, f"output_tokens[{i}]")
            )
            if given is not None and len(given) < r.output_len:
                raise ValueError(
                    f"output_tokens[{i}] has {len(given)} ids for output_len {r.output_len}"
                )
            # v1's Request.priority is any int: smaller is more urgent, negatives included
            prio = 0 if priorities is None else count_arg(f"priorities[{i}]", priorities[i], None)
            arrived = (
                r.arrival_step
                if arrival_times is None
                else time_arg(f"arrival_times[{i}]", arrival_times[i])
            )
            for k in range(r.n):
                outs = (
                    given[: r.output_len]
                    if given is not None and k == 0
                    else tuple(synthetic_token(i, k, j) for j in range(r.output_len))
                )
                req = V1Request((i, k), prompt, r.output_len, outs, i, prio, arrival_time=arrived)
                out.append((r.arrival_step, req))
        out.sort(key=lambda x: (x[0], x[1].arrival))
        return out

    def _check_fits(self, i: int, r: Request, too_long: str) -> None:
        """Refuse request i if longer than max_model_len, or if one sample's peak blocks
        (lookahead included) exceed the pool."""
        if r.total_len > self.max_model_len:
            raise ValueError(f"{too_long} {self.max_model_len}")
        ahead, nb = self.num_lookahead_tokens, self.manager.num_gpu_blocks
        chunk = min(r.total_len, self.max_num_batched_tokens)  # alone: no threshold
        # v1 reserves no slot past max_model_len, lookahead included
        last = min(r.total_len - 1 + ahead, self.max_model_len)
        peak = self.manager.peak_blocks(r.prompt_len, last, chunk + ahead)
        if peak > nb:
            raise ValueError(
                f"request {i} ({r.total_len} tokens) needs {peak} blocks, more than the pool's {nb}"
            )

    # ---- results -------------------------------------------------------------
    @property
    def done(self) -> bool:
        return not (self._pending or self.waiting or self.running)

    @property
    def arrivals_pending(self) -> bool:
        return bool(self._pending)

    # ---- one step: schedule(), the model, update_from_output() -----------------------
    def schedule(self) -> SchedulerOutput:
        """What runs this step (v1's Scheduler.schedule; see the module doc)."""
        self._start_step()
        while self._pending and self._pending[0][0] < self.now:
            self.waiting.add_request(self._pending.popleft()[1])
        # v1 (0.34): the cap is for a long prefill starving others; alone, it has nobody to
        # starve, so it is lifted while at most one request runs or waits
        self._threshold = (
            self.long_prefill_token_threshold if len(self.running) + len(self.waiting) > 1 else 0
        )
        scheduled: dict[V1Request, int] = {}  # request -> tokens scheduled this step
        preempted: list[V1Request] = []
        budget, i = self.max_num_batched_tokens, 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = self._chunk(req.num_tokens - req.num_computed_tokens, budget)
            fits = self._allocate(req, n)
            while not fits:
                victim = self._pick_victim()
                if victim in scheduled:
                    budget += scheduled.pop(victim)
                    i -= 1
                self._preempt(victim)
                preempted.append(victim)
                if victim is req:
                    break
                fits = self._allocate(req, n)
            if not fits:
                if self.policy == "priority" and preempted[-1] is req:
                    # v1 (0.34): the lowest-priority request preempted itself; the ones after
                    # it rank higher and may still fit in what it freed (running[i] is the next)
                    continue
                break
            scheduled[req] = n
            budget -= n
            i += 1
        admitted: list[V1Request] = []
        while (
            not preempted and self.waiting and budget > 0 and len(self.running) < self.max_num_seqs
        ):
            req = self.waiting.peek_request()
            if not self._admit(req, budget, scheduled):
                break
            budget -= scheduled[req]
            self.waiting.pop_request()
            self.running.append(req)
            admitted.append(req)
        new = [
            NewRequestData(
                r.request_id, r.prompt, self.block_ids(r.request_id), r.num_computed_tokens
            )
            for r in admitted
        ]
        cached = [r for r in scheduled if r not in admitted]
        out = self._output(
            new,
            CachedRequestData(
                [r.request_id for r in cached],
                [r.num_computed_tokens for r in cached],
                [len(r.sampled) for r in cached],
            ),
            {r.request_id: n for r, n in scheduled.items()},
            {r.request_id for r in preempted},
        )
        for req, n in scheduled.items():  # v1's _update_after_schedule
            start = req.num_computed_tokens
            self.recomputed_tokens += max(0, min(start + n, req.high) - start)
            req.num_computed_tokens = start + n
            req.high = max(req.high, req.num_computed_tokens)
        return out

    def block_ids(self, req_id: ReqId) -> tuple[int, ...]:
        """A running request's block table (a hybrid manager's: its full-attention group's)."""
        m = self.manager
        table = m.block_tables(req_id)[0] if isinstance(m, HybridManager) else m.block_table(req_id)
        return tuple(table.blocks)

    def add_request(
        self, prompt: TokenIds, max_tokens: int, stop_token_ids: TokenIds = ()
    ) -> ReqId:
        """A request from an engine that runs a model (v1's add_request): it finishes after
        `max_tokens` tokens or on a stop token (kept); its request id, (index, 0)."""
        ids = prompt_ids(prompt, None, "prompt")
        stops = prompt_ids(stop_token_ids, None, "stop_token_ids")
        r = Request(len(ids), count_arg("max_tokens", max_tokens, 1))
        i = len(self.requests)
        self._check_fits(i, r, f"prompt + max_tokens = {r.total_len} exceeds max_model_len")
        req = V1Request((i, 0), ids, r.output_len, (), i, arrival_time=self.now)
        req.stop_token_ids = stops
        self.requests.append(r)
        self._left.append(1)
        self._by_id[req.request_id] = req
        self.waiting.add_request(req)
        return req.request_id

    def sampling_req_ids(self, scheduler_output: SchedulerOutput) -> list[ReqId]:
        """The requests of a step whose computed tokens caught up (so they sample)."""
        return [
            rid
            for rid in scheduler_output.num_scheduled_tokens
            if self._by_id[rid].num_computed_tokens == self._by_id[rid].num_tokens
        ]

    def workload_tokens(self, scheduler_output: SchedulerOutput) -> dict[ReqId, int]:
        """The tokens the workload says each sampling request samples (the model, faked)."""
        return {
            rid: self._by_id[rid].outputs[len(self._by_id[rid].sampled)]
            for rid in self.sampling_req_ids(scheduler_output)
        }

    def update_from_output(
        self, scheduler_output: SchedulerOutput, sampled: Mapping[ReqId, int]
    ) -> list[ReqId]:
        """Take what the model sampled (v1's update_from_output); the finished request ids."""
        sampled = self._check_output(scheduler_output, sampled)
        self._pending_output = None
        prefill = decode = 0
        finished: list[ReqId] = []
        for rid, n in scheduler_output.num_scheduled_tokens.items():
            req = self._by_id[rid]
            if n == 1 and req.sampled and req.num_computed_tokens == req.num_tokens:
                decode += 1
            else:
                prefill += n
            if rid in sampled:
                token = sampled[rid]
                req.sampled.append(token)
                req.unsent.append(token)
                if len(req.sampled) == req.output_len or token in req.stop_token_ids:
                    self._finish(req)
                    finished.append(rid)
        self.prefill_tokens += prefill
        self.decode_tokens += decode
        if self.record:
            self.records.append(
                V1StepRecord(
                    self.now,
                    len(self.running),
                    len(self.waiting),
                    self.manager.pool.num_used,
                    prefill + decode,
                    prefill,
                    decode,
                    len(scheduler_output.preempted_req_ids),
                )
            )
        return finished

    def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool:
        """v1's reset_prefix_cache, between steps; whether it did. With
        reset_running_requests every running request is preempted first (last first)."""
        bool_arg("reset_running_requests", reset_running_requests)
        if self._pending_output is not None:
            raise RuntimeError("reset_prefix_cache() between schedule() and update_from_output()")
        if reset_running_requests:
            while self.running:
                self._preempt(self.running.pop())
        if self._cache is not None:
            return self._cache.reset_prefix_cache()
        return self.manager.pool.num_used == 0

    # ---- allocation, admission, preemption ----------------------------------------
    def _allocate(self, req: V1Request, n: int) -> bool:
        """Slots for n more tokens of a running request; False (nothing changed) if short."""
        m, sent = self._cache, tuple(req.unsent)
        if m is not None:
            ahead = self._lookahead(req.num_computed_tokens + n)
            new = m.allocate_slots(req.request_id, n, ahead, sent or None)
        else:
            try:
                new = self.manager.append_tokens(req.request_id, n)
            except OutOfBlocks:
                new = None
        if new is None:
            return False
        req.unsent.clear()
        return True

    def _admit(self, req: V1Request, budget: int, scheduled: dict[V1Request, int]) -> bool:
        m, tokens = self._cache, req.token_ids()
        if m is not None:
            computed = m.get_computed_blocks(tokens) if self.enable_prefix_caching else None
            hit = 0 if computed is None else computed.num_tokens
            n = self._chunk(len(tokens) - hit, budget)
            if (
                m.allocate_slots(
                    req.request_id,
                    n,
                    self._lookahead(hit + n),
                    tokens,
                    computed,  # type: ignore[arg-type]  # each manager's own lookup type
                    preempted=req.num_preemptions > 0,
                )
                is None
            ):
                return False
            req.num_computed_tokens = hit
        else:
            n = self._chunk(len(tokens), budget)
            plain = self.manager
            assert isinstance(plain, KVCacheManager), "a manager without v1's calls"
            if not plain.can_allocate(n):
                return False
            plain.add_sequence(req.request_id, n)
        req.unsent.clear()
        scheduled[req] = n
        return True

    def _lookahead(self, end: int) -> int:
        """Lookahead slots past a request's first `end` tokens: v1 reserves none past
        max_model_len (allocate_slots caps the slots it needs there)."""
        return max(0, min(self.num_lookahead_tokens, self.max_model_len - end))

    def _chunk(self, left: int, budget: int) -> int:
        """Tokens to compute for a request now: what is left, within budget and threshold."""
        cap = self._threshold
        return min(left, budget, cap) if cap else min(left, budget)

    def _pick_victim(self) -> V1Request:
        if self.policy == "priority":
            # v1 (0.34): max by (priority, arrival_time); a tie goes to the first running
            victim = max(self.running, key=lambda r: (r.priority, r.arrival_time))
            self.running.remove(victim)
            return victim
        return self.running.pop()

    def _preempt(self, req: V1Request) -> None:
        self.preemptions += 1
        req.num_preemptions += 1
        self.discarded_tokens += req.num_computed_tokens
        self.manager.free_sequence(req.request_id)
        req.num_computed_tokens = 0
        req.unsent.clear()
        self.waiting.prepend_request(req)

    def finish_requests(self, request_ids: ReqId | Iterable[ReqId]) -> list[ReqId]:
        """Abort requests from outside, between steps (v1's finish_requests with
        FINISHED_ABORTED: a client went away). Each waiting or running one leaves, its blocks
        freed (the tail first), and the next schedule() lists it in finished_req_ids. Ids
        unknown, not yet arrived or already finished are skipped, as in v1. Returns the ids
        aborted, in the order given."""
        if self._pending_output is not None:
            raise RuntimeError("finish_requests() between schedule() and update_from_output()")
        ids = _req_ids(request_ids)
        waiting = {id(r) for r in self.waiting}
        aborted: list[ReqId] = []
        for rid in ids:
            req = self._by_id.get(rid)
            if req is None or (req not in self.running and id(req) not in waiting):
                continue  # unknown, finished, or not yet arrived
            if req in self.running:
                self._finish(req)
            else:  # waiting requests hold no blocks in v1 (a preemption freed them)
                self.waiting.remove_requests([req])
                self._forget(req)
            aborted.append(rid)
        return aborted

    def _finish(self, req: V1Request) -> None:
        """Free a finished request's blocks and forget it (v1's _free_request)."""
        self.manager.free_sequence(req.request_id)
        self.running.remove(req)
        self._forget(req)

    def _forget(self, req: V1Request) -> None:
        """A request that left: reported as finished by the next schedule()."""
        del self._by_id[req.request_id]
        self._finished_req_ids.add(req.request_id)
        self.finished_seqs += 1
        i = req.request_id[0]
        self._left[i] -= 1
        if not self._left[i]:
            self.finished += 1


def _req_ids(request_ids: object) -> list[ReqId]:
    """One request id, or several, as a list without repeats (TypeError for anything else)."""
    if isinstance(request_ids, tuple) and all(isinstance(x, int) for x in request_ids):
        request_ids = [request_ids]  # one id: (request index, sample index)
    elif isinstance(request_ids, (str, bytes)) or not isinstance(request_ids, Iterable):
        raise TypeError(f"request_ids must be a request id or ids, got {request_ids!r}")
    ids: list[ReqId] = []
    for rid in request_ids:
        if not (isinstance(rid, tuple) and len(rid) == 2 and all(type(x) is int for x in rid)):
            raise TypeError(f"a request id is (request index, sample index), got {rid!r}")
        ids.append((rid[0], rid[1]))
    return list(dict.fromkeys(ids))
