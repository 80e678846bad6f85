"""What is wrong with a finished figure's texts: two that overlap (line by line), one that
runs off its figure, or one its axes would clip that runs past that axes.

`text_problems(fig)` measures every text matplotlib would draw, at the figure's own size and
dpi, in pixels. The figure is laid out by a draw whose rendering is switched off
(`Figure.draw_without_rendering`): every artist's draw method runs (tick labels are made,
texts are placed and measured with the Agg renderer's fonts) but no pixel is painted, so the
boxes are those a painted draw gives, at a fraction of its cost. Used by
test_label_collisions.py, on every figure `pagedsim figures` saves (see rendered.py).
"""

TOLERANCE_PX = 1.0  # how far two boxes may run into each other, in pixels


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

    fig.draw_without_rendering()  # lays out and measures; paints nothing
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
