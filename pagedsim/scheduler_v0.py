"""vLLM v0's continuous-batching driver over one KV-cache manager (v0; Orca, vLLM Sec. 4.5).

Whole-prompt admission, a watermark, group preemption, swap, fork and copy-on-write, as
vLLM v0's scheduler and block manager. Each request is a *group* of sequences sharing its
prompt (`n` samples or `beam_width` beams, forked with copy-on-write). schedule() decodes
every running sequence, preempting victim groups (default: the newest) while short; only
if nothing was preempted do swapped groups come back, then waiting ones are admitted
while their blocks, decode headroom and the watermark (1% of the pool, v0's) fit.

An engine that runs a model uses `add_request` and mirrors its output processor with
`fork_seq` / `free_seq` between schedule() and update_from_output(). A forked group is
only swapped, never recomputed (`SeqGroupPolicy`).
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .block_table import NULL_BLOCK, blocks_needed
from .config import CacheConfig, SchedulerConfig
from .errors import count_arg
from .manager import KVCacheManager
from .policies.preemption import Group, RecomputePolicy, SwapPolicy, make_policy, preemption_class
from .policies.prefix_cache import PrefixCachingManager
from .scheduler_common import (
    TokenIds,
    WorkloadScheduler,
    check_configs,
    check_scheduler_args,
    fraction,
    prompt_ids,
    synthetic_token,
)
from .scheduler_output import CachedRequestData, NewRequestData, ReqId, SchedulerOutput
from .workloads import Request

VICTIMS = ("newest", "oldest")
NO_SEQ_CAP = sys.maxsize  # max_num_seqs that never caps: the blocks alone decide admission


class V0Settings(NamedTuple):
    """pagedsim's own v0 knobs, which no vLLM config holds."""

    victim: str = "newest"  # the running group preempted first: "newest" (v0's) or "oldest"
    watermark: float = 0.01  # pool fraction admission leaves free (v0's BlockSpaceManager)
    beam_reshuffle: float = 0.25  # chance a beam is replaced by a fork of another, per step
    seed: int = 0  # seeds the synthetic beam re-ranking
    max_stalled_steps: int = 1000  # steps without progress before run() gives up

    def checked(self) -> V0Settings:
        """These settings checked, the fractions as floats."""
        if self.victim not in VICTIMS:
            raise ValueError(f"victim must be one of {VICTIMS}, got {self.victim!r}")
        watermark = fraction("watermark", self.watermark, 1.0)
        if watermark >= 1.0:
            raise ValueError(
                f"watermark must be below 1 (it would keep the whole pool free), got {watermark!r}"
            )
        return self._replace(
            watermark=watermark,
            beam_reshuffle=fraction("beam_reshuffle", self.beam_reshuffle, 1.0),
            max_stalled_steps=count_arg("max_stalled_steps", self.max_stalled_steps, 1),
        )


# SchedulerV0's own defaults: recompute, no cap on running sequences, no swap space
DEFAULT_SCHEDULER_CONFIG = SchedulerConfig(preemption_mode="recompute", max_num_seqs=NO_SEQ_CAP)
DEFAULT_CACHE_CONFIG = CacheConfig()
DEFAULT_SETTINGS = V0Settings()


