"""Swap or recompute? A first-order cost model for bringing back a preempted sequence
(vLLM Sec. 4.5, Fig. 19).

Swap is vLLM v0's alternative; v1 preempts by recompute only.
    swap       K/V of l tokens go to the host and back over PCIe (one copy per block):
                   t_swap = 2 * (ceil(l/B) * copy_latency + l * bytes_per_token / pcie_bandwidth)
    recompute  the l tokens are prefilled again (d_model = heads * head_dim):
                   flops = 2 * params * l + 2 * num_layers * l**2 * d_model
                   t_recompute = flops / (peak_flops * mfu)

v1's argument: freed full blocks stay in the prefix cache, so with a fraction h served from
cache (measured on a v1 run unless `--hit-fraction` is given)

    t_recompute_v1 = t_recompute(l) - t_recompute(h * l)

Swap is linear in l and recompute has a quadratic term, so for each length there is a
PCIe bandwidth above which swapping wins:

    bandwidth* = 2 * l * bytes_per_token / (t_recompute - 2 * ceil(l/B) * copy_latency)

ASSUMED by default (each one a flag): OPT-13B from `sizing.PRESETS`; an A100 (312 TFLOPS
dense FP16, prefill at 50% MFU); PCIe 4.0 x16 at 25 GB/s per direction; 10 microseconds per
block copy, block size 16.
"""

from __future__ import annotations

import json
import math
from typing import NamedTuple, TypedDict

from ..errors import MAX_BLOCK_SIZE
from ..io.args import ArgParser, float_in, int_in
from ..sizing import ModelSpec, preset


class Row(TypedDict):
    """One sequence length's costs, as the table and --json show them."""

    tokens: int  # sequence length
    swap_ms: float  # swap out and back in over PCIe
    recompute_ms: float  # prefill the whole sequence again
    recompute_v1_ms: float  # prefill again net of prefix-cache hits (v1)
    cheaper: str  # "swap" or "recompute"
    crossover_gbps: float | None  # PCIe bandwidth above which swap wins (None: never)


class Setup(NamedTuple):
    """What the cost model assumes (each a flag of `pagedsim swapcost`)."""

    spec: ModelSpec
    params: float  # parameter count
    block_size: int
    tflops: float  # GPU peak dense FP16
    mfu: float  # fraction of peak a prefill reaches
    pcie_gbps: float  # effective GB/s per direction
    copy_latency_us: float  # fixed cost per block copy


LENGTHS = (16, 64, 256, 512, 1024, 2048)
BANDWIDTHS = (4, 8, 16, 25, 32, 64)  # GB/s, for the crossover table


def params_of(spec: ModelSpec) -> float:
    d = spec.query_heads * spec.head_dim
    return 12.0 * spec.num_layers * d * d


def _copy_seconds(length: int, s: Setup) -> float:
    """The fixed cost of copying `length` tokens' blocks out and back in (one copy a block)."""
    return 2 * math.ceil(length / s.block_size) * s.copy_latency_us * 1e-6


def swap_seconds(length: int, s: Setup) -> float:
    return _copy_seconds(length, s) + 2 * length * s.spec.bytes_per_token() / (s.pcie_gbps * 1e9)


def recompute_seconds(length: int, s: Setup) -> float:
    d = s.spec.query_heads * s.spec.head_dim
    flops = 2 * s.params * length + 2 * s.spec.num_layers * length * length * d
    return flops / (s.tflops * 1e12 * s.mfu)


def measured_hit_fraction(
    num_requests: int = 40, num_gpu_blocks: int = 250, block_size: int = 16, seed: int = 0
) -> float:
    """Fraction of the tokens preemption discarded that the prefix cache served back (v1)."""
    from ..policies import PrefixCachingManager
    from ..scheduler import make_scheduler
    from ..workloads import synthetic

    m = PrefixCachingManager(num_gpu_blocks, block_size, trace=False)
    s = make_scheduler(
        synthetic("sharegpt", num_requests, seed),
        m,
        mode="v1",
        max_num_batched_tokens=512,
        record=False,
    ).run()
    return 1.0 - s.recomputed_tokens / s.discarded_tokens if s.discarded_tokens else 0.0


def crossover_gbps(length: int, s: Setup) -> float | None:
    """PCIe bandwidth at which swap and recompute tie (None: recompute always wins)."""
    spare = recompute_seconds(length, s) - _copy_seconds(length, s)
    return 2 * length * s.spec.bytes_per_token() / spare / 1e9 if spare > 0 else None


