"""Workload figures: the memory-waste breakdown (vLLM paper Fig. 2) and the block-size sweep.

Rows come from the labs (`labs.waste`, `labs.sweep`), which also register the figures;
nothing here imports a lab. The paper's Figure 2 token-state shares are overlaid as
markers, not data we measured; a note computed from the rows says why they differ.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from .. import palette
from ..workloads import synthetic
from . import style, tradeoff

PARTS = ("token_states", "reserved", "internal_fragmentation", "external_fragmentation")
PART_LABELS = ("token states", "reservation", "internal fragmentation", "external fragmentation")
PART_COLOURS = ("#117733", "#DDCC77", "#CC6677", "#332288")  # Tol muted
LABELS = {"paged": "paged (B=16)", "max": "Orca max", "pow2": "Orca pow2", "oracle": "Orca oracle"}
FOOTNOTE = (
    "static: all admitted at step 0, unlimited memory.\n{}: first-fit in 14,648 slots "
    "(12 GB of OPT-13B KV), FCFS."
)
PAPER_TOKEN_STATES = {"paged": 96.3, "max": 20.4, "pow2": 26.8, "oracle": 38.2}  # vLLM Fig. 2


def draw_waste(by_mode: dict, out_dir: Path, name: str = "waste_breakdown.png") -> list[Path]:
    """Stacked bars: for each allocator, one bar per mode ({"static": fractions, ...})."""
    slide = style.slides()
    if slide:
        fig = style.new_figure(*style.SLIDE_BODY_IN)
        ax = fig.add_axes([0.09, 0.22, 0.56, 0.64])
    else:
        fig = style.new_figure(10.0, 5.0)
        ax = fig.add_axes([0.075, 0.15, 0.64, 0.74])
    allocators = ("max", "pow2", "oracle", "paged")
    for m, mode in enumerate(by_mode):
        _waste_bars(ax, (m, len(by_mode)), mode, by_mode[mode], allocators)
    centres = np.arange(len(allocators))
    paper = [PAPER_TOKEN_STATES[a] for a in allocators]
    label = "paper: token states" if slide else "paper Fig. 2: token states"
    ax.scatter(centres, paper, marker="D", s=28, color="black", zorder=5, label=label)
    ticks = [LABELS[a].replace("Orca ", "Orca\n") if slide else LABELS[a] for a in allocators]
    ax.set_xticks(centres, ticks)
    ax.set_xlim(-0.55, len(allocators) - 0.45)
    ax.set_ylim(0, 108)
    ax.set_ylabel("share of slot-steps (%)" if slide else "share of KV-cache slot-steps (%)")
    title = "Where KV-cache memory goes (synthetic ShareGPT, 10,000 requests)"
    if slide:
        fig.text(0.01, 0.98, title, va="top", fontsize=18)
    else:
        ax.set_title(title, loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, fontsize=10)
    if slide:
        return _waste_slides(fig, by_mode, out_dir, name)
    fig.text(0.075, 0.03, FOOTNOTE.format("continuous"), fontsize=9.5)
    note = dict(fontsize=8.5, va="top", color="#444444", gid="paper-note", linespacing=1.25)
    fig.text(0.735, 0.6, textwrap.fill(paper_note(by_mode), 38), **note)
    return [style.save(fig, Path(out_dir) / name)]


def _waste_bars(ax, which: tuple[int, int], mode: str, shares: dict, allocators) -> None:
    """Mode `which[0]` of `which[1]`: one stacked bar per allocator, its mode's name on top."""
    m, modes = which
    width = 0.8 / modes
    x = np.arange(len(allocators)) + (m - (modes - 1) / 2) * width
    bottom = np.zeros(len(allocators))
    for part, colour, label in zip(PARTS, PART_COLOURS, PART_LABELS, strict=True):
        h = np.array([100 * shares[a][part] for a in allocators])
        key = label if m == 0 else None
        ax.bar(x, h, width * 0.92, bottom=bottom, color=colour, ec="white", lw=0.5, label=key)
        bottom += h
    shown = {"continuous": "cont."}.get(mode, mode) if style.slides() else mode  # bar-wide
    for xi, a in zip(x, allocators, strict=True):
        share = 100 * shares[a]["token_states"]
        inside = dict(ha="center", va="center", fontsize=8, color="white", rotation=90)
        ax.text(xi, share / 2, f"{share:.0f}%", **inside)
        ax.text(xi, 101.5, shown, ha="center", va="bottom", fontsize=8.5, color=palette.INK)


