"""Chapter 3's figures, registered for `pagedsim figures` (FIGURES: name -> maker).

All inputs are fixed (the tour's script, seeded workloads, `sizing` presets), so the files
are the same on every run. 3.4 replays `pagedsim tour`'s own trace.
"""

from __future__ import annotations

from pathlib import Path

from . import anatomy, flow, fragmentation, kernel_cost, scenario, style, tradeoff
from .animate import write_gif


def tour_snapshots() -> list:
    """The snapshots of `pagedsim tour` (12 blocks x 4 tokens, fork, copy-on-write, OutOfBlocks)."""
    from ..app.tour import tour_manager

    trace = tour_manager().trace
    assert trace is not None, "the tour's manager records a trace"
    return trace.snapshots


def make_tour(out_dir: Path) -> list[Path]:
    """3.4: the tour as an animated GIF, plus its key frames drawn as one (vector) figure."""
    snaps = tour_snapshots()
    if style.slides():  # one key frame per file, for a lecture hall (to step live: tour --html)
        return scenario.write_slides(snaps, out_dir, "3.4-tour")
    gif = write_gif(snaps, Path(out_dir) / "3.4-tour.gif")
    return [gif, scenario.write_strip(snaps, Path(out_dir) / "3.4-tour-key-frames.png")]


def make_core_flow(out_dir: Path) -> list[Path]:
    """3.6: free pool -> allocated blocks -> block tables, drawn from the tour's trace."""
    return flow.make_core_flow(out_dir, tour_snapshots())


FIGURES = {
    "3.1-fragmentation": fragmentation.make,
    "3.2-block-anatomy": anatomy.make_anatomy,
    "3.3-logical-vs-physical": flow.make_logical_physical,
    "3.4-tour": make_tour,
    "3.5-block-size-tradeoff": tradeoff.make,
    "3.5b-kernel-cost": kernel_cost.make,
    "3.6-core-flow": make_core_flow,
    "3.7-alignment": anatomy.make_alignment,
}
