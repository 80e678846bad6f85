"""Chapter 3's figures, registered for `pagedsim figures` (FIGURES: name -> maker).

Each maker takes the output folder and returns the files it wrote. All inputs are
fixed (the tour's script, seeded workloads, `sizing` presets), so the files are the
same on every run. 3.4 replays `pagedsim tour`'s own trace.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from PIL import Image

from ..trace import AllocationFailed, CopyOnWrite, SequenceAdded, SequenceForked, SequenceFreed
from . import anatomy, flow, style, tradeoff
from .animate import write_gif
from .render import Layout, render


def tour_snapshots() -> list:
    """The snapshots of `pagedsim tour` (12 blocks x 4 tokens, fork, copy-on-write, OutOfBlocks)."""
    from ..tour import tour_manager

    return tour_manager().trace.snapshots


STRIP_COLS, STRIP_GAP = 2, 12  # key frames per row, pixels between them


def key_frames(snapshots) -> list[int]:
    """The start, then the first step of each kind the chapter discusses, in trace order."""
    picks = {0}
    for kind in (SequenceAdded, SequenceForked, CopyOnWrite, SequenceFreed, AllocationFailed):
        k = next((i for i, s in enumerate(snapshots) if any(isinstance(e, kind) for e in s.events)), None)
        if k is not None:
            picks.add(k)
    return sorted(picks)


def make_tour(out_dir: Path) -> list[Path]:
    """3.4: the tour as an animated GIF, plus a PNG strip of its key frames."""
    snaps = tour_snapshots()
    layout, colours = Layout.for_snapshots(snaps), style.seq_colours(snaps)
    fig, tiles = None, []
    for k in key_frames(snaps):
        fig = render(snaps[k], fig, layout=layout, colours=colours)
        fig.canvas.draw()
        tiles.append(np.asarray(fig.canvas.buffer_rgba())[..., :3].copy())  # [H, W, 3]
    plt.close(fig)
    h, w, _ = tiles[0].shape
    cols, gap = STRIP_COLS, STRIP_GAP
    rows = -(-len(tiles) // cols)
    strip = np.full((rows * (h + gap) - gap, cols * (w + gap) - gap, 3), 170, np.uint8)  # grey gutters
    for i, tile in enumerate(tiles):
        r, c = divmod(i, cols)
        strip[r * (h + gap):r * (h + gap) + h, c * (w + gap):c * (w + gap) + w] = tile
    png = Path(out_dir) / "3.4-tour-key-frames.png"
    Image.fromarray(strip).save(png, optimize=True)
    return [write_gif(snaps, Path(out_dir) / "3.4-tour.gif"), png]


def make_core_flow(out_dir: Path) -> list[Path]:
    """3.6: free pool -> allocated blocks -> block tables, drawn from the tour's trace."""
    return flow.make_core_flow(out_dir, tour_snapshots())


FIGURES = {
    "3.2-block-anatomy": anatomy.make_anatomy,
    "3.3-logical-vs-physical": flow.make_logical_physical,
    "3.4-tour": make_tour,
    "3.5-block-size-tradeoff": tradeoff.make,
    "3.6-core-flow": make_core_flow,
    "3.7-alignment": anatomy.make_alignment,
}