def _waste_slides(fig, by_mode: dict, out_dir: Path, name: str) -> list[Path]:
    """`--slides`: the bars with their footnote, then the note on the paper's markers."""
    fig.text(0.01, 0.01, FOOTNOTE.format("cont. = continuous"), fontsize=18, va="bottom")
    stem = Path(name).stem
    note = style.text_slide(paper_note(by_mode), "paper-note")
    return [
        style.save(fig, Path(out_dir) / f"{stem}-slide-1-bars.png"),
        style.save(note, Path(out_dir) / f"{stem}-slide-2-paper.png"),
    ]


def paper_note(by_mode: dict) -> str:
    """Why the paper's markers sit where they do against our bars (numbers from both)."""

    def ours(a):  # static/continuous, the bars' order
        return "/".join(f"{100 * by_mode[m][a]['token_states']:.0f}%" for m in by_mode)

    return (
        f"The markers are the paper's averages over its own serving runs (OPT-13B, real "
        f"ShareGPT lengths, its Orca re-implementations); the bars are closed forms over a "
        f"synthetic trace that matches only the paper's mean lengths. Reservation waste "
        f"depends on the whole length distribution (a request holds its final length from "
        f"its first step), so pow2 (ours {ours('pow2')}, paper "
        f"{PAPER_TOKEN_STATES['pow2']:.0f}%) and oracle (ours {ours('oracle')}, paper "
        f"{PAPER_TOKEN_STATES['oracle']:.0f}%) differ, while max, set by max_len alone, "
        f"agrees (ours {ours('max')}, paper {PAPER_TOKEN_STATES['max']:.0f}%). Compare "
        f"shapes, not values."
    )


def sweep_notes(rows) -> tuple[str | None, str]:
    """The sweep figure's two notes, computed from its rows: the preemption curve's shape (None
    without preemption counts), and why its numbers are not lesson 3.5's."""
    ok = [r for r in rows if r["preemptions"] is not None]
    peak = max(ok, key=lambda r: r["preemptions"]) if ok else None
    why = (
        None
        if peak is None
        else (
            f"Why preemptions peak at B={peak['block_size']} and then fall: with prefix caching "
            "on, admission counts a prompt's cached blocks as free, so while hits are frequent "
            f"({100 * peak['hit_rate']:.0f}% at B={peak['block_size']}) the scheduler admits more "
            "than memory can grow, and decodes preempt. Bigger blocks hit less (a shared prefix "
            f"counts in whole blocks: {100 * ok[-1]['hit_rate']:.0f}% at B={ok[-1]['block_size']}) "
            "and each admission reserves more (its last block and one block of headroom are B "
            "tokens each), so fewer requests run at once: fewer preemptions, paid for with a "
            "smaller batch and a longer run."
        )
    )
    lesson = tradeoff.tradeoff(
        tradeoff.step_lengths(synthetic("sharegpt", tradeoff.NUM_REQUESTS, seed=tradeoff.SEED)),
        (16,),
    )[16][0]
    here = next((r for r in rows if r["block_size"] == 16), None)
    differ = (
        f"Not lesson 3.5's numbers: lesson and figure 3.5 use {tradeoff.NUM_REQUESTS} requests of "
        "the same synthetic trace"
        + (
            f" (waste {lesson:.2f}% at B=16); this figure's waste and tables use the whole trace "
            f"({100 * here['waste']:.2f}%)"
            if here
            else "; this figure's waste and tables use the whole trace"
        )
        + ", and its preemption and hit-rate panels replay only its first requests in a fixed "
        "memory (see the title). Same definition of waste."
    )
    return why, differ


