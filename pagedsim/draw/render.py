"""Draw one `Snapshot` of the block manager: physical memory, free list, block tables, caption.

`render(snapshot)` is a pure function of the snapshot (plus colours and a layout shared by a
trace): drawing snapshot k again gives the same picture, which makes the stepper's "step
back" real time travel. Layout (y grows downwards):

    step k: caption ........................................................
    block tables (logical -> physical)   | physical blocks (grid, row-major)
      seq A  9 tok  [0][1][5]             |  [0 A x1 4/4] [1 A x1 1/4] [2 free] ...
    free list, head first: HEAD -> 7 -> 8 -> ... (+n more)

Artists carry gids that tests read (`block-<b>`, `badge-<b>`, `free-<i>`, `caption`, ...).
Reference: Kwon et al., SOSP 2023, figures 6-8, which draw the same three structures.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import Any

from matplotlib.colors import to_hex
from matplotlib.lines import Line2D
from matplotlib.patches import Circle, FancyArrowPatch, Patch, Rectangle
from matplotlib.text import Text

from .. import palette
from ..text.captions import caption
from ..trace import SequenceAdded, SequenceForked, SequenceFreed
from ..view.diffs import touched_blocks  # the blocks a step's events name
from . import style

MAX_SEQS = 8  # table rows drawn; with more sequences the last row summarises the rest
MAX_CELLS = 12  # logical slots drawn per table row
PITCH = 1.25  # grid distance between physical blocks, in layout units
CELL = 1.05  # side of one physical block
LABEL_W = 3.4  # least width of the "seq A / 9 tok" label column (longer ids widen it)
NODE_PITCH = 1.1  # distance between free-list nodes
COPY_BAND = 0.9  # extra room under each grid row for a copy-on-write arrow and its label
COPY_DEPTH = 0.3  # how far a copy arrow's arc dips below the blocks
ROW = 0.82  # distance between block-table rows


@dataclass(frozen=True)
class Layout:
    """Geometry that depends only on sizes, so every frame of a trace lines up."""

    num_gpu_blocks: int
    cols: int  # blocks per grid row
    table_rows: int  # sequence rows reserved
    table_cells: int  # logical slots reserved per row
    copy_room: bool = False  # some frame draws a copy-on-write arrow under the blocks
    gone: tuple = ()  # (step, ((seq_id, back_step | None), ...)): who left the pool at each step
    name_chars: int = 1  # the longest sequence id, in characters ("A:window": 8)

    @property
    def rows(self) -> int:
        return math.ceil(self.num_gpu_blocks / self.cols)

    @property
    def unit(self) -> float:  # inches per layout unit: a little smaller for big pools
        return (0.5 if self.num_gpu_blocks <= 32 else 0.4) * style.look().scale

    @classmethod
    def for_snapshots(cls, snapshots) -> "Layout":
        snapshots = list(snapshots)
        if not snapshots:
            raise ValueError("snapshots must not be empty")
        n = snapshots[0].num_gpu_blocks
        cols = n if n <= 8 else 6 if n <= 12 else 8 if n <= 32 else 16
        seqs = max(len(s.sequences) for s in snapshots)
        cells = max((len(q.blocks) for s in snapshots for q in s.sequences), default=0)
        copies = any(s.pending_copies for s in snapshots)
        gone = departures(snapshots)
        seqs = max(seqs, *(len(s.sequences) + len(g) for s, g in zip(snapshots, gone, strict=True)))
        marks = tuple((s.step, g) for s, g in zip(snapshots, gone, strict=True) if g)
        names = max((len(str(q.seq_id)) for s in snapshots for q in s.sequences), default=1)
        rows, slots = max(2, min(seqs, MAX_SEQS)), max(4, min(cells, MAX_CELLS))
        return cls(n, cols, rows, slots, copies, marks, names)

    def departed(self, step: int) -> tuple:
        """((seq_id, back_step | None), ...) for the frame of `step` (see `departures`)."""
        return next((g for k, g in self.gone if k == step), ())

    # Derived positions, in units.
    def text_pt(self, size: float) -> float:
        """The size a `size`-pt text ends up at relative to this layout: the look's minimum,
        and under `--slides` the 18 pt it is raised to once the frame is fitted to a slide."""
        pt = style.pt(size)
        if style.slides():
            wide = 0.5 + LABEL_W + self.table_cells + 1.2 + self.cols * PITCH + 0.3
            (w, h), unit = style.SLIDE_IN, self.unit
            fit = min(w / (wide * unit), h / (self.height * unit))
            pt = max(pt, style.SLIDE_MIN_PT / fit)
        return pt

    @property
    def label_w(self) -> float:
        """The label column: "seq <longest id>" (bold) and "<n> tok" side by side, estimated at
        0.62 em per character at the size the look draws them, so they never meet."""
        em = self.text_pt(9.5) / 72 / self.unit  # one em at the label size, in layout units
        bold = 0.7 if style.slides() else 0.62  # a wider guess at 18 pt: a gap that shows
        return max(LABEL_W, 0.65 + bold * em * (4 + self.name_chars) + 0.3 + 0.6 * em * 7)

    @property
    def grid_x(self) -> float:
        return 0.5 + self.label_w + self.table_cells + 1.2

    @property
    def width(self) -> float:
        return self.grid_x + self.cols * PITCH + 0.3

    @property
    def row_pitch(self) -> float:  # with a copy arrow in the trace, rows part to make room for it
        return PITCH + (COPY_BAND if self.copy_room else 0.0)

    @property
    def body_y(self) -> float:
        # below the caption and the panel titles (on a slide, two caption lines at 18 pt)
        return 2.7 if style.slides() else 2.4

    @property
    def free_y(self) -> float:
        grid = self.rows * PITCH + (self.rows - 1 + 0.6) * (self.row_pitch - PITCH)  # under the
        # last row a copy label needs less room: the free list's margin below takes the rest
        tables = 0.7 + self.table_rows * ROW
        return self.body_y + max(grid, tables) + 0.4  # no idle band above the free list

    @property
    def height(self) -> float:
        # the free list, then the legend (on a slide it may take two rows at 18 pt)
        return self.free_y + (2.85 if style.slides() else 2.25)


def departures(snapshots) -> list[tuple]:
    """For each frame: the sequences that left the pool in it, as (seq_id, back): back is the
    step of the next frame that has it again (preempted or swapped out), or None (finished)."""
    live = [{q.seq_id for q in s.sequences} for s in snapshots]
    added = [
        {
            getattr(e, "seq_id", getattr(e, "child", None))
            for e in s.events
            if isinstance(e, (SequenceAdded, SequenceForked))
        }
        for s in snapshots
    ]
    seen = [held | new for held, new in zip(live, added, strict=True)]
    out = []
    for k, snap in enumerate(snapshots):
        before = [q.seq_id for q in snapshots[k - 1].sequences] if k else []
        freed = [e.seq_id for e in snap.events if isinstance(e, SequenceFreed)]
        left = [sid for sid in dict.fromkeys([*before, *freed]) if sid not in live[k]]
        later = range(k + 1, len(snapshots))
        back = [next((snapshots[j].step for j in later if sid in seen[j]), None) for sid in left]
        out.append(tuple(zip(left, back, strict=True)))
    return out


def render(
    snapshot, fig=None, *, ax=None, layout: Layout | None = None, colours=None, legend: bool = True
):
    """Draw `snapshot`; returns the figure. Without `ax` it draws on `fig` (cleared and resized)
    or a new figure; with `ax` it redraws that axes. Pass one `layout` and `colours` for every
    frame of a trace so frames line up; `legend=False` leaves the legend band empty."""
    layout = layout or Layout.for_snapshots([snapshot])
    if layout.num_gpu_blocks != snapshot.num_gpu_blocks:
        raise ValueError(
            f"layout is for {layout.num_gpu_blocks} blocks, snapshot has {snapshot.num_gpu_blocks}"
        )
    colours = colours if colours is not None else style.seq_colours([snapshot])
    if ax is None:
        size = style.whole_pixels(layout.width * layout.unit, layout.height * layout.unit)
        if fig is None:
            fig = style.new_figure(*size)
        else:  # reuse the figure (a frame loop); give it this layout's size
            fig.clear()
            fig.set_size_inches(*size)
        fig._pagedsim_scaled = True  # the look's scale is in layout.unit already
        ax = fig.add_axes((0, 0, 1, 1))
    else:  # drop the previous frame's artists (cheaper than ax.clear(), same result here)
        for artist in [*ax.patches, *ax.texts, *ax.artists, *ax.lines, *ax.collections, *ax.images]:
            artist.remove()
        fig = ax.figure
    ax.set_xlim(0, layout.width)
    ax.set_ylim(layout.height, 0)  # y grows downwards, like reading a page
    ax.set_axis_off()
    _caption(ax, snapshot, layout)
    _tables(ax, snapshot, layout, colours)
    _blocks(ax, snapshot, layout, colours)
    _free_list(ax, snapshot, layout)
    if legend:
        _legend(ax, layout, snapshot)
    return fig


def describe_artists(fig) -> list[tuple]:
    """Every patch and text of `fig` as plain tuples: what tests compare instead of pixels."""
    out: list[tuple[object, ...]] = [
        ("figtext", t.get_gid(), t.get_text(), _r(t.get_position()), to_hex(t.get_color()))
        for t in fig.texts
    ]
    for ax in fig.axes:
        for a in ax.get_children():
            if isinstance(a, Text):
                out.append(
                    ("text", a.get_gid(), a.get_text(), _r(a.get_position()), to_hex(a.get_color()))
                )
            elif isinstance(a, Patch):
                if isinstance(a, Rectangle):
                    geom = _r((*a.get_xy(), a.get_width(), a.get_height()))
                elif isinstance(a, Circle):
                    geom = _r((*a.center, a.radius))
                elif isinstance(a, FancyArrowPatch):
                    # posA/posB live only in this private instance field: no getter, no stub
                    ends = vars(a)["_posA_posB"]
                    geom = _r(sum(ends, ())) if ends else ()
                else:
                    geom = ()
                face, edge = (
                    to_hex(c, keep_alpha=True) for c in (a.get_facecolor(), a.get_edgecolor())
                )
                out.append((type(a).__name__, a.get_gid(), face, edge, geom))
    return out


def _r(values) -> tuple:
    return tuple(round(float(v), 6) for v in values)


def block_xy(layout: Layout, b: int) -> tuple[float, float]:
    """Top-left corner of physical block `b` in layout units."""
    row, col = divmod(b, layout.cols)
    return layout.grid_x + col * PITCH, layout.body_y + row * layout.row_pitch


def _caption(ax, snap, layout):
    failed = any(e.kind == "allocation_failed" for e in snap.events)
    # ~0.57 em per character; a failed step's caption is bold, ~7% wider
    chars = max(
        20, int(layout.width * layout.unit * 72 / ((0.61 if failed else 0.57) * layout.text_pt(11)))
    )
    said = caption(snap, style.lang())
    if style.lang() == "zh":  # no spaces to break at: cut by width (a CJK character is ~1 em)
        text = style.tr("step {k}: {caption}", k=snap.step, caption=said)
        text = "\n".join(text[i : i + chars // 2] for i in range(0, len(text), chars // 2))
    else:
        text = textwrap.fill(f"step {snap.step}: {said}", chars)
    ink, weight = ("#AA3377", "bold") if failed else (palette.INK, "normal")
    _text(ax, 0.5, 0.35, text, 11, va="top", ha="left", gid="caption", color=ink, fontweight=weight)
    heads = (
        (0.5, style.tr("block tables (logical \u2192 physical)")),
        (layout.grid_x, style.tr("physical blocks (B = {b} tokens)", b=snap.block_size)),
    )
    for x, head in heads:
        y = layout.body_y - 0.62
        _text(ax, x, y, head, 10, ha="left", va="bottom", color=palette.INK, fontweight="bold")


def _text(ax, x, y, text, size, **kw):
    """`text` at (x, y), centred on it both ways unless `kw` says otherwise, at `size` pt."""
    kw.setdefault("ha", "center")
    kw.setdefault("va", "center")
    return ax.text(x, y, text, fontsize=style.pt(size), **kw)


def _box(ax, x, y, w, h, **kw):
    """A rectangle with its top-left corner at (x, y), ink-edged unless `kw` says otherwise."""
    kw.setdefault("edgecolor", palette.INK)
    return ax.add_artist(Rectangle((x, y), w, h, **kw))


def _tables(ax, snap, layout, colours):
    x0 = 0.5 + layout.label_w
    grey = style.grey("#666666")
    for i in range(layout.table_cells):  # logical index header
        _text(ax, x0 + i + 0.45, layout.body_y + 0.35, str(i), 7.5, va="baseline", color=grey)
    seqs = snap.sequences
    shown = seqs if len(seqs) <= layout.table_rows else seqs[: layout.table_rows - 1]
    for r, seq in enumerate(shown):
        _table_row(ax, layout.body_y + 0.6 + r * ROW, seq, layout, colours)
    rows = len(shown) + (len(shown) < len(seqs))
    for j, (sid, back) in enumerate(layout.departed(snap.step)[: max(0, layout.table_rows - rows)]):
        _gone_row(ax, layout.body_y + 0.6 + (rows + j) * ROW, sid, back, colours, layout.label_w)
    if len(shown) < len(seqs):
        more = style.tr("... and {n} more sequences", n=len(seqs) - len(shown))
        y = layout.body_y + 0.6 + len(shown) * ROW + 0.41
        _text(ax, 0.5, y, more, 8.5, ha="left", color=style.grey("#444444"))
    if not seqs:
        _text(ax, 0.5, layout.body_y + 1.05, style.tr("(no sequences)"), 9, ha="left", color=grey)


def _table_row(ax, y, seq, layout, colours):
    """One sequence: its colour, "seq A" and "9 tok", then the slots of its block table."""
    x0, sid = 0.5 + layout.label_w, seq.seq_id
    colour = style.colour_of(sid, colours)
    _box(ax, 0.5, y + 0.08, 0.5, 0.66, facecolor=colour, lw=0.6)
    label = style.tr("seq {s}", s=sid)
    _text(ax, 1.15, y + 0.41, label, 9.5, ha="left", fontweight="bold", gid=f"label-{sid}")
    tokens = style.tr("{n} tok", n=seq.num_tokens)
    _text(ax, x0 - 0.15, y + 0.41, tokens, 8, ha="right", gid=f"tokens-{sid}")
    blocks = seq.blocks
    cut = len(blocks) > layout.table_cells
    for i, b in enumerate(blocks[: layout.table_cells - 1] if cut else blocks):
        dropped = b < 0  # NULL_BLOCK: a sliding window released it
        face, ls = ("white", "--") if dropped else (colour, "-")
        _box(ax, x0 + i, y + 0.08, 0.9, 0.66, facecolor=face, lw=0.6, ls=ls, gid=f"table-{sid}-{i}")
        ink = palette.INK if dropped else style.text_on(colour)
        _text(ax, x0 + i + 0.45, y + 0.41, "\u2013" if dropped else str(b), 8.5, color=ink)
    if cut:
        more = f"+{len(blocks) - layout.table_cells + 1}"
        _text(ax, x0 + layout.table_cells - 0.55, y + 0.41, more, 8, color=style.grey("#444444"))


def _gone_row(ax, y, seq_id, back, colours, label_w):
    """A sequence that left the pool at this step: its colour as a dashed outline, and why."""
    colour = style.colour_of(seq_id, colours)
    gone = dict(facecolor="white", edgecolor=colour, lw=1.6, ls="--", gid=f"gone-{seq_id}")
    _box(ax, 0.5, y + 0.08, 0.5, 0.66, **gone)
    grey = style.grey("#666666")
    _text(ax, 1.15, y + 0.41, style.tr("seq {s}", s=seq_id), 9.5, ha="left", color=grey)
    why = (
        style.tr("finished: its blocks are freed")
        if back is None
        else style.tr("preempted: out of the pool until step {k}", k=back)
    )
    why_kw = dict(ha="left", color=grey, style="italic", gid=f"gone-why-{seq_id}")
    _text(ax, 0.5 + label_w, y + 0.41, why, 8.5, **why_kw)


def _blocks(ax, snap, layout, colours):
    """The physical pool: every block, then this step's orange frames and copy arrows."""
    owners: dict[int, list[object]] = {b: [] for b in range(snap.num_gpu_blocks)}
    for seq in snap.sequences:
        for b in seq.blocks:
            if 0 <= b < snap.num_gpu_blocks:
                owners[b].append(seq.seq_id)
    for b in range(snap.num_gpu_blocks):
        if snap.ref_counts[b] == 0:
            _free_block(ax, snap, b, block_xy(layout, b))
        else:
            inks = [style.colour_of(s, colours) for s in owners[b]]
            _used_block(ax, snap, b, block_xy(layout, b), inks)
    for b in touched_blocks(snap):  # what this step changed: an orange frame
        x, y = block_xy(layout, b)
        frame = dict(facecolor="none", edgecolor=palette.ACCENT, lw=2.2, gid=f"touched-{b}")
        _box(ax, x - 0.07, y - 0.07, CELL + 0.14, CELL + 0.14, zorder=4, **frame)
    for src, dst in snap.pending_copies:
        _copy_arrow(ax, layout, src, dst)


