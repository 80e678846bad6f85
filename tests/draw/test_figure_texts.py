"""What the figures say, read from their artists: subtitles that match the trace they draw."""

import pytest

from pagedsim import palette
from pagedsim.draw import flow
from pagedsim.trace import SequenceAdded

pytestmark = pytest.mark.draw


def test_the_3_3_subtitle_names_the_admission_order_of_the_run_it_draws():
    m = flow.scattered_manager()
    order = [e.seq_id for e in m.trace.events if isinstance(e, SequenceAdded)]
    assert order == ["X", "A", "Y", "B"]  # X and Y sit between A's and B's admissions
    text = flow.logical_subtitle(m)
    assert text.startswith("Admitted in the order X, A, Y, B (prompt tokens: X 8, A 4, Y 8, B 4)")
    assert "X and Y then finished" in text and "so A and B" in text
    assert "between A and B" not in text


def sweep_rows(preemptions, hit_rates):
    return [
        {
            "block_size": b,
            "waste": b / 1000,
            "mean_entries": 400 / b,
            "max_entries": 2048 // b,
            "max_batch": 33 - b // 32,
            "preemptions": p,
            "hit_rate": h,
        }
        for b, p, h in zip((1, 4, 16, 64, 256), preemptions, hit_rates, strict=True)
    ]


def drawn_sweep(rows, tmp_path, monkeypatch):
    from pagedsim.draw import figures_workloads as fw
    from pagedsim.draw import style

    saved = {}
    monkeypatch.setattr(style, "save", lambda fig, path, **kw: saved.setdefault("fig", fig))
    fw.draw_sweep(rows, tmp_path, "test")
    return saved["fig"]


def test_the_sweep_has_no_dual_axis_and_its_note_names_the_peak_it_was_given(tmp_path, monkeypatch):
    rows = sweep_rows((10, 30, 12, 5, 1), (0.9, 0.8, 0.5, 0.3, 0.05))
    fig = drawn_sweep(rows, tmp_path, monkeypatch)
    boxes = [tuple(round(v, 3) for v in ax.get_position().bounds) for ax in fig.axes]
    assert len(set(boxes)) == len(boxes)  # no twin axis drawn over another
    assert all(ax.get_ylabel() == "" or "(" not in ax.get_ylabel() for ax in fig.axes)
    note = next(t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid() == "notes")
    flat = note.replace("\n", " ")
    assert "peak at B=4 and then fall" in flat and "(80% at B=4)" in flat and "5% at B=256" in flat
    assert "Not lesson 3.5's numbers" in flat and "500 requests" in flat


def test_the_sweep_note_follows_the_rows_when_the_peak_moves(tmp_path, monkeypatch):
    fig = drawn_sweep(sweep_rows((1, 2, 3, 9, 4), (0.7, 0.6, 0.5, 0.4, 0.2)), tmp_path, monkeypatch)
    note = next(t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid() == "notes")
    assert "peak at B=64" in note.replace("\n", " ")


def test_the_waste_note_quotes_both_the_bars_and_the_papers_markers():
    from pagedsim.draw import figures_workloads as fw

    def parts(share):
        return {
            "token_states": share,
            "reserved": 0.0,
            "internal_fragmentation": 1 - share,
            "external_fragmentation": 0.0,
        }

    by_mode = {
        "static": {
            "max": parts(0.25),
            "pow2": parts(0.5),
            "oracle": parts(0.75),
            "paged": parts(0.98),
        },
        "continuous": {
            "max": parts(0.2),
            "pow2": parts(0.4),
            "oracle": parts(0.6),
            "paged": parts(0.97),
        },
    }
    note = fw.paper_note(by_mode)
    assert "pow2 (ours 50%/40%, paper 27%)" in note
    assert "oracle (ours 75%/60%, paper 38%)" in note
    assert "max_len alone, agrees (ours 25%/20%" in note


def test_the_3_2_cell_grid_is_inked_and_the_chapter3_preset_explained(tmp_path, monkeypatch):
    from matplotlib.colors import to_hex

    from pagedsim.draw import anatomy, style
    from pagedsim.sizing import preset

    saved = []
    monkeypatch.setattr(style, "save", lambda fig, path, **kw: saved.append(fig))
    anatomy.make_anatomy(tmp_path)
    ax = saved[0].axes[0]
    grids = [c for c in ax.collections if c.get_gid() == "grid"]
    assert len(grids) == 8  # 2 models x (K, V) x (columns, rows)
    for grid in grids:
        assert to_hex(grid.get_colors()[0]) == palette.INK.lower() and grid.get_alpha() >= 0.4
    assert sum(p.get_gid() == "one-cell" for p in ax.patches) == 2
    texts = [t.get_text() for t in ax.texts]
    said = "chapter3  (the chapter's worked example, shaped like Llama-2-7B"
    assert any(t.startswith(said) for t in texts)
    shape = ("num_layers", "num_kv_heads", "head_dim", "dtype_bytes")
    chapter3, llama2 = preset("chapter3"), preset("llama-2-7b")
    assert [getattr(chapter3, f) for f in shape] == [getattr(llama2, f) for f in shape]
