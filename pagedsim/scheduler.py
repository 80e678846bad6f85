"""A continuous-batching driver: iteration-level scheduling over one KV-cache manager (Orca; vLLM Sec. 4.5).

Each request becomes a *group* of sequences that share its prompt: `n` parallel
samples or `beam_width` beams, forked from the prompt with copy-on-write. One call
to `step()` is one model iteration:

    1. decode: every running sequence gets one token (`manager.decode_step`). If the
       free blocks cannot cover the new blocks this needs (including copy-on-write
       copies), victim groups are preempted first -- by default the most recently
       admitted -- with the chosen policy (`recompute` or `swap`, see policies/).
       Beams are then re-ranked synthetically: each beam, with probability
       `beam_reshuffle`, is replaced by a fork of another beam (vLLM's beam search
       frees losing beams and forks winning ones the same way).
    2. if nothing was preempted: swapped groups come back first (FCFS), and then
       waiting groups are admitted in arrival order while their prompt blocks, plus
       one block per sequence of headroom for the next decode, plus a watermark (1% of
       the pool, as in vLLM) fit in the free blocks.
       A recomputed group prefills its prompt and the tokens it had generated.
    3. a `StepRecord` of the usage is appended to `records`.

Groups finish after `output_len` decode steps and free their blocks at once. The
manager's `evictor` hook is pointed at the same victim choice, so an allocation
that runs short anywhere preempts instead of failing.
"""

from __future__ import annotations

import inspect
from collections import deque
from dataclasses import dataclass

import numpy as np

from .block_table import blocks_needed
from .policies.preemption import Group, RecomputePolicy, make_policy
from .policies.prefix_cache import PrefixCachingManager

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


