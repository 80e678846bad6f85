"""Figures for slides: the projector look, vector output, the key-frame strip as one figure, 3.1."""

from pathlib import Path

import pytest
from matplotlib.image import AxesImage
from matplotlib.text import Text

from pagedsim.draw import fragmentation, scenario, style
from pagedsim.draw.render import Layout, render

pytestmark = pytest.mark.draw


def texts(fig):
    return [t for t in fig.findobj(Text) if t.get_text()]


def test_projector_frames_have_no_text_under_12_pt_and_no_pale_colours(tour_snaps):
    with style.output(look="projector"):
        fig = render(tour_snaps[6], layout=Layout.for_snapshots(tour_snaps))
        style.fit_look(fig)
        sizes = [t.get_fontsize() for t in texts(fig)]
        assert min(sizes) >= 12
        palette = style.look().seq_colours
    with style.output(look="paper"):
        paper = render(tour_snaps[6], layout=Layout.for_snapshots(tour_snaps))
        assert min(t.get_fontsize() for t in texts(paper)) < 8  # the paper look is untouched
    luminance = [0.2126 * r + 0.7152 * g + 0.0722 * b for r, g, b in map(style.to_rgb, palette)]
    # every sequence colour is dark enough for white text on a projector
    assert max(luminance) < 0.5
    assert fig.get_size_inches()[0] == pytest.approx(paper.get_size_inches()[0] * 1.4, abs=0.02)


def test_the_copy_on_write_label_sits_next_to_its_arrow(tour_snaps):
    snap = next(s for s in tour_snaps if s.pending_copies)
    fig = render(snap, layout=Layout.for_snapshots(tour_snaps))
    ax = fig.axes[0]
    ((src, dst),) = snap.pending_copies
    arrow = next(p for p in ax.patches if p.get_gid() == f"copy-{src}-{dst}")
    label = next(t for t in ax.texts if t.get_gid() == f"copy-label-{src}-{dst}")
    (ax_, ay), (bx, by) = arrow._posA_posB
    lx, ly = label.get_position()
    assert label.get_text() == f"copy {src}\u2192{dst}"
    # centred just below the curve
    assert abs(lx - (ax_ + bx) / 2) < 0.01 and 0 < ly - max(ay, by) < 1.2


def test_every_step_picture_has_a_legend_naming_each_mark(tour_snaps):
    fig = render(tour_snaps[1])
    legend = fig.axes[0].get_legend()
    assert legend is not None and legend.get_gid() == "legend"
    assert [t.get_text() for t in legend.get_texts()] == [
        "free block",
        "ref count (badge)",
        "fill (tokens / B)",
        "changed this step",
        "copy-on-write src\u2192dst",
    ]


def test_the_key_frame_strip_is_one_figure_with_one_vector_panel_per_key_frame(tour_snaps):
    fig = scenario.strip_figure(tour_snaps)
    picks = scenario.key_frames(tour_snaps)
    assert [ax.get_gid() for ax in fig.axes] == [f"frame-{k}" for k in picks]
    assert not fig.findobj(AxesImage)  # nothing pasted as pixels
    captions = [next(t for t in ax.texts if t.get_gid() == "caption").get_text() for ax in fig.axes]
    assert captions[0].startswith("step 0:") and "OutOfBlocks" in captions[-1]


def test_svg_keeps_text_as_text_and_is_byte_identical_when_saved_twice(tour_snaps, tmp_path):
    paths = []
    for name in ("a", "b"):
        with style.output(fmt="svg"):
            paths.append(scenario.draw_one(tour_snaps, 6, tmp_path / f"{name}.png"))
    assert [p.suffix for p in paths] == [".svg", ".svg"]
    svg = paths[0].read_text()
    assert "<text" in svg and "copy 3\u21925" in svg and "free list, head first" in svg
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_pdf_output_and_bad_output_settings(tour_snaps, tmp_path):
    with style.output(fmt="pdf", dpi=150):
        path = scenario.draw_one(tour_snaps, 1, tmp_path / "one.png")
    assert path.suffix == ".pdf" and path.read_bytes().startswith(b"%PDF")
    for bad in ({"fmt": "bmp"}, {"look": "poster"}, {"dpi": 5}):
        with pytest.raises(ValueError):
            with style.output(**bad):
                pass


