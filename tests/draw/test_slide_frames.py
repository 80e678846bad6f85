"""3.4 for a lecture hall: one key frame per file, one legend per strip, a copy label that covers
no block, and a GIF at least 1280 px wide at a stated pace."""

import pytest
from PIL import Image

from pagedsim.draw import animate, scenario
from pagedsim.draw.render import Layout, render

pytestmark = pytest.mark.draw


def test_figures_slides_writes_each_key_frame_to_its_own_file(tour_snaps, slide_figures):
    """Read from the session's `pagedsim figures --slides --format svg` pass (rendered.py)."""
    out = slide_figures.out
    picks = scenario.key_frames(tour_snaps)
    slides = sorted(p.name for p in out.glob("3.4-tour-slide-*.svg"))
    assert slides == sorted(f"3.4-tour-slide-{i + 1}-step-{k:02d}.svg" for i, k in enumerate(picks))
    assert not list(out.glob("3.4-tour-key-frames.*"))  # no six-panel strip in a slide deck
    for i, k in enumerate(picks):
        svg = (out / slides[i]).read_text()
        assert f"step {k}:" in svg and svg.count("changed this step") == 1  # one frame, one legend
        assert "font-size: 18px" in svg  # --slides: 18 pt once fitted to a slide body
    assert sorted(slide_figures.written["3.4-tour"]) == slides  # each named as it is written


def test_the_key_frame_strip_draws_one_legend_not_one_per_panel(tour_snaps):
    fig = scenario.strip_figure(tour_snaps)
    legends = [ax.get_gid() for ax in fig.axes if ax.get_legend() is not None]
    assert legends == [fig.axes[-1].get_gid()]


def test_the_copy_label_and_arrow_cover_no_block(tour_snaps):
    snap = next(s for s in tour_snaps if s.pending_copies)
    fig = render(snap, layout=Layout.for_snapshots(tour_snaps))
    ax = fig.axes[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ((src, dst),) = snap.pending_copies
    blocks = [p for p in ax.patches if (p.get_gid() or "").startswith("block-")]
    assert len(blocks) == snap.num_gpu_blocks
    marks = [
        next(t for t in ax.texts if t.get_gid() == f"copy-label-{src}-{dst}"),
        next(p for p in ax.patches if p.get_gid() == f"copy-{src}-{dst}"),
    ]
    for mark in marks:
        box = mark.get_window_extent(renderer)
        hit = [p.get_gid() for p in blocks if p.get_window_extent(renderer).overlaps(box)]
        assert hit == [], f"{mark.get_gid()} covers {hit}"


def test_the_gif_is_at_least_1280_pixels_wide_and_shows_each_step_for_3_s(
    tour_snaps, plain_figures
):
    """3.4-tour.gif is animate.write_gif of the tour: read from the session's plain pass."""
    with Image.open(plain_figures.out / "3.4-tour.gif") as gif:
        assert gif.size[0] >= animate.GIF_MIN_WIDTH == 1280
        assert gif.n_frames == len(tour_snaps)
        durations = []
        for k in range(gif.n_frames):
            gif.seek(k)
            durations.append(gif.info["duration"])
    assert set(durations) == {animate.FRAME_MS} and animate.FRAME_MS == 3000
