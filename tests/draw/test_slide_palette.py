"""Slides and the browser page share one palette (pagedsim/palette.py): the page's sequence
colours, as its CSS and its data carry them, are the colours the slides fill sequences with,
and a `--slides` PNG is a whole 16:9 full-HD slide."""

import json
import re

import pytest
from matplotlib import image

from pagedsim import palette
from pagedsim.app.tour import tour_manager
from pagedsim.draw import figures, style
from pagedsim.view import to_html

pytestmark = [pytest.mark.draw]

HEX = re.compile(r"#[0-9a-fA-F]{6}\b")


def page_colours(page: str) -> tuple[list[str], list[str]]:
    """(the --c0.. CSS variables in order, the data's palette) of a built page."""
    css = page[page.index("<style>") : page.index("</style>")]
    variables = re.findall(r"--c(\d+):\s*(#[0-9a-fA-F]{6})", css)
    data = page[page.index('id="trace-data">') + len('id="trace-data">') :]
    palette_ = json.loads(data[: data.index("</script>")])["palette"]
    return [c for _, c in sorted(variables, key=lambda kv: int(kv[0]))], palette_


def test_the_page_writes_its_sequence_colours_from_the_palette():
    css, data = page_colours(to_html(tour_manager().trace))
    assert css == data == list(palette.SEQ_COLOURS)


def test_the_viewer_css_names_no_palette_colour_itself():
    """Every palette colour reaches the page through the generated :root rule only."""
    from importlib.resources import files

    css = files("pagedsim.view").joinpath("viewer.css").read_text(encoding="utf-8")
    ours = {c.lower() for c in (*palette.SEQ_COLOURS, palette.FREE, palette.ACCENT)}
    assert not {c.lower() for c in HEX.findall(css)} & ours


@pytest.mark.slow
def test_slides_fill_sequences_in_the_pages_colours(tmp_path):
    figures.main(["--slides", "--format", "svg", "--only", "3.4-tour", "--out", str(tmp_path)])
    slides = sorted(tmp_path.glob("3.4-tour-slide-*.svg"))
    assert slides
    drawn = {c.lower() for p in slides for c in HEX.findall(p.read_text(encoding="utf-8"))}
    other_roles = {palette.ALERT, palette.ACCENT, palette.INK}  # the projector reuses alert
    every_seq_colour = {c.lower() for lk in style.LOOKS.values() for c in lk.seq_colours}
    every_seq_colour -= {c.lower() for c in other_roles}
    _, page = page_colours(to_html(tour_manager().trace))
    seq_drawn = drawn & every_seq_colour
    assert seq_drawn <= {c.lower() for c in page}, seq_drawn
    assert {c.lower() for c in page[:2]} <= seq_drawn  # seq A and seq B, as on the page


@pytest.mark.slow
def test_a_slides_png_is_1920_by_1080(tmp_path):
    figures.main(["--slides", "--only", "3.4-tour", "--out", str(tmp_path)])
    pngs = sorted(tmp_path.glob("3.4-tour-slide-*.png"))
    assert pngs
    for path in pngs:
        assert image.imread(path).shape[:2] == (1080, 1920), path.name