def test_first_fit_refuses_the_late_request_that_fixed_blocks_accept():
    owner, fits = fragmentation.first_fit()
    # enough free slots, no hole big enough
    assert not fits and owner.count(None) >= fragmentation.LATE[1]
    blocks = fragmentation.fixed_blocks()
    taken = [b for b, (o, _) in enumerate(blocks) if o == "F"]
    # scattered blocks are fine
    assert len(taken) == 3 and taken != list(range(taken[0], taken[0] + 3))
    assert sum(n for o, n in blocks if o) == sum(
        n
        for name, n in (*fragmentation.REQUESTS, fragmentation.LATE)
        if name not in fragmentation.FINISHED
    )


def test_chinese_labels_are_drawn_when_a_cjk_font_is_installed(tour_snaps, monkeypatch):
    # stands in for Noto Sans CJK here
    monkeypatch.setattr(style, "cjk_font", lambda: "DejaVu Sans")
    with style.output(lang="zh"):
        fig = render(tour_snaps[5], layout=Layout.for_snapshots(tour_snaps))
        import matplotlib

        assert matplotlib.rcParams["font.sans-serif"][0] == "DejaVu Sans"
    words = [t.get_text() for t in texts(fig)]
    caption = next(t.get_text() for t in fig.axes[0].texts if t.get_gid() == "caption")
    assert caption.replace("\n", "").startswith("第 5 步：序列 B2 从序列 B 分叉，共享块 2、3")
    assert "块表（逻辑 \u2192 物理）" in words and "空闲块" in words and "序列 B2" in words


def test_without_a_cjk_font_chinese_figures_stay_english_with_a_one_line_note(
    tour_snaps, monkeypatch, capsys
):
    monkeypatch.setattr(style, "cjk_font", lambda: None)
    monkeypatch.setitem(style._out, "noted", False)
    for _ in range(2):
        with style.output(lang="zh"):
            fig = render(tour_snaps[5])
    assert capsys.readouterr().err == style.NO_CJK_NOTE + "\n"  # one line, however many figures
    caption = next(t.get_text() for t in fig.axes[0].texts if t.get_gid() == "caption")
    assert caption.startswith("step 5: seq B2 forks from seq B")


def test_no_idle_band_between_the_fullest_block_tables_and_the_free_list(tour_snaps):
    layout = Layout.for_snapshots(tour_snaps)
    fig = render(tour_snaps[-1], layout=layout)  # the frame with the most table rows
    ax = fig.axes[0]
    rows = [p for p in ax.patches if (p.get_gid() or "").startswith("table-")]
    lowest = max(p.get_y() + p.get_height() for p in rows)
    title = next(t for t in ax.texts if t.get_text().startswith("free list, head first"))
    assert 0 < title.get_position()[1] - lowest < 0.7  # layout units (a block is 1.05)


def test_a_styled_figures_run_without_out_leaves_figures_alone_and_says_where(
    tmp_path, monkeypatch, capsys
):
    from pagedsim.draw import figures

    monkeypatch.chdir(tmp_path)
    assert figures.main(["--only", "3.7-alignment", "--format", "svg", "--style", "projector"]) == 0
    err = capsys.readouterr().err
    folder = err.split("writing to ")[1].split(" ")[0]
    assert not (tmp_path / "figures").exists()
    assert [p.name for p in Path(folder).iterdir()] == ["3.7-alignment.svg"]
    assert figures.main(["--only", "3.7-alignment"]) == 0  # a plain run: figures/
    assert [p.name for p in (tmp_path / "figures").iterdir()] == ["3.7-alignment.png"]
