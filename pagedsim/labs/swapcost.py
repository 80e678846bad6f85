"""Swap or recompute? A first-order cost model for bringing back a preempted sequence
(vLLM Sec. 4.5, Fig. 19).

Swap is vLLM v0's alternative; v1 preempts by recompute only (see below).

    swap       K/V of l tokens go to the host and come back over PCIe:
                   t_swap = 2 * (ceil(l/B) * copy_latency + l * bytes_per_token / pcie_bandwidth)
               (vLLM's swap_blocks issues one copy per block, hence a per-block latency)
    recompute  the l tokens are prefilled again:
                   flops = 2 * params * l + 2 * num_layers * l**2 * d_model
                   (weights, plus causal attention scores and values; d_model = heads * head_dim)
                   t_recompute = flops / (peak_flops * mfu)

vLLM v1's argument (it preempts by recompute only): freed full blocks stay in the
prefix cache, so re-admission recomputes only tokens past the cached prefix. With
a fraction h of the l tokens served from cache, only tokens [h*l, l) are computed:

    t_recompute_v1 = t_recompute(l) - t_recompute(h * l)

h is measured (`measured_hit_fraction`: 1 - recomputed / discarded tokens of a v1
scheduler run on a synthetic ShareGPT trace) unless `--hit-fraction` is given.
Swap (v0 only) time is linear in l, recompute has a quadratic attention term, so for each
length there is a PCIe bandwidth above which swapping wins:

    bandwidth* = 2 * l * bytes_per_token / (t_recompute - 2 * ceil(l/B) * copy_latency)

ASSUMPTIONS (defaults; every one is a flag, none is a measurement of ours):
    model       OPT-13B from `sizing.PRESETS` (40 layers, 40 heads x 128, FP16 K/V:
                819,200 bytes per token); params ~ 12 * layers * d_model**2 = 12.6e9
    GPU         NVIDIA A100: 312 TFLOPS dense FP16 peak, prefill at 50% of peak (MFU)
    PCIe        4.0 x16: 25 GB/s effective per direction (32 GB/s theoretical)
    copy        10 microseconds of fixed cost per block copy, block size 16
"""

from __future__ import annotations

import argparse
import json
import math
from typing import TypedDict

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


LENGTHS = (16, 64, 256, 512, 1024, 2048)
BANDWIDTHS = (4, 8, 16, 25, 32, 64)  # GB/s, for the crossover table


def params_of(spec: ModelSpec) -> float:
    d = spec.query_heads * spec.head_dim
    return 12.0 * spec.num_layers * d * d


def swap_seconds(
    length: int, spec: ModelSpec, block_size: int, gbps: float, latency_us: float
) -> float:
    blocks = math.ceil(length / block_size)
    return 2 * (blocks * latency_us * 1e-6 + length * spec.bytes_per_token() / (gbps * 1e9))


def recompute_seconds(
    length: int, spec: ModelSpec, params: float, tflops: float, mfu: float
) -> float:
    d = spec.query_heads * spec.head_dim
    flops = 2 * params * length + 2 * spec.num_layers * length * length * d
    return flops / (tflops * 1e12 * mfu)


def measured_hit_fraction(
    num_requests: int = 40, num_blocks: int = 250, block_size: int = 16, seed: int = 0
) -> float:
    """Fraction of the tokens preemption discarded that the prefix cache served back (v1)."""
    from ..policies import PrefixCachingManager
    from ..scheduler import make_scheduler
    from ..workloads import synthetic

    m = PrefixCachingManager(num_blocks, block_size, trace=False)
    s = make_scheduler(
        synthetic("sharegpt", num_requests, seed),
        m,
        mode="v1",
        max_num_batched_tokens=512,
        record=False,
    ).run()
    return 1.0 - s.recomputed_tokens / s.discarded_tokens if s.discarded_tokens else 0.0


