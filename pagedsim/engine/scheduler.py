"""The engine's scheduler: a token budget per step, chunked prefill, preemption.

Each step (vLLM v1's order) serves running requests first, then swapped ones, then
waiting ones, within `max_num_batched_tokens` (vLLM's name for the step's budget):
  * a decoding request costs one token per live sequence and one slot each
    (append: a new block at a boundary, a private copy of a shared tail);
  * a request still prefilling gets the next chunk of its remaining tokens that the
    budget allows (chunked prefill: a long prompt spans several steps);
  * a waiting request is admitted when its blocks fit; prefix-cache hits are counted
    as computed, capped so that at least the last token is computed (v1).
When a running request cannot get a slot, the most recently admitted request not yet
served this step is preempted (the request itself if there is none). v0's rule picks
how: one sequence -> recompute (blocks freed, tokens prefilled again later) unless the
preemption_mode is "swap"; several sequences (beams, n > 1) -> swap, since they share blocks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..policies.preemption import preemption_class
from .adapter import BlockAdapter
from .requests import RequestState


@dataclass
class Run:
    """A request inside the engine."""

    state: RequestState
    computed: dict = field(default_factory=dict)  # seq -> tokens whose K/V is in the cache
    order: int = 0  # admission counter: larger = admitted later
    hold: int = 0  # positions below this already hold K/V from a cache hit: not rewritten
    hit_tokens: int = 0  # tokens served by prefix-cache hits, over every admission
    status: str = "waiting"  # waiting | running | swapped | done


@dataclass
class Item:
    """One sequence's share of a step: compute positions [start, end)."""

    run: Run
    seq: str
    start: int
    end: int
    write_from: int  # positions below this already hold K/V (a capped cache hit)


class Scheduler:
    def __init__(self, blocks: BlockAdapter, kv, max_num_batched_tokens: int, preemption_mode: str):
        # the registry decides (policies/preemption.py)
        self.keeps_kv = preemption_class(preemption_mode).keeps_kv
        self.blocks, self.kv = blocks, kv
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque = deque()
        self.running: list = []
        self.swapped: deque = deque()
        self._order = 0
        self.stats = dict(
            preempted_recompute=0,
            preempted_swap=0,
            swap_bytes=0,
            cow_bytes=0,
            cached_tokens=0,
            computed_tokens=0,
            recomputed_tokens=0,
        )

    def add(self, run: Run) -> None:
        self.waiting.append(run)

    def schedule(self) -> list[Item]:
        items: list[Item] = []
        budget, served = self.max_num_batched_tokens, set[int]()
        self._swap_in()
        for run in list(self.running):
            if run.status != "running":
                continue  # preempted earlier in this loop
            served.add(id(run))
            budget = self._serve(run, items, budget, served)
        if not self.swapped:
            while self.waiting and budget > 0 and self._admit(self.waiting[0]):
                run = self.waiting.popleft()
                budget = self._serve(run, items, budget, served)
        return items

    # ---- one request's share of the step ------------------------------------------------
    def _serve(self, run: Run, items: list, budget: int, served: set) -> int:
        state, seqs = run.state, run.state.seq_keys()
        remaining = {s: len(state.tokens[s]) - run.computed[s] for s in seqs}
        if all(run.computed[s] > 0 and remaining[s] == 1 for s in seqs):  # decoding
            if len(seqs) > budget:
                return budget
            for s in seqs:
                while self.blocks.num_tokens(s) < len(state.tokens[s]):
                    copies = self.blocks.append(s, state.tokens[s][self.blocks.num_tokens(s)])
                    if copies is not None:
                        if copies:
                            self.kv.copy(copies)
                            self.stats["cow_bytes"] += len(copies) * self.kv.block_bytes
                        continue
                    victim = next(
                        (
                            r
                            for r in reversed(self.running)
                            if r.status == "running" and id(r) not in served
                        ),
                        run,
                    )
                    self.preempt(victim)
                    if victim is run:
                        return budget
            items += [
                Item(run, s, run.computed[s], run.computed[s] + 1, max(run.computed[s], run.hold))
                for s in seqs
            ]
            return budget - len(seqs)
        chunk = min(max(remaining.values()), budget // len(seqs))
        if chunk <= 0:
            return budget
        for s in seqs:
            start = run.computed[s]
            end = min(start + chunk, len(state.tokens[s]))
            items.append(Item(run, s, start, end, max(start, run.hold)))
            budget -= end - start
        return budget

    # ---- admission, preemption, swapping ------------------------------------------------
    def _admit(self, run: Run) -> bool:
        state = run.state
        (seq,) = state.seq_keys()  # several sequences never wait here: they swap
        tokens = tuple(state.tokens[seq])
        cached = self.blocks.admit(seq, tokens)
        if cached is None:
            return False
        run.computed = {seq: min(cached, len(tokens) - 1)}  # v1's cap: compute the last token
        run.hold = cached
        self.stats["cached_tokens"] += run.computed[seq]
        run.hit_tokens += run.computed[seq]
        self._order += 1
        run.order, run.status = self._order, "running"
        self.running.append(run)
        return True

    def preempt(self, run: Run) -> None:
        seqs = run.state.seq_keys()
        self.running.remove(run)
        if len(seqs) > 1 or self.keeps_kv:
            pairs = self.blocks.swap_out(seqs)
            if pairs is not None:
                self.kv.swap_out(pairs)
                self.stats["swap_bytes"] += len(pairs) * self.kv.block_bytes
                self.stats["preempted_swap"] += 1
                run.status = "swapped"
                self.swapped.append(run)
                return
            if len(seqs) > 1:
                raise RuntimeError(
                    "the host pool is full: a request with several sequences "
                    "can only be swapped (vLLM v0 raises here too)"
                )
        (seq,) = seqs
        self.blocks.free(seq)
        self.stats["preempted_recompute"] += 1
        self.stats["recomputed_tokens"] += run.computed[seq]
        run.computed, run.hold = {seq: 0}, 0
        run.status = "waiting"
        self.waiting.appendleft(run)

    def _swap_in(self) -> None:
        while self.swapped:
            run = self.swapped[0]
            seqs = run.state.seq_keys()
            decode_room = sum(len(r.state.tokens) for r in self.running)  # one block per sequence
            if self.blocks.blocks_to_swap_in(seqs) + decode_room > self.blocks.num_free:
                return
            pairs = self.blocks.swap_in(
                seqs, {s: (run.state.tokens[s], run.computed[s]) for s in seqs}
            )
            self.kv.swap_in(pairs)
            self.stats["swap_bytes"] += len(pairs) * self.kv.block_bytes
            self.swapped.popleft()
            run.status = "running"
            self.running.append(run)
