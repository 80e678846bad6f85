"""3.1: external fragmentation -- first-fit holes against fixed-size blocks (PagedAttention Sec. 3).

The story (REQUESTS, FINISHED, LATE) runs through two small models, `first_fit` (one
contiguous range per request: F is refused) and `fixed_blocks` (blocks of B slots: F fits,
the only waste inside each last block). Reference: Kwon et al., SOSP 2023, Sec. 3, Fig. 3.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from matplotlib.patches import Rectangle

from ..palette import INK
from . import style

SLOTS, BLOCK = 48, 4
REQUESTS = (("A", 10), ("B", 6), ("C", 12), ("D", 8), ("E", 8))
FINISHED = ("B", "D")
LATE = ("F", 12)
SIZE = (11.0, 5.2)  # inches


def first_fit(requests=REQUESTS, finished=FINISHED, late=LATE, slots=SLOTS):
    """owner per slot (None = hole) after the requests and the frees; and whether `late` fit."""
    owner = [None] * slots

    def place(name, n):
        run = 0
        for i in range(slots):
            run = run + 1 if owner[i] is None else 0
            if run == n:
                owner[i - n + 1 : i + 1] = [name] * n
                return True
        return False

    for name, n in requests:
        assert place(name, n), f"{name} must fit in the fresh memory"
    owner = [None if o in finished else o for o in owner]
    return owner, place(*late)


def fixed_blocks(requests=REQUESTS, finished=FINISHED, late=LATE, slots=SLOTS, block=BLOCK):
    """(owner, tokens held) per block after the same story, with LIFO reuse of freed blocks."""
    free = list(range(slots // block))  # head first
    held: dict = {}
    for name, n in (*requests, late):
        if name == late[0]:
            for gone in finished:  # the frees happen before the late request
                free[:0] = reversed(held.pop(gone)[0])
        need = -(-n // block)
        blocks, free = free[:need], free[need:]
        held[name] = (blocks, n)
    out = [(None, 0)] * (slots // block)
    for name, (blocks, n) in held.items():
        for i, b in enumerate(blocks):
            out[b] = (name, min(block, n - i * block))
    return out


def _bar(ax, y, owners, colours, *, label):
    for i, o in enumerate(owners):
        colour = colours.get(o, "white")
        edge, hatch = (INK, None) if o else ("#999999", "///")
        slot = dict(facecolor=colour, edgecolor=edge, lw=0.4, hatch=hatch, gid=f"slot-{label}-{i}")
        ax.add_patch(Rectangle((i, y), 1, 1, **slot))
    ax.text(-0.6, y + 0.5, label, ha="right", va="center", fontsize=style.pt(10), fontweight="bold")


def make(out_dir: Path) -> list[Path]:
    """3.1: first-fit leaves holes too small for a new request; fixed blocks fit it."""
    names = [n for n, _ in (*REQUESTS, LATE)]
    palette = style.look().seq_colours
    colours = {n: palette[i % len(palette)] for i, n in enumerate(names)}
    fig = style.new_figure(*style.whole_pixels(*SIZE))
    # on a slide the row names are 18 pt: a wider margin for them (fit_slide wraps the rest)
    ax = fig.add_axes((0.17, 0.04, 0.8, 0.8) if style.slides() else (0.1, 0.04, 0.86, 0.8))
    ax.set_xlim(-1, SLOTS + 1)
    ax.set_ylim(9.6, -0.6)
    ax.set_axis_off()
    title = style.tr("3.1  External fragmentation: first-fit holes vs fixed blocks")
    fig.text(0.02, 0.96, title, fontsize=style.pt(12), fontweight="bold", va="top")
    story = "{slots} token slots. A..E arrive, B and D finish, then F needs {n} slots."
    sub = style.tr(story, slots=SLOTS, n=LATE[1])
    fig.text(0.02, 0.905, sub, fontsize=style.pt(10), va="top", color=style.grey("#444444"))
    _first_fit_row(ax, colours)
    _blocks_row(ax, colours)
    _key(ax, colours)
    return [style.save(fig, Path(out_dir) / "3.1-fragmentation.png")]


def _first_fit_row(ax, colours):
    """The contiguous layout after B and D finish, and why F is refused."""
    owner, fits = first_fit()
    holes = [len(list(run)) for o, run in itertools.groupby(owner) if o is None]
    _bar(ax, 0.6, owner, colours, label=style.tr("first fit"))
    _names(ax, 0.6, owner)
    assert not fits, "the story needs a refused late request"
    slide = style.slides()  # 18 pt: the verdict wraps to two lines, hung under the bar
    verdict = style.tr(
        "free: {free} slots in holes of {holes}  \u2192  F ({n}) is refused: no hole is big "
        "enough (external fragmentation)",
        free=owner.count(None),
        holes=", ".join(map(str, holes)),
        n=LATE[1],
    )
    words = dict(fontsize=style.pt(10.5), color="#AA3377", gid="first-fit-verdict")
    ax.text(0, 1.8 if slide else 2.15, verdict, va="top" if slide else "center", **words)


def _blocks_row(ax, colours):
    """The same story in blocks of BLOCK slots: F takes whichever blocks are free."""
    blocks = fixed_blocks()
    slots = [o for o, n in blocks for k in range(BLOCK)]
    held = [o if k < n else None for o, n in blocks for k in range(BLOCK)]
    _bar(ax, 4.4, held, colours, label=style.tr("blocks of {b}", b=BLOCK))
    for b in range(len(blocks) + 1):  # block boundaries
        ax.plot([b * BLOCK, b * BLOCK], [4.2, 5.6], color=INK, lw=1.6)
    grey = style.grey("#555555")
    for b in range(len(blocks)):
        centred = dict(ha="center", va="center", fontsize=style.pt(8.5), color=grey)
        ax.text(b * BLOCK + BLOCK / 2, 5.95, f"#{b}", **centred)
    _names(ax, 4.4, slots)
    wasted = sum(BLOCK - n for o, n in blocks if o)
    taken = ", ".join(str(b) for b, (o, _) in enumerate(blocks) if o == "F")
    verdict = style.tr(
        "F takes blocks {blocks}: they need not be next to each other. Waste: {waste} slots, "
        "only inside last blocks (internal, < B per request)",
        blocks=taken,
        waste=wasted,
    )
    ax.text(0, 7.0, verdict, fontsize=style.pt(10.5), va="center", gid="blocks-verdict")


def _key(ax, colours):
    """What an empty slot, a request's tokens and a block boundary look like."""
    ax.add_patch(
        Rectangle((0, 8.3), 1.2, 0.8, facecolor="white", edgecolor="#999999", hatch="///", lw=0.4)
    )
    ax.text(1.6, 8.7, style.tr("empty slot"), va="center", fontsize=style.pt(9.5))
    ax.add_patch(Rectangle((9, 8.3), 1.2, 0.8, facecolor=colours["A"], edgecolor=INK, lw=0.4))
    ax.text(10.6, 8.7, style.tr("a request's tokens"), va="center", fontsize=style.pt(9.5))
    edge = 23 if style.slides() else 21  # past "a request's tokens" at 18 pt
    ax.plot([edge, edge], [8.2, 9.2], color=INK, lw=1.6)
    ax.text(edge + 0.6, 8.7, style.tr("block boundary"), va="center", fontsize=style.pt(9.5))


def _names(ax, y, owners):
    """Each request's name once, centred on its first run of slots."""
    i = 0
    for owner, run in itertools.groupby(owners):
        j = i + len(list(run))
        if owner is not None:
            name = dict(ha="center", va="center", fontsize=style.pt(10), fontweight="bold")
            ax.text((i + j) / 2, y - 0.35, owner, color=INK, **name)
        i = j