def crossover_gbps(
    length: int,
    spec: ModelSpec,
    params: float,
    block_size: int,
    tflops: float,
    mfu: float,
    latency_us: float,
) -> float | None:
    """PCIe bandwidth at which swap and recompute tie (None: recompute always wins)."""
    spare = (
        recompute_seconds(length, spec, params, tflops, mfu)
        - 2 * math.ceil(length / block_size) * latency_us * 1e-6
    )
    return 2 * length * spec.bytes_per_token() / spare / 1e9 if spare > 0 else None


def parser() -> ArgParser:
    """`pagedsim swapcost`'s command line: the model, the GPU and the link it assumes."""
    ap = ArgParser(prog="pagedsim swapcost", description=__doc__.split("\n\n")[0])
    positive = float_in(0, 1e30, open_low=True)
    ap.add_argument("--model", default="opt-13b", help="a sizing preset")
    ap.add_argument(
        "--params", type=positive, default=None, help="parameter count (default ~12*L*d^2)"
    )
    ap.add_argument(
        "--tflops", type=positive, default=312.0, help="GPU peak dense FP16 TFLOPS (A100)"
    )
    ap.add_argument(
        "--mfu",
        type=float_in(0, 1, open_low=True),
        default=0.5,
        help="fraction of peak a prefill reaches",
    )
    ap.add_argument(
        "--pcie-gbps", type=positive, default=25.0, help="effective PCIe GB/s per direction"
    )
    ap.add_argument(
        "--copy-latency-us", type=float_in(0, 1e9), default=10.0, help="fixed cost per block copy"
    )
    ap.add_argument("--block-size", type=int_in(1, MAX_BLOCK_SIZE), default=16)
    ap.add_argument(
        "--hit-fraction",
        type=float_in(0, 1),
        default=None,
        help="fraction of a preempted sequence served by the prefix cache "
        "(default: measured on a v1 run)",
    )
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
    rows = [_row(length, spec, params, h, args) for length in LENGTHS]
    if args.json:
        print(
            json.dumps(
                {"assumptions": vars(args) | {"params": params, "hit_fraction": h}, "rows": rows},
                indent=2,
            )
        )
        return 0
    _print_table(rows, spec, params, h, args)
    return 0


def _row(length: int, spec: ModelSpec, params: float, h: float, args: argparse.Namespace) -> Row:
    """Swap against recompute for one preempted sequence of `length` tokens; `h`: the share
    of it v1's prefix cache serves again."""
    s = swap_seconds(length, spec, args.block_size, args.pcie_gbps, args.copy_latency_us)
    r = recompute_seconds(length, spec, params, args.tflops, args.mfu)
    x = crossover_gbps(
        length, spec, params, args.block_size, args.tflops, args.mfu, args.copy_latency_us
    )
    r1 = r - recompute_seconds(int(h * length), spec, params, args.tflops, args.mfu)
    return {
        "tokens": length,
        "swap_ms": 1e3 * s,
        "recompute_ms": 1e3 * r,
        "recompute_v1_ms": 1e3 * r1,
        "cheaper": "swap" if s < r else "recompute",
        "crossover_gbps": x,
    }


def _print_table(
    rows: list[Row], spec: ModelSpec, params: float, h: float, args: argparse.Namespace
) -> None:
    """The assumptions, the rows, then the 512-token crossover by PCIe bandwidth."""
    print(
        f"ASSUMED: {spec.name} ({spec.bytes_per_token():,} B/token, "
        f"{params / 1e9:.1f}e9 params), "
        f"{args.tflops:g} TFLOPS x {args.mfu:g} MFU, PCIe {args.pcie_gbps:g} GB/s, "
        f"{args.copy_latency_us:g} us per block copy, block size {args.block_size}"
    )
    how = "measured, v1 scheduler, synthetic ShareGPT" if args.hit_fraction is None else "given"
    print(f"prefix-cache hit fraction on re-admission: {100 * h:.1f}% ({how})")
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
        s = swap_seconds(length, spec, args.block_size, gbps, args.copy_latency_us)
        r = recompute_seconds(length, spec, params, args.tflops, args.mfu)
        print(
            f"  {gbps:>3} GB/s  swap {1e3 * s:6.2f} ms  recompute {1e3 * r:6.2f} ms  -> "
            f"{'swap' if s < r else 'recompute'}"
        )
