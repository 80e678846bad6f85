"""Figures for the chapter 3.7 labs: a race drawn step by step (`labs.interleavings`), and
the sector counts of one warp's load per KV layout and per misalignment (`labs.sectors`).
All come from index arithmetic or exhaustive enumeration: no GPU, no timing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.patches import Rectangle

from pagedsim.draw.style import SLIDE_BODY_IN, new_figure, save, slides
from pagedsim.labs import interleavings as il
from pagedsim.palette import ACCENT, FREE, FREE_EDGE, INK, SEQ_COLOURS

LANE_COLOURS = SEQ_COLOURS[:3]


# a memory step's name in its box (t = atomic.sub(top, 0, 1) = atomic_add(-1)), and on a slide
OP_LABEL = {
    "read": "read",
    "write": "write",
    "cas ok": "CAS ok",
    "cas fail": "CAS fail",
    "atomic_add": "atomic.sub",
}
SLIDE_OP_LABEL = {**OP_LABEL, "cas ok": "CAS \u2713", "cas fail": "CAS \u2717", "atomic_add": "sub"}


def _draw_schedule(ax, out: il.Outcome, title: str, slide: bool = False) -> None:
    """Threads as horizontal lanes, one box per memory step, the top value underneath (on a
    slide the boxes say less, and the outcome goes beside the lanes)."""
    n = len(out.blocks)
    dup = set(out.duplicates)
    top = out.start_top
    for k, s in enumerate(out.steps):
        hot = s.addr.startswith("stack") and s.value in dup
        _draw_step(ax, k, s, n - 1 - s.thread, hot, slide)
        if s.addr == "top" and s.op in ("write", "cas ok", "atomic_add"):
            top = s.value
        ax.text(k + 0.5, -0.45, str(top), ha="center", va="center", fontsize=9, color=INK)
    ax.text(-0.15, -0.45, "top", ha="right", va="center", fontsize=9, color=INK)
    want = out.start_top - n
    ends = f"ends {top}, should be {want}" if top != want else f"ends {top}: right"
    _lanes(ax, out, title, (ends, top != want), slide)


def _draw_step(ax, k: int, s, y: int, hot: bool, slide: bool) -> None:
    """Memory step `k` in its thread's lane at height `y`: what it did, where, and the value;
    `hot` (orange): it handed out a block another thread gets too."""
    failed = s.op == "cas fail"
    face = ACCENT if hot else ("#FFFFFF" if failed else LANE_COLOURS[s.thread])
    edge: dict[str, Any] = dict(
        edgecolor=INK, linewidth=2.2 if hot else 0.8, linestyle="--" if failed else "-"
    )
    ax.add_patch(Rectangle((k + 0.05, y + 0.12), 0.9, 0.76, facecolor=face, **edge))
    label, addr = OP_LABEL[s.op], s.addr
    if slide:
        label, addr = SLIDE_OP_LABEL[s.op], addr.replace("stack", "s")
    centred = dict(ha="center", va="center", color=INK)
    ax.text(k + 0.5, y + 0.62, f"{label}\n{addr}", fontsize=7.5, **centred)
    weight = "bold" if hot else "normal"
    ax.text(k + 0.5, y + 0.24, f"= {s.value}", fontsize=8, fontweight=weight, **centred)


def _lanes(ax, out: il.Outcome, title: str, ends: tuple[str, bool], slide: bool) -> None:
    """A lane per thread, what each gets and how top ends (`ends`: the text, and whether it
    is wrong): on a slide in the lanes' names and the x label, on paper after the last step."""
    n, dup, steps = len(out.blocks), set(out.duplicates), len(out.steps)
    names = [f"thread {i}" + (f"\ngets {out.blocks[i]}" if slide else "") for i in range(n)]
    ax.set_yticks([n - 1 - i + 0.5 for i in range(n)], names)
    ax.set_ylim(-0.8, n)
    if slide:
        for i, tick in enumerate(ax.get_yticklabels()):
            if out.blocks[i] in dup:
                tick.set_color(ACCENT)
                tick.set_fontweight("bold")
        ax.set_xticks([k + 0.5 for k in range(steps)], [])
        ax.tick_params(axis="x", length=0)
        ax.set_xlim(-0.05, steps + 0.05)
        ax.set_xlabel(f"memory step (time) \u2192   top {ends[0]}")
        ax.set_title(title, loc="left")
        ax.spines[["top", "right", "left", "bottom"]].set_visible(False)
        return
    x = steps + 0.2
    ax.text(x, -0.45, ends[0], va="center", fontsize=9, color=ACCENT if ends[1] else INK)
    for i in range(n):
        got = out.blocks[i]
        hot = dict(color=ACCENT, fontweight="bold") if got in dup else dict(color=INK)
        ax.text(x, n - 1 - i + 0.5, f"gets {got}", va="center", fontsize=9, **hot)
    ax.set_xticks([k + 0.5 for k in range(steps)], [str(k) for k in range(steps)])
    ax.set_xlim(-0.2, steps + 1.4)
    ax.set_xlabel("memory step (time)")
    ax.set_title(title, fontsize=10, loc="left")
    ax.spines[["top", "right", "left"]].set_visible(False)


