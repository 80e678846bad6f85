"""Replay a trace: PNG frames, an animated GIF, and an HTML player for notebooks.

Every frame is `render(snapshots[k])` with one layout and one colour map, so blocks stay
put and a sequence keeps its colour. GIFs go through `FuncAnimation` and `PillowWriter`;
`to_html` is `Animation.to_jshtml()`. Reference: matplotlib's animation gallery.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.animation import FuncAnimation, PillowWriter

from . import style
from .render import Layout, render

GIF_DPI = 100  # the lowest GIF resolution: the PNG frames' scale
GIF_MIN_WIDTH = 1280  # pixels: a GIF is rendered at whatever dpi makes it at least this wide
FRAME_MS = 3000  # how long each step stays on screen: time to read the caption aloud


def gif_dpi(layout: Layout) -> int:
    """The dpi that makes a frame of `layout` at least GIF_MIN_WIDTH pixels wide."""
    return max(GIF_DPI, math.ceil(GIF_MIN_WIDTH / (layout.width * layout.unit)))


def _setup(snapshots):
    snapshots = list(snapshots)
    if not snapshots:
        raise ValueError("snapshots must not be empty")
    layout = Layout.for_snapshots(snapshots)
    colours = style.seq_colours(snapshots)
    fig = render(snapshots[0], layout=layout, colours=colours)
    return snapshots, layout, colours, fig


def animation(snapshots, *, interval: int = FRAME_MS):
    """A `FuncAnimation` with one frame per snapshot; returns (animation, figure)."""
    snapshots, layout, colours, fig = _setup(snapshots)
    ax = fig.axes[0]

    def draw(k):
        render(snapshots[k], ax=ax, layout=layout, colours=colours)
        return ax.get_children()

    anim = FuncAnimation(
        fig, draw, frames=len(snapshots), interval=interval, blit=False, repeat=True
    )
    return anim, fig


def write_frames(snapshots, out_dir, *, prefix: str = "frame") -> list[Path]:
    """One PNG per snapshot: `<prefix>_000.png`, `<prefix>_001.png`, ..."""
    snapshots, layout, colours, fig = _setup(snapshots)
    out_dir = Path(out_dir)
    paths = []
    for k, snap in enumerate(snapshots):
        render(snap, ax=fig.axes[0], layout=layout, colours=colours)
        paths.append(style.save(fig, out_dir / f"{prefix}_{k:03d}.png", close=False))
    plt.close(fig)
    return paths


def write_gif(snapshots, path, *, interval: int = FRAME_MS, dpi: int | None = None) -> Path:
    """An animated GIF of the whole trace (loops forever), `interval` ms a frame, at `dpi`
    (default: `gif_dpi`, at least GIF_MIN_WIDTH pixels wide)."""
    path = Path(path)
    snapshots = list(snapshots)
    anim, fig = animation(snapshots, interval=interval)  # refuses no snapshots: nothing written
    layout = Layout.for_snapshots(snapshots)
    if dpi is None:
        dpi = gif_dpi(layout)
    path.parent.mkdir(parents=True, exist_ok=True)
    # whole pixels at this dpi too, whichever way the Pillow writer rounds
    size = (layout.width * layout.unit, layout.height * layout.unit)
    fig.set_size_inches(*style.whole_pixels(*size, dpi))
    # FuncAnimation asks the canvas for an extra redraw after every frame; the writer's
    # savefig already draws it, so skip the duplicate (halves the time on Agg).
    fig.canvas.draw_idle = lambda *args, **kwargs: None
    anim.save(
        path,
        # matplotlib's stub says int, but PillowWriter takes any fps (1000 / fps ms a frame);
        # unused-ignore: where matplotlib is not installed, mypy has no stub to disagree with
        writer=PillowWriter(fps=1000 / interval),  # type: ignore[arg-type, unused-ignore]
        dpi=dpi,
        savefig_kwargs={"facecolor": "white"},
    )
    plt.close(fig)
    return path


def to_html(snapshots, *, interval: int = FRAME_MS) -> str:
    """An HTML/JavaScript player (play and step controls) for a notebook cell."""
    anim, fig = animation(snapshots, interval=interval)
    html = anim.to_jshtml(default_mode="once")
    plt.close(fig)
    return html


def write_trace(
    snapshots, out_dir, *, gif: bool = True, frames: bool = True, name: str = "trace"
) -> list[Path]:
    """What `pagedsim tour --draw DIR` writes: PNG frames and/or `<name>.gif` into `out_dir`."""
    snapshots = list(snapshots)
    out_dir = Path(out_dir)
    paths = write_frames(snapshots, out_dir, prefix=f"{name}_step") if frames else []
    if gif:
        paths.append(write_gif(snapshots, out_dir / f"{name}.gif"))
    return paths
