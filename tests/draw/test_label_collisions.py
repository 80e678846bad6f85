"""Labels that must not collide, checked with the text bounding boxes the renderer reports:
a long sequence id ("seq A:window") beside its token count, and a key frame's caption
inside its own panel, in the paper and the projector look; then every text of every
figure `pagedsim figures` writes, plain and `--slides`: no two overlap (line by line), none
runs off its figure, none its axes would clip runs past that axes. Exceptions are listed
in EXCEPTIONS with a reason."""

from pathlib import Path

import pytest

from pagedsim.app.play_session import Options, Session
from pagedsim.draw import scenario, style
from pagedsim.draw.hybrid import hybrid_snapshots
from pagedsim.draw.render import Layout, render

pytestmark = pytest.mark.draw

BEAM = ["alloc A 6", "alloc B 5", "fork B B2", "append B", "append B2 2", "free A", "alloc C 40"]


def boxes(fig, prefix: str) -> dict:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return {
        t.get_gid(): t.get_window_extent(renderer)
        for ax in fig.axes
        for t in ax.texts
        if (t.get_gid() or "").startswith(prefix)
    }


@pytest.mark.parametrize("look", ["paper", "projector"])
def test_a_long_sequence_id_never_runs_into_its_token_count(look):
    snaps = hybrid_snapshots()
    with style.output(look=look):
        layout = Layout.for_snapshots(snaps)
        for snap in snaps[1:]:
            fig = render(snap, layout=layout)
            style.fit_look(fig)
            labels, counts = boxes(fig, "label-"), boxes(fig, "tokens-")
            assert labels and len(labels) == len(counts) == len(snap.sequences)
            for seq in snap.sequences:
                label, count = labels[f"label-{seq.seq_id}"], counts[f"tokens-{seq.seq_id}"]
                assert label.x1 < count.x0, (look, snap.step, seq.seq_id, label, count)


@pytest.mark.parametrize("look", ["paper", "projector"])
def test_every_key_frame_caption_stays_inside_its_panel(look):
    session = Session(Options())
    for command in BEAM:
        session.run(command)
    with style.output(look=look):
        fig = scenario.strip_figure(session.timeline("en"))
        style.fit_look(fig)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            caption = next(t for t in ax.texts if t.get_gid() == "caption")
            box, panel = caption.get_window_extent(renderer), ax.get_window_extent(renderer)
            assert panel.x0 <= box.x0 and box.x1 <= panel.x1, (look, ax.get_gid(), box, panel)


# Every figure and every slide: no two visible texts overlap, none runs off its figure, and
# none that its axes clip runs past that axes (it would be cut). Checked on the finished
# figure, at the size and font sizes it is saved with, by wrapping Figure.savefig.
TOLERANCE_PX = 1.0
# mode -> {file name prefix: why its texts may touch}. None has a reason to: `--slides`
# raises every text to 18 pt, and each figure's slide layout (style.fit_slide's wrapping,
# and the makers' slide branches) keeps those texts apart and on the figure. The test fails
# when a listed file has become clean, so a list that ever grows only shrinks again.
EXCEPTIONS: dict = {"plain": {}, "slides": {}}


def line_boxes(t, box, renderer) -> list:
    """A text's box per line (a short line under a long one leaves room beside it); one box
    for a one-line or rotated text."""
    from matplotlib.transforms import Bbox

    lines = t.get_text().split("\n")
    if len(lines) == 1 or t.get_rotation() % 360:
        return [box]
    out, h = [], box.height / len(lines)
    align = t._multialignment or t.get_horizontalalignment()
    for k, line in enumerate(lines):
        w = renderer.get_text_width_height_descent(
            line, t.get_fontproperties(), ismath="$" in line
        )[0]
        if not line.strip() or w <= 0:
            continue
        x0 = {"left": box.x0, "right": box.x1 - w}.get(align, box.x0 + (box.width - w) / 2)
        out.append(Bbox([[x0, box.y1 - (k + 1) * h], [x0 + w, box.y1 - k * h]]))
    return out


