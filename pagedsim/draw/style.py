"""Shared look for every picture: a colourblind-safe palette, fonts, and a byte-stable save.

Colours come from Paul Tol's "muted" qualitative scheme (https://personal.sron.nl/~pault/),
designed to stay distinguishable under the common colour-vision deficiencies; its
pale grey is Tol's colour for "no data", which is what a free block is. Sequences get
colours in admission order (the order they first appear in a trace), so a sequence
keeps its colour for the whole animation even after older sequences finish.

`save` writes PNGs at a fixed dpi with no timestamp or software-version metadata, so
regenerating a figure from the same seed gives the same bytes.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg", force=False)  # headless unless a GUI backend was chosen before us

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402

SEQ_COLOURS = (  # Tol muted, ordered so neighbours in admission order contrast
    "#88CCEE",  # cyan
    "#CC6677",  # rose
    "#117733",  # green
    "#DDCC77",  # sand
    "#332288",  # indigo
    "#AA4499",  # purple
    "#44AA99",  # teal
    "#999933",  # olive
    "#882255",  # wine
)
FREE = "#DDDDDD"  # Tol's pale grey: a block on the free list
FREE_EDGE = "#888888"
INK = "#222222"  # text and outlines
ACCENT = "#EE7733"  # Tol vibrant orange: highlights (copy-on-write, the free-list head)
DPI = 100

RC = {
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "axes.titlesize": 12,
    "axes.labelsize": 10,
    "svg.hashsalt": "pagedsim",
}


def seq_colours(snapshots) -> dict:
    """seq_id -> colour, in order of first appearance across `snapshots`."""
    out: dict = {}
    for snap in snapshots:
        for s in snap.sequences:
            if s.seq_id not in out:
                out[s.seq_id] = SEQ_COLOURS[len(out) % len(SEQ_COLOURS)]
    return out


def colour_of(seq_id, colours: dict) -> str:
    """The colour of `seq_id`; sequences missing from `colours` get one by position."""
    if seq_id in colours:
        return colours[seq_id]
    return SEQ_COLOURS[len(colours) % len(SEQ_COLOURS)]


def text_on(colour) -> str:
    """Black or white, whichever reads better on `colour` (relative luminance test)."""
    r, g, b = to_rgb(colour)
    return INK if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "white"


def whole_pixels(width: float, height: float, dpi: int = DPI) -> tuple[float, float]:
    """Inches that come out as round(inches * dpi) pixels whether matplotlib rounds or
    truncates (versions differ): a quarter pixel above the whole number."""
    return tuple((round(x * dpi) + 0.25) / dpi for x in (width, height))


def new_figure(width: float, height: float):
    """A figure of `width` x `height` inches with the house fonts."""
    with plt.rc_context(RC):
        return plt.figure(figsize=(width, height), dpi=DPI)


def save(fig, path, *, dpi: int = DPI, close: bool = True) -> Path:
    """Write `fig` to `path` (PNG) without timestamps or version strings; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, metadata={"Software": None}, facecolor="white")
    if close:
        plt.close(fig)
    return path
