"""Replaying a vLLM KV event stream: time and peak memory against the stream's length.

    python benchmarks/bench_kv_events.py [--n 3000 30000] [--old-max 3000]

The stream, the measurements and the old tree they compare with (`--old-max`,
`--old-every-max`: its `replay`) are in benchmarks/README.md, "Replaying a vLLM KV event
stream".
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc

from pagedsim import kv_events as ke


def stream_lines(n: int) -> list[str]:
    """One chain of n blocks (block_size 1), then n children of its last block."""
    chain = {
        "type": "BlockStored",
        "block_hashes": list(range(1, n + 1)),
        "parent_block_hash": None,
        "token_ids": [7] * n,
        "block_size": 1,
    }
    lines = [json.dumps({"ts": 0.0, "events": [chain], "data_parallel_rank": 0})]
    for k in range(n):
        child = {
            "type": "BlockStored",
            "block_hashes": [n + 1 + k],
            "parent_block_hash": n,
            "token_ids": [k % 1000],
            "block_size": 1,
        }
        lines.append(json.dumps({"ts": 1.0 + k, "events": [child], "data_parallel_rank": 0}))
    return lines


def measure(label: str, fn, *args) -> tuple[float, float]:
    """Wall time of one run, then tracemalloc's peak in a second (tracing slows it)."""
    t0 = time.perf_counter()
    fn(*args)
    seconds = time.perf_counter() - t0
    tracemalloc.start()
    fn(*args)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    print(f"  {label:<28} {seconds:8.2f} s   peak {peak:8.1f} MiB", flush=True)
    return seconds, peak


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, nargs="+", default=[3000, 30000])
    p.add_argument("--old-max", type=int, default=3000, help="the largest N for the old code")
    p.add_argument(
        "--old-every-max", type=int, default=500, help="the largest N for the old every-frame"
    )
    args = p.parse_args()
    for n in args.n:
        lines = stream_lines(n)
        size = sum(len(line) + 1 for line in lines) / 2**20
        print(f"N = {n:,}: {2 * n + 0:,} blocks stored in {n + 1:,} events, {size:.2f} MiB")
        t0 = time.perf_counter()
        batches = ke.read_batches(lines) if hasattr(ke, "read_batches") else None
        events = ke.read_stream(lines)
        print(f"  {'stream (read)':<28} {time.perf_counter() - t0:8.2f} s")
        if hasattr(ke, "timeline"):
            from pagedsim.view import stream

            measure("replay (timeline)", ke.timeline, events)
            measure("page (page_data)", stream.page_data, batches)
        elif n <= args.old_max:
            frames = ke.shown_frames(len(events), 8)
            measure("old replay, 8 frames", ke.replay, events, frames)
            if n <= args.old_every_max:
                measure("old replay, every frame", ke.replay, events)


if __name__ == "__main__":
    main()