class Scheduler:
    def __init__(self, requests, manager, policy="recompute", *, victim: str = "newest",
                 max_running: int | None = None, host_blocks: int = 0, block_bytes: int = 1,
                 beam_reshuffle: float = 0.25, seed: int = 0, tokens=None, record: bool = True,
                 watermark: float = 0.01):
        if victim not in VICTIMS:
            raise ValueError(f"victim must be one of {VICTIMS}, got {victim!r}")
        if not 0.0 <= beam_reshuffle <= 1.0:
            raise ValueError(f"beam_reshuffle must be in [0, 1], got {beam_reshuffle!r}")
        self.manager = manager
        self.policy = (make_policy(policy, host_blocks=host_blocks, block_bytes=block_bytes)
                       if isinstance(policy, str) else policy)
        self.victim = victim  # which running group is preempted first
        self.max_running = max_running  # cap on running sequences (None: blocks decide)
        self.beam_reshuffle = beam_reshuffle
        # request index -> prompt token ids (for prefix caching), as tuples once
        self.tokens = None if tokens is None else [tuple(np.asarray(t).tolist()) for t in tokens]
        self.watermark = int(watermark * manager.num_blocks)  # blocks admission leaves free
        self.record = record
        self.rng = np.random.default_rng(seed)
        bs, nb = manager.block_size, manager.num_blocks
        self.requests = list(requests)
        for i, r in enumerate(self.requests):
            per_seq = blocks_needed(r.total_len, bs)
            if hasattr(manager, "kept"):  # a sliding window caps what a sequence holds
                per_seq = max(manager.kept(r.total_len) + 1, blocks_needed(r.prompt_len, bs))
            worst = r.num_seqs * per_seq + r.num_seqs
            if worst > nb:
                raise ValueError(f"request {i} ({r.num_seqs} x {r.total_len} tokens) needs up to "
                                 f"{worst} blocks, more than the pool's {nb}")
        self._arrivals = deque(sorted(range(len(self.requests)),
                                      key=lambda i: self.requests[i].arrival_step))
        self.waiting: deque[Group] = deque()
        self.running: list[Group] = []
        self.swapped: deque[Group] = deque()
        self.records: list[StepRecord] = []
        self.now = 0  # steps taken
        self.finished = 0
        self._admitted = 0  # admission counter (Group.order)
        manager.evictor = self._evict
        # Skip building the slot list when the manager can (the driver never writes K/V).
        params = inspect.signature(manager.decode_step).parameters
        self._decode_kwargs = {"with_slots": False} if "with_slots" in params else {}

    # ---- results -------------------------------------------------------------
    @property
    def done(self) -> bool:
        return not (self._arrivals or self.waiting or self.running or self.swapped)

    @property
    def preemptions(self) -> int:
        return self.policy.preemptions

    @property
    def recomputed_tokens(self) -> int:
        return self.policy.recomputed_tokens

    def run(self, max_steps: int = 10**8, check: bool = False) -> "Scheduler":
        """Step until every request is finished; `check` runs check_invariants after each step."""
        while not self.done:
            if self.now >= max_steps:
                raise RuntimeError(f"not finished after {max_steps} steps")
            self.step()
            if check:
                self.manager.check_invariants()
        return self

    # ---- one iteration ------------------------------------------------------------
    def step(self) -> None:
        self.now += 1
        arrivals, reqs = self._arrivals, self.requests
        while arrivals and reqs[arrivals[0]].arrival_step < self.now:
            i = arrivals.popleft()
            r = reqs[i]
            seqs = [(i, k) for k in range(r.num_seqs)]
            self.waiting.append(Group(i, r.prompt_len, r.output_len, seqs))
        before = self.policy.preemptions
        self._decode()
        if self.policy.preemptions == before:
            while self.swapped and self.policy.swap_in(self.manager, self.swapped[0]):
                g = self.swapped.popleft()
                g.order = self._next_order()
                self.running.append(g)
            if not self.swapped:
                while self.waiting and self._admit(self.waiting[0]):
                    self.running.append(self.waiting.popleft())
        if self.record:
            m = self.manager
            self.records.append(StepRecord(
                self.now, sum(len(g.seq_ids) for g in self.running), len(self.waiting),
                len(self.swapped), m.pool.num_used,
                sum(len(g.seq_ids) * (g.prompt_len + g.generated) for g in self.running),
                sum(len(g.seq_ids) * blocks_needed(g.prompt_len + g.generated, m.block_size)
                    for g in self.running)))

    def _decode(self) -> None:
        m = self.manager
        while self.running and self._blocks_for_decode() > m.num_free_blocks:
            self._preempt(self._pick(self.running))
        if not self.running:
            return
        m.decode_step([s for g in self.running for s in g.seq_ids], **self._decode_kwargs)
        still = []
        for g in self.running:
            g.generated += 1
            if g.generated >= g.output_len:
                for s in g.seq_ids:
                    m.free_sequence(s)
                self.finished += 1
            else:
                if len(g.seq_ids) > 1 and self.requests[g.key].beam_width > 1:
                    self._rerank(g)
                still.append(g)
        self.running = still

    def _blocks_for_decode(self) -> int:
        tables, ref, bs = self.manager._tables, self.manager.pool._ref, self.manager.block_size
        need = 0
        for g in self.running:
            for s in g.seq_ids:
                t = tables[s]
                need += t.num_tokens % bs == 0 or ref[t.blocks[-1]] > 1
        return need

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
        tokens = None if self.tokens is None else self.tokens[g.key]
        cached = tokens is not None and isinstance(m, PrefixCachingManager)
        need = blocks_needed(p, bs) + k + self.watermark  # headroom for the next decode
        if g.generated:
            need += k * (blocks_needed(p + g.generated, bs) - p // bs)
        if need > m.num_free_blocks and cached:  # blocks already in use cost nothing
            need -= sum(1 for b in m.match(tokens) if m.pool._ref[b])
        if need > m.num_free_blocks:
            return False
        first = g.seq_ids[0]
        if cached:
            m.add_sequence(first, p, tokens)
        else:
            m.add_sequence(first, p)
        for s in g.seq_ids[1:]:
            m.fork(first, s)
        if g.generated:
            for s in g.seq_ids:
                m.append_tokens(s, g.generated)
        g.order = self._next_order()
        return True

    def _preempt(self, g: Group) -> None:
        self.running.remove(g)
        if self.policy.preempt(self.manager, g) == "swap":
            self.swapped.append(g)
        else:
            self.waiting.appendleft(g)

    def _pick(self, groups) -> Group:
        pick = max if self.victim == "newest" else min
        return pick(groups, key=lambda g: g.order)

    def _evict(self, manager, blocks_short: int, protect: set) -> None:
        """The manager's evictor hook: preempt groups that hold no protected sequence."""
        while blocks_short > 0:
            candidates = [g for g in self.running if not protect.intersection(g.seq_ids)]
            if not candidates:
                return
            free_before = manager.num_free_blocks
            self._preempt(self._pick(candidates))
            blocks_short -= manager.num_free_blocks - free_before

    def _next_order(self) -> int:
        self._admitted += 1
        return self._admitted

    def _num_running(self) -> int:
        return sum(len(g.seq_ids) for g in self.running)


__all__ = ["Scheduler", "StepRecord", "Group", "RecomputePolicy", "VICTIMS"]
