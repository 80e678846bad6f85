"""Figures of the 3.7 labs: the race timeline highlights the double-handed block, makers write PNGs."""

import pytest
from matplotlib.colors import to_hex
from matplotlib.patches import Rectangle

from pagedsim.labs import interleavings as il
from pagedsim.draw import figures_labs
from pagedsim.draw.style import ACCENT, new_figure

pytestmark = [pytest.mark.draw, pytest.mark.ch3_7]


def _boxes(out):
    fig = new_figure(6, 3)
    ax = fig.add_subplot()
    figures_labs._draw_schedule(ax, out, "t")
    return [p for p in ax.patches if isinstance(p, Rectangle)], ax


def test_racy_timeline_draws_one_box_per_step_and_marks_both_reads_of_the_shared_block():
    out = il.summarize("racy", 2).first_bad
    boxes, ax = _boxes(out)
    assert len(boxes) == len(out.steps) == 6
    hot = [b for b in boxes if to_hex(b.get_facecolor()) == ACCENT.lower()]
    assert len(hot) == 2  # thread 0 and thread 1 both read stack[top-1]
    texts = [t.get_text() for t in ax.texts]
    assert texts.count(f"gets {out.duplicates[0]}") == 2


def test_cas_timeline_marks_nothing_and_shows_the_failed_cas():
    out = next(o for o in il.explore("cas", 2) if any(s.op == "cas fail" for s in o.steps))
    boxes, ax = _boxes(out)
    assert not [b for b in boxes if to_hex(b.get_facecolor()) == ACCENT.lower()]
    assert sum(b.get_linestyle() == "--" for b in boxes) == 1
    assert any("CAS fail" in t.get_text() for t in ax.texts)


def test_every_lab_figure_maker_writes_its_png(tmp_path):
    for name, maker in figures_labs.FIGURES.items():
        paths = maker(tmp_path)
        assert paths and all(p.exists() and p.stat().st_size > 10_000 for p in paths), name