def _free_block(ax, snap, b, xy):
    """A free block: grey and dashed (hatched while the prefix cache still holds its
    tokens); the free list's head and, off a slide, cached blocks say so in words."""
    (x, y), slide, lk = xy, style.slides(), style.look()
    cached = b in snap.cached_blocks
    hatch = "//" if cached else None
    free = dict(facecolor=lk.free, edgecolor=lk.free_edge, lw=0.8, ls="--", hatch=hatch)
    _box(ax, x, y, CELL, CELL, gid=f"block-{b}", **free)
    _text(ax, x + CELL / 2, y + (0.25 if slide else 0.45), str(b), 9.5, color=style.grey("#777777"))
    head = snap.free_list and b == snap.free_list[0]
    if head or (cached and not slide):  # a slide's legend names the hatch
        word = style.tr("head") if head else style.tr("cached")
        ink = palette.ACCENT if head else style.grey("#777777")
        _text(ax, x + CELL / 2, y + (0.7 if slide else 0.8), word, 6.5, color=ink)


def _used_block(ax, snap, b, xy, owners):
    """A block in use, in its owners' colours (extra owners as vertical stripes), with its
    id, a fill bar, the tokens it holds and its ref count badge. `owners`: their colours."""
    (x, y), count = xy, snap.ref_counts[b]
    # on a slide every text is 18 pt, about 0.4 of a block: the id, the fill and a thinner
    # fill bar are stacked apart so that they do not run into each other
    id_y, fill_y, bar_y, bar_h = (
        (0.22, 0.62, CELL - 0.13, 0.08) if style.slides() else (0.36, 0.66, CELL - 0.2, 0.12)
    )
    first = owners[0] if owners else "#BBBBBB"
    _box(ax, x, y, CELL, CELL, facecolor=first, lw=1.8 if count > 1 else 0.8, gid=f"block-{b}")
    for j, colour in enumerate(owners[1:], start=1):
        w = CELL / len(owners)
        _box(ax, x + j * w, y, w, CELL, facecolor=colour, edgecolor="none", gid=f"share-{b}-{j}")
    shared = len(owners) > 1
    ink = palette.INK if shared else style.text_on(first)
    box = dict(boxstyle="round,pad=0.12", fc="white", ec="none", alpha=0.8) if shared else None
    _text(ax, x + CELL / 2, y + id_y, str(b), 10, fontweight="bold", color=ink, bbox=box)
    fill = snap.block_fill[b]
    _box(ax, x + 0.1, y + bar_y, CELL - 0.2, bar_h, facecolor="white", lw=0.4)
    bar = dict(facecolor=palette.INK, edgecolor="none", gid=f"fill-{b}")
    _box(ax, x + 0.1, y + bar_y, (CELL - 0.2) * fill / snap.block_size, bar_h, **bar)
    text = block_label(snap, b)  # the text the block holds, when the trace knows it
    if text:
        words = dict(color=ink, bbox=box, gid=f"text-{b}", linespacing=0.9)
        _text(ax, x + CELL / 2, y + 0.64, text, 4.5, **words)
    else:
        _text(ax, x + CELL / 2, y + fill_y, f"{fill}/{snap.block_size}", 6.5, color=ink, bbox=box)
    badge = Circle((x + CELL - 0.05, y + 0.05), 0.19, fc="white", ec=palette.INK, lw=0.7, zorder=6)
    ax.add_artist(badge)
    bold = dict(fontweight="bold", gid=f"badge-{b}", zorder=7)
    _text(ax, x + CELL - 0.05, y + 0.06, str(count), 7, **bold)


