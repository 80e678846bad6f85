"""Block size sweep, 1..256: what a bigger block buys and costs (vLLM paper Sec. 7.2, Fig. 18a).

The driver is the v0-mode scheduler (recompute preemption) over a prefix cache with vLLM
v1's rules (full blocks only, hits capped at num_tokens - 1). Per block size B:

    waste         internal fragmentation of the paged allocator, a fraction of the slots
                  it holds (closed form, see waste.py)
    entries       block-table entries per live sequence (mean over decode steps; max)
    max_batch     the longest prefix of the trace that fits, at final lengths, in
                  `memory_tokens` slots (blocks = memory // B)
    preemptions   recompute preemptions serving the first `sim_requests` requests
    hit_rate      prefix-cache hit rate in that run (prompts share seeded system prompts)

The paper finds 16-128 best on ShareGPT and 16-32 on Alpaca for latency; this sweep shows
the memory side: small blocks waste nothing but need long tables, large blocks waste the
tail of every sequence and share fewer prefix tokens.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from .. import workloads
from ..block_table import blocks_needed
from ..errors import count_arg
from ..io.args import ArgParser, int_in, writable_dir
from ..policies import PrefixCachingManager
from ..scheduler import make_scheduler
from .waste import (
    DEFAULT_MEMORY_TOKENS,
    MAX_MEMORY_TOKENS,
    add_trace_args,
    ceil_sum,
    exact_sum,
    load_requests,
    sums,
    text_table,
    waste_figure,
)

# one row of the sweep, by COLUMNS: numbers, and None where the driver did not run
SweepRow = dict[str, float | None]
BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MAX_SIM_REQUESTS = 20_000  # the driver runs once per block size: beyond this, hours
COLUMNS = tuple("block_size waste mean_entries max_entries max_batch preemptions hit_rate".split())


def analytic_row(cols: dict[str, np.ndarray], block_size: int, memory_tokens: int) -> SweepRow:
    p, o = cols["prompt_len"], cols["output_len"]
    k = np.maximum(cols["n"], cols["beam_width"])
    total = p + o
    parts = sums(cols, block_size, max(int(total.max()), 1))["paged"]
    held = parts["token_states"] + parts["internal_fragmentation"]
    entries = exact_sum(k * (ceil_sum(total, block_size) - ceil_sum(p, block_size)))
    per_request = k * -(-total // block_size)  # <= 2**8 * 2**25 each; the cumsum stays < 2**53
    fits = np.cumsum(per_request) <= memory_tokens // block_size
    return {
        "block_size": block_size,
        "waste": parts["internal_fragmentation"] / held,
        "mean_entries": entries / exact_sum(k * o),
        "max_entries": int(-(-total.max() // block_size)),
        "max_batch": int(fits.sum()),
    }


def driver_row(
    requests: Sequence[workloads.Request],
    tokens: Sequence[np.ndarray],
    block_size: int,
    memory_tokens: int,
) -> SweepRow:
    manager = PrefixCachingManager(memory_tokens // block_size, block_size, trace=False)
    s = make_scheduler(requests, manager, "recompute", tokens=tokens, record=False).run()
    return {"preemptions": s.preemptions, "hit_rate": manager.stats.hit_rate}


def sweep(
    requests: Iterable[workloads.Request],
    block_sizes: Iterable[int] = BLOCK_SIZES,
    memory_tokens: int = DEFAULT_MEMORY_TOKENS,
    sim_requests: int = 200,
    seed: int = 0,
) -> list[SweepRow]:
    """One row per block size (see the module doc). The trace must not be empty."""
    requests = list(requests)
    if not requests:
        raise ValueError("the trace has no requests; nothing to sweep")
    memory_tokens = count_arg("memory_tokens", memory_tokens, 1, MAX_MEMORY_TOKENS)
    sim_requests = count_arg("sim_requests", sim_requests, 0, MAX_SIM_REQUESTS)
    cols = workloads.as_arrays(requests)
    sim = requests[:sim_requests]
    tokens = workloads.prompt_tokens(sim, seed)
    rows: list[SweepRow] = []
    for b in block_sizes:
        row = analytic_row(cols, b, memory_tokens)
        fits = all(
            r.num_seqs * (blocks_needed(r.total_len, b) + 1) <= memory_tokens // b for r in sim
        )
        skipped: SweepRow = {"preemptions": None, "hit_rate": None}  # a request never fits
        rows.append(row | (driver_row(sim, tokens, b, memory_tokens) if fits else skipped))
    return rows


def format_rows(rows: Iterable[SweepRow]) -> str:
    def cell(c: str, v: float | None) -> str:
        if v is None:
            return "n/a"
        if c in ("waste", "hit_rate"):
            return f"{100 * v:.1f}%"
        return f"{v:.1f}" if isinstance(v, float) else str(v)

    return text_table([COLUMNS, *(tuple(cell(c, r[c]) for c in COLUMNS) for r in rows)])


def sweep_title(source: str, sim_requests: int, memory_tokens: int) -> str:
    """The figure's title: the same for `pagedsim sweep` and `pagedsim figures`."""
    return f"{source}; driver on the first {sim_requests}; {memory_tokens:,} slots"


def sweep_figure(out_dir: Path) -> list[Path]:
    """Block sizes 1..256 on synthetic ShareGPT: waste, tables, batch, preemptions, hits."""
    from ..draw.figures_workloads import draw_sweep

    reqs = workloads.synthetic("sharegpt", 10_000, seed=0)  # `pagedsim sweep`'s defaults
    title = sweep_title("sharegpt (synthetic, 10000 requests, seed 0)", 200, DEFAULT_MEMORY_TOKENS)
    return draw_sweep(sweep(reqs), out_dir, title)


# name -> callable(out_dir: pathlib.Path) -> list[pathlib.Path]; see draw/figures.py
FIGURES: dict[str, Callable[[Path], list[Path]]] = {
    "waste_breakdown": waste_figure,
    "block_size_sweep": sweep_figure,
}


def main(argv: list[str]) -> int:
    ap = ArgParser(prog="pagedsim sweep", description=__doc__.split("\n")[0])
    add_trace_args(ap)
    memory = "KV memory in token slots (default: 12 GB of OPT-13B KV)"
    sim = "requests served by the driver for preemptions and hit rate"
    mem = int_in(1, MAX_MEMORY_TOKENS)
    ap.add_argument("--memory-tokens", type=mem, default=DEFAULT_MEMORY_TOKENS, help=memory)
    ap.add_argument("--sim-requests", type=int_in(0, MAX_SIM_REQUESTS), default=200, help=sim)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--figure", metavar="DIR", help="also write block_size_sweep.png into DIR")
    args = ap.parse_args(argv)
    folder = writable_dir(args.figure) if args.figure else None  # fail before the work
    requests, source = load_requests(args)
    rows = sweep(
        requests, memory_tokens=args.memory_tokens, sim_requests=args.sim_requests, seed=args.seed
    )
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(
            f"trace: {source}; memory {args.memory_tokens} token slots; driver on the first "
            f"{min(args.sim_requests, len(requests))} requests"
        )
        print(format_rows(rows))
    if folder is not None:
        from ..draw.figures_workloads import draw_sweep

        title = sweep_title(source, min(args.sim_requests, len(requests)), args.memory_tokens)
        (path,) = draw_sweep(rows, folder, title)
        print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)
    return 0
