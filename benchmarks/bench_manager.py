"""Churn benchmark: KVCacheManager against a bare-Python floor, side by side in one run.

    python benchmarks/bench_manager.py [--repeats 7] [--requests 4000] [--trace-on] [--json]

The churn workload: 65,536 blocks of 16 tokens; 4,000 requests with lognormal lengths;
up to 256 running; each step admits what fits, appends one token to every running
sequence and frees the finished. The *floor*: a list as a stack of free ids, a dict of
block lists and one of lengths (no ref counts, validation, slots or tracing). Every
contender replays the precomputed schedule in lockstep chunks of 16 steps (the order
rotating), so a burst of load falls on all alike; each repetition gives floor CPU time /
its CPU time, reported as the median, lowest and highest over repetitions.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from pagedsim import KVCacheManager

NUM_GPU_BLOCKS, BLOCK_SIZE, NUM_REQUESTS, MAX_RUNNING = 65_536, 16, 4_000, 256
CHUNK = 16  # scheduler steps timed for one contender before the next takes its turn

# One scheduler step: (admitted [(seq id, prompt tokens)], running seq ids, finished seq ids)
Step = tuple[list[tuple[int, int]], list[int], list[int]]


def churn_workload(seed: int = 0, n: int = NUM_REQUESTS) -> list[tuple[int, int]]:
    """Lognormal lengths whose means are ~160 (prompt) and ~340 (output), clipped to [1, 2048]."""
    rng = np.random.default_rng(seed)
    sigma = 1.0  # mean of a lognormal is exp(mu + sigma^2 / 2)
    prompt = rng.lognormal(np.log(160) - sigma**2 / 2, sigma, n)
    output = rng.lognormal(np.log(340) - sigma**2 / 2, sigma, n)
    clip = lambda x: np.clip(np.rint(x), 1, 2048).astype(int).tolist()  # noqa: E731
    return list(zip(clip(prompt), clip(output), strict=True))


def churn_schedule(requests: list[tuple[int, int]]) -> list[Step]:
    """The steps a first-come-first-served scheduler with MAX_RUNNING slots takes."""
    pending = list(reversed(list(enumerate(requests))))
    running: dict[int, int] = {}  # seq id -> tokens still to generate
    steps: list[Step] = []
    while pending or running:
        admitted = []
        while pending and len(running) < MAX_RUNNING:
            s, (prompt, output) = pending.pop()
            admitted.append((s, prompt))
            running[s] = output
        batch, finished = list(running), []
        for s in batch:
            running[s] -= 1
            if not running[s]:
                del running[s]
                finished.append(s)
        steps.append((admitted, batch, finished))
    return steps


class Floor:
    """A list as a stack of free ids and a dict of tables: the bare minimum."""

    def __init__(self) -> None:
        self.free = list(range(NUM_GPU_BLOCKS - 1, -1, -1))
        self.tables: dict[int, list[int]] = {}
        self.lens: dict[int, int] = {}

    def add(self, s: int, prompt: int) -> None:
        pop = self.free.pop
        self.tables[s] = [pop() for _ in range(-(-prompt // BLOCK_SIZE))]
        self.lens[s] = prompt

    def step(self, seq_ids: list[int]) -> None:
        pop, tables, lens = self.free.pop, self.tables, self.lens
        for s in seq_ids:
            n = lens[s]
            if not n % BLOCK_SIZE:
                tables[s].append(pop())
            lens[s] = n + 1

    def finish(self, s: int) -> None:
        self.free.extend(reversed(self.tables.pop(s)))
        del self.lens[s]


class Manager:
    """The real manager, one `decode_step` per scheduler step. `with_slots` also returns
    each new token's slot (what write_kv needs), on admission and on every step."""

    def __init__(self, trace: bool = False, with_slots: bool = False):
        m = KVCacheManager(NUM_GPU_BLOCKS, BLOCK_SIZE, trace=trace, snapshots=False)
        self.add: Callable[[int, int], object] = partial(m.add_sequence, with_slots=with_slots)
        self.step: Callable[[list[int]], object] = partial(m.decode_step, with_slots=with_slots)
        self.finish = m.free_sequence


class PerCall(Manager):
    """The same manager driven one `append_tokens(seq, 1)` call per token."""

    def __init__(self) -> None:
        super().__init__()
        m = self.finish.__self__
        append = m.append_tokens

        def step(seq_ids: list[int]) -> None:
            for s in seq_ids:
                append(s, 1)

        self.step = step


CONTENDERS: dict[str, tuple[str, Callable[[], object]]] = {
    "floor": ("bare list-stack + dict floor", Floor),
    "decode_step": ("KVCacheManager.decode_step, tracing off", Manager),
    "append_tokens": ("  ... append_tokens(seq, 1) per call", PerCall),
    "decode_step_slots": ("  ... decode_step returning slots", lambda: Manager(with_slots=True)),
    "decode_step_trace_on": ("KVCacheManager.decode_step, tracing on", lambda: Manager(True)),
}


def replay(names: list[str], steps: list[Step]) -> dict[str, float]:
    """CPU seconds of each contender replaying `steps` on a fresh instance, in lockstep chunks."""
    impls = [CONTENDERS[k][1]() for k in names]
    seconds = [0.0] * len(impls)
    clock = time.process_time
    gc.collect()
    gc.disable()  # as timeit does: collector pauses are noise, not bookkeeping cost
    try:
        for i, first in enumerate(range(0, len(steps), CHUNK)):
            chunk = steps[first : first + CHUNK]
            k = i % len(impls)  # rotate who goes first
            for j in list(range(k, len(impls))) + list(range(k)):
                impl = impls[j]
                add, step, finish = impl.add, impl.step, impl.finish  # type: ignore[attr-defined]
                t0 = clock()
                for admitted, batch, finished in chunk:
                    for s, prompt in admitted:
                        add(s, prompt)
                    step(batch)
                    for s in finished:
                        finish(s)
                seconds[j] += clock() - t0
    finally:
        gc.enable()
    return dict(zip(names, seconds, strict=True))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--requests", type=int, default=NUM_REQUESTS)
    p.add_argument("--trace-on", action="store_true", help="also time tracing on (slow)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    steps = churn_schedule(churn_workload(n=args.requests))
    tokens = sum(len(batch) for _, batch, _ in steps)
    names = [k for k in CONTENDERS if args.trace_on or k != "decode_step_trace_on"]
    load_before = os.getloadavg()
    runs = [replay(names, steps) for _ in range(args.repeats)]
    load_after = os.getloadavg()
    ratios = {k: [run["floor"] / run[k] for run in runs] for k in names}
    result = {
        "requests": args.requests,
        "steps": len(steps),
        "tokens": tokens,
        "repeats": args.repeats,
        "load_average_1min": [load_before[0], load_after[0]],
        "floor_tokens_per_s": tokens / statistics.median(run["floor"] for run in runs),
        "ratio_median": {k: statistics.median(v) for k, v in ratios.items()},
        "ratio_min": {k: min(v) for k, v in ratios.items()},
        "ratio_max": {k: max(v) for k, v in ratios.items()},
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(
        f"{tokens:,} appended tokens, {args.requests:,} requests, {len(steps):,} steps; "
        f"median of {args.repeats} lockstep replays; load average "
        f"{load_before[0]:.1f} -> {load_after[0]:.1f}"
    )
    print(f"  {'':<42} floor/time (1.00 = the floor)  min - max")
    for k in names:
        print(
            f"  {CONTENDERS[k][0]:<42} {result['ratio_median'][k]:.2f}x"
            f"{'':<22} {result['ratio_min'][k]:.2f} - {result['ratio_max'][k]:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
