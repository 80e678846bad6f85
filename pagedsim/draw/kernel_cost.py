"""Figure 3.5b: the kernel's side of the block-size trade-off, from the sector model (no GPU).

Sectors (32 B) read per decode step of one sequence and one KV head, over figure 3.5's
seeded requests with Llama-2-7B's head (`kernel_cost`): a contiguous cache against B-token
tiles plus the block table, and the dependent table lookups. Traffic is lowest for small
blocks, yet vLLM measures them as slow (paper section 7.2): the model leaves out latency.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import palette
from ..labs import sectors as sc
from ..workloads import synthetic
from . import style, tradeoff

SIZE = (11, 5.2)  # inches, like 3.5
GEOMETRY = sc.Geometry(head_dim=128, elem_bytes=2)  # Llama-2-7B's head, fp16


def kernel_cost(lengths: np.ndarray, block_sizes=tradeoff.BLOCK_SIZES, g=GEOMETRY) -> dict:
    """block size -> sector counts summed over `lengths` (one decode step each), see above."""
    lengths = np.asarray(lengths, dtype=np.int64)  # [steps]
    token_bytes = g.head_dim * g.elem_bytes
    contiguous = 2 * -(-lengths * token_bytes // sc.SECTOR)  # one run each for K and V
    out = {}
    for b in block_sizes:
        tile, _ = sc.misaligned_run(b * token_bytes, 0)  # sectors of one aligned (block, head) tile
        blocks = -(-lengths // b)
        out[b] = {
            "contiguous": int(contiguous.sum()),
            "kv": int((2 * blocks * tile).sum()),
            "table": int((-(-4 * blocks // sc.SECTOR)).sum()),
            "lookups": float(blocks.mean()),
            "bytes_per_lookup": 2 * b * token_bytes,
        }
    return out


def make(out_dir: Path) -> list[Path]:
    """3.5b: what the decode kernel reads per block size, from the sector model (not measured)."""
    requests = synthetic("sharegpt", tradeoff.NUM_REQUESTS, seed=tradeoff.SEED)
    lengths = tradeoff.step_lengths(requests)
    cost = kernel_cost(lengths)
    title = (
        "3.5b  The kernel's side of the block size: sectors read per decode step "
        "(a model from sector counting, not a measurement)"
    )
    caveat = (
        "Per sequence and KV head, over every decode step of figure 3.5's 500 "
        "synthetic ShareGPT requests; D = 128, fp16; sectors: pagedsim.labs.sectors.\n"
        "The model prices bytes only: it cannot see the latency "
        "of a lookup on the critical path, which is why vLLM measures B < 16 as slow\n"
        "although it reads the fewest bytes. A GPU run of the decode kernel over block sizes "
        "should replace this figure."
    )
    if style.slides():
        return _slides(out_dir, cost, title, caveat)
    fig = style.new_figure(*SIZE)
    left, right = fig.subplots(1, 2)
    fig.subplots_adjust(left=0.07, right=0.98, top=0.84, bottom=0.27, wspace=0.25)
    fig.suptitle(title, fontsize=12)
    _traffic(left, cost)
    _latency(right, cost)
    fig.text(0.07, 0.03, caveat, fontsize=9, color="#444444", gid="caveat")
    return [style.save(fig, Path(out_dir) / "3.5b-kernel-cost.png")]


def _slides(out_dir: Path, cost: dict, title: str, caveat: str) -> list[Path]:
    """`--slides`: the traffic panel, the latency panel and the caveat, one slide each."""
    import textwrap

    paths = []
    for i, key in enumerate(("traffic", "latency", "caveat")):
        if key == "caveat":
            fig = style.text_slide(caveat, "caveat")
        else:
            fig = style.new_figure(*style.SLIDE_BODY_IN)
            ax = fig.add_axes([0.1, 0.15, 0.86, 0.6])
            if key == "traffic":
                _traffic(ax, cost, top=1.45)
                ax.set_ylabel("extra sectors (%)")  # the axes' height at 18 pt
                ax.set_title("traffic: lowest with small blocks")
            else:
                _latency(ax, cost)
                ax.set_ylabel("lookups per step")
                ax.set_title("latency: a lookup before each block's loads")
            fig.text(0.01, 0.99, textwrap.fill(title, 80), va="top", fontsize=18)
        paths.append(style.save(fig, Path(out_dir) / f"3.5b-kernel-cost-slide-{i + 1}-{key}.png"))
    return paths


def _traffic(ax, cost: dict, top: float = 1.18) -> None:
    """Extra sectors over a contiguous cache per block size: masked slots and table entries."""
    bs = list(cost)
    x = np.arange(len(bs))
    need = np.array([cost[b]["contiguous"] for b in bs], dtype=float)
    over = np.array([cost[b]["kv"] - cost[b]["contiguous"] for b in bs]) / need * 100
    table = np.array([cost[b]["table"] for b in bs]) / need * 100
    ax.bar(x, over, color=palette.SEQ_COLOURS[1], label="last block's empty slots, read and masked")
    ax.bar(x, table, bottom=over, color=palette.SEQ_COLOURS[4], label="block-table entries")
    slide = style.slides()
    for xi, o, t in zip(x, over, table, strict=True):
        extra = f"+{o + t:.1f}%" if not slide else f"+{o + t:.0f}%"  # bar-wide at 18 pt
        ax.text(xi, o + t + 0.4, extra, ha="center", va="bottom", fontsize=8.5, gid="extra")
    ax.set_xticks(x, [str(b) for b in bs])
    ax.set_xlabel("block size B (tokens)")
    ax.set_ylabel("extra sectors over a contiguous cache (%)")
    ax.set_title("traffic: lowest with small blocks", fontsize=10)
    ax.set_ylim(0, max(over + table) * top)
    ax.legend(fontsize=9, loc="upper left", frameon=False)
    ax.grid(axis="y", alpha=0.3)


def _latency(ax, cost: dict) -> None:
    """Dependent block-table lookups per step, each point labelled with the bytes it brings."""
    bs = list(cost)
    x = np.arange(len(bs))
    lookups = [cost[b]["lookups"] for b in bs]
    ax.plot(x, lookups, marker="o", color=palette.SEQ_COLOURS[4], gid="lookups")
    ax.set_yscale("log")
    for xi, b, n in zip(x, bs, lookups, strict=True):
        kib = f"{cost[b]['bytes_per_lookup'] // 1024 or 0.5:g} KiB"
        ax.text(xi, n * 1.25, kib, ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [str(b) for b in bs])
    ax.set_xlabel("block size B (tokens)")
    ax.set_ylabel("dependent block-table lookups per step (mean)")
    ax.set_title("latency: a dependent lookup before each block's loads", fontsize=10)
    ax.set_ylim(min(lookups) / 1.5, max(lookups) * 3)
    corner = dict(transform=ax.transAxes, ha="right", va="top", fontsize=8.5, color="#444444")
    ax.text(0.98, 0.97, "labels: K+V bytes one lookup brings in", **corner)
    ax.grid(alpha=0.3)
