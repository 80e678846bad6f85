"""`pagedsim figures`: every maker writes a non-blank image of the size it asks for."""

import math

import numpy as np
import pytest
from PIL import Image

from pagedsim.draw import (
    anatomy,
    figures,
    figures_ch3,
    flow,
    fragmentation,
    kernel_cost,
    scenario,
    style,
    tradeoff,
)
from pagedsim.draw.animate import gif_dpi
from pagedsim.draw.render import Layout
from pagedsim.sizing import preset
from pagedsim.workloads import synthetic

pytestmark = pytest.mark.draw


def px(size, dpi=style.DPI):
    return round(size[0] * dpi), round(size[1] * dpi)


def expected_sizes(tour_snaps):
    lay = Layout.for_snapshots(tour_snaps)
    frame = (lay.width * lay.unit, lay.height * lay.unit)
    n = len(scenario.key_frames(tour_snaps))
    cols, rows = scenario.STRIP_COLS, math.ceil(n / scenario.STRIP_COLS)
    strip = (
        cols * frame[0] + (cols - 1) * scenario.STRIP_GAP,
        rows * frame[1] + (rows - 1) * scenario.STRIP_GAP,
    )
    return {
        "3.1-fragmentation.png": px(fragmentation.SIZE),
        "3.2-block-anatomy.png": px(anatomy.ANATOMY_SIZE),
        "3.3-logical-vs-physical.png": px(flow.LOGICAL_SIZE),
        "3.4-tour.gif": px(frame, gif_dpi(lay)),
        "3.4-tour-key-frames.png": px(strip),
        "3.5-block-size-tradeoff.png": px(tradeoff.SIZE),
        "3.5b-kernel-cost.png": px(kernel_cost.SIZE),
        "3.6-core-flow.png": px(flow.FLOW_SIZE),
        "3.7-alignment.png": px(anatomy.ALIGNMENT_SIZE),
    }


@pytest.fixture
def made(plain_figures):
    """The folder of the session's plain `pagedsim figures` pass (rendered.py)."""
    return plain_figures.out


@pytest.mark.slow  # the session's plain pass draws every figure (rendered.py)
def test_each_chapter_figure_is_a_non_blank_image_of_the_expected_size(
    plain_figures, made, tour_snaps
):
    sizes = expected_sizes(tour_snaps)
    chapter = [n for name in figures_ch3.FIGURES for n in plain_figures.written[name]]
    assert sorted(chapter) == sorted(sizes)
    for name, size in sizes.items():
        with Image.open(made / name) as im:
            assert im.size == size, name
            pixels = np.asarray(im.convert("RGB"))  # [H, W, 3]
        inked = (pixels.min(axis=2) < 235).mean()
        assert inked > 0.03, f"{name} is almost blank ({inked:.1%} inked)"
        # one int per colour
        packed = pixels[::3, ::3].astype(np.int32) @ np.array([1 << 16, 1 << 8, 1])
        assert len(np.unique(packed)) > 8, f"{name} has too few colours"


@pytest.mark.slow  # the session's plain pass draws every figure (rendered.py)
def test_the_tour_gif_has_one_frame_per_tour_step(made, tour_snaps):
    with Image.open(made / "3.4-tour.gif") as gif:
        assert gif.n_frames == len(tour_snaps)


@pytest.mark.slow  # the session's plain pass draws every figure (rendered.py)
def test_regenerating_a_figure_gives_the_same_bytes(made, tmp_path):
    figures.main(
        ["--out", str(tmp_path), "--only", "3.5-block-size-tradeoff", "3.3-logical-vs-physical"]
    )
    names = ("3.5-block-size-tradeoff.png", "3.3-logical-vs-physical.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)  # --only: those alone
    for name in names:
        assert (tmp_path / name).read_bytes() == (made / name).read_bytes()


def test_every_registered_maker_from_every_registry_is_listed(capsys):
    assert figures.main(["--list"]) == 0
    listed = capsys.readouterr().out
    for name in figures.collect():
        assert name in listed
    assert set(figures_ch3.FIGURES) <= set(figures.collect())


def test_an_unknown_figure_name_is_one_error_line_naming_it(capsys):
    assert figures.main(["--only", "3.9-nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "3.9-nope" in err and "usage" not in err, err


def test_the_block_formula_matches_the_chapter_and_sizing():
    assert anatomy.formula(preset("chapter3")).endswith("= 8,388,608 B (8 MiB)")
    gqa = preset("llama-3-8b")
    assert anatomy.formula(gqa).endswith(f"= {gqa.bytes_per_block(16):,} B (2 MiB)")


def test_the_tradeoff_matches_a_slot_by_slot_count():
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 700, size=300)
    data = tradeoff.tradeoff(lengths, (1, 3, 16, 256))
    for bs, (waste, entries) in data.items():
        slots = sum(-(-int(n) // bs) * bs for n in lengths)
        empty = sum(-(-int(n) // bs) * bs - int(n) for n in lengths)
        assert waste == pytest.approx(100 * empty / slots)
        assert entries == pytest.approx(np.mean([-(-int(n) // bs) for n in lengths]))
    assert data[1][0] == 0.0


def test_waste_grows_and_table_entries_shrink_with_block_size_on_the_sharegpt_workload():
    data = tradeoff.tradeoff(tradeoff.step_lengths(synthetic("sharegpt", 100, seed=0)))
    waste = [data[b][0] for b in tradeoff.BLOCK_SIZES]
    entries = [data[b][1] for b in tradeoff.BLOCK_SIZES]
    assert waste == sorted(waste) and entries == sorted(entries, reverse=True)


def test_key_frames_include_the_fork_the_copy_on_write_and_the_failure(tour_snaps):
    kinds = {e.kind for k in scenario.key_frames(tour_snaps) for e in tour_snaps[k].events}
    assert {"sequence_forked", "copy_on_write", "sequence_freed", "allocation_failed"} <= kinds


def test_tour_draw_writes_its_frames_and_a_gif(tmp_path, capsys):
    from pagedsim.app.tour import main as tour_main

    assert tour_main(["--steps", "2", "--draw", str(tmp_path)]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["trace.gif", "trace_step_000.png", "trace_step_001.png", "trace_step_002.png"]


def test_the_simulator_core_never_imports_matplotlib():
    import subprocess
    import sys

    code = (
        "import sys, pagedsim, pagedsim.app.tour, pagedsim.workloads; "
        "pagedsim.app.tour.tour_manager(); print('matplotlib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
