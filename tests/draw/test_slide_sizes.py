"""`pagedsim figures --slides` for the back of a hall: every file is a whole 16:9 slide
(960 x 540 pt: no white bands on a 16:9 screen) with no text under 18 pt. Read from the SVG:
its width and height in pt, and the font size of every <text> (matplotlib writes SVG
user units at 72 per inch, so a font-size in px is in pt)."""

import re

import pytest

pytestmark = [pytest.mark.draw, pytest.mark.slow]

BODY = (960.0, 540.0)
SIZE = re.compile(r'<svg[^>]*width="([\d.]+)pt" height="([\d.]+)pt"')


def fitted_sizes(svg: str) -> list[float]:
    """Every text's size in pt once the drawing is scaled to fit the slide body."""
    w, h = (float(v) for v in SIZE.search(svg).groups())
    fit = min(BODY[0] / w, BODY[1] / h)
    return [float(px) * fit for px in re.findall(r"font-size:\s*([\d.]+)px", svg)]


def test_fitted_sizes_reads_the_scale_from_the_svg():
    svg = (
        '<svg width="1920pt" height="480pt"><text style="font-size: 36px">a</text>'
        '<text style="font: 12px x; font-size: 20px">b</text></svg>'
    )
    assert fitted_sizes(svg) == [18.0, 10.0]


def test_every_slide_is_16_by_9(deck):
    """SVG sizes are written to 6 digits: 960 x 540 pt, not a body-sized 2:1 strip."""
    off = {}
    for path in deck:
        w, h = (float(v) for v in SIZE.search(path.read_text(encoding="utf-8")).groups())
        if abs(w * 9 - h * 16) > 1e-3 or abs(w - BODY[0]) > 1e-3:
            off[path.name] = (w, h)
    assert off == {}


@pytest.fixture
def deck(slide_figures):
    """The session's `pagedsim figures --slides --format svg` pass (rendered.py)."""
    return sorted(slide_figures.out.iterdir())


def test_every_slides_file_is_an_svg_with_text(deck):
    assert len(deck) >= 15 and all(p.suffix == ".svg" for p in deck), [p.name for p in deck]


def test_no_text_on_any_slide_is_under_18_pt_once_fitted_to_the_slide_body(deck):
    small = {}
    for path in deck:
        sizes = fitted_sizes(path.read_text(encoding="utf-8"))
        assert sizes, f"{path.name} has no text"
        if min(sizes) < 18 - 1e-6:
            small[path.name] = round(min(sizes), 1)
    assert small == {}


def test_multi_panel_figures_are_split_one_idea_per_slide(deck):
    """The sweep's panels and notes, the sector layouts, the tour's key frames and the hybrid
    groups each get their own files; none of the many-panel originals is in the deck."""
    from pagedsim.labs import sectors

    names = {p.name for p in deck}
    originals = {"block_size_sweep", "layout_sectors", "3.4-tour-key-frames", "hybrid-groups"}
    assert not {f"{n}.svg" for n in originals} & names
    sweep = ["waste", "entries", "batch", "preemptions", "hit-rate", "why", "not-3.5"]
    for i, key in enumerate(sweep):
        assert f"block_size_sweep-slide-{i + 1}-{key}.svg" in names
    for i, layout in enumerate(sectors.LAYOUTS):
        assert f"layout_sectors-slide-{i + 1}-{layout}.svg" in names
    assert any(n.startswith("3.4-tour-slide-") for n in names)
    assert any(n.startswith("hybrid-groups-slide-") for n in names)
    for path in deck:  # a plot of the sweep is one axes; a layout slide holds its three loads
        panels = len(re.findall(r'<g id="axes_\d+"', path.read_text(encoding="utf-8")))
        if path.name.startswith("block_size_sweep-slide-"):
            assert panels == (0 if path.stem.endswith(("why", "not-3.5")) else 1), path.name
        if path.name.startswith("layout_sectors-slide-"):
            assert panels == 3, path.name