def shown_texts(fig) -> list:
    """(text, its box in pixels) of every text `fig` draws: tick labels of ticks outside the
    view are made but never drawn, so they are left out."""
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ticks, drawn = set(), set()  # every tick label, and those of ticks inside the view
    for ax in fig.axes:
        for axis in ax._axis_map.values():
            for tick in axis.majorTicks + axis.minorTicks:
                ticks.update((id(tick.label1), id(tick.label2)))
            if ax.axison and axis.get_visible():  # an axis turned off draws no tick label
                for tick in axis._update_ticks():
                    drawn.update((id(tick.label1), id(tick.label2)))
    shown = []
    for t in fig.findobj(Text):
        if not (t.get_visible() and t.get_text().strip()):
            continue
        if id(t) in ticks and id(t) not in drawn:
            continue
        if t.axes is not None and not t.axes.get_visible():
            continue
        box = t.get_window_extent(renderer)
        if box.width > 0 and box.height > 0:
            shown.append((t, box))
    return shown


def text_problems(fig) -> list:
    """What is wrong with `fig`'s texts, as short readable strings (empty: nothing)."""
    shown = shown_texts(fig)
    renderer = fig.canvas.get_renderer()
    tol, page, out = TOLERANCE_PX, fig.bbox, []
    for t, box in shown:
        label = repr(t.get_text()[:40])
        if box.x0 < page.x0 - tol or box.y0 < page.y0 - tol or box.x1 > page.x1 + tol:
            out.append(f"{label} runs off the figure")
        elif box.y1 > page.y1 + tol:
            out.append(f"{label} runs off the figure")
        if t.axes is not None and t in t.axes.texts and t.get_clip_on():
            ax = t.axes.bbox
            if box.x0 < ax.x0 - tol or box.x1 > ax.x1 + tol or box.y0 < ax.y0 - tol:
                out.append(f"{label} runs past its axes (clipped)")
            elif box.y1 > ax.y1 + tol:
                out.append(f"{label} runs past its axes (clipped)")
    lines = [(t, line_boxes(t, box, renderer)) for t, box in shown]
    for i, (t1, boxes1) in enumerate(lines):
        for t2, boxes2 in lines[i + 1 :]:
            if any(overlap(b1, b2) for b1 in boxes1 for b2 in boxes2):
                out.append(f"{t1.get_text()[:30]!r} overlaps {t2.get_text()[:30]!r}")
    return out


def overlap(b1, b2) -> bool:
    dx = min(b1.x1, b2.x1) - max(b1.x0, b2.x0)
    dy = min(b1.y1, b2.y1) - max(b1.y0, b2.y0)
    return dx > TOLERANCE_PX and dy > TOLERANCE_PX


def test_text_problems_finds_an_overlap_and_a_text_off_the_figure():
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(4, 2))
    fig.text(0.1, 0.5, "one label")
    fig.text(0.12, 0.5, "another")
    fig.text(0.95, 0.1, "off the edge")
    fig.text(0.1, 0.9, "a long first line\nshort", va="top")
    fig.text(0.3, 0.8, "beside", va="top")  # beside the short second line: no overlap
    problems = text_problems(fig)
    plt.close(fig)
    assert any("overlaps" in p for p in problems)
    assert any("'off the edge' runs off the figure" == p for p in problems)
    assert not any("beside" in p for p in problems), problems


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["plain", "slides"])
def test_no_text_on_any_figure_or_slide_overlaps_another_or_runs_off(mode, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from pagedsim.draw import figures

    found: dict = {}
    save = Figure.savefig

    def checked(fig, fname, *args, **kwargs):
        problems = text_problems(fig)
        if problems:
            found[Path(str(fname)).name] = problems
        return save(fig, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", checked)
    argv = ["--out", str(tmp_path)] + (["--slides"] if mode == "slides" else [])
    assert figures.main(argv) == 0
    excused = EXCEPTIONS[mode]
    assert {n: v for n, v in sorted(found.items()) if not n.startswith(tuple(excused))} == {}
    clean = [p for p in excused if not any(n.startswith(p) for n in found)]
    assert clean == [], f"now clean: take {clean} off EXCEPTIONS[{mode!r}]"
