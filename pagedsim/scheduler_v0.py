"""vLLM v0's continuous-batching driver over one KV-cache manager (v0; Orca, vLLM Sec. 4.5).

`make_scheduler(..., mode="v0")` (scheduler.py) builds this one; vLLM v1's token-budget
scheduler is in scheduler_v1.py. This one follows vLLM v0's scheduler and block manager:
whole-prompt admission, a watermark, group preemption, swap, fork and copy-on-write.

Each request becomes a *group* of sequences that share its prompt: `n` parallel
samples or `beam_width` beams, forked from the prompt with copy-on-write. One model
iteration is `schedule()`, the model, then `update_from_output()` (scheduler_output.py;
`step()` fakes the model with the workload's tokens):

    schedule()
    1. decode: every running sequence gets one token (`manager.decode_step`). If the
       free blocks cannot cover the new blocks this needs (including copy-on-write
       copies), victim groups are preempted first -- by default the most recently
       admitted -- with the chosen policy (`recompute` or `swap`, see policies/).
    2. if nothing was preempted: swapped groups come back first (FCFS), and then
       waiting groups are admitted in arrival order while their prompt blocks, plus
       one block per sequence of headroom for the next decode, plus a watermark (1% of
       the pool, v0's default) fit in the free blocks.
       A recomputed group prefills its prompt and the tokens it had generated.
    update_from_output(scheduler_output, sampled)
    3. every decoded group is one token longer; a group with `output_len` tokens is
       finished and frees its blocks (v0 frees finished groups after the model ran, so
       the next schedule(), not this one, admits into them). Beams are then re-ranked
       synthetically: each beam, with probability `beam_reshuffle`, is replaced by a
       fork of another beam (vLLM v0's beam search frees losing beams and forks
       winning ones the same way; v1 runs beam search outside the scheduler).
    4. a `StepRecord` of the usage is appended to `records`.

The manager's `reclaimer` hook is pointed at the same victim choice, so an allocation
that runs short anywhere preempts (a group not scheduled this step) instead of failing.
With prefix caching, decoded tokens carry ids, so generated blocks are cached too, and
`recomputed_tokens` counts only tokens prefilled again after cache hits
(`discarded_tokens`: what was freed).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .block_table import blocks_needed
from .errors import count_arg
from .manager import KVCacheManager
from .policies.preemption import Group, RecomputePolicy, make_policy, preemption_class
from .policies.prefix_cache import PrefixCachingManager
from .scheduler_common import (
    TokenIds,
    WorkloadScheduler,
    check_scheduler_args,
    fraction,
    prompt_ids,
    synthetic_token,
)
from .scheduler_output import CachedRequestData, NewRequestData, ReqId, SchedulerOutput
from .workloads import Request

VICTIMS = ("newest", "oldest")


@dataclass(frozen=True)
class StepRecord:
    step: int
    running: int  # running sequences (after this step's admissions)
    waiting: int  # waiting groups
    swapped: int  # swapped-out groups
    blocks_used: int
    logical_tokens: int  # sum of running sequences' lengths
    unshared_blocks: int  # blocks the running sequences would hold without any sharing
    scheduled_tokens: int = 0  # prefill_tokens + decode_tokens
    prefill_tokens: int = 0  # prompt (and recomputed) tokens prefilled, net of cache hits
    decode_tokens: int = 0  # one per running sequence decoded


class SchedulerV0(WorkloadScheduler):
    """vLLM v0's driver (see the module doc); `make_scheduler(mode="v0")` builds one."""

    mode = "v0"

    def __init__(
        self,
        requests: Iterable[Request],
        manager: KVCacheManager,
        policy: str | RecomputePolicy = "recompute",
        *,
        victim: str = "newest",
        max_running: int | None = None,
        host_blocks: int = 0,
        block_bytes: int = 1,
        beam_reshuffle: float = 0.25,
        seed: int = 0,
        tokens: Sequence[TokenIds] | None = None,
        record: bool = True,
        watermark: float = 0.01,
        max_stalled_steps: int = 1000,
    ) -> None:
        requests = check_scheduler_args(requests, manager, record)
        if victim not in VICTIMS:
            raise ValueError(f"victim must be one of {VICTIMS}, got {victim!r}")
        beam_reshuffle = fraction("beam_reshuffle", beam_reshuffle, 1.0)
        watermark = fraction("watermark", watermark, 1.0)
        if watermark >= 1.0:
            raise ValueError(
                f"watermark must be below 1 (it would keep the whole pool free), got {watermark!r}"
            )
        if max_running is not None:
            max_running = count_arg("max_running", max_running, 1)
        self.max_stalled_steps = count_arg("max_stalled_steps", max_stalled_steps, 1)
        self.manager = manager
        self.policy = (
            make_policy(policy, host_blocks=host_blocks, block_bytes=block_bytes)
            if isinstance(policy, str)
            else policy
        )
        self.victim = victim  # which running group is preempted first
        self.max_running = max_running  # cap on running sequences (None: blocks decide)
        self.beam_reshuffle = beam_reshuffle
        self.watermark = int(watermark * manager.num_blocks)  # blocks admission leaves free
        self.record = record
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        nb = manager.num_blocks
        self.requests = requests
        if tokens is not None and len(tokens) != len(self.requests):
            raise ValueError(f"tokens has {len(tokens)} prompts for {len(self.requests)} requests")
        # request index -> prompt token ids (for prefix caching), as tuples, checked now,
        # not halfway through a run
        self.tokens = (
            None
            if tokens is None
            else [
                prompt_ids(tokens[i], r.prompt_len, f"tokens[{i}]")
                for i, r in enumerate(self.requests)
            ]
        )
        for i, r in enumerate(self.requests):
            per_seq = manager.peak_blocks(r.prompt_len, r.total_len)
            worst = r.num_seqs * per_seq + r.num_seqs + self.watermark
            if max_running is not None and r.num_seqs > max_running:
                raise ValueError(
                    f"request {i} has {r.num_seqs} sequences; max_running "
                    f"{max_running} can never admit it"
                )
            if worst > nb:
                raise ValueError(
                    f"request {i} ({r.num_seqs} x {r.total_len} tokens) needs up to "
                    f"{worst} blocks, more than the pool's {nb}"
                )
        self._arrivals = deque(
            sorted(range(len(self.requests)), key=lambda i: self.requests[i].arrival_step)
        )
        self.waiting: deque[Group] = deque()
        self.running: list[Group] = []
        self.swapped: deque[Group] = deque()
        self.records: list[StepRecord] = []
        self.now = 0  # steps taken
        self.finished = 0
        self._admitted = 0  # admission counter (Group.order)
        self._cached = self.tokens is not None and isinstance(manager, PrefixCachingManager)
        self.recomputed_tokens = 0  # tokens prefilled again after a preemption, net of cache hits
        self._prefill = self._decoded = 0  # this step's token counts
        self._scheduled: dict[ReqId, int] = {}  # sequence -> tokens computed this step
        self._preempted_now: set[ReqId] = set()  # sequences preempted this step
        self._finished_req_ids: set[ReqId] = set()  # finished since the last schedule()
        self._preempted: set[object] = set()  # keys of groups preempted at least once
        manager.reclaimer = self._evict

    # ---- results -------------------------------------------------------------
    @property
    def done(self) -> bool:
        return not (self._arrivals or self.waiting or self.running or self.swapped)

    @property
    def preemptions(self) -> int:
        return self.policy.preemptions

    @property
    def discarded_tokens(self) -> int:
        """Tokens whose KV preemption freed (the recompute cost without a prefix cache)."""
        return self.policy.recomputed_tokens

    @property
    def arrivals_pending(self) -> bool:
        return bool(self._arrivals)

    # ---- one iteration: schedule(), the model, update_from_output() -----------------
    def schedule(self) -> SchedulerOutput:
        """What runs this step (v0's Scheduler.schedule): one token for every running
        sequence, preempting groups while the blocks are short; then, if nothing was
        preempted, swapped groups back in and waiting groups admitted (prefilled)."""
        if self._pending_output is not None:
            raise RuntimeError("schedule() again before update_from_output() of the last step")
        self.now += 1
        self._prefill = self._decoded = 0
        self._scheduled = {}
        self._preempted_now = set()
        arrivals, reqs = self._arrivals, self.requests
        while arrivals and reqs[arrivals[0]].arrival_step < self.now:
            i = arrivals.popleft()
            r = reqs[i]
            seqs = [(i, k) for k in range(r.num_seqs)]
            self.waiting.append(Group(i, r.prompt_len, r.output_len, seqs))
        before = self.policy.preemptions
        decoded = self._schedule_decodes()
        admitted: list[Group] = []
        if self.policy.preemptions == before:
            while self.swapped and self.policy.swap_in(self.manager, self.swapped[0]):
                g = self.swapped.popleft()
                g.order = self._next_order()
                self.running.append(g)
            if not self.swapped:
                while self.waiting and self._admit(self.waiting[0]):
                    admitted.append(self.waiting.popleft())
                    self.running.append(admitted[-1])
        out = self._make_output(decoded, admitted)
        self._pending_output = out
        return out

    def _make_output(self, decoded: list[Group], admitted: list[Group]) -> SchedulerOutput:
        cached = [(g, s) for g in decoded for s in g.seq_ids]
        out = SchedulerOutput(
            scheduled_new_reqs=[
                NewRequestData(
                    s,
                    self._prompt(g),
                    tuple(self.manager.block_table(s).blocks),
                    g.prompt_len + g.generated - self._scheduled[s],
                )
                for g in admitted
                for s in g.seq_ids
            ],
            scheduled_cached_reqs=CachedRequestData(
                [s for _, s in cached],
                [g.prompt_len + g.generated for g, _ in cached],
                [g.generated for g, _ in cached],
            ),
            num_scheduled_tokens=self._scheduled,
            total_num_scheduled_tokens=self._prefill + self._decoded,
            preempted_req_ids=self._preempted_now,
            finished_req_ids=self._finished_req_ids,
        )
        self._finished_req_ids = set()
        return out

    def sampling_req_ids(self, scheduler_output: SchedulerOutput) -> list[ReqId]:
        """The sequences of a step that sample a token: the decoded ones (a v0 prefill
        here samples nothing: a group generates `output_len` tokens by decoding)."""
        return list(scheduler_output.scheduled_cached_reqs.req_ids)

    def workload_tokens(self, scheduler_output: SchedulerOutput) -> dict[ReqId, int]:
        """The ids the decodes gave the manager (the workload's tokens: the model, faked)."""
        cached = scheduler_output.scheduled_cached_reqs
        return {
            s: synthetic_token(s[0], s[1], n)
            for s, n in zip(cached.req_ids, cached.num_computed_tokens, strict=True)
        }

    def update_from_output(
        self, scheduler_output: SchedulerOutput, sampled: Mapping[ReqId, int]
    ) -> list[ReqId]:
        """Take the sampled tokens (v0's output processing): every decoded group is one
        token longer; a group with `output_len` tokens is finished and freed, and beams
        are re-ranked. Returns the finished sequences."""
        sampled = self._check_output(scheduler_output, sampled)
        self._pending_output = None
        m, finished, still = self.manager, list[ReqId](), list[Group]()
        for g in self.running:
            if g.seq_ids[0] not in sampled:  # admitted or swapped in this step
                still.append(g)
                continue
            g.generated += 1
            if g.generated >= g.output_len:
                for s in g.seq_ids:
                    m.free_sequence(s)
                    finished.append(s)
                self.finished += 1
            else:
                if len(g.seq_ids) > 1 and self._request(g).beam_width > 1:
                    self._rerank(g)
                still.append(g)
        self.running = still
        self._finished_req_ids.update(finished)
        if self.record:
            self.records.append(self._record())
        return finished

    def _record(self) -> StepRecord:
        m = self.manager
        return StepRecord(
            self.now,
            sum(len(g.seq_ids) for g in self.running),
            len(self.waiting),
            len(self.swapped),
            m.pool.num_used,
            sum(len(g.seq_ids) * (g.prompt_len + g.generated) for g in self.running),
            sum(
                len(g.seq_ids) * blocks_needed(g.prompt_len + g.generated, m.block_size)
                for g in self.running
            ),
            self._prefill + self._decoded,
            self._prefill,
            self._decoded,
        )

    def _schedule_decodes(self) -> list[Group]:
        """One slot for every running sequence (preempting first while blocks are short);
        the groups decoded."""
        m = self.manager
        while self.running and m.blocks_for_decode(self._running_seqs()) > m.num_free_blocks:
            self._preempt(self._pick(self.running))
        if not self.running:
            return []
        seqs = self._running_seqs()
        ids = None
        if self._cached:
            ids = [
                synthetic_token(s[0], s[1], g.prompt_len + g.generated)
                for g in self.running
                for s in g.seq_ids
            ]
        m.decode_step(seqs, with_slots=False, token_ids=ids)
        self._decoded = len(seqs)
        self._scheduled.update(dict.fromkeys(seqs, 1))
        return list(self.running)

    def _prompt(self, g: Group) -> tuple[int, ...]:
        """A group's prompt ids: the ones given, or the workload's synthetic ones."""
        assert isinstance(g.key, int), f"group key {g.key!r} is not a request index"
        if self.tokens is not None:
            return self.tokens[g.key]
        return tuple(synthetic_token(g.key, "p", q) for q in range(g.prompt_len))

    def _running_seqs(self) -> list[ReqId]:
        return [s for g in self.running for s in g.seq_ids]

    def _rerank(self, g: Group) -> None:
        m, beams = self.manager, g.seq_ids
        for k, s in enumerate(beams):
            if self.rng.random() < self.beam_reshuffle:
                parent = beams[(k + 1 + int(self.rng.integers(len(beams) - 1))) % len(beams)]
                m.free_sequence(s)
                m.fork(parent, s)

    # ---- admission and preemption -----------------------------------------------------
    def _admit(self, g: Group) -> bool:
        m, bs = self.manager, self.manager.block_size
        k, p = len(g.seq_ids), g.prompt_len
        if self.max_running is not None and self._num_running() + k > self.max_running:
            return False
        assert isinstance(g.key, int), f"group key {g.key!r} is not a request index"
        # the prefix cache, when there is one and the prompts' ids are known (else None)
        cache = m if self.tokens is not None and isinstance(m, PrefixCachingManager) else None
        tokens = () if self.tokens is None else self.tokens[g.key]
        need = blocks_needed(p, bs) + k + self.watermark  # headroom for the next decode
        if g.generated:
            need += k * (blocks_needed(p + g.generated, bs) - p // bs)
        if need > m.num_free_blocks and cache is not None:  # hits on blocks in use cost nothing
            need -= sum(1 for b in cache.get_computed_blocks(tokens).blocks if m.pool.ref_count(b))
        if need > m.num_free_blocks:
            return False
        first = g.seq_ids[0]
        if cache is not None:
            hit_before = cache.stats.hit_tokens
            cache.add_sequence(first, p, tokens)
            prefilled = p - (cache.stats.hit_tokens - hit_before)
        else:
            m.add_sequence(first, p)
            prefilled = p
        self._scheduled[first] = prefilled
        for s in g.seq_ids[1:]:
            m.fork(first, s)  # shares the prompt: nothing to compute
            self._scheduled[s] = 0
        if g.generated:
            beams = self.requests[g.key].beam_width > 1  # a beam's history is not its own ids
            for s in g.seq_ids:
                ids = (
                    None
                    if cache is None or beams
                    else [synthetic_token(s[0], s[1], q) for q in range(p, p + g.generated)]
                )
                m.append_tokens(s, g.generated, token_ids=ids)
                self._scheduled[s] += g.generated
            prefilled += k * g.generated
        if g.key in self._preempted:
            self.recomputed_tokens += prefilled
        self._prefill += prefilled
        g.order = self._next_order()
        return True

    def _preempt(self, g: Group) -> None:
        self._preempted.add(g.key)
        self._preempted_now.update(g.seq_ids)
        self.running.remove(g)
        applied = self.policy.preempt(self.manager, g)  # the policy's name, or its fallback's
        if preemption_class(applied).keeps_kv:
            self.swapped.append(g)
        else:
            self.waiting.appendleft(g)

    def _pick(self, groups: Iterable[Group]) -> Group:
        if self.victim == "newest":
            return max(groups, key=lambda g: g.order)
        return min(groups, key=lambda g: g.order)

    def _evict(self, manager: KVCacheManager, blocks_short: int, protect: set[Hashable]) -> None:
        """The manager's reclaimer hook: preempt groups that hold no protected sequence and
        were not scheduled this step (the model is about to compute their tokens)."""
        while blocks_short > 0:
            candidates = [
                g
                for g in self.running
                if not protect.intersection(g.seq_ids) and g.seq_ids[0] not in self._scheduled
            ]
            if not candidates:
                return
            free_before = manager.num_free_blocks
            self._preempt(self._pick(candidates))
            blocks_short -= manager.num_free_blocks - free_before

    def _request(self, g: Group) -> Request:
        """The request a group came from (its key is the request's index)."""
        assert isinstance(g.key, int), f"group key {g.key!r} is not a request index"
        return self.requests[g.key]

    def _next_order(self) -> int:
        self._admitted += 1
        return self._admitted

    def _num_running(self) -> int:
        return sum(len(g.seq_ids) for g in self.running)
