"""Where KV-cache memory goes: paged vs contiguous allocators (vLLM paper, Fig. 2).

Sums over every decode step and every live sequence (a request with `n` samples or
`beam_width` beams counts that many sequences, without sharing: see `sharing.py`). A
sequence of prompt P and output O holds l = P + t tokens at step t = 1..O; L = P + O.

    allocator  slots held        token_states  reserved   internal_fragmentation
    paged(B)   ceil(l/B)*B       l             0          ceil(l/B)*B - l
    max        max_len           l             L - l      max_len - L
    pow2       2**ceil(log2 L)   l             L - l      2**ceil(log2 L) - L
    oracle     L                 l             L - l      0

external_fragmentation is 0 in `static` mode (all admitted at step 0, unlimited memory).
In `continuous` mode the contiguous allocators are replayed first-fit in `memory_tokens`
slots (`contiguous.py`), counting free slots the waiting queue cannot use: with
`queue="fcfs"` every hole the queue's head does not fit in, with `queue="any"` only holes
smaller than every waiting request. The paged allocator has none.

Every sum has a closed form per request (int64 per request, Python ints across them), with
C(n) = sum_{l=1..n} ceil(l/B) = B*q*(q+1)/2 + r*(q+1) (q, r = divmod(n, B)):

    sum_t l             = O*P + O*(O+1)/2
    sum_t (L - l)       = O*(O-1)/2
    sum_t ceil(l/B)*B   = B * (C(P+O) - C(P))
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from .. import workloads
from ..errors import MAX_BLOCK_SIZE, count_arg
from ..io.args import ArgParser, int_in
from ..sizing import preset
from .contiguous import external_fragmentation

ALLOCATORS = ("paged", "max", "pow2", "oracle")
PARTS = ("token_states", "reserved", "internal_fragmentation", "external_fragmentation")
# The paper's OPT-13B on one A100-40GB keeps about 12 GB for the KV cache (its Fig. 1).
DEFAULT_MEMORY_TOKENS = 12 * 10**9 // preset("opt-13b").bytes_per_token()  # 14,648 slots
MAX_LEN = 1 << 26  # the largest max_len (a contiguous region), 4x the longest sequence
MAX_MEMORY_TOKENS = 1 << 40  # token slots of contiguous memory


def exact_sum(values: np.ndarray) -> int:
    """The sum of an int64 array as a Python int: no overflow however long the array."""
    total: int = sum(np.asarray(values).tolist())  # Python ints: tolist() is typed Any
    return total


def ceil_sum(n: np.ndarray, block_size: int) -> np.ndarray:
    """C(n) = sum over l = 1..n of ceil(l / block_size), elementwise."""
    q, r = np.divmod(n, block_size)
    c: npt.NDArray[np.int64] = block_size * q * (q + 1) // 2 + r * (q + 1)
    return c


def next_pow2(x: np.ndarray) -> np.ndarray:
    """The smallest power of two >= x (x >= 1), elementwise."""
    _, exp = np.frexp((np.asarray(x) - 1).astype(np.float64))
    pow2: npt.NDArray[np.int64] = np.left_shift(np.int64(1), exp.astype(np.int64))
    return pow2


def sums(
    cols: dict[str, np.ndarray],
    block_size: int,
    max_len: int,
    mode: str = "static",
    memory_tokens: int = DEFAULT_MEMORY_TOKENS,
    queue: str = "fcfs",
) -> dict[str, dict[str, int]]:
    """Slot-step sums of each part, per allocator. `cols` comes from `workloads.as_arrays`."""
    _check(block_size, max_len, mode, memory_tokens)
    p, o = cols["prompt_len"], cols["output_len"]
    k = np.maximum(cols["n"], cols["beam_width"])  # sequences per request
    total = p + o
    if len(total) and int(total.max()) > max_len:
        i = int(total.argmax())
        raise ValueError(f"request {i} has {int(total[i])} tokens, more than --max-len {max_len}")
    tokens = exact_sum(k * (o * p + o * (o + 1) // 2))
    reserved = exact_sum(k * (o * (o - 1) // 2))
    paged = block_size * exact_sum(k * (ceil_sum(total, block_size) - ceil_sum(p, block_size)))
    out = {"paged": dict(zip(PARTS, (tokens, 0, paged - tokens, 0), strict=True))}
    sizes = {"max": np.full_like(total, max_len), "pow2": next_pow2(total), "oracle": total}
    for name, size in sizes.items():
        ext = 0
        if mode == "continuous":  # each sequence of a request gets its own region
            rep = np.repeat(np.arange(len(size)), k)
            ext = external_fragmentation(
                size[rep], o[rep], cols["arrival_step"][rep], memory_tokens, queue
            )
        internal = exact_sum(k * o * (size - total))
        out[name] = dict(zip(PARTS, (tokens, reserved, internal, ext), strict=True))
    return out


def fractions(part_sums: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    """Each allocator's parts divided by their total (they sum to 1)."""
    out: dict[str, dict[str, float]] = {}
    for name, parts in part_sums.items():
        whole = sum(parts.values())
        out[name] = {k: (v / whole if whole else 0.0) for k, v in parts.items()}
    return out


