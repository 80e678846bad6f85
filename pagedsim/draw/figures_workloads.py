"""Figures for workloads and eviction: the memory-waste breakdown (vLLM Fig. 2) and the block-size sweep.

This module only turns rows into pictures: the rows come from the labs
(`pagedsim.labs.waste`, `pagedsim.labs.sweep`), which also register the figures
(`labs.sweep.FIGURES`); nothing here imports a lab. The paper's Figure 2 token-state
shares are overlaid as markers for comparison, not as data we measured.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import style

PARTS = ("token_states", "reserved", "internal_fragmentation", "external_fragmentation")
PART_LABELS = ("token states", "reservation", "internal fragmentation", "external fragmentation")
PART_COLOURS = ("#117733", "#DDCC77", "#CC6677", "#332288")  # Tol muted
LABELS = {"paged": "paged (B=16)", "max": "Orca max", "pow2": "Orca pow2", "oracle": "Orca oracle"}
PAPER_TOKEN_STATES = {"paged": 96.3, "max": 20.4, "pow2": 26.8, "oracle": 38.2}  # vLLM Fig. 2


def draw_waste(by_mode: dict, out_dir: Path, name: str = "waste_breakdown.png") -> Path:
    """Stacked bars: for each allocator, one bar per mode ({"static": fractions, ...})."""
    fig = style.new_figure(10.0, 5.0)
    ax = fig.add_axes([0.075, 0.15, 0.64, 0.74])
    modes = list(by_mode)
    allocators = ("max", "pow2", "oracle", "paged")
    width = 0.8 / len(modes)
    for m, mode in enumerate(modes):
        x = np.arange(len(allocators)) + (m - (len(modes) - 1) / 2) * width
        bottom = np.zeros(len(allocators))
        for part, colour, label in zip(PARTS, PART_COLOURS, PART_LABELS):
            h = np.array([100 * by_mode[mode][a][part] for a in allocators])
            ax.bar(x, h, width * 0.92, bottom=bottom, color=colour, edgecolor="white",
                   linewidth=0.5, label=label if m == 0 else None)
            bottom += h
        for xi, a in zip(x, allocators):
            share = 100 * by_mode[mode][a]["token_states"]
            ax.text(xi, share / 2, f"{share:.0f}%", ha="center", va="center", fontsize=8,
                    color="white", rotation=90)
            ax.text(xi, 101.5, mode, ha="center", va="bottom", fontsize=8.5, color=style.INK)
    centres = np.arange(len(allocators))
    ax.scatter(centres, [PAPER_TOKEN_STATES[a] for a in allocators], marker="D", s=28,
               color="black", zorder=5, label="paper Fig. 2: token states")
    ax.set_xticks(centres, [LABELS[a] for a in allocators])
    ax.set_xlim(-0.55, len(allocators) - 0.45)
    ax.set_ylim(0, 108)
    ax.set_ylabel("share of KV-cache slot-steps (%)")
    ax.set_title("Where KV-cache memory goes (synthetic ShareGPT, 10,000 requests)", loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, fontsize=10)
    fig.text(0.075, 0.03, "static: all admitted at step 0, unlimited memory.\ncontinuous: "
             "first-fit in 14,648 slots (12 GB of OPT-13B KV), FCFS.", fontsize=9.5)
    return style.save(fig, Path(out_dir) / name)


def draw_sweep(rows, out_dir: Path, title: str = "", name: str = "block_size_sweep.png") -> Path:
    """Four panels over block size: waste, table entries, largest batch, preemptions/hit rate."""
    bs = np.array([r["block_size"] for r in rows])
    fig = style.new_figure(10.0, 6.4)
    axes = fig.subplots(2, 2)
    fig.subplots_adjust(left=0.08, right=0.92, top=0.88, bottom=0.09, hspace=0.42, wspace=0.3)
    panels = (
        (axes[0, 0], [100 * r["waste"] for r in rows], "internal fragmentation (%)", False),
        (axes[0, 1], [r["mean_entries"] for r in rows], "table entries per sequence (mean)", True),
        (axes[1, 0], [r["max_batch"] for r in rows], "largest batch that fits (requests)", False),
    )
    for ax, ys, label, logy in panels:
        ax.plot(bs, ys, marker="o", color=style.SEQ_COLOURS[4])
        ax.set_title(label, fontsize=10)
        if logy:
            ax.set_yscale("log")
    ax = axes[1, 1]
    ok = [r for r in rows if r["preemptions"] is not None]
    ax.plot([r["block_size"] for r in ok], [r["preemptions"] for r in ok], marker="o",
            color=style.SEQ_COLOURS[1], label="preemptions")
    ax.set_title("preemptions and prefix-cache hit rate", fontsize=10)
    ax.set_ylabel("preemptions", color=style.SEQ_COLOURS[1])
    twin = ax.twinx()
    twin.plot([r["block_size"] for r in ok], [100 * r["hit_rate"] for r in ok], marker="s",
              color=style.SEQ_COLOURS[2])
    twin.set_ylabel("hit rate (%)", color=style.SEQ_COLOURS[2])
    twin.set_ylim(0, 100)
    for ax in axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_xticks(bs, [str(b) for b in bs], fontsize=8)
        ax.set_xlabel("block size (tokens)")
        ax.grid(alpha=0.3)
    fig.suptitle(f"Block size sweep: {title}", fontsize=11)
    return style.save(fig, Path(out_dir) / name)
