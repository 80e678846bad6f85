"""Figures of the 3.7 labs: the race timeline marks the double-handed block; makers write PNGs."""

import pytest
from matplotlib.colors import to_hex
from matplotlib.patches import Rectangle

from pagedsim.draw import figures_labs
from pagedsim.draw.style import new_figure
from pagedsim.labs import interleavings as il
from pagedsim.palette import ACCENT

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


def drawn(maker, tmp_path, monkeypatch):
    """The figure `maker` would save, kept open for its artists."""
    saved = []
    monkeypatch.setattr(figures_labs, "save", lambda fig, path, **kw: saved.append(fig) or path)
    maker(tmp_path)
    (fig,) = saved
    return fig


def test_the_race_timeline_draws_the_exercises_atomic_sub_pop_as_well_as_cas(tmp_path, monkeypatch):
    fig = drawn(figures_labs.race_timeline, tmp_path, monkeypatch)
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert len(titles) == 3 and titles[0].startswith("racy pop")
    assert "cuda.atomic.sub(top, 0, 1)" in titles[1] and "0 bad of 6" in titles[1]
    assert "compare-and-swap" in titles[2] and "0 bad of" in titles[2]
    middle = [t.get_text() for t in fig.axes[1].texts]
    assert sum(t.startswith("atomic.sub\n") for t in middle) == 2  # one indivisible step per thread
    assert sorted(t for t in middle if t.startswith("gets ")) == ["gets 11", "gets 12"]
    first_two = [s.thread for s in figures_labs.overlapping("atomic_add").steps[:2]]
    assert first_two == [0, 1]  # the threads' atomic steps interleave, as in the racy panel


def test_every_alignment_bar_has_a_label_even_at_zero(tmp_path, monkeypatch):
    fig = drawn(figures_labs.alignment_sectors, tmp_path, monkeypatch)
    right = fig.axes[1]
    bars = [p for p in right.patches if isinstance(p, Rectangle)]
    labels = [t.get_text() for t in right.texts]
    zeros = [b for b in bars if b.get_height() == 0]
    assert len(bars) == 15 and len(labels) == 15 and zeros
    assert labels.count("0") == len(zeros)
    assert right.get_ylim()[0] < 0  # a zero bar's outline sits above the axis line
    assert all(to_hex(b.get_edgecolor()) != to_hex(b.get_facecolor()) for b in zeros)
