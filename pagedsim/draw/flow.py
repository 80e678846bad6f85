"""Figures 3.3 (logical vs physical blocks) and 3.6 (the core flow), drawn from real traces.

3.3 draws each sequence's logical blocks in a row, with an arrow to each physical block.
3.6 shows the free pool (head first), the physical blocks and the block tables in one
frame, the block `allocate()` just popped highlighted. Reference: Kwon et al., SOSP 2023,
figure 6 (block table translation).
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
PHYS_Y = 4.0  # 3.3: the height of the physical strip, between the two logical rows


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


def _box(ax, x, y, w, h, colour, text, **kw):
    """A block drawn at (x, y): `colour`, ink edge (unless `ec`), and `text` centred on it."""
    kw.setdefault("edgecolor", kw.pop("ec", palette.INK))
    kw.setdefault("lw", 0.8)
    ax.add_patch(Rectangle((x, y), w, h, facecolor=colour, **kw))
    ink = style.text_on(colour)
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9, color=ink)


def _arrow(ax, a, b, colour, **kw):
    """An arrow from `a` to `b` (a block table's entry to its block, a list's link)."""
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", color=colour, **kw))


def make_logical_physical(out_dir: Path) -> list[Path]:
    """3.3: contiguous logical blocks of two sequences, scattered in physical memory."""
    m = scattered_manager()
    snap = m.snapshot()
    colours = style.seq_colours([snap])
    n = snap.num_gpu_blocks
    # on a slide (18 pt): a slide-shaped figure, a wider label column, and room at the top
    # for the title and the subtitle wrapped to the slide's width
    slide = style.slides()
    left = -4.0 if slide else -3.0  # where the row labels start
    size = style.SLIDE_BODY_IN if slide else LOGICAL_SIZE
    fig, ax = style.canvas(size, (left - 0.2, n + 0.6), (0, 11.8 if slide else 9.3))
    for b in range(n):  # physical memory strip
        owner = snap.owners(b)
        colour = style.colour_of(owner[0], colours) if owner else palette.FREE
        _box(ax, b + 0.05, PHYS_Y, 0.9, 0.9, colour, str(b), ls="-" if owner else "--")
    bold = dict(va="center", fontsize=10, fontweight="bold")
    ax.text(left, PHYS_Y + 0.45, "physical blocks\n(GPU memory)", **bold)
    for seq, y, side in zip(snap.sequences, (7.0, 1.0), (1, -1), strict=True):
        label = f"seq {seq.seq_id}: logical\n({seq.num_tokens} tokens)"
        ax.text(left, y + 0.45, label, **bold)
        _logical_row(ax, snap, seq, (y, side), style.colour_of(seq.seq_id, colours))
    title = (
        "3.3  Logical blocks are contiguous; physical blocks are wherever the free list put them"
    )
    sub = logical_subtitle(m)
    if slide:
        title = textwrap.fill(title, 50)
        sub = textwrap.fill(sub.replace("\n", " "), 95)
    ax.text(left, 11.5 if slide else 9.0, title, fontsize=12.5, fontweight="bold", va="top")
    grey = dict(fontsize=9, va="top", color="#444444", gid="subtitle")
    ax.text(left, 10.3 if slide else 8.55, sub, **grey)
    return [style.save(fig, Path(out_dir) / "3.3-logical-vs-physical.png")]


def _logical_row(ax, snap, seq, at, colour):
    """One sequence's logical blocks side by side at height `at[0]`, each with its fill and
    an arrow to its physical block: above the strip (`at[1]` = 1) or below it (-1)."""
    (y, side), n, size = at, snap.num_gpu_blocks, snap.block_size
    x0 = (n - len(seq.blocks)) / 2
    for i, b in enumerate(seq.blocks):
        last = min(size, seq.num_tokens - i * size)
        _box(ax, x0 + i + 0.05, y, 0.9, 0.9, colour, f"L{i}", gid=f"logical-{seq.seq_id}-{i}")
        fill = dict(ha="center", va="bottom" if side > 0 else "top", fontsize=7.5, color="#555555")
        ax.text(x0 + i + 0.5, y + (1.05 if side > 0 else -0.15), f"{last}/{size}", **fill)
        start = (x0 + i + 0.5, y if side > 0 else y + 0.9)
        end = (b + 0.5, PHYS_Y + 0.9 if side > 0 else PHYS_Y)
        _arrow(ax, start, end, colour, mutation_scale=10, lw=1.3, shrinkA=1, shrinkB=1, alpha=0.9)
    sep = "\n" if style.slides() else " "
    table = f"block table {seq.seq_id}{sep}= [{', '.join(map(str, seq.blocks))}]"
    mono = dict(ha="left", fontsize=9.5, family="DejaVu Sans Mono", va="center")
    ax.text(x0 + len(seq.blocks) + 0.5, y + 0.45, table, **mono)


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
    """3.6: free pool -> allocated blocks -> block tables, from the first step growing a table."""
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
    # on a slide (18 pt) the figure is as wide as a slide body, the caption wraps, and the
    # column heads keep one line (what they hold is said by the boxes themselves)
    slide = style.slides()
    y0 = 2.85 if slide else 2.7
    top = snap.num_gpu_blocks * 0.8 + y0 - 0.3
    size = style.SLIDE_BODY_IN if slide else FLOW_SIZE
    fig, ax = style.canvas(size, (0, 17.5), (top + 1.2, -0.2))
    title = ("3.6  The core flow" if slide else "3.6  The core flow, from a real trace") + (
        ": free pool \u2192 allocated blocks \u2192 block tables"
    )
    ax.text(0.3, 0.2, title, fontsize=12.5, fontweight="bold", va="top")
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
    _free_pool(ax, [new, *snap.free_list], y0, before.step)
    _physical_column(ax, snap, y0, new, colours)
    note = "free(): when a count drops to 0 the block is pushed back at the head (LIFO)"
    ax.text(0.6, top + 0.8, note, fontsize=9, color="#444444")
    _table_column(ax, snap, y0, colours)
    return [style.save(fig, Path(out_dir) / "3.6-core-flow.png")]


def _free_pool(ax, pool, y0, before):
    """3.6's left column: the block allocate() just popped (ghosted), then the free list."""
    for i, b in enumerate(pool):
        y = y0 + i * 0.8
        if i == 0:
            _box(ax, 0.9, y, 1.2, 0.6, "white", str(b), ls="--", ec=palette.ACCENT, lw=1.6)
        else:
            _box(ax, 0.9, y, 1.2, 0.6, palette.FREE, str(b), ls="-", ec=palette.FREE_EDGE)
        if i > 1:
            _arrow(ax, (1.5, y - 0.2), (1.5, y), "#666666", mutation_scale=8, shrinkA=0, shrinkB=0)
    said = f"was the head at step {before}"
    ax.text(2.3, y0 + 0.3, said, fontsize=8, va="center", color=palette.ACCENT)
    ax.text(2.3, y0 + 1.1, "head now", fontsize=8, va="center", color="#555555")


