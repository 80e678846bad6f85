"""The workload figures, tested by their artists (Agg backend)."""

import pytest

pytestmark = pytest.mark.draw


def test_waste_figure_stacks_four_parts_per_bar_and_marks_the_papers_numbers(tmp_path):
    import matplotlib.pyplot as plt

    from pagedsim.draw import figures_workloads as fw
    from pagedsim.labs.waste import breakdown
    from pagedsim.workloads import synthetic

    frac = breakdown(synthetic("sharegpt", 50), 16, 2048)
    [path] = fw.draw_waste({"static": frac, "continuous": frac}, tmp_path)
    assert path.exists() and path.stat().st_size > 10_000
    from pagedsim.labs import sweep

    assert set(sweep.FIGURES) == {"waste_breakdown", "block_size_sweep"}
    assert not hasattr(fw, "FIGURES")  # draw/ only draws; the lab registers its figures
    plt.close("all")


def test_sweep_figure_has_five_panels_and_a_notes_panel(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from pagedsim.draw import figures_workloads as fw
    from pagedsim.draw import style

    saved = {}
    monkeypatch.setattr(
        style, "save", lambda fig, path, **kw: saved.setdefault("fig", fig) and path
    )
    rows = [
        {
            "block_size": b,
            "waste": b / 512,
            "mean_entries": 64 / b,
            "max_entries": 128 // b,
            "max_batch": 30 - b // 16,
            "preemptions": 10,
            "hit_rate": 0.5,
        }
        for b in (1, 16, 256)
    ]
    fw.draw_sweep(rows, tmp_path, "test")
    fig = saved["fig"]
    assert len(fig.axes) == 6  # five panels, each on its own axis, and the notes
    assert [len(ax.lines) for ax in fig.axes] == [1, 1, 1, 1, 1, 0]
    plt.close("all")
