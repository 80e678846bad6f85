"""Figure 3.5: the block-size trade-off on a seeded ShareGPT-like workload.

Small blocks waste few slots but need long block tables; big blocks, the reverse (the
formulas are `tradeoff`'s, and the figure prints them). Workload: `synthetic("sharegpt",
500, seed=0)`. Reference: Kwon et al., SOSP 2023, section 7.2 (ablation on block size).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import palette
from ..workloads import synthetic
from . import style

BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
NUM_REQUESTS, SEED = 500, 0
SIZE = (11, 5.2)  # inches


def step_lengths(requests) -> np.ndarray:
    """Every sequence length seen after a decode step, over all requests."""  # [sum(output_len)]
    return np.concatenate([np.arange(r.prompt_len + 1, r.total_len + 1) for r in requests])


def tradeoff(lengths: np.ndarray, block_sizes=BLOCK_SIZES) -> dict:
    """block size -> (wasted slots %, mean table entries) for the given step lengths."""
    out = {}
    for bs in block_sizes:
        blocks = -(-lengths // bs)  # ceil(l / B)
        slots = blocks * bs
        out[bs] = (100.0 * (slots - lengths).sum() / slots.sum(), float(blocks.mean()))
    return out


def make(out_dir: Path) -> list[Path]:
    """3.5: wasted slots (%) and block-table entries against block size 1..256."""
    requests = synthetic("sharegpt", NUM_REQUESTS, seed=SEED)
    lengths = step_lengths(requests)
    data = tradeoff(lengths)
    title = (
        f"Block-size trade-off on {NUM_REQUESTS} synthetic ShareGPT-like requests (seed {SEED}; "
        f"mean prompt {np.mean([r.prompt_len for r in requests]):.0f}, "
        f"output {np.mean([r.output_len for r in requests]):.0f} tokens)"
    )
    note = (
        "l = sequence length after each decode step;  wasted = sum(ceil(l/B)*B - l) / "
        "sum(ceil(l/B)*B) over all steps;  entries = mean of ceil(l/B)"
    )
    if style.slides():
        return _slides(out_dir, data, title, note)
    fig = style.new_figure(*SIZE)
    ax1, ax2 = fig.subplots(1, 2)
    _waste_panel(ax1, data, box_y=0.93, top=1.18)
    _entries_panel(ax2, data)
    fig.suptitle(title, fontsize=11)
    fig.text(0.5, 0.015, note, ha="center", fontsize=9, color="#444444")
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    return [style.save(fig, Path(out_dir) / "3.5-block-size-tradeoff.png")]


def _slides(out_dir: Path, data: dict, title: str, note: str) -> list[Path]:
    """`--slides`: each panel on its own slide, the workload and the definitions around it."""
    import textwrap

    paths = []
    for i, key in enumerate(("waste", "entries")):
        fig = style.new_figure(*style.SLIDE_BODY_IN)
        ax = fig.add_axes([0.1, 0.27, 0.86, 0.52])
        if key == "waste":
            _waste_panel(ax, data, box_y=0.8, top=1.35)
            ax.set_ylabel("wasted slots (%)")  # the axes' height at 18 pt
        else:
            _entries_panel(ax, data)
            ax.set_ylabel("entries per sequence")
        fig.text(0.01, 0.99, textwrap.fill(title, 80), va="top", fontsize=18)
        fig.text(0.01, 0.01, textwrap.fill(note, 80), fontsize=18, va="bottom", color="#444444")
        name = f"3.5-block-size-tradeoff-slide-{i + 1}-{key}.png"
        paths.append(style.save(fig, Path(out_dir) / name))
    return paths


def _waste_panel(ax, data: dict, box_y: float, top: float) -> None:
    """Wasted slots (%) per block size, each point labelled, the least-waste box at `box_y`."""
    bs = np.array(BLOCK_SIZES)
    waste = np.array([data[b][0] for b in BLOCK_SIZES])
    ax.plot(bs, waste, "o-", color=palette.SEQ_COLOURS[1], lw=2)
    for b, w in zip(bs, waste, strict=True):
        above = dict(textcoords="offset points", xytext=(0, 8), ha="center", fontsize=8.5)
        ax.annotate(f"{w:.1f}%", (b, w), **above)
    ax.set_ylabel("wasted slots (% of allocated slots)")
    ax.set_title("internal fragmentation grows with B")
    ax.set_ylim(0, max(waste) * top)
    best = BLOCK_SIZES[int(np.argmin(waste))]
    best_text = (
        f"least waste: B={best} ({data[best][0]:.1f}%, {data[best][1]:.0f} entries)\n"
        f"B=16: {data[16][0]:.1f}% waste, {data[16][1]:.1f} entries"
    )
    rounded = dict(boxstyle="round", fc="white", ec="#BBBBBB")
    ax.text(0.03, box_y, best_text, transform=ax.transAxes, va="top", fontsize=9, bbox=rounded)
    _block_size_axis(ax)


def _entries_panel(ax, data: dict) -> None:
    """Mean block-table entries per sequence per block size, on a log scale."""
    bs = np.array(BLOCK_SIZES)
    entries = np.array([data[b][1] for b in BLOCK_SIZES])
    ax.plot(bs, entries, "s-", color=palette.SEQ_COLOURS[4], lw=2)
    for b, e in zip(bs, entries, strict=True):
        last = b == bs[-1]
        shift = dict(xytext=(-4, -14), ha="right") if last else dict(xytext=(6, 6), ha="left")
        ax.annotate(f"{e:.1f}", (b, e), textcoords="offset points", fontsize=8.5, **shift)
    ax.set_yscale("log")
    ax.set_ylim(entries.min() / 1.6, entries.max() * 2.2)
    ax.set_ylabel("block-table entries per sequence (mean)")
    ax.set_title("table length shrinks as 1/B")
    _block_size_axis(ax)


def _block_size_axis(ax) -> None:
    bs = np.array(BLOCK_SIZES)
    ax.set_xscale("log", base=2)
    ax.set_xticks(bs, [str(b) for b in bs])
    ax.set_xlabel("block size B (tokens per block)")
    ax.grid(True, alpha=0.3)
    ax.axvline(16, color="#888888", ls=":", lw=1)
    ax.text(16, ax.get_ylim()[1], " vLLM default B=16", fontsize=8, va="top", color="#555555")