def _copy_arrow(ax, layout, src, dst):
    """A pending copy-on-write, src -> dst: an arc under the blocks, its label at its side."""
    (sx, sy), (dx, dy) = block_xy(layout, src), block_xy(layout, dst)
    a, b = (sx + CELL / 2, sy + CELL + 0.08), (dx + CELL / 2, dy + CELL + 0.08)
    dist = math.hypot(b[0] - a[0], b[1] - a[1])
    rad = min(0.45, 2 * COPY_DEPTH / max(dist, 1e-9)) * (1 if dx >= sx else -1)
    arc: dict[str, Any] = dict(connectionstyle=f"arc3,rad={rad}", arrowstyle="-|>")
    ink: dict[str, Any] = dict(color=palette.ACCENT, zorder=8, mutation_scale=16, lw=2.6)
    ax.add_artist(
        FancyArrowPatch(a, b, gid=f"copy-{src}-{dst}", shrinkA=0, shrinkB=0, **arc, **ink)
    )
    label = style.tr("copy {src}\u2192{dst}", src=src, dst=dst)
    x, y = (a[0] + b[0]) / 2, (a[1] + b[1]) / 2 + abs(rad) * dist / 2 + 0.12
    tag = dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.9)
    words = dict(fontweight="bold", color=palette.ACCENT, gid=f"copy-label-{src}-{dst}")
    _text(ax, x, y, label, 9, va="top", zorder=9, bbox=tag, **words)