def overlapping(impl: str) -> il.Outcome:
    """The first schedule of `impl` in which the two threads' first steps interleave (for CAS:
    one whose compare-and-swap fails and retries)."""
    for out in il.explore(impl, 2):
        if impl == "cas" and any(s.op == "cas fail" for s in out.steps):
            return out
        if impl != "cas" and out.steps[0].thread != out.steps[1].thread:
            return out
    raise AssertionError(f"no overlapping schedule of {impl}")  # the walk always has one


def _pops(slide: bool) -> list[tuple[str, il.Outcome, str]]:
    """(file key, schedule, title) of each pop: racy, atomic.sub, compare-and-swap."""
    racy, sub, cs = il.summarize("racy", 2), il.summarize("atomic_add", 2), il.summarize("cas", 2)
    bad = racy.first_bad
    if bad is None:
        raise RuntimeError("the racy pop has no bad schedule to draw")
    titles = (
        (
            f"racy pop: {racy.bad} of {racy.total} schedules hand one block\n"
            f"to two threads; here block {bad.duplicates[0]} (orange)",
            f"exercise 3.7: t = cuda.atomic.sub(top, 0, 1)\n{sub.bad} bad of {sub.total}: "
            "read and decrement are one step",
            f"cuda_kernels.alloc, compare-and-swap: {cs.bad} bad of {cs.total}\n"
            "a failed CAS (dashed) retries with the top it saw",
        )
        if slide
        else (
            f"racy pop: {racy.bad} of {racy.total} interleavings hand one block to two "
            f"threads; here block {bad.duplicates[0]} (orange)",
            f"exercise 3.7's pop, t = cuda.atomic.sub(top, 0, 1): {sub.bad} bad of "
            f"{sub.total}; read and decrement are one step",
            f"cuda_kernels.alloc's compare-and-swap pop: {cs.bad} bad of {cs.total}; "
            "a failed CAS (dashed) retries with the top it saw",
        )
    )
    schedules = (bad, overlapping("atomic_add"), overlapping("cas"))
    return list(zip(("racy", "atomic-sub", "cas"), schedules, titles, strict=True))


def race_timeline(out_dir: Path) -> list[Path]:
    """The first bad schedule of the racy pop for 2 threads; the exercise's atomic.sub pop and the
    allocator kernel's compare-and-swap pop on an overlapping schedule."""
    title = "Two threads pop the free stack [10, 11, 12] at once"
    if slides():
        paths = []
        for i, (key, outcome, name) in enumerate(_pops(slide=True)):
            fig = new_figure(*SLIDE_BODY_IN)
            _draw_schedule(fig.subplots(), outcome, name, slide=True)
            fig.text(0.01, 0.98, title, va="top")
            fig.text(0.99, 0.01, "s[i] = stack[i]", ha="right", va="bottom")
            fig.subplots_adjust(left=0.15, right=0.99, top=0.74, bottom=0.12)
            paths.append(save(fig, Path(out_dir) / f"race_timeline-slide-{i + 1}-{key}.png"))
        return paths
    fig = new_figure(10, 8.0)
    axes = fig.subplots(3, 1, gridspec_kw={"hspace": 0.85})
    for ax, (_, outcome, name) in zip(axes, _pops(slide=False), strict=True):
        _draw_schedule(ax, outcome, name)
    fig.suptitle(title, fontsize=12, x=0.02, ha="left")
    fig.subplots_adjust(left=0.1, right=0.93, top=0.9, bottom=0.07)
    return [save(fig, Path(out_dir) / "race_timeline.png")]


