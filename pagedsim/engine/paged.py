"""The paged engine: a model served from pagedsim's blocks by an attention backend.

One `step()` is vLLM v1's EngineCore.step (and nano-vllm's LLMEngine.step), three calls:

    scheduler_output = scheduler.schedule()         which requests compute which positions
    sampled = <the model on scheduler_output>       `_run`, then each request's sampler
    finished = scheduler.update_from_output(scheduler_output, sampled)

v1 (`mode="v1"`, the default) runs on `SchedulerV1` (lesson 3.6: one token budget, chunked
prefill, prefix caching, recompute preemption, KV cache groups for sliding-window and
hybrid models). Per layer the runner writes the scheduled tokens' K/V into their slots,
runs the backend's prefill on the prefill chunks (packed by `query_start_loc`) and its
decode on the one-token queries, then the rest of the layer in NumPy. v0 (`mode="v0"`:
beam search, n > 1, swapping) runs the same loop on `SchedulerV0` (vLLM v0's
LLMEngine.step): the sampler forks and frees through `fork_seq` / `free_seq` (v0's output
processor) and the engine moves the K/V the scheduler asked for (swaps, copy-on-write).
A finished request leaves `runs` in the step that finishes it, as in vLLM.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..block_table import NULL_BLOCK, BlockTable, blocks_needed
from ..config import CacheConfig, SchedulerConfig
from ..errors import bool_arg, count_arg
from ..manager import KVCacheManager
from ..policies.hybrid import HybridManager
from ..policies.prefix_cache import PrefixCachingManager
from ..policies.sliding_window_cache import SlidingWindowPrefixCachingManager
from ..scheduler_common import check_configs
from ..scheduler_output import SchedulerOutput
from ..scheduler_v0 import SchedulerV0, SeqGroupPolicy
from ..scheduler_v1 import SchedulerV1
from .backend import AttentionBackend, Ints, choose
from .model import ModelConfig, Transformer
from .requests import Logits, Request, RequestState, seq_id
from .step_log import TableCounts, trace_counts


@dataclass
class Run:
    """A request inside the engine."""

    state: RequestState
    hit_tokens: int = 0  # tokens served by prefix-cache hits, over every admission
    status: str = "waiting"  # waiting | running | done


@dataclass
class Item:
    """One sequence's share of a step: compute positions [start, end)."""

    run: Run
    seq: tuple[int, int]  # the block manager's sequence id
    key: str  # the sequence's key in run.state.tokens
    start: int
    end: int
    write_from: int  # positions below this already hold K/V (a capped cache hit)


# the engine's own defaults: a 16-token budget, v0 recomputing one sequence per group
ENGINE_SCHEDULER_CONFIG = SchedulerConfig(max_num_batched_tokens=16, preemption_mode="recompute")

STATS = (
    "preempted_recompute preempted_swap swap_bytes cow_bytes cached_tokens computed_tokens "
    "recomputed_tokens"
).split()


