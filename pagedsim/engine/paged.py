"""The paged engine: a model served from pagedsim's blocks by an attention backend.

One `step()` (nano-vllm's LLMEngine.step + ModelRunner, reduced to the blocks): the
scheduler picks each sequence's positions [start, end) within vLLM's token budget
`max_num_batched_tokens`; the runner embeds those tokens, and per layer writes their
K/V into their slots (`write_kv`, skipping positions a capped cache hit already holds),
runs `paged_prefill` for the prefill chunks (query length > 1, ragged, packed by
`query_start_loc`) and `paged_attention` for the decodes (query length 1), then the
rest of the layer in NumPy. Sequences that reached their last token hand their logits
to their request, whose fork/free actions go back to the block manager. Which code
reads the blocks (NumPy, or cuda_kernels on a GPU or the simulator) is the injected
backend (backend.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..block_table import blocks_needed
from ..errors import count_arg
from .adapter import BlockAdapter
from .backend import choose
from .kvstore import PagedKV
from .model import Transformer
from .requests import Request, RequestState
from .scheduler import Run, Scheduler
from .window_adapter import WindowAdapter


class PagedEngine:
    # per engine step, the text each block holds: set by generate.generate, read by step_frames
    block_labels: list[tuple[str, ...]]

    def __init__(
        self,
        model: Transformer,
        num_gpu_blocks: int,
        block_size: int,
        *,
        max_num_batched_tokens: int = 16,
        enable_prefix_caching: bool = False,
        preemption_mode: str = "recompute",
        num_cpu_blocks: int | None = None,
        backend="auto",
        trace: bool = False,
        check: bool = False,
        manager=None,
    ):
        """`backend`: "auto" (kernels on a GPU, NumPy on the CPU), "numpy", "kernels", or an
        attention backend object (backend.py). `max_num_batched_tokens` is vLLM's token
        budget of one step; `num_gpu_blocks` and `num_cpu_blocks` (default 4 x num_gpu_blocks,
        v0's swap space) size the pools, `preemption_mode` is v0's "recompute" or "swap".
        `manager`: a KVCacheManager to serve from instead of a new one (adapter.py; a model
        with full-attention layers only)."""
        if not isinstance(model, Transformer):
            raise TypeError(
                f"model must be a Transformer (TinyModel or hf.load_model), got "
                f"{type(model).__name__}"
            )
        count_arg("max_num_batched_tokens", max_num_batched_tokens, 1)
        for name, flag in (
            ("enable_prefix_caching", enable_prefix_caching),
            ("trace", trace),
            ("check", check),
        ):
            if type(flag) is not bool:
                raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
        if preemption_mode not in ("recompute", "swap"):
            raise ValueError(
                f"preemption_mode must be 'recompute' or 'swap', got {preemption_mode!r}"
            )
        num_cpu_blocks = (
            4 * count_arg("num_gpu_blocks", num_gpu_blocks, 1)
            if num_cpu_blocks is None
            else count_arg("num_cpu_blocks", num_cpu_blocks, 0)
        )
        c = model.config
        self.model, self.check = model, check
        kinds = c.windowed
        self.blocks: Any  # a BlockAdapter or a WindowAdapter: the calls the scheduler makes
        if "sliding" in kinds and manager is not None:
            raise ValueError("a model with sliding-window layers is served by its own manager")
        if "sliding" in kinds:  # v1's window manager, or its hybrid allocator
            assert c.sliding_window is not None, "a sliding layer has a window"
            self.blocks = WindowAdapter(
                num_gpu_blocks,
                block_size,
                sliding_window=c.sliding_window,
                hybrid="full" in kinds,
                enable_prefix_caching=enable_prefix_caching,
                trace=trace,
            )
        else:
            self.blocks = BlockAdapter(
                num_gpu_blocks,
                block_size,
                enable_prefix_caching=enable_prefix_caching,
                num_cpu_blocks=num_cpu_blocks,
                trace=trace,
                manager=manager,
            )
        # each layer's KV cache group: 0, or 1 for the sliding layers of a hybrid model
        self.layer_group = [
            int(len(kinds) == 2 and c.layer_type(i) == "sliding") for i in range(c.layers)
        ]
        self.backend = choose(backend)  # the one place the attention backend is picked
        self.kv = PagedKV(
            self.backend,
            c.layers,
            num_gpu_blocks,
            c.kv_heads,
            block_size,
            c.head_dim,
            num_cpu_blocks,
        )
        self.scheduler = Scheduler(self.blocks, self.kv, max_num_batched_tokens, preemption_mode)
        self.runs: list = []
        self.log: list = []  # one dict per step: what ran and what the blocks did

    @property
    def max_num_batched_tokens(self) -> int:
        return self.scheduler.max_num_batched_tokens

    def refuse(self, request) -> None:
        """Raise if `request` could never be served; changes nothing."""
        if not isinstance(request, Request):
            raise TypeError(f"a request must be a Request, got {type(request).__name__}")
        self.model.check_tokens(request.prompt)
        limit = self.model.max_model_len
        if limit is not None and len(request.prompt) + request.max_tokens > limit:
            raise ValueError(
                f"prompt + max_tokens = {len(request.prompt) + request.max_tokens} "
                f"exceeds the {limit} positions longrope's short factors serve "
                f"(original_max_position_embeddings)"
            )
        if request.width > 1 and not getattr(self.blocks, "supports_fork", True):
            raise ValueError(
                f"request runs {request.width} sequences; a model with "
                f"sliding-window layers serves one (n = 1, no beam search)"
            )
        bs, pool = self.blocks.block_size, self.blocks.manager.num_blocks
        worst = (
            request.width
            * blocks_needed(len(request.prompt) + request.max_tokens, bs)
            * len(getattr(self.blocks, "groups", "x"))
        )  # a hybrid model fills two groups
        if worst > pool:
            raise ValueError(f"request needs up to {worst} blocks alone; the pool has {pool}")
        if request.width > self.scheduler.max_num_batched_tokens:
            raise ValueError(
                f"request runs {request.width} sequences; max_num_batched_tokens "
                f"is {self.scheduler.max_num_batched_tokens}"
            )

    def submit(self, request) -> None:
        """Queue a request; refuse one that could never fit the pool or the token budget."""
        self.refuse(request)
        run = Run(RequestState(len(self.runs), request))
        self.runs.append(run)
        self.scheduler.add(run)

    def generate(self, requests, max_steps: int = 10_000) -> list:
        """Serve `requests` to the end; RequestState per request (all refused if one is bad)."""
        if isinstance(requests, Request) or not hasattr(requests, "__iter__"):
            raise TypeError(f"requests must be a list of Request, got {type(requests).__name__}")
        requests = list(requests)
        for r in requests:
            self.refuse(r)
        count_arg("max_steps", max_steps, 1)
        first = len(self.runs)
        for r in requests:
            self.submit(r)
        for _ in range(max_steps):
            if all(run.status == "done" for run in self.runs):
                return [run.state for run in self.runs[first:]]
            self.step()
        raise RuntimeError(f"not finished after {max_steps} steps")

    def step(self) -> dict:
        if all(run.status == "done" for run in self.runs):
            raise RuntimeError(
                "nothing to step: no request is waiting or running (submit one first)"
            )
        before = dict(self.scheduler.stats)
        items = self.scheduler.schedule()
        if not items:
            raise RuntimeError("nothing could be scheduled: the pool or budget is too small")
        logits = self._run(items)
        for item in items:
            state = item.run.state
            self.blocks.written(item.seq, state.tokens[item.seq], item.write_from, item.end)
            item.run.computed[item.seq] = item.end
        self.scheduler.stats["computed_tokens"] += sum(i.end - i.start for i in items)
        for run in {id(i.run): i.run for i in items}.values():
            self._advance(run, logits)
        if self.check:
            self.blocks.check()
        record = dict(
            step=len(self.log) + 1,
            prefill_tokens=sum(i.end - i.start for i in items if i.end - i.start > 1),
            decode_tokens=sum(1 for i in items if i.end - i.start == 1),
            seqs=[f"{i.seq}[{i.start}:{i.end}]" for i in items],
            free_blocks=self.blocks.num_free,
            **self.blocks.events_since_mark(),
        )
        record.update(
            {
                k: v - before[k]
                for k, v in self.scheduler.stats.items()
                if k.startswith("preempted") and v != before[k]
            }
        )
        self.log.append(record)
        return record

    def block_tokens(self) -> dict:
        """block -> the token ids it holds: live sequences' blocks, and the free blocks the
        prefix cache can still hit (their K/V is complete). For labelling pictures."""
        bs = self.blocks.block_size
        out = {b: prefix[-bs:] for b, prefix in self.blocks.ready.items()}
        for run in self.runs:
            if run.status != "running":
                continue
            for s in run.state.seq_keys():
                tokens = run.state.tokens[s][: self.blocks.num_tokens(s)]
                for i, b in enumerate(self.blocks.table(s)):
                    out[b] = tuple(tokens[i * bs : (i + 1) * bs])
        return out

    def _advance(self, run: Run, logits: dict) -> None:
        state = run.state
        if any(run.computed[s] < len(state.tokens[s]) for s in state.seq_keys()):
            return  # a chunk of a prompt: no token yet
        for kind, *seqs in state.advance({s: logits[s] for s in state.seq_keys()}):
            if kind == "fork":
                self.blocks.fork(*seqs)
                run.computed[seqs[1]] = run.computed[seqs[0]]
            else:
                self.blocks.free(seqs[0])
                del run.computed[seqs[0]]
        if state.done:
            for s in state.seq_keys():
                self.blocks.free(s)
            run.status = "done"
            self.scheduler.running.remove(run)

    def _run(self, items: list) -> dict:
        """Forward the scheduled positions; logits {seq: [V]} of sequences at their end."""
        m, c = self.model, self.model.config
        prefill = [i for i in items if i.end - i.start > 1]
        decode = [i for i in items if i.end - i.start == 1]
        order = prefill + decode
        tokens = np.concatenate([i.run.state.tokens[i.seq][i.start : i.end] for i in order])
        positions = np.concatenate([np.arange(i.start, i.end) for i in order])
        groups = sorted(set(self.layer_group))
        slots = {
            g: np.concatenate(
                [
                    np.where(
                        np.arange(i.start, i.end) >= i.write_from,
                        self.blocks.slots(i.seq, i.start, i.end, g),
                        -1,
                    )
                    for i in order
                ]
            ).astype(np.int64)
            for g in groups
        }
        split = sum(i.end - i.start for i in prefill)
        pre = {g: self._batch(prefill, g) for g in groups}
        dec = {g: self._batch(decode, g) for g in groups}
        h = m.embed_tokens(tokens)
        for layer in range(c.layers):
            g = self.layer_group[layer]
            q, k, v = m.qkv(layer, h, positions)
            self.kv.write(layer, k, v, slots[g])
            pre_args, dec_args = pre[g], dec[g]
            parts = []
            if prefill:
                tables, lens, starts = pre_args
                parts.append(
                    self.kv.prefill(
                        layer,
                        np.ascontiguousarray(q[:split]),
                        tables,
                        lens,
                        starts,
                        m.attention[layer],
                    )
                )
            if decode:
                tables, lens, _ = dec_args
                parts.append(
                    self.kv.decode(
                        layer, np.ascontiguousarray(q[split:]), tables, lens, m.attention[layer]
                    )
                )
            h = m.finish(layer, h, np.concatenate(parts))
        last = np.cumsum([i.end - i.start for i in order]) - 1
        ends = [
            (n, i)
            for n, i in zip(last, order, strict=True)
            if i.end == len(i.run.state.tokens[i.seq])
        ]
        out: np.ndarray | list[np.ndarray] = m.logits(h[[n for n, _ in ends]]) if ends else []
        return {i.seq: row for (_, i), row in zip(ends, out, strict=True)}

    def _batch(self, items: list, group: int = 0):
        """(block_tables int32 [S, max_blocks] padded with -1, context_lens, query_start_loc)
        of one KV cache group."""
        if not items:
            return None
        tables = [
            self.blocks.table(i.seq, group) if group else self.blocks.table(i.seq) for i in items
        ]
        width = max(len(t) for t in tables)
        padded = np.full((len(items), width), -1, np.int32)
        for row, t in enumerate(tables):
            padded[row, : len(t)] = t
        lens = np.array([i.end for i in items], np.int32)
        starts = np.concatenate([[0], np.cumsum([i.end - i.start for i in items])]).astype(np.int32)
        return padded, lens, starts