def breakdown(
    requests: Iterable[workloads.Request],
    block_size: int = 16,
    max_len: int = 2048,
    mode: str = "static",
    memory_tokens: int = DEFAULT_MEMORY_TOKENS,
    queue: str = "fcfs",
) -> dict[str, dict[str, float]]:
    return fractions(
        sums(workloads.as_arrays(requests), block_size, max_len, mode, memory_tokens, queue)
    )


def _check(block_size: int, max_len: int, mode: str, memory_tokens: int) -> None:
    count_arg("block_size", block_size, 1, MAX_BLOCK_SIZE)
    count_arg("max_len", max_len, 1, MAX_LEN)
    count_arg("memory_tokens", memory_tokens, 1, MAX_MEMORY_TOKENS)
    if mode not in ("static", "continuous"):
        raise ValueError(f"mode must be 'static' or 'continuous', got {mode!r}")


def waste_figure(out_dir: Path) -> list[Path]:
    """Memory-waste breakdown, paged vs Orca max/pow2/oracle (like vLLM Fig. 2)."""
    from ..draw.figures_workloads import draw_waste

    reqs = workloads.synthetic("sharegpt", 10_000, seed=0)
    by_mode = {mode: breakdown(reqs, 16, 2048, mode) for mode in ("static", "continuous")}
    return draw_waste(by_mode, out_dir)


def text_table(table: Sequence[Sequence[str]], left: int = 0) -> str:
    """Rows of cells as aligned columns: the first `left` left-aligned, the rest right."""
    widths = [max(map(len, column)) for column in zip(*table, strict=True)]
    aligned = (
        [
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        for row in table
    )
    return "\n".join("  ".join(row) for row in aligned)


def format_table(frac: Mapping[str, Mapping[str, float]]) -> str:
    rows = [(n, *(f"{100 * frac[n][p]:.1f}%" for p in PARTS)) for n in ALLOCATORS if n in frac]
    return text_table([("allocator", *PARTS), *rows], left=1)


def add_trace_args(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group()
    src.add_argument(
        "--trace", help="CSV trace (prompt_len,output_len[,n,beam_width,arrival_step])"
    )
    src.add_argument("--workload", choices=sorted(workloads.DATASETS), default="sharegpt")
    parser.add_argument("--num-requests", type=int_in(1, workloads.MAX_REQUESTS), default=10_000)
    parser.add_argument("--seed", type=int_in(0, 2**63 - 1), default=0)


def load_requests(args: argparse.Namespace) -> tuple[list[workloads.Request], str]:
    """The requests named on the command line; an empty trace is refused (nothing to measure)."""
    if args.trace:
        requests, source = workloads.read_csv(args.trace), args.trace
    else:
        requests = workloads.synthetic(args.workload, args.num_requests, args.seed)
        source = f"{args.workload} (synthetic, {args.num_requests} requests, seed {args.seed})"
    if not requests:
        raise ValueError(f"{source}: the trace has no requests")
    return requests, source


def main(argv: list[str]) -> int:
    ap = ArgParser(prog="pagedsim waste", description=__doc__.split("\n")[0])
    add_trace_args(ap)
    memory = "contiguous memory for --mode continuous (default: 12 GB of OPT-13B KV)"
    queue = (
        "external fragmentation: free space the queue's head cannot use (fcfs) or that no "
        "waiting request could use (any)"
    )
    sharing = (
        "also print the blocks saved by sharing (n / beam_width 2, 4, 6; driver run on the "
        "first 1000 requests)"
    )
    ap.add_argument("--block-size", type=int_in(1, MAX_BLOCK_SIZE), default=16)
    ap.add_argument("--max-len", type=int_in(1, MAX_LEN), default=2048)
    ap.add_argument("--mode", choices=("static", "continuous"), default="static")
    mem = int_in(1, MAX_MEMORY_TOKENS)
    ap.add_argument("--memory-tokens", type=mem, default=DEFAULT_MEMORY_TOKENS, help=memory)
    ap.add_argument("--queue", choices=("fcfs", "any"), default="fcfs", help=queue)
    ap.add_argument("--json", action="store_true", help="print {paged,max,pow2,oracle: fractions}")
    ap.add_argument("--sharing", action="store_true", help=sharing)
    args = ap.parse_args(argv)
    requests, source = load_requests(args)  # errors: one line on stderr, from pagedsim.app.cli
    frac = breakdown(
        requests, args.block_size, args.max_len, args.mode, args.memory_tokens, args.queue
    )
    if args.json:
        print(json.dumps(frac, indent=2))
    else:
        print(
            f"trace: {source}; block size {args.block_size}, max_len {args.max_len}, "
            f"mode {args.mode}"
            + (f", memory {args.memory_tokens} token slots" if args.mode == "continuous" else "")
        )
        print(format_table(frac))
    if args.sharing:
        from .sharing import format_savings, sharing_savings

        print(format_savings(sharing_savings(requests[:1000], args.block_size)))
    return 0