def parser() -> ArgParser:
    """`pagedsim swapcost`'s command line: the model, the GPU and the link it assumes."""
    ap = ArgParser(prog="pagedsim swapcost", description=__doc__.split("\n\n")[0])
    positive = float_in(0, 1e30, open_low=True)
    ap.add_argument("--model", default="opt-13b", help="a sizing preset")
    flags = (  # (flag, type, default, help)
        ("--params", positive, None, "parameter count (default ~12*L*d^2)"),
        ("--tflops", positive, 312.0, "GPU peak dense FP16 TFLOPS (A100)"),
        ("--mfu", float_in(0, 1, open_low=True), 0.5, "fraction of peak a prefill reaches"),
        ("--pcie-gbps", positive, 25.0, "effective PCIe GB/s per direction"),
        ("--copy-latency-us", float_in(0, 1e9), 10.0, "fixed cost per block copy"),
        ("--block-size", int_in(1, MAX_BLOCK_SIZE), 16, None),
        (
            "--hit-fraction",
            float_in(0, 1),
            None,
            "fraction of a preempted sequence served by the prefix cache "
            "(default: measured on a v1 run)",
        ),
    )
    for flag, kind, default, text in flags:
        ap.add_argument(flag, type=kind, default=default, help=text)
    ap.add_argument("--json", action="store_true")
    return ap


def main(argv: list[str]) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    try:
        spec = preset(args.model)
    except ValueError as e:
        ap.error(str(e))
    h = measured_hit_fraction() if args.hit_fraction is None else args.hit_fraction
    params = args.params or params_of(spec)
    link = (args.tflops, args.mfu, args.pcie_gbps, args.copy_latency_us)
    setup = Setup(spec, params, args.block_size, *link)
    rows = [_row(length, setup, h) for length in LENGTHS]
    if args.json:
        assumed = vars(args) | {"params": params, "hit_fraction": h}
        print(json.dumps({"assumptions": assumed, "rows": rows}, indent=2))
        return 0
    how = "measured, v1 scheduler, synthetic ShareGPT" if args.hit_fraction is None else "given"
    _print_table(rows, setup, f"{100 * h:.1f}% ({how})")
    return 0


def _row(length: int, s: Setup, h: float) -> Row:
    """Swap against recompute for one preempted sequence; `h`: the share v1's cache serves."""
    swap, recompute = swap_seconds(length, s), recompute_seconds(length, s)
    return {
        "tokens": length,
        "swap_ms": 1e3 * swap,
        "recompute_ms": 1e3 * recompute,
        "recompute_v1_ms": 1e3 * (recompute - recompute_seconds(int(h * length), s)),
        "cheaper": "swap" if swap < recompute else "recompute",
        "crossover_gbps": crossover_gbps(length, s),
    }


def _print_table(rows: list[Row], s: Setup, hit: str) -> None:
    """The assumptions, the rows, then the 512-token crossover by PCIe bandwidth."""
    print(
        f"ASSUMED: {s.spec.name} ({s.spec.bytes_per_token():,} B/token, "
        f"{s.params / 1e9:.1f}e9 params), "
        f"{s.tflops:g} TFLOPS x {s.mfu:g} MFU, PCIe {s.pcie_gbps:g} GB/s, "
        f"{s.copy_latency_us:g} us per block copy, block size {s.block_size}"
    )
    print(f"prefix-cache hit fraction on re-admission: {hit}")
    print(
        f"{'tokens':>6}  {'swap out+in':>11}  {'recompute':>9}  {'v1 recompute':>12}  "
        f"{'cheaper':>9}  {'swap wins above':>15}"
    )
    for row in rows:
        x = row["crossover_gbps"]
        print(
            f"{row['tokens']:>6}  {row['swap_ms']:>8.2f} ms  {row['recompute_ms']:>6.2f} ms  "
            f"{row['recompute_v1_ms']:>9.2f} ms  {row['cheaper']:>9}  "
            f"{('%.1f GB/s' % x) if x else 'never':>15}"
        )
    length = 512
    print(f"\ncrossover at {length} tokens, by PCIe bandwidth:")
    for gbps in BANDWIDTHS:
        swap = swap_seconds(length, s._replace(pcie_gbps=gbps))
        recompute = recompute_seconds(length, s)
        print(
            f"  {gbps:>3} GB/s  swap {1e3 * swap:6.2f} ms  recompute {1e3 * recompute:6.2f} ms  -> "
            f"{'swap' if swap < recompute else 'recompute'}"
        )