class SeqGroupPolicy(SwapPolicy):
    """vLLM v0's preemption of a sequence group (`Scheduler._preempt`): a lone sequence is
    recomputed (swapped with `swap_single`), a group of several swapped; a full host pool
    raises (v0: "Aborted due to the lack of CPU swap space")."""

    name = "recompute"  # the policy pagedsim's --preemption-mode "recompute" means in v0

    def __init__(self, num_cpu_blocks: int, block_bytes: int = 1, *, swap_single: bool = False):
        super().__init__(num_cpu_blocks, block_bytes)
        self.swap_single = swap_single

    def preempt(self, manager: KVCacheManager, group: Group) -> str:
        if len(group.seq_ids) == 1 and not self.swap_single:
            return RecomputePolicy.preempt(self, manager, group)
        if len(group.seq_ids) > 1:
            tables = [manager.block_table(s).blocks for s in group.seq_ids]
            distinct = {b for t in tables for b in t if b != NULL_BLOCK}
            if len(distinct) > self.host_free:
                raise RuntimeError(
                    f"the host pool is full ({self.host_free} free blocks, {len(distinct)} "
                    f"needed): a group of several sequences can only be swapped (vLLM v0 "
                    f"aborts here too)"
                )
        return super().preempt(manager, group)


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
    manager: KVCacheManager

    def __init__(
        self,
        requests: Iterable[Request],
        manager: KVCacheManager,
        scheduler_config: SchedulerConfig = DEFAULT_SCHEDULER_CONFIG,
        cache_config: CacheConfig = DEFAULT_CACHE_CONFIG,
        *,
        policy: RecomputePolicy | None = None,
        settings: V0Settings = DEFAULT_SETTINGS,
        tokens: Sequence[TokenIds] | None = None,
        record: bool = True,
    ) -> None:
        """As vLLM v0's Scheduler; `policy` replaces preemption_mode's; `tokens`: prompt ids."""
        requests = check_scheduler_args(requests, manager, record)
        check_configs(scheduler_config, cache_config)
        if policy is not None and not isinstance(policy, RecomputePolicy):
            raise TypeError(f"policy must be a RecomputePolicy, got {type(policy).__name__}")
        if not isinstance(settings, V0Settings):
            raise TypeError(f"settings must be a V0Settings, got {type(settings).__name__}")
        victim, watermark, beam_reshuffle, seed, max_stalled_steps = settings.checked()
        self.scheduler_config, self.cache_config = scheduler_config, cache_config
        self.max_stalled_steps = max_stalled_steps
        self.manager = manager
        if policy is None:
            num_cpu_blocks = cache_config.num_cpu_blocks or 0
            policy = make_policy(scheduler_config.preemption_mode, num_cpu_blocks=num_cpu_blocks)
        self.policy = policy
        self.victim = victim  # which running group is preempted first
        self.max_num_seqs = scheduler_config.max_num_seqs  # cap on running sequences
        self.beam_reshuffle = beam_reshuffle
        self.watermark = int(watermark * manager.num_gpu_blocks)  # blocks admission leaves free
        self.record = record
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.requests = requests
        if tokens is not None and len(tokens) != len(self.requests):
            raise ValueError(f"tokens has {len(tokens)} prompts for {len(self.requests)} requests")
        # request index -> prompt token ids (prefix caching), checked now, not mid-run
        self.tokens = (
            None
            if tokens is None
            else [
                prompt_ids(tokens[i], r.prompt_len, f"tokens[{i}]")
                for i, r in enumerate(self.requests)
            ]
        )
        for i, r in enumerate(self.requests):
            self._check_fits(i, r)
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
        self._scheduled: dict[ReqId, int] = {}  # sequence -> tokens computed this step
        self._preempted_now: set[ReqId] = set()  # sequences preempted this step
        self._finished_req_ids: set[ReqId] = set()  # finished since the last schedule()
        self._preempted: set[object] = set()  # keys of groups preempted at least once
        # requests added by an engine that runs a model (add_request): index -> stop ids,
        # and each of their sequences' sampled tokens
        self._stops: dict[int, tuple[int, ...]] = {}
        self._out: dict[ReqId, list[int]] = {}
        self._groups: dict[int, Group] = {}  # their groups, by request index, until finished
        manager.reclaimer = self._evict

    def _check_fits(self, i: int, r: Request) -> None:
        """Raise if request `i` could never be admitted (with decode headroom)."""
        per_seq = self.manager.peak_blocks(r.prompt_len, r.total_len)
        self._refuse(f"request {i}", r, r.num_seqs * per_seq + r.num_seqs)

    def check_request(self, prompt_len: int, max_tokens: int, best_of: int = 1) -> None:
        """Raise (nothing changed) if an `add_request` could never be admitted: the peak of
        `best_of` sequences of prompt_len + max_tokens (a forked group swaps whole)."""
        r = Request(prompt_len, max_tokens, n=best_of)
        peak = r.num_seqs * self.manager.peak_blocks(r.prompt_len, r.total_len)
        self._refuse("the request", r, peak)

    def _refuse(self, name: str, r: Request, worst: int) -> None:
        worst += self.watermark
        if r.num_seqs > self.max_num_seqs:
            raise ValueError(
                f"{name} has {r.num_seqs} sequences; max_num_seqs "
                f"{self.max_num_seqs} can never admit it"
            )
        if worst > self.manager.num_gpu_blocks:
            raise ValueError(
                f"{name} ({r.num_seqs} x {r.total_len} tokens) needs up to "
                f"{worst} blocks, more than the pool's {self.manager.num_gpu_blocks}"
            )

    # ---- serving a model (v0's LLMEngine.add_request) --------------------------------
    def add_request(
        self, prompt: TokenIds, max_tokens: int, stop_token_ids: TokenIds = (), best_of: int = 1
    ) -> ReqId:
        """A request from an engine that runs a model: a group of one sequence that finishes
        after `max_tokens` tokens or on a stop token (kept); its sequence id, (index, 0)."""
        ids = prompt_ids(prompt, None, "prompt")
        if not ids:
            raise ValueError("prompt must hold at least one token id")
        stops = prompt_ids(stop_token_ids, None, "stop_token_ids")
        r = Request(len(ids), count_arg("max_tokens", max_tokens, 1), n=best_of)
        i = len(self.requests)
        self.check_request(r.prompt_len, r.output_len, r.num_seqs)
        if self.tokens is None:
            if self.requests:
                raise ValueError(
                    "add_request needs a scheduler whose requests have token ids "
                    "(built with tokens=..., or with no requests)"
                )
            self.tokens = []
            self._cached = isinstance(self.manager, PrefixCachingManager)
        self.requests.append(r)
        self.tokens.append(ids)
        self._stops[i] = stops
        self._out[(i, 0)] = []
        self._groups[i] = Group(i, r.prompt_len, r.output_len, [(i, 0)])
        self.waiting.append(self._groups[i])
        return (i, 0)

    def fork_seq(self, parent: ReqId, child: ReqId) -> None:
        """v0's fork_seq, between schedule() and update_from_output(): `child` shares `parent`."""
        g = self._sampling_group(parent, "parent")
        if not (isinstance(child, tuple) and len(child) == 2 and child[0] == g.key):
            raise ValueError(f"child must be a sequence id ({g.key}, k), got {child!r}")
        if child in self._out:
            raise ValueError(f"child {child!r} is already a live sequence")
        self.manager.fork(parent, child)
        g.seq_ids.append(child)
        self._out[child] = list(self._out[parent])

    def free_seq(self, seq: ReqId) -> None:
        """v0's free_seq: a beam fell out or a sample stopped (no sequence left: finished)."""
        g = self._sampling_group(seq, "seq")
        self.manager.free_sequence(seq)
        g.seq_ids.remove(seq)
        del self._out[seq]

    def _sampling_group(self, seq: object, name: str) -> Group:
        """The added request's group that `seq` lives in, if it samples this step."""
        out = self._pending_output
        key = seq[0] if isinstance(seq, tuple) and seq in self._out else None
        if out is None or key not in self._sampling_keys(out):
            raise ValueError(
                f"{name} {seq!r} is not a live sequence of a request sampling this step"
            )
        return self._groups[key]

    def _sampling_keys(self, scheduler_output: SchedulerOutput) -> list[int]:
        """The added requests that sample this step, in the order they were scheduled."""
        ids = [
            *scheduler_output.scheduled_cached_reqs.req_ids,
            *(new.req_id for new in scheduler_output.scheduled_new_reqs),
        ]
        return list(dict.fromkeys(s[0] for s in ids if s[0] in self._groups))

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
        """What runs this step (v0's Scheduler.schedule; see the module doc)."""
        self._start_step()
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
        new = [
            NewRequestData(
                s,
                self._prompt(g),
                tuple(self.manager.block_table(s).blocks),
                g.prompt_len + g.generated - self._scheduled[s],
            )
            for g in admitted
            for s in g.seq_ids
        ]
        cached = [(g, s) for g in decoded for s in g.seq_ids]
        running = CachedRequestData(
            [s for _, s in cached],
            # a served sequence computes its last sampled token's K/V now
            [g.prompt_len + g.generated - (s in self._out) for g, s in cached],
            [g.generated for g, _ in cached],
        )
        return self._output(new, running, self._scheduled, self._preempted_now)

    def sampling_req_ids(self, scheduler_output: SchedulerOutput) -> list[ReqId]:
        """The sequences that sample: the decoded ones, and the prefilled live ones of
        added requests (a workload's prefill samples nothing)."""
        workload = scheduler_output.scheduled_cached_reqs.req_ids
        return [
            *(s for s in workload if s[0] not in self._groups),
            *(s for k in self._sampling_keys(scheduler_output) for s in self._groups[k].seq_ids),
        ]

    def workload_tokens(self, scheduler_output: SchedulerOutput) -> dict[ReqId, int]:
        """The workload's tokens for `sampling_req_ids` (the model, faked)."""
        cached = scheduler_output.scheduled_cached_reqs
        sampled = {
            s: synthetic_token(s[0], s[1], n)
            for s, n in zip(cached.req_ids, cached.num_computed_tokens, strict=True)
        }
        for new in scheduler_output.scheduled_new_reqs:
            if new.req_id in self._out:
                n = new.num_computed_tokens + scheduler_output.num_scheduled_tokens[new.req_id]
                sampled[new.req_id] = synthetic_token(*new.req_id, n)
        return sampled

    def update_from_output(
        self, scheduler_output: SchedulerOutput, sampled: Mapping[ReqId, int]
    ) -> list[ReqId]:
        """Take the sampled tokens (v0's output processing); the finished sequences."""
        sampled = self._check_output(scheduler_output, sampled)
        self._pending_output = None
        m, finished, still = self.manager, list[ReqId](), list[Group]()
        served = set(self._sampling_keys(scheduler_output))
        for g in self.running:
            if g.key not in served and (not g.seq_ids or g.seq_ids[0] not in sampled):
                still.append(g)  # admitted or swapped in this step
                continue
            g.generated += 1
            for s in g.seq_ids if g.key in self._stops else ():
                self._out[s].append(sampled[s])
            if g.generated >= g.output_len or self._stopped(g):
                for s in g.seq_ids:
                    m.free_sequence(s)
                    finished.append(s)
                    self._out.pop(s, None)
                self._groups.pop(g.key, None)  # type: ignore[call-overload]
                self.finished += 1
            else:
                if len(g.seq_ids) > 1 and self._request(g).beam_width > 1:
                    self._rerank(g)
                still.append(g)
        self.running = still
        self._finished_req_ids.update(finished)
        if self.record:
            self.records.append(self._record(scheduler_output))
        return finished

    def _stopped(self, g: Group) -> bool:
        """An added request's sequence sampled one of its stop tokens."""
        if g.key in self._groups and not g.seq_ids:
            return True  # the output processor freed every sequence (a beam search ended)
        stops = self._stops.get(g.key, ()) if isinstance(g.key, int) else ()
        return bool(stops) and all(self._out[s][-1] in stops for s in g.seq_ids)

    def _record(self, scheduler_output: SchedulerOutput) -> StepRecord:
        m, total = self.manager, scheduler_output.total_num_scheduled_tokens
        decoded = len(scheduler_output.scheduled_cached_reqs.req_ids)
        return StepRecord(
            self.now,
            len(self._running_seqs()),
            len(self.waiting),
            len(self.swapped),
            m.pool.num_used,
            sum(len(g.seq_ids) * (g.prompt_len + g.generated) for g in self.running),
            sum(
                len(g.seq_ids) * blocks_needed(g.prompt_len + g.generated, m.block_size)
                for g in self.running
            ),
            total,
            total - decoded,
            decoded,
        )

    def _schedule_decodes(self) -> list[Group]:
        """One slot for every running sequence, preempting while short; the groups."""
        m = self.manager
        while self.running and m.blocks_for_decode(self._running_seqs()) > m.num_free_blocks:
            self._preempt(self._pick(self.running))
        if not self.running:
            return []
        seqs = self._running_seqs()
        ids = None
        if self._cached:  # an added request's sequence computes its last sampled token
            ids = [
                self._out[s][-1]
                if s in self._out
                else synthetic_token(s[0], s[1], g.prompt_len + g.generated)
                for g in self.running
                for s in g.seq_ids
            ]
        m.decode_step(seqs, with_slots=False, token_ids=ids)
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
        m = self.manager
        k, p = len(g.seq_ids), g.prompt_len
        if len(self._running_seqs()) + k > self.max_num_seqs:
            return False
        assert isinstance(g.key, int), f"group key {g.key!r} is not a request index"
        # the prefix cache, when there is one and the prompts' ids are known (else None)
        cache = m if self.tokens is not None and isinstance(m, PrefixCachingManager) else None
        tokens = () if self.tokens is None else self.tokens[g.key]
        need = self._blocks_to_admit(g)
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
                    else self._out[s]
                    if s in self._out  # an added request's sampled tokens
                    else [synthetic_token(s[0], s[1], q) for q in range(p, p + g.generated)]
                )
                m.append_tokens(s, g.generated, token_ids=ids)
                self._scheduled[s] += g.generated
            prefilled += k * g.generated
        if g.key in self._preempted:
            self.recomputed_tokens += prefilled
        g.order = self._next_order()
        return True

    def _blocks_to_admit(self, g: Group) -> int:
        """Free blocks `_admit` asks for before cache hits: the tokens, a block of decode
        headroom per sequence (an added request's: only if its next decode starts a block),
        the watermark."""
        bs, k, p = self.manager.block_size, len(g.seq_ids), g.prompt_len
        if g.key in self._groups:
            assert k == 1, "a forked added request is only ever swapped"
            held = p + g.generated
            starts_block = g.generated + 1 < g.output_len and held % bs == 0
            return blocks_needed(held, bs) + starts_block + self.watermark
        need = blocks_needed(p, bs) + k + self.watermark  # headroom for the next decode
        if g.generated:
            need += k * (blocks_needed(p + g.generated, bs) - p // bs)
        return need

    def _preempt(self, g: Group) -> None:
        if g.key in self._groups and len(g.seq_ids) > 1 and not self.policy.keeps_kv:
            raise RuntimeError(
                "a request whose sequences were forked can only be swapped "
                "(preemption 'swap'; vLLM v0 refuses to recompute them too)"
            )
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
        """The manager's reclaimer: preempt groups neither protected nor scheduled now."""
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
        assert isinstance(g.key, int), f"group key {g.key!r} is not a request index"
        return self.requests[g.key]

    def _next_order(self) -> int:
        self._admitted += 1
        return self._admitted