def block_label(snap, b: int) -> str:
    """A snapshot may carry `block_labels` (the engine's text per block): two short lines."""
    labels = getattr(snap, "block_labels", ())
    text = labels[b] if b < len(labels) else ""
    text = text.replace("\n", "\u21b5")
    half = -(-len(text) // 2)
    return text[:half] + "\n" + text[half:] if len(text) > 8 else text


def _legend(ax, layout, snap=None):
    """What the marks mean (on a slide, copy-on-write only where the frame draws a copy)."""
    lk, badge = style.look(), style.tr("ref count (badge)")
    free: dict[str, Any] = dict(facecolor=lk.free, edgecolor=lk.free_edge, ls="--")
    handles = [
        Patch(**free, label=style.tr("free block")),
        Line2D([], [], ls="none", marker="o", ms=9, mfc="white", mec=palette.INK, label=badge),
        Patch(facecolor=palette.INK, label=style.tr("fill (tokens / B)")),
        Patch(
            facecolor="none", edgecolor=palette.ACCENT, lw=2.2, label=style.tr("changed this step")
        ),
        Line2D([], [], color=palette.ACCENT, lw=2.6, label=style.tr("copy-on-write src\u2192dst")),
    ]
    if style.slides() and snap is not None and not snap.pending_copies:
        handles = handles[:-1]
    if style.slides() and snap is not None and set(snap.cached_blocks) & set(snap.free_list):
        handles.append(  # a slide's blocks are too narrow for the word "cached" at 18 pt
            Patch(**free, hatch="//", label=style.tr("cached (free, reusable)"))
        )
    ncol = 3 if style.slides() and len(handles) > 4 else len(handles)
    leg = ax.legend(
        handles=handles,
        loc="lower left",
        ncol=ncol,
        frameon=False,
        fontsize=style.pt(8.5),
        handlelength=1.6,
        columnspacing=1.2,
        borderaxespad=0.2,
        bbox_to_anchor=(0.5 / layout.width, 0.0),
    )
    leg.set_gid("legend")


def _free_list(ax, snap, layout):
    """The free list as a chain of nodes from HEAD, as many as fit, then TAIL or how many more."""
    y, free = layout.free_y, snap.free_list
    title = style.tr("free list, head first = allocate() order ({n} free)", n=len(free))
    _text(ax, 0.5, y, title, 10, ha="left", fontweight="bold")
    y += 0.45
    _text(ax, 0.5, y + 0.4, "HEAD", 8.5, ha="left", color=palette.ACCENT, fontweight="bold")
    # "HEAD" is bold 8.5 pt (18 on a slide): about 0.8 em a letter, then the first arrow
    head_end = 0.5 + 3.3 * layout.text_pt(8.5) / 72 / layout.unit
    x = max(2.0, head_end + 0.45)
    room = max(1, int((layout.width - x - 1.6) // NODE_PITCH))
    shown = free if len(free) <= room else free[: room - 1]
    prev = (max(1.45, head_end + 0.1), y + 0.4)
    lk = style.look()
    for i, b in enumerate(shown):
        nx = x + i * NODE_PITCH
        _link(ax, prev, (nx, y + 0.4))
        node = dict(facecolor=lk.free, edgecolor=lk.free_edge, lw=0.8, gid=f"free-{i}")
        _box(ax, nx, y + 0.05, 0.7, 0.7, **node)
        _text(ax, nx + 0.35, y + 0.4, str(b), 8.5)
        prev = (nx + 0.7, y + 0.4)
    end = x + len(shown) * NODE_PITCH
    _link(ax, prev, (end, y + 0.4))
    rest = len(free) - len(shown)
    tail = "TAIL" if free else style.tr("empty: the next allocate() fails")
    tail = style.tr("... +{n} more", n=rest) if rest else tail
    ink = "#AA3377" if not free else style.grey("#555555")
    _text(ax, end + 0.1, y + 0.4, tail, 8.5, ha="left", color=ink, gid="free-tail")


def _link(ax, a, b):
    """One arrow of the free list's chain."""
    link: dict[str, Any] = dict(arrowstyle="-|>", mutation_scale=9, shrinkA=1, shrinkB=1)
    ax.add_artist(FancyArrowPatch(a, b, color=style.grey("#555555"), lw=0.9, **link))