def _physical_column(ax, snap, y0, new, colours):
    """3.6's middle column: every physical block with its owners and count; the arrow of
    allocate() from the pool to block `new`."""
    for b in range(snap.num_gpu_blocks):
        owners = snap.owners(b)
        colour = style.colour_of(owners[0], colours) if owners else palette.FREE
        label = f"{b}: " + (
            "+".join(map(str, owners)) + f"  x{snap.ref_counts[b]}" if owners else "free"
        )
        ec, lw = (palette.ACCENT, 2.2) if b == new else (palette.INK, 0.8)
        ls = "-" if owners else "--"
        _box(ax, 6.7, y0 + b * 0.8, 2.6, 0.6, colour, label, ls=ls, lw=lw, ec=ec)
    bend = dict(mutation_scale=16, lw=2.2, connectionstyle="arc3,rad=-0.15")
    _arrow(ax, (2.1, y0 + 0.3), (6.7, y0 + new * 0.8 + 0.3), palette.ACCENT, **bend)
    pop = "allocate():\npop the head,\nref count = 1"
    ax.text(3.6, y0 + 2.3 + new * 0.2, pop, fontsize=9, color=palette.ACCENT, fontweight="bold")


def _table_column(ax, snap, y0, colours):
    """3.6's right column: the block tables stacked, so no arrow crosses a cell."""
    y = y0 + (0.2 if style.slides() else -0.25)
    for seq in snap.sequences:
        colour = style.colour_of(seq.seq_id, colours)
        label = f"seq {seq.seq_id} ({seq.num_tokens} tokens)"
        ax.text(12.6, y + 0.3, label, fontsize=9.5, fontweight="bold", va="center")
        y += 0.75
        for i, b in enumerate(seq.blocks):
            _box(ax, 12.9, y, 1.6, 0.6, colour, f"L{i} \u2192 {b}")
            thin = dict(mutation_scale=10, lw=1.2, alpha=0.9, shrinkA=1, shrinkB=2)
            _arrow(ax, (12.9, y + 0.3), (9.3, y0 + b * 0.8 + 0.3), colour, **thin)
            y += 0.8
        y += 0.5
