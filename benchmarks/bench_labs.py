"""Labs benchmark: the waste comparison and the block-size sweep over a 10,000-request trace.

    python benchmarks/bench_labs.py [--repeats 3] [--json]

Target: all of it in <= 10 s on the 2-core development machine. `waste static` (closed
forms, 4 allocators), `waste continuous` (plus the first-fit replay of 3 contiguous
allocators) and `sweep` (9 block sizes), each best-of-`--repeats`, the trace made once.
"""

from __future__ import annotations

import argparse
import json
import timeit
from functools import partial

from pagedsim import workloads
from pagedsim.labs import sweep, waste

NUM_REQUESTS = 10_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    reqs = workloads.synthetic("sharegpt", NUM_REQUESTS, seed=0)
    runs = {
        "waste_static_s": partial(waste.breakdown, reqs, 16, 2048, "static"),
        "waste_continuous_s": partial(waste.breakdown, reqs, 16, 2048, "continuous"),
        "sweep_s": partial(sweep.sweep, reqs),
    }
    # best of --repeats, the collector on as in use (timeit turns it off unless told)
    results = {
        name: min(timeit.repeat(run, "gc.enable()", number=1, repeat=args.repeats))
        for name, run in runs.items()
    }
    results["total_s"] = sum(results.values())
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"sharegpt, {NUM_REQUESTS:,} requests, best of {args.repeats}:")
    for name, seconds in results.items():
        print(f"  {name:<20} {seconds:6.2f} s")
    print(f"  target: total <= 10 s -> {'met' if results['total_s'] <= 10 else 'MISSED'}")


if __name__ == "__main__":
    main()
