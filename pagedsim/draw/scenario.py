"""Any trace as slides: one frame per step, a key-frame strip (or one file per key frame), a GIF.

Used by `pagedsim play ... --draw DIR` and the 3.4 figure. The key-frame strip is ONE
figure, one axes per frame, so in SVG and PDF every label stays editable text; only its
last frame draws the legend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from ..trace import AllocationFailed, CopyOnWrite, SequenceAdded, SequenceForked, SequenceFreed
from . import style
from .animate import write_frames, write_gif
from .render import Layout, render

STRIP_COLS = 2  # key frames per row
STRIP_GAP = 0.15  # inches between frames (paper look)


def key_frames(snapshots) -> list[int]:
    """The start, then the first step of each kind the chapter discusses, in trace order."""
    picks = {0}
    for kind in (SequenceAdded, SequenceForked, CopyOnWrite, SequenceFreed, AllocationFailed):
        k = next(
            (i for i, s in enumerate(snapshots) if any(isinstance(e, kind) for e in s.events)), None
        )
        if k is not None:
            picks.add(k)
    return sorted(picks)


def strip_figure(snapshots, picks=None, *, cols: int = STRIP_COLS):
    """One figure: the frames `picks` (default: key_frames) in a grid, `cols` per row."""
    snapshots = list(snapshots)
    picks = key_frames(snapshots) if picks is None else list(picks)
    if not picks:
        raise ValueError("no frames to draw")
    layout, colours = Layout.for_snapshots(snapshots), style.seq_colours(snapshots)
    w, h = layout.width * layout.unit, layout.height * layout.unit  # inches per frame
    gap = STRIP_GAP * style.look().scale
    cols = min(cols, len(picks))
    rows = -(-len(picks) // cols)
    W, H = style.whole_pixels(cols * w + (cols - 1) * gap, rows * h + (rows - 1) * gap)
    fig = style.new_figure(W, H)
    fig._pagedsim_scaled = True  # layout.unit already carries the look's scale
    for i, k in enumerate(picks):
        r, c = divmod(i, cols)
        box = ((c * (w + gap)) / W, 1 - (r * (h + gap) + h) / H, w / W, h / H)
        ax = fig.add_axes(box, gid=f"frame-{k}")
        render(snapshots[k], ax=ax, layout=layout, colours=colours, legend=i == len(picks) - 1)
        edge: dict[str, Any] = dict(fill=False, ec="#999999", lw=0.8, clip_on=False)
        ax.add_artist(plt.Rectangle((0.002, 0.002), 0.996, 0.996, transform=ax.transAxes, **edge))
    return fig


def write_strip(snapshots, path, picks=None) -> Path:
    return style.save(strip_figure(snapshots, picks), path)


def write_slides(snapshots, out_dir, name: str, picks=None) -> list[Path]:
    """One file per key frame (`pagedsim figures --slides`), each a whole frame with its legend."""
    snapshots = list(snapshots)
    picks = key_frames(snapshots) if picks is None else list(picks)
    return [
        draw_one(snapshots, k, Path(out_dir) / f"{name}-slide-{i + 1}-step-{k:02d}.png")
        for i, k in enumerate(picks)
    ]


def draw_one(snapshots, k: int, path) -> Path:
    """Frame `k` of `snapshots`, laid out for the whole trace, into `path` (format: its suffix)."""
    snapshots = list(snapshots)
    fig = render(
        snapshots[k], layout=Layout.for_snapshots(snapshots), colours=style.seq_colours(snapshots)
    )
    return style.save(fig, path)


def write_all(
    snapshots, out_dir, *, fmt: str = "png", name: str = "scenario", lang: str = "en"
) -> list[Path]:
    """`<name>_step_000.<fmt>` ... one per snapshot, `<name>-key-frames.<fmt>` and `<name>.gif`."""
    snapshots, out_dir = list(snapshots), Path(out_dir)
    with style.output(fmt=fmt, look=style.look().name, lang=lang):
        paths = write_frames(snapshots, out_dir, prefix=f"{name}_step")
        paths.append(write_strip(snapshots, out_dir / f"{name}-key-frames.png"))
        paths.append(write_gif(snapshots, out_dir / f"{name}.gif"))
    return paths