class PagedEngine:
    def __init__(
        self,
        model: Transformer,
        cache_config: CacheConfig,
        scheduler_config: SchedulerConfig = ENGINE_SCHEDULER_CONFIG,
        *,
        backend: str | AttentionBackend[Any] = "auto",
        trace: bool = False,
        check: bool = False,
        manager: KVCacheManager | None = None,
        mode: str = "v1",
    ) -> None:
        """`cache_config`: num_gpu_blocks required; num_cpu_blocks (v0's swap space) defaults
        to 4 x num_gpu_blocks. `backend`: "auto", "numpy", "kernels" or a backend object.
        `mode` "v0": preemption_mode "recompute" recomputes one sequence and swaps several
        (SeqGroupPolicy), "swap" swaps every group. `manager`: a pool to serve (v0 only)."""
        if not isinstance(model, Transformer):
            raise TypeError(
                f"model must be a Transformer (TinyModel or hf.load_model), got "
                f"{type(model).__name__}"
            )
        check_configs(scheduler_config, cache_config)
        if cache_config.num_gpu_blocks is None:
            raise ValueError("cache_config.num_gpu_blocks must be set: the pool's size")
        num_gpu_blocks, block_size = cache_config.num_gpu_blocks, cache_config.block_size
        caching = cache_config.enable_prefix_caching
        preemption_mode = scheduler_config.preemption_mode
        flags = dict(trace=trace, check=check)
        c = model.config
        self._check_args(mode, c.windowed, preemption_mode, manager, flags)
        num_cpu_blocks = cache_config.num_cpu_blocks
        num_cpu_blocks = 4 * num_gpu_blocks if num_cpu_blocks is None else num_cpu_blocks
        self.model, self.check, self.mode, self.block_size = model, check, mode, block_size
        self.backend = choose(backend)  # the one place the attention backend is picked
        # the paged K/V: per layer a cache [N, 2, H_kv, B, D] float32 (the backend's array)
        # and a host pool for v0's swapping (NumPy)
        shape = (num_gpu_blocks, 2, c.kv_heads, block_size, c.head_dim)
        self.caches = [self.backend.new_cache(shape) for _ in range(c.layers)]
        self.hosts = [np.zeros((num_cpu_blocks, *shape[1:]), np.float32) for _ in range(c.layers)]
        self.block_bytes = c.layers * int(np.prod(shape[1:])) * 4  # one block, every layer
        # each layer's KV cache group: 0, or 1 for the sliding layers of a hybrid model
        self.layer_group = [
            int(len(c.windowed) == 2 and c.layer_type(i) == "sliding") for i in range(c.layers)
        ]
        # the KV cache groups: ("full",), ("window",), or ("full", "window") (hybrid)
        self.groups = tuple(
            g for g, kind in (("full", "full"), ("window", "sliding")) if kind in c.windowed
        )
        self.scheduler: Any  # SchedulerV1 or SchedulerV0
        self.stats = dict.fromkeys(STATS, 0)
        self._budget = scheduler_config.max_num_batched_tokens
        if mode == "v1":
            self.manager = _v1_manager(c, num_gpu_blocks, block_size, caching, trace)
            self.scheduler = self._v1_scheduler(self._budget, cache_config)
        else:
            self.manager = _v0_manager(manager, num_gpu_blocks, block_size, caching, trace)
            swap_single = preemption_mode == "swap"
            policy = SeqGroupPolicy(num_cpu_blocks, self.block_bytes, swap_single=swap_single)
            sized = replace(cache_config, num_cpu_blocks=num_cpu_blocks)  # as the engine holds it
            self.scheduler = SchedulerV0(
                [], self.manager, cache_config=sized, policy=policy, record=False
            )
        self._written: dict[int, tuple[int, ...]] = {}  # block -> the tokens its K/V holds in full
        self._mark = 0  # trace events already counted in the step log
        self.runs: dict[int, Run] = {}  # the live requests, by request number (rid[0])
        self._num_requests = 0  # requests ever submitted: the next one's number
        self.log: list[dict[str, Any]] = []  # one dict per step: what ran and what the blocks did

    def _v1_scheduler(self, max_num_batched_tokens: int, cache: CacheConfig) -> SchedulerV1:
        """SchedulerV1 over the v1 manager; the window groups' step-log counts beside it."""
        self._tables_log = (
            TableCounts(self.groups, self._tables) if "window" in self.groups else None
        )
        return SchedulerV1(
            [],
            self.manager,
            # max_model_len: the model's own limits (Transformer.check_length)
            SchedulerConfig(max_num_batched_tokens=max_num_batched_tokens, max_model_len=2**62),
            cache,
            record=False,
            slide_after_update=True,  # the model reads the window during the step
        )

    @staticmethod
    def _check_args(
        mode: str,
        windowed: set[str],
        preemption_mode: str,
        manager: KVCacheManager | None,
        flags: dict[str, bool],
    ) -> None:
        for name, flag in flags.items():
            bool_arg(name, flag)
        if mode not in ("v1", "v0"):
            raise ValueError(f"mode must be 'v1' or 'v0', got {mode!r}")
        if mode == "v0" and "sliding" in windowed:
            raise ValueError("a model with sliding-window layers is served by v1 (mode='v1')")
        if mode == "v1" and preemption_mode != "recompute":
            raise ValueError("v1 preempts by recomputing only: preemption_mode='swap' is v0's")
        if mode == "v1" and manager is not None:
            raise ValueError("a given manager serves v0 (mode='v0'): v1 allocates its own")

    def refuse(self, request: Request) -> None:
        """Raise if `request` could never be served; changes nothing."""
        if not isinstance(request, Request):
            raise TypeError(f"a request must be a Request, got {type(request).__name__}")
        self.model.check_tokens(request.prompt)
        self.model.check_length(len(request.prompt), request.max_tokens)
        bs, pool = self.block_size, self.manager.num_gpu_blocks
        worst = (
            request.width
            * blocks_needed(len(request.prompt) + request.max_tokens, bs)
            * len(self.groups)
        )  # a hybrid model fills two groups
        if worst > pool:
            raise ValueError(f"request needs up to {worst} blocks alone; the pool has {pool}")
        if self.mode == "v1" and (request.width > 1 or request.beam_width):
            raise ValueError(
                f"request runs {request.width} sequences or a beam search; vLLM v1 runs "
                f"those outside its scheduler: this engine serves them with v0's forks "
                f"(mode='v0'), and a model with sliding-window layers serves one"
            )
        if request.width > self._budget:
            raise ValueError(
                f"request runs {request.width} sequences; max_num_batched_tokens is {self._budget}"
            )
        if self.mode == "v0":  # its admission headroom and watermark (SchedulerV0)
            self.scheduler.check_request(len(request.prompt), request.max_tokens, request.width)

    def submit(self, request: Request, keep_logits: bool = False) -> Run:
        """Queue a request (refused if it could never be served); its Run leaves `runs` when
        done. `keep_logits`: keep every position's logits, for the dense comparison."""
        bool_arg("keep_logits", keep_logits)
        self.refuse(request)
        number = self._num_requests
        run = Run(RequestState(number, request, keep_logits))
        best_of = {} if self.mode == "v1" else {"best_of": request.width}
        rid = self.scheduler.add_request(
            request.prompt, request.max_tokens, request.stop_token_ids, **best_of
        )
        assert rid == (number, 0), "the scheduler numbers requests as the engine"
        self.runs[number] = run
        self._num_requests += 1
        return run

    def generate(
        self, requests: Iterable[Request], max_steps: int = 10_000, keep_logits: bool = False
    ) -> list[RequestState]:
        """Serve `requests` to the end; RequestState per request (all refused if one is bad),
        each with its logits at every position if `keep_logits` (submit)."""
        if isinstance(requests, Request) or not hasattr(requests, "__iter__"):
            raise TypeError(f"requests must be a list of Request, got {type(requests).__name__}")
        requests = list(requests)
        for r in requests:
            self.refuse(r)
        count_arg("max_steps", max_steps, 1)
        bool_arg("keep_logits", keep_logits)
        runs = [self.submit(r, keep_logits) for r in requests]
        for _ in range(max_steps):
            if not self.runs:
                return [run.state for run in runs]
            self.step()
        raise RuntimeError(f"not finished after {max_steps} steps")

    def step(self) -> dict[str, Any]:
        """One engine step: schedule() -> (v0: the K/V moves it asked for) -> the model ->
        each sampling request's sampler -> update_from_output(). The step log's entry."""
        if not self.runs:
            raise RuntimeError(
                "nothing to step: no request is waiting or running (submit one first)"
            )
        counts = self._counts()
        scheduler_output = self.scheduler.schedule()
        moved = self._move_blocks() if self.mode == "v0" else False
        items = self._items(scheduler_output)
        logits = self._run(items) if items else {}
        self._remember(items)  # before a sampler frees a sequence's blocks
        sampled = self._sample(scheduler_output, logits)
        for rid in self.scheduler.update_from_output(scheduler_output, sampled):
            self.runs[rid[0]].status = "done"
        for run in self.runs.values():  # v0: a request whose every sequence stopped ends
            if run.state.done:  # with none left
                run.status = "done"
        self.runs = {n: run for n, run in self.runs.items() if run.status != "done"}
        self.stats["computed_tokens"] += scheduler_output.total_num_scheduled_tokens
        preempted = {k: v - counts[k] for k, v in self._counts().items() if v != counts[k]}
        for k, v in preempted.items():
            self.stats[k] += v
        if not items and not moved and not preempted:
            raise RuntimeError("nothing could be scheduled: the pool or budget is too small")
        return self._record(items, preempted)

    def _counts(self) -> dict[str, int]:
        """The scheduler's preemption counters, as the step log names them."""
        sched = self.scheduler
        if self.mode == "v1":
            return dict(
                preempted_recompute=sched.preemptions, recomputed_tokens=sched.discarded_tokens
            )
        swaps = sched.policy.swap_outs
        return dict(
            preempted_recompute=sched.preemptions - swaps,
            preempted_swap=swaps,
            recomputed_tokens=sched.recomputed_tokens,
        )

    def _move_blocks(self) -> bool:
        """v0: the K/V moves schedule() asked for: swaps out first (their GPU blocks may be
        handed out again in the same schedule()), copy-on-write copies, swaps in. True if
        anything was swapped."""
        swap_out, swap_in = self.scheduler.policy.drain_swaps()
        copies, b = self.manager.drain_copies(), self.backend
        for cache, host in zip(self.caches, self.hosts, strict=True):
            if swap_out:
                b.swap_out(cache, host, swap_out)
            if copies:
                b.copy_blocks(cache, copies)
            if swap_in:
                b.swap_in(host, cache, swap_in)
        self.stats["swap_bytes"] += (len(swap_out) + len(swap_in)) * self.block_bytes
        self.stats["cow_bytes"] += len(copies) * self.block_bytes
        return bool(swap_out or swap_in)

    def _sample(
        self, scheduler_output: SchedulerOutput, logits: dict[str, Logits]
    ) -> dict[tuple[int, int], int]:
        """Each sampling request's sampler (RequestState.advance); v0's forks and frees reach
        the scheduler before update_from_output(), as v0's output processor calls
        fork_seq and free_seq. Returns {req_id: the token it sampled}."""
        sched = self.scheduler
        for rid in dict.fromkeys(q[0] for q in sched.sampling_req_ids(scheduler_output)):
            state = self.runs[rid].state
            for kind, *keys in state.advance({k: logits[k] for k in state.seq_keys()}):
                if self.mode == "v1":
                    continue  # a stop token: update_from_output finishes the request
                if kind == "fork":
                    sched.fork_seq(seq_id(keys[0]), seq_id(keys[1]))
                else:
                    sched.free_seq(seq_id(keys[0]))
        sampled: dict[tuple[int, int], int] = {}
        for q in sched.sampling_req_ids(scheduler_output):  # v0: the live ones, after forks
            state = self.runs[q[0]].state
            key = state.key(q[1])
            sampled[q] = (state.tokens.get(key) or state.finished[key])[-1]
        return sampled

    def _items(self, scheduler_output: SchedulerOutput) -> list[Item]:
        """The scheduled requests as the runner's items; new ones are marked running and
        their prefix-cache hits counted."""
        cached = scheduler_output.scheduled_cached_reqs
        starts = dict(zip(cached.req_ids, cached.num_computed_tokens, strict=True))
        counts = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            run = self.runs[new.req_id[0]]
            run.status = "running"
            starts[new.req_id] = new.num_computed_tokens
            if counts[new.req_id]:  # v0: a sequence forked at admission computes nothing
                run.hit_tokens += new.num_computed_tokens
                self.stats["cached_tokens"] += new.num_computed_tokens
        for rid in scheduler_output.preempted_req_ids:
            self.runs[rid[0]].status = "waiting"
        if self.mode == "v0":  # a group swapped in this step runs again, from the next
            for group in self.scheduler.running:
                self.runs[group.key].status = "running"
        items = []
        for rid, n in counts.items():
            run, start = self.runs[rid[0]], starts[rid]
            if n:
                items.append(Item(run, rid, run.state.key(rid[1]), start, start + n, start))
        return items

    def _remember(self, items: list[Item]) -> None:
        """v1: the tokens each full block written this step holds (labels for the cache)."""
        bs = self.block_size
        for i in items:
            table = self._tables(i.seq)[0].blocks
            tokens = i.run.state.tokens.get(i.key) or i.run.state.finished.get(i.key, [])
            for b in range(i.start // bs, min(i.end // bs, len(table))):
                if table[b] != NULL_BLOCK:
                    self._written[table[b]] = tuple(tokens[b * bs : (b + 1) * bs])

    def _record(self, items: list[Item], preempted: dict[str, int]) -> dict[str, Any]:
        if self.check:
            self.manager.check_invariants()
        if self.mode == "v1" and self._tables_log is not None:
            live = [(i, 0) for i, run in self.runs.items() if run.status == "running"]
            events = self._tables_log.since_mark(live)
        else:
            events, self._mark = trace_counts(self.manager.trace, self._mark)
        record = dict(
            step=len(self.log) + 1,
            prefill_tokens=sum(i.end - i.start for i in items if i.end - i.start > 1),
            decode_tokens=sum(1 for i in items if i.end - i.start == 1),
            seqs=[f"{i.key}[{i.start}:{i.end}]" for i in items],
            free_blocks=self.manager.num_free_blocks,
            **events,
        )
        record.update(preempted)
        self.log.append(record)
        return record

    def block_tokens(self) -> dict[int, tuple[int, ...]]:
        """block -> the token ids it holds: live sequences' blocks, and the free blocks the
        prefix cache can still hit (their K/V is complete). For labelling pictures."""
        bs, m = self.block_size, self.manager
        hittable = m.cached_free_blocks() if isinstance(m, PrefixCachingManager) else []
        out = {b: self._written[b] for b in hittable if b in self._written}
        for run in self.runs.values():
            if run.status != "running":
                continue
            for s in run.state.seq_keys():
                seq = seq_id(s)
                tokens = run.state.tokens[s][: m.num_tokens(seq)]
                for n, b in enumerate(self._tables(seq)[0].blocks):
                    if b != NULL_BLOCK:
                        out[b] = tuple(tokens[n * bs : (n + 1) * bs])
        return out

    def _tables(self, seq: Hashable) -> tuple[BlockTable, ...]:
        """A sequence's block table per KV cache group."""
        m = self.manager
        return m.block_tables(seq) if isinstance(m, HybridManager) else (m.block_table(seq),)

    def _run(self, items: list[Item]) -> dict[str, Logits]:
        """Forward the scheduled positions; logits {key: [V]} of sequences at their end."""
        m, c = self.model, self.model.config
        prefill = [i for i in items if i.end - i.start > 1]
        decode = [i for i in items if i.end - i.start == 1]
        order = prefill + decode
        tokens = np.concatenate([i.run.state.tokens[i.key][i.start : i.end] for i in order])
        positions = np.concatenate([np.arange(i.start, i.end) for i in order])
        lengths = np.concatenate([np.full(i.end - i.start, i.end) for i in order])
        groups = sorted(set(self.layer_group))
        tables = {id(i): self._tables(i.seq) for i in order}
        slots = {
            g: np.concatenate([self._slots(i, tables[id(i)][g].blocks) for i in order])
            for g in groups
        }
        split = sum(i.end - i.start for i in prefill)
        pre = {g: _batch(prefill, [tables[id(i)][g].blocks for i in prefill]) for g in groups}
        dec = {g: _batch(decode, [tables[id(i)][g].blocks for i in decode]) for g in groups}
        h = m.embed_tokens(tokens, positions)
        for layer in range(c.layers):
            g, spec, cache = self.layer_group[layer], m.attention[layer], self.caches[layer]
            q, k, v = m.qkv(layer, h, positions, lengths)
            self.backend.write(cache, k, v, slots[g])
            parts = []
            if prefill:
                q_pre = np.ascontiguousarray(q[:split])
                parts.append(self.backend.prefill(q_pre, cache, *pre[g], spec))
            if decode:
                q_dec = np.ascontiguousarray(q[split:])
                parts.append(self.backend.decode(q_dec, cache, *dec[g][:2], spec))
            h = m.finish(layer, h, np.concatenate(parts))
        last = np.cumsum([i.end - i.start for i in order]) - 1
        ends = [
            (n, i)
            for n, i in zip(last, order, strict=True)
            if i.end == len(i.run.state.tokens[i.key])
        ]
        out: np.ndarray | list[np.ndarray] = m.logits(h[[n for n, _ in ends]]) if ends else []
        return {i.key: row for (_, i), row in zip(ends, out, strict=True)}

    def _slots(self, item: Item, blocks: Sequence[int]) -> np.ndarray:
        """The slot of each position the step writes; -1 for a position whose K/V is
        already there (a capped cache hit) or whose block the window dropped."""
        bs = self.block_size
        pos = np.arange(item.start, item.end)
        b = np.asarray(blocks, np.int64)[pos // bs]
        keep = (b != NULL_BLOCK) & (pos >= item.write_from)
        return np.where(keep, b * bs + pos % bs, -1).astype(np.int64)


def _batch(items: list[Item], tables: list[Sequence[int]]) -> tuple[Ints, Ints, Ints]:
    """(block_tables int32 [S, max_blocks] padded with -1, context_lens, query_start_loc)."""
    width = max((len(t) for t in tables), default=0)
    padded = np.full((len(items), width), -1, np.int32)
    for row, t in enumerate(tables):
        padded[row, : len(t)] = t
    lens = np.array([i.end for i in items], np.int32)
    starts = np.concatenate([[0], np.cumsum([i.end - i.start for i in items])]).astype(np.int32)
    return padded, lens, starts


def _v0_manager(
    manager: KVCacheManager | None, num_gpu_blocks: int, block_size: int, caching: bool, trace: bool
) -> KVCacheManager:
    """v0's manager: `manager` if given (a student's pool, from
    course/ch03_kv_block/capstone.py), checked to be empty and of the configured shape, else
    a new one."""
    if manager is None:
        cls = PrefixCachingManager if caching else KVCacheManager
        return cls(num_gpu_blocks, block_size, trace=trace)
    if not isinstance(manager, KVCacheManager):
        raise TypeError(f"manager must be a KVCacheManager, got {type(manager).__name__}")
    if (manager.num_gpu_blocks, manager.block_size) != (num_gpu_blocks, block_size):
        raise ValueError(
            f"manager has {manager.num_gpu_blocks} blocks x {manager.block_size} tokens, "
            f"not {num_gpu_blocks} x {block_size}"
        )
    if isinstance(manager, PrefixCachingManager) != caching:
        raise ValueError(
            f"enable_prefix_caching is {caching} but the manager is a {type(manager).__name__}"
        )
    if manager.seq_ids():
        raise ValueError("manager must start with no sequences")
    return manager


def _v1_manager(
    config: ModelConfig, num_gpu_blocks: int, block_size: int, caching: bool, trace: bool
) -> KVCacheManager | HybridManager:
    """v1's manager: hybrid (full and sliding layers), window (all slide), prefix caching,
    or a plain KVCacheManager when prefix caching is off."""
    kinds = config.windowed
    if "sliding" in kinds:
        assert config.sliding_window is not None, "a sliding layer has a window"
        if "full" in kinds:
            return HybridManager(
                num_gpu_blocks, block_size, sliding_window=config.sliding_window, trace=trace
            )
        return SlidingWindowPrefixCachingManager(
            num_gpu_blocks, block_size, sliding_window=config.sliding_window, trace=trace
        )
    if caching:
        return PrefixCachingManager(num_gpu_blocks, block_size, trace=trace)
    # v1's pool with caching off puts freed blocks back at its head as one run (prepend_n)
    return KVCacheManager(num_gpu_blocks, block_size, free_order="prepend", trace=trace)