def _sweep_panels(rows) -> list:
    """(key, xs, ys, title, log y axis) of each panel of the sweep."""
    bs = [r["block_size"] for r in rows]
    ok = [r for r in rows if r["preemptions"] is not None]
    ok_bs = [r["block_size"] for r in ok]
    return [
        ("waste", bs, [100 * r["waste"] for r in rows], "internal fragmentation (%)", 0),
        ("entries", bs, [r["mean_entries"] for r in rows], "table entries per sequence (mean)", 1),
        ("batch", bs, [r["max_batch"] for r in rows], "largest batch that fits (requests)", 0),
        ("preemptions", ok_bs, [r["preemptions"] for r in ok], "preemptions (recompute)", 0),
        ("hit-rate", ok_bs, [100 * r["hit_rate"] for r in ok], "prefix-cache hit rate (%)", 0),
    ]


def _sweep_panel(ax, bs, xs, ys, label: str, logy: int, key: str, fontsize: float) -> None:
    ax.plot(xs, ys, marker="o", color=palette.SEQ_COLOURS[4])
    ax.set_title(label, fontsize=fontsize)
    if logy:
        ax.set_yscale("log")
    ax.set_xscale("log", base=2)
    ax.set_xticks(bs, [str(b) for b in bs], fontsize=8)
    ax.set_xlabel("block size (tokens)")
    ax.grid(alpha=0.3)
    if key == "hit-rate":
        ax.set_ylim(0, 100)


def draw_sweep(rows, out_dir: Path, title: str = "", name: str = "block_size_sweep.png") -> list:
    """Five panels over block size (waste, table entries, largest batch, preemptions, prefix-cache
    hit rate) and two notes; under `--slides`, `draw_sweep_slides`. The paths written."""
    if style.slides():
        return draw_sweep_slides(rows, out_dir, title, name)
    bs = np.array([r["block_size"] for r in rows])
    fig = style.new_figure(13.0, 7.6)
    axes = fig.subplots(2, 3)
    fig.subplots_adjust(left=0.06, right=0.98, top=0.9, bottom=0.08, hspace=0.45, wspace=0.28)
    spots = (axes[0, 0], axes[0, 1], axes[0, 2], axes[1, 0], axes[1, 1])
    for ax, (key, xs, ys, label, logy) in zip(spots, _sweep_panels(rows), strict=True):
        _sweep_panel(ax, bs, xs, ys, label, logy, key, 10)  # logy: 1 for a log y axis
    notes = axes[1, 2]
    notes.set_axis_off()
    why, differ = sweep_notes(rows)
    text = "\n\n".join(textwrap.fill(t, 56) for t in (why, differ) if t is not None)
    words = dict(va="top", ha="left", fontsize=8.5, gid="notes", linespacing=1.3)
    notes.text(-0.12, 1.1, text, transform=notes.transAxes, **words)
    fig.suptitle(f"Block size sweep: {title}", fontsize=11)
    return [style.save(fig, Path(out_dir) / name)]


def draw_sweep_slides(rows, out_dir: Path, title: str, name: str) -> list:
    """One idea per slide: each panel alone, then each note as a text slide."""
    bs = [r["block_size"] for r in rows]
    stem, paths = Path(name).stem, []
    slides = [(key, panel) for key, *panel in _sweep_panels(rows)]
    why, differ = sweep_notes(rows)
    slides += [(key, text) for key, text in (("why", why), ("not-3.5", differ)) if text]
    for i, (key, what) in enumerate(slides):
        if isinstance(what, str):  # a note: text only, wrapped to the slide's width
            fig = style.text_slide(what, "notes")
        else:
            fig = style.new_figure(*style.SLIDE_BODY_IN)
            ax = fig.add_axes([0.1, 0.2, 0.86, 0.62])
            xs, ys, label, logy = what
            _sweep_panel(ax, bs, xs, ys, label, logy, key, 20)
            ax.xaxis.label.set_fontsize(18)
            fig.text(0.5, 0.97, f"Block size sweep: {title}", ha="center", va="top", fontsize=18)
        paths.append(style.save(fig, Path(out_dir) / f"{stem}-slide-{i + 1}-{key}.png"))
    return paths
