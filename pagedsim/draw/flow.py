"""Figures 3.3 (logical vs physical blocks) and 3.6 (the core flow), drawn from real traces.

Nothing here is hand-placed: every box and arrow comes from a `Snapshot` of a
`KVCacheManager` run. 3.3 puts each sequence's logical blocks in a contiguous row
and draws an arrow to wherever its block table says the physical block is. 3.6
shows the three structures of the chapter's design in one frame: the free pool
(the free list, head first), the physical blocks, and the block tables, with the
block that `allocate()` just popped from the head highlighted.
Reference: Kwon et al., SOSP 2023, figure 6 (block table translation).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from matplotlib.patches import FancyArrowPatch, Rectangle

from .. import palette
from ..manager import KVCacheManager
from ..story import caption
from ..trace import BlockAllocated, SequenceAdded, SequenceFreed, TokensAppended
from . import style

LOGICAL_SIZE, FLOW_SIZE = (12, 5.6), (10.5, 7.0)  # inches
SLIDE_IN = (13.33 / 1.4, 6.67 / 1.4)  # the projector look scales by 1.4 to a slide body


def scattered_manager() -> KVCacheManager:
    """A and B admitted between two sequences that then finish, so both grow into the holes."""
    m = KVCacheManager(16, 4)
    m.add_sequence("X", 8)
    m.add_sequence("A", 4)
    m.add_sequence("Y", 8)
    m.add_sequence("B", 4)
    m.free_sequence("X")  # LIFO: the freed blocks go back at the head of the free list
    m.free_sequence("Y")
    for _ in range(12):  # A and B decode in turn, each taking whatever block is at the head
        m.decode_step(["A", "B"])
    m.check_invariants()
    return m


def _box(ax, x, y, w, h, colour, text, gid=None, **kw):
    ax.add_patch(
        Rectangle(
            (x, y),
            w,
            h,
            facecolor=colour,
            edgecolor=kw.pop("ec", palette.INK),
            lw=kw.pop("lw", 0.8),
            gid=gid,
            **kw,
        )
    )
    ax.text(
        x + w / 2,
        y + h / 2,
        text,
        ha="center",
        va="center",
        fontsize=9,
        color=style.text_on(colour),
    )


def make_logical_physical(out_dir: Path) -> list[Path]:
    """3.3: contiguous logical blocks of two sequences, scattered in physical memory."""
    m = scattered_manager()
    snap = m.snapshot()
    colours = style.seq_colours([snap])
    n = snap.num_blocks
    # on a slide (18 pt): a slide-shaped figure, a wider label column, and room at the top
    # for the title and the subtitle wrapped to the slide's width
    slide = style.slides()
    fig = style.new_figure(*(SLIDE_IN if slide else LOGICAL_SIZE))
    ax = fig.add_axes((0, 0, 1, 1))
    left = -4.0 if slide else -3.0  # where the row labels start
    ax.set_xlim(left - 0.2, n + 0.6)
    ax.set_ylim(0, 11.8 if slide else 9.3)
    ax.set_axis_off()
    phys_y = 4.0
    for b in range(n):  # physical memory strip
        owner = snap.owners(b)
        colour = style.colour_of(owner[0], colours) if owner else palette.FREE
        _box(ax, b + 0.05, phys_y, 0.9, 0.9, colour, str(b), ls="-" if owner else "--")
    ax.text(
        left,
        phys_y + 0.45,
        "physical blocks\n(GPU memory)",
        va="center",
        fontsize=10,
        fontweight="bold",
    )
    for seq, y, side in zip(snap.sequences, (7.0, 1.0), (1, -1), strict=True):
        colour = style.colour_of(seq.seq_id, colours)
        ax.text(
            left,
            y + 0.45,
            f"seq {seq.seq_id}: logical\n({seq.num_tokens} tokens)",
            va="center",
            fontsize=10,
            fontweight="bold",
        )
        x0 = (n - len(seq.blocks)) / 2
        for i, b in enumerate(seq.blocks):
            last = min(snap.block_size, seq.num_tokens - i * snap.block_size)
            _box(ax, x0 + i + 0.05, y, 0.9, 0.9, colour, f"L{i}", gid=f"logical-{seq.seq_id}-{i}")
            ax.text(
                x0 + i + 0.5,
                y + (1.05 if side > 0 else -0.15),
                f"{last}/{snap.block_size}",
                ha="center",
                va="bottom" if side > 0 else "top",
                fontsize=7.5,
                color="#555555",
            )
            start = (x0 + i + 0.5, y if side > 0 else y + 0.9)
            end = (b + 0.5, phys_y + 0.9 if side > 0 else phys_y)
            ax.add_patch(
                FancyArrowPatch(
                    start,
                    end,
                    arrowstyle="-|>",
                    mutation_scale=10,
                    color=colour,
                    lw=1.3,
                    shrinkA=1,
                    shrinkB=1,
                    alpha=0.9,
                )
            )
        table = ", ".join(map(str, seq.blocks))
        ax.text(
            x0 + len(seq.blocks) + 0.5,
            y + 0.45,
            f"block table {seq.seq_id}" + ("\n" if slide else " ") + f"= [{table}]",
            ha="left",
            fontsize=9.5,
            family="DejaVu Sans Mono",
            va="center",
        )
    title = (
        "3.3  Logical blocks are contiguous; physical blocks are wherever the free list put them"
    )
    sub = logical_subtitle(m)
    if slide:
        title = textwrap.fill(title, 50)
        sub = textwrap.fill(sub.replace("\n", " "), 95)
    ax.text(left, 11.5 if slide else 9.0, title, fontsize=12.5, fontweight="bold", va="top")
    ax.text(
        left, 10.3 if slide else 8.55, sub, fontsize=9, va="top", color="#444444", gid="subtitle"
    )
    return [style.save(fig, Path(out_dir) / "3.3-logical-vs-physical.png")]


def logical_subtitle(m: KVCacheManager) -> str:
    """3.3's subtitle, read from the run's trace: who was admitted in what order, who finished."""
    assert m.trace is not None, "3.3 is drawn from a manager that records a trace"
    events = m.trace.events
    added = [e for e in events if isinstance(e, SequenceAdded)]
    freed = [e.seq_id for e in events if isinstance(e, SequenceFreed)]
    kept = [e.seq_id for e in added if e.seq_id not in freed]
    order = ", ".join(str(e.seq_id) for e in added)
    sizes = ", ".join(f"{e.seq_id} {e.num_tokens}" for e in added)
    return (
        f"Admitted in the order {order} (prompt tokens: {sizes}); "
        f"{' and '.join(map(str, freed))} then finished and left their blocks at the head "
        f"of the free list (LIFO),\nso {' and '.join(map(str, kept))}, decoding in turn, "
        "grow into those holes."
    )


def make_core_flow(out_dir: Path, snapshots) -> list[Path]:
    """3.6: free pool -> allocated blocks -> block tables, from the first step that grows a
    table."""
    k = next(
        i
        for i, s in enumerate(snapshots)
        if s.events
        and isinstance(s.events[0], TokensAppended)
        and any(isinstance(e, BlockAllocated) for e in s.events)
    )
    before, snap = snapshots[k - 1], snapshots[k]
    new = next(e.block for e in snap.events if isinstance(e, BlockAllocated))
    colours = style.seq_colours(snapshots[: k + 1])
    n = snap.num_blocks
    # on a slide (18 pt) the figure is as wide as a slide body, the caption wraps, and the
    # column heads keep one line (what they hold is said by the boxes themselves)
    slide = style.slides()
    fig = style.new_figure(*(SLIDE_IN if slide else FLOW_SIZE))
    ax = fig.add_axes((0, 0, 1, 1))
    y0 = 2.85 if slide else 2.7
    top = n * 0.8 + y0 - 0.3
    ax.set_xlim(0, 17.5)
    ax.set_ylim(top + 1.2, -0.2)
    ax.set_axis_off()
    ax.text(
        0.3,
        0.2,
        ("3.6  The core flow" if slide else "3.6  The core flow, from a real trace")
        + ": free pool \u2192 allocated blocks \u2192 block tables",
        fontsize=12.5,
        fontweight="bold",
        va="top",
    )
    said = f"step {snap.step}: {caption(snap)}"
    said = textwrap.fill(said, 90) if slide else said
    ax.text(0.3, 0.85, said, fontsize=9.5, va="top", color="#444444")
    heads = (
        "free pool\n(free list, head first)",
        "physical blocks\n(id, owner, ref count)",
        "block tables\n(logical \u2192 physical)",
    )
    for x, title in zip((0.6, 6.4, 12.6), heads, strict=True):
        title = title.split("\n")[0] if slide else title
        ax.text(x, 2.05 if slide else 1.6, title, fontsize=10.5, fontweight="bold", va="top")
    pool = [new] + list(snap.free_list)  # the popped block, ghosted, then the list now
    for i, b in enumerate(pool):
        y = y0 + i * 0.8
        popped = i == 0
        _box(
            ax,
            0.9,
            y,
            1.2,
            0.6,
            "white" if popped else palette.FREE,
            str(b),
            ls="--" if popped else "-",
            ec=palette.ACCENT if popped else palette.FREE_EDGE,
            lw=1.6 if popped else 0.8,
        )
        if i > 1:
            ax.add_patch(
                FancyArrowPatch(
                    (1.5, y - 0.2),
                    (1.5, y),
                    arrowstyle="-|>",
                    mutation_scale=8,
                    color="#666666",
                    shrinkA=0,
                    shrinkB=0,
                )
            )
    ax.text(
        2.3,
        y0 + 0.3,
        f"was the head at step {before.step}",
        fontsize=8,
        va="center",
        color=palette.ACCENT,
    )
    ax.text(2.3, y0 + 1.1, "head now", fontsize=8, va="center", color="#555555")
    for b in range(n):  # physical memory, one column
        y = y0 + b * 0.8
        owners = snap.owners(b)
        colour = style.colour_of(owners[0], colours) if owners else palette.FREE
        label = f"{b}: " + (
            "+".join(map(str, owners)) + f"  x{snap.ref_counts[b]}" if owners else "free"
        )
        _box(
            ax,
            6.7,
            y,
            2.6,
            0.6,
            colour,
            label,
            ls="-" if owners else "--",
            lw=2.2 if b == new else 0.8,
            ec=palette.ACCENT if b == new else palette.INK,
        )
    ax.add_patch(
        FancyArrowPatch(
            (2.1, y0 + 0.3),
            (6.7, y0 + new * 0.8 + 0.3),
            arrowstyle="-|>",
            mutation_scale=16,
            color=palette.ACCENT,
            lw=2.2,
            connectionstyle="arc3,rad=-0.15",
        )
    )
    ax.text(
        3.6,
        y0 + 2.3 + new * 0.2,
        "allocate():\npop the head,\nref count = 1",
        fontsize=9,
        color=palette.ACCENT,
        fontweight="bold",
    )
    ax.text(
        0.6,
        top + 0.8,
        "free(): when a count drops to 0 the block is pushed back at the head (LIFO)",
        fontsize=9,
        color="#444444",
    )
    y = y0 + (0.2 if slide else -0.25)
    for seq in snap.sequences:  # block tables stacked in one column: no arrow crosses a cell
        colour = style.colour_of(seq.seq_id, colours)
        ax.text(
            12.6,
            y + 0.3,
            f"seq {seq.seq_id} ({seq.num_tokens} tokens)",
            fontsize=9.5,
            fontweight="bold",
            va="center",
        )
        y += 0.75
        for i, b in enumerate(seq.blocks):
            _box(ax, 12.9, y, 1.6, 0.6, colour, f"L{i} \u2192 {b}")
            ax.add_patch(
                FancyArrowPatch(
                    (12.9, y + 0.3),
                    (9.3, y0 + b * 0.8 + 0.3),
                    arrowstyle="-|>",
                    mutation_scale=10,
                    color=colour,
                    lw=1.2,
                    alpha=0.9,
                    shrinkA=1,
                    shrinkB=2,
                )
            )
            y += 0.8
        y += 0.5
    return [style.save(fig, Path(out_dir) / "3.6-core-flow.png")]
