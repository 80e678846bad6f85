"""Churn benchmark: KVCacheManager against a bare-Python floor, side by side in one run.

The standard churn workload: a pool of 65,536 blocks of 16 tokens; 4,000 requests
with lognormal prompt and output lengths (means near 160 and 340 tokens, clipped to
[1, 2048], seed 0); up to 256 sequences running; each step appends one token to every
running sequence; a block is allocated only when the last one is full; a finished
sequence frees all its blocks.

The *floor* is the least work that bookkeeping can do: a Python list used as a stack of
free block ids, a dict of per-sequence block lists and a dict of lengths. No ref counts,
no validation, no slot computation. Every contender is driven by the same scheduler loop,
so only the memory-management calls differ. Runs alternate (floor, manager, ...) and the
best of each is kept; time is this process's CPU time (`time.process_time`), so other
programs on a shared machine count less. The ratio is what to read.

Two figures matter: the batch `decode_step` (one call per step, as a scheduler makes it)
and the per-call `append_tokens(seq, 1)` (one call per token, the simplest loop a
learner writes), both with tracing off, each as a fraction of the floor.

    python benchmarks/bench_manager.py [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import time

import numpy as np

from pagedsim import KVCacheManager

NUM_BLOCKS, BLOCK_SIZE, NUM_REQUESTS, MAX_RUNNING = 65_536, 16, 4_000, 256


def churn_workload(seed: int = 0, n: int = NUM_REQUESTS):
    """Lognormal lengths whose means are ~160 (prompt) and ~340 (output), clipped to [1, 2048]."""
    rng = np.random.default_rng(seed)
    sigma = 1.0  # mean of a lognormal is exp(mu + sigma^2 / 2)
    prompt = rng.lognormal(np.log(160) - sigma**2 / 2, sigma, n)
    output = rng.lognormal(np.log(340) - sigma**2 / 2, sigma, n)
    clip = lambda x: np.clip(np.rint(x), 1, 2048).astype(int).tolist()  # noqa: E731
    return list(zip(clip(prompt), clip(output), strict=True))


class Floor:
    """A list as a stack of free ids and a dict of tables: the bare minimum."""

    name = "bare list + dict floor"

    def __init__(self):
        self.free = list(range(NUM_BLOCKS - 1, -1, -1))
        self.tables, self.lens = {}, {}

    def add(self, s, prompt):
        free = self.free
        self.tables[s] = [free.pop() for _ in range(-(-prompt // BLOCK_SIZE))]
        self.lens[s] = prompt

    def step(self, seq_ids):
        free, tables, lens = self.free, self.tables, self.lens
        for s in seq_ids:
            n = lens[s]
            if n % BLOCK_SIZE == 0:
                tables[s].append(free.pop())
            lens[s] = n + 1

    def finish(self, s):
        self.free.extend(reversed(self.tables.pop(s)))
        del self.lens[s]


class Manager:
    """The real manager. `with_slots` also returns each new token's slot (what write_kv needs)."""

    def __init__(self, trace: bool, with_slots: bool = False):
        self.m = KVCacheManager(NUM_BLOCKS, BLOCK_SIZE, trace=trace, snapshots=False)
        self.with_slots = with_slots
        self.add = functools.partial(self.m.add_sequence, with_slots=with_slots)
        self.finish = self.m.free_sequence
        self.step = functools.partial(self.m.decode_step, with_slots=with_slots)


class PerCall(Manager):
    """The same manager driven one `append_tokens(seq, 1)` call per token."""

    def __init__(self):
        super().__init__(trace=False)
        append = self.m.append_tokens

        def step(seq_ids):
            for s in seq_ids:
                append(s, 1)

        self.step = step


def drive(impl, requests) -> tuple[float, int]:
    """Run the workload through `impl`; return (seconds, tokens appended)."""
    gc.collect()
    gc.disable()  # as timeit does: collector pauses are noise, not bookkeeping cost
    try:
        return _drive(impl, requests)
    finally:
        gc.enable()


def _drive(impl, requests) -> tuple[float, int]:
    pending = list(reversed(list(enumerate(requests))))
    running: dict[int, int] = {}  # seq id -> tokens still to generate
    tokens = 0
    t0 = time.process_time()
    while pending or running:
        while pending and len(running) < MAX_RUNNING:
            s, (prompt, output) = pending.pop()
            impl.add(s, prompt)
            running[s] = output
        batch = list(running)
        impl.step(batch)
        tokens += len(batch)
        for s in batch:
            left = running[s] - 1
            if left:
                running[s] = left
            else:
                del running[s]
                impl.finish(s)
    return time.process_time() - t0, tokens


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    requests = churn_workload()
    makers = {
        "floor": Floor,
        "off": lambda: Manager(False),
        "slots": lambda: Manager(False, with_slots=True),
        "per_call": PerCall,
        "on": lambda: Manager(True),
    }
    best: dict[str, float] = {}
    for _ in range(args.repeats):
        for key, make in makers.items():
            seconds, tokens = drive(make(), requests)
            best[key] = min(best.get(key, float("inf")), seconds)
    rate = {k: tokens / v for k, v in best.items()}
    result = {
        "tokens": tokens,
        "floor_tokens_per_s": rate["floor"],
        "manager_trace_off_tokens_per_s": rate["off"],
        "manager_trace_on_tokens_per_s": rate["on"],
        "manager_trace_off_with_slots_tokens_per_s": rate["slots"],
        "manager_per_call_append_tokens_per_s": rate["per_call"],
        "ratio_trace_off": rate["off"] / rate["floor"],
        "ratio_per_call_append_tokens": rate["per_call"] / rate["floor"],
        "ratio_trace_off_with_slots": rate["slots"] / rate["floor"],
        "ratio_trace_on": rate["on"] / rate["floor"],
    }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{tokens:,} appended tokens, {len(requests):,} requests, best of {args.repeats}")
        for key, label in (
            ("floor", "bare list + dict floor"),
            ("off", "KVCacheManager.decode_step, tracing off"),
            ("slots", "  ... and returning slots"),
            ("per_call", "  ... append_tokens(seq, 1) per call"),
            ("on", "KVCacheManager, tracing on"),
        ):
            print(
                f"  {label:<40} {rate[key] / 1e6:6.2f} M tokens/s   "
                f"{rate[key] / rate['floor']:.2f}x the floor"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