def _sector_strip(ax, w, title: str, slide: bool = False) -> None:
    """Each lane's bytes as a bar over the 32-byte sector grid, untouched 128-B lines cut out."""
    import numpy as np

    from pagedsim.labs import sectors as sc

    lines = np.unique(
        np.concatenate(
            [np.arange(a // sc.LINE, (a + w.nbytes - 1) // sc.LINE + 1) for a in w.addresses]
        )
    )
    slot = {int(line): i for i, line in enumerate(lines)}  # touched line -> position on the axis

    def x_of(addr):
        return slot[int(addr) // sc.LINE] * sc.LINE + int(addr) % sc.LINE

    for a in w.addresses:
        for sector in range(int(a) // sc.SECTOR, (int(a) + w.nbytes - 1) // sc.SECTOR + 1):
            x = x_of(sector * sc.SECTOR)
            ax.axvspan(x, x + sc.SECTOR, color=FREE, zorder=0)
    for i in range(len(lines) + 1):
        ax.axvline(i * sc.LINE, color=FREE_EDGE, linewidth=0.8, zorder=1)
    starts = [x_of(a) for a in w.addresses]
    ax.barh(np.arange(sc.WARP), w.nbytes, left=starts, height=0.8, color=SEQ_COLOURS[4], zorder=2)
    ax.set_xlim(0, len(lines) * sc.LINE)
    ax.set_ylim(-1, sc.WARP)
    ax.set_yticks([0, 31])
    ax.set_xticks([i * sc.LINE for i in range(len(lines) + 1)][:: max(1, len(lines) // 4)])
    ax.tick_params(labelsize=7)
    span = int(w.addresses.max()) + w.nbytes - int(w.addresses.min())
    n_lines = f"{w.lines} line{'s' * (w.lines > 1)}"
    if slide:  # a third of a slide's width at 18 pt: the same facts, shorter lines
        facts = f"\n{w.sectors} sectors, {n_lines}\n{w.efficiency:.0%} used, over {span} B"
        ax.set_title(title + facts, fontsize=18)
        return
    facts = (
        f": {w.sectors} sectors, {n_lines}, {w.efficiency:.0%} used\n(bytes spread over {span} B)"
    )
    ax.set_title(title + facts, fontsize=8.5)


def layout_sectors(out_dir: Path) -> list[Path]:
    """One warp's K load per layout and thread mapping: bytes per lane over the sector grid."""
    from pagedsim.labs import sectors as sc

    g = sc.Geometry()
    cases = [("kernel", "k"), ("kernel", "v"), ("vec16", "k")]
    if slides():
        paths = []
        for r, layout in enumerate(sc.LAYOUTS):
            fig = new_figure(*SLIDE_BODY_IN)
            axes = fig.subplots(1, 3)
            for ax, (mapping, which) in zip(axes, cases, strict=True):
                w = sc.warp_load(layout, mapping, which, g)
                _sector_strip(ax, w, f"{which.upper()}, {mapping}", slide=True)
            axes[0].set_ylabel("lane")
            fig.suptitle(f"{layout}: one warp's load (fp16, B={g.block_size}, D={g.head_dim})")
            fig.supxlabel("bytes of the 128-B lines touched; grey: 32-B sectors fetched")
            fig.subplots_adjust(left=0.08, right=0.95, top=0.7, bottom=0.2, wspace=0.3)
            paths.append(save(fig, Path(out_dir) / f"layout_sectors-slide-{r + 1}-{layout}.png"))
        return paths
    fig = new_figure(12, 10)
    axes = fig.subplots(4, 3)
    for r, layout in enumerate(sc.LAYOUTS):
        for c, (mapping, which) in enumerate(cases):
            w = sc.warp_load(layout, mapping, which, g)
            _sector_strip(axes[r, c], w, f"{layout}, {which.upper()}, {mapping}")
        axes[r, 0].set_ylabel("lane")
    fig.suptitle(
        f"One warp's load, fp16, B={g.block_size}, D={g.head_dim}. 'kernel': lanes over "
        f"head_dim (the factory kernel); 'vec16': 16 B per lane over tokens (vLLM)",
        fontsize=11,
    )
    fig.supxlabel(
        "bytes of the 128-byte lines the warp touches, side by side (untouched lines cut "
        "out); grey: 32-byte sectors fetched",
        fontsize=10,
    )
    fig.subplots_adjust(left=0.05, right=0.98, top=0.92, bottom=0.07, hspace=0.75, wspace=0.2)
    return [save(fig, Path(out_dir) / "layout_sectors.png")]


def alignment_sectors(out_dir: Path) -> list[Path]:
    """Sectors and lines one warp's 128-byte load touches at each offset; the predicted extra."""
    from pagedsim.labs import sectors as sc

    offsets = (0, 4, 16, 64, 128)
    fig = new_figure(11, 5.0)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.3, 1]})
    fig.suptitle(
        "3.7  What a misaligned block start costs one warp's load: 32-byte sectors "
        "(a model, not a measurement)",
        fontsize=12,
        x=0.02,
        ha="left",
    )
    for i, o in enumerate(offsets):
        y = len(offsets) - 1 - i
        for s in range(o // 32, (o + 127) // 32 + 1):
            left.add_patch(Rectangle((s * 32, y + 0.1), 32, 0.8, fc=FREE, ec=FREE_EDGE))
        left.add_patch(Rectangle((o, y + 0.3), 128, 0.4, facecolor=SEQ_COLOURS[4]))
        n_sec, n_line = sc.misaligned_run(128, o)
        cost = f"{n_sec} sectors, {n_line} line{'s' if n_line > 1 else ''}"
        left.text(300, y + 0.5, cost, va="center", fontsize=9)
    for x in (0, 128, 256):
        left.axvline(x, color=INK, linewidth=1)
    left.set_xlim(0, 390)
    left.set_ylim(0, len(offsets))
    ys = [len(offsets) - 1 - i + 0.5 for i in range(len(offsets))]
    left.set_yticks(ys, [f"+{o} B" for o in offsets])
    left.set_xticks(range(0, 257, 64 if slides() else 32))  # 18 pt on a slide: every other
    left.set_xlabel("bytes from a 128-byte boundary (grey: 32-byte sectors fetched)")
    left.set_title("32 lanes x 4 B (fp32) starting at the offset", fontsize=10)
    width = 0.2
    series = (  # (bytes per element, the whole tile's extra?, colour, label, number format)
        (4, False, SEQ_COLOURS[0], "fp32 warp load (128 B)", ".0f"),
        (2, False, SEQ_COLOURS[1], "fp16 warp load (64 B)", ".0f"),
        (2, True, SEQ_COLOURS[2], "fp16 whole K tile ({} B)", ".1f"),
    )
    for j, (es, tile, colour, label, fmt) in enumerate(series):
        rows = sc.alignment_table(offsets, sc.Geometry(elem_bytes=es))
        xs = [k + (j - 1) * width for k in range(len(offsets))]
        extra = [100 * (r["tile_extra"] if tile else r["warp_extra"]) for r in rows]
        name = label.format(rows[0]["tile_bytes"])
        # a 0 bar: a dark line at 0
        bars = right.bar(xs, extra, width, color=colour, label=name, edgecolor=INK, linewidth=0.8)
        right.bar_label(
            bars, fmt=lambda v, f=fmt: f"{v:{f}}%" if v else "0", fontsize=9, gid="bar-label"
        )
    right.set_xticks(range(len(offsets)), [f"+{o}" for o in offsets])
    right.set_xlabel("block start offset (bytes)")
    right.set_ylabel("extra sectors (%)")
    right.set_ylim(-4, 80)  # room under 0, so a zero-height bar's outline clears the axis
    right.axhline(0, color=INK, linewidth=0.6)
    right.legend(fontsize=9, loc="upper right")
    right.set_title("predicted extra traffic (theory, no GPU); 0: no extra sector", fontsize=10)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.82, bottom=0.13, wspace=0.3)
    return [save(fig, Path(out_dir) / "alignment_sectors.png")]


FIGURES: dict = {  # name -> callable(out_dir: pathlib.Path) -> list[pathlib.Path]
    "race_timeline": race_timeline,
    "layout_sectors": layout_sectors,
    "alignment_sectors": alignment_sectors,
}
