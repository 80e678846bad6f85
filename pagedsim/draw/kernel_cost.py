"""Figure 3.5b: the kernel's side of the block-size trade-off, from the sector model (no GPU).

Figure 3.5 prices a block size in memory (wasted slots, table length). This one prices it in
what the decode kernel reads, per decode step of one sequence and one KV head, counted in
32-byte sectors with `pagedsim.labs.sectors` (a model: it counts bytes, it times nothing):

    contiguous  2 (K, V) x sectors of one l x D x elem-byte run: the cache without blocks
    KV read     2 x ceil(l / B) tiles x sectors of one B x D x elem-byte tile: the kernel loads
                whole blocks and masks the empty tail of the last one
    table       sectors of the ceil(l / B) int32 block-table entries the thread block reads
    lookups     ceil(l / B): each is a dependent load; the block's loads wait for it

l runs over every decode step of the same 500 seeded ShareGPT-like requests as figure 3.5,
with Llama-2-7B's head (D = 128, fp16). Traffic is lowest for small blocks, yet vLLM measures
small blocks as slow (paper section 7.2): what the sector model leaves out is latency, one
table lookup on the critical path per B tokens, and too little contiguous work per lookup.
A GPU run of the decode kernel over block sizes is what should replace this figure.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

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
    bs = list(cost)
    x = np.arange(len(bs))
    need = np.array([cost[b]["contiguous"] for b in bs], dtype=float)
    over = np.array([cost[b]["kv"] - cost[b]["contiguous"] for b in bs]) / need * 100
    table = np.array([cost[b]["table"] for b in bs]) / need * 100
    fig = style.new_figure(*SIZE)
    left, right = fig.subplots(1, 2)
    fig.subplots_adjust(left=0.07, right=0.98, top=0.84, bottom=0.27, wspace=0.25)
    fig.suptitle(
        "3.5b  The kernel's side of the block size: sectors read per decode step "
        "(a model from sector counting, not a measurement)",
        fontsize=12,
    )
    left.bar(x, over, color=style.SEQ_COLOURS[1], label="last block's empty slots, read and masked")
    left.bar(x, table, bottom=over, color=style.SEQ_COLOURS[4], label="block-table entries")
    for xi, o, t in zip(x, over, table, strict=True):
        left.text(
            xi, o + t + 0.4, f"+{o + t:.1f}%", ha="center", va="bottom", fontsize=8.5, gid="extra"
        )
    left.set_xticks(x, [str(b) for b in bs])
    left.set_xlabel("block size B (tokens)")
    left.set_ylabel("extra sectors over a contiguous cache (%)")
    left.set_title("traffic: lowest with small blocks", fontsize=10)
    left.set_ylim(0, max(over + table) * 1.18)
    left.legend(fontsize=9, loc="upper left", frameon=False)
    left.grid(axis="y", alpha=0.3)
    lookups = [cost[b]["lookups"] for b in bs]
    right.plot(x, lookups, marker="o", color=style.SEQ_COLOURS[4], gid="lookups")
    right.set_yscale("log")
    for xi, b, n in zip(x, bs, lookups, strict=True):
        right.text(
            xi,
            n * 1.25,
            f"{cost[b]['bytes_per_lookup'] // 1024 or 0.5:g} KiB",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    right.set_xticks(x, [str(b) for b in bs])
    right.set_xlabel("block size B (tokens)")
    right.set_ylabel("dependent block-table lookups per step (mean)")
    right.set_title("latency: a dependent lookup before each block's loads", fontsize=10)
    right.set_ylim(min(lookups) / 1.5, max(lookups) * 3)
    right.text(
        0.98,
        0.97,
        "labels: K+V bytes one lookup brings in",
        transform=right.transAxes,
        ha="right",
        va="top",
        fontsize=8.5,
        color="#444444",
    )
    right.grid(alpha=0.3)
    fig.text(
        0.07,
        0.03,
        "Per sequence and KV head, over every decode step of figure 3.5's 500 "
        "synthetic ShareGPT requests; D = 128, fp16; sectors: pagedsim.labs.sectors.\n"
        "The model prices bytes only: it cannot see the latency "
        "of a lookup on the critical path, which is why vLLM measures B < 16 as slow\n"
        "although it reads the fewest bytes. A GPU run of the decode kernel over block sizes "
        "should replace this figure.",
        fontsize=9,
        color="#444444",
        gid="caveat",
    )
    return [style.save(fig, Path(out_dir) / "3.5b-kernel-cost.png")]
