"""`pagedsim figures --style projector --format svg`: every figure, measured from its SVG text.

The SVG keeps text as <text> elements (svg.fonttype "none") and its viewBox is in points
(width="...pt" equals the viewBox width), so a `font-size: Npx` in the file is N points on
the slide. The test reads every <text> and <tspan>, including mathtext's superscripts,
which matplotlib writes as tspans at 70% of the label size.
"""

import re
import xml.etree.ElementTree as ET

import pytest

from pagedsim.draw import figures

pytestmark = pytest.mark.draw

SVG = "{http://www.w3.org/2000/svg}"
SIZE = re.compile(r"font-size:\s*([0-9.]+)px")


def text_sizes(path) -> list[tuple[str, float]]:
    """(text, size in pt) for every piece of text in the SVG at `path`."""
    root = ET.parse(path).getroot()
    assert root.get("width").endswith("pt")
    assert float(root.get("width")[:-2]) == pytest.approx(float(root.get("viewBox").split()[2]))
    out = []
    for el in root.iter():
        if el.tag not in (SVG + "text", SVG + "tspan"):
            continue
        own = SIZE.search(el.get("style", ""))
        if el.tag == SVG + "text" and own is None:  # a text of tspans: each tspan has its size
            assert [c for c in el if c.tag == SVG + "tspan"], f"unsized <text> in {path.name}"
            continue
        out.append(("".join(el.itertext()).strip(), float(own.group(1))))
    return out


@pytest.fixture
def projector_svgs(projector_figures):
    """The session's `pagedsim figures --style projector --format svg` pass (rendered.py)."""
    return {p.stem: p for p in projector_figures.out.glob("*.svg")}


def test_every_figure_is_written_as_svg_in_the_projector_style(projector_svgs):
    expected = {name for name in figures.collect() if name != "3.4-tour"} | {"3.4-tour-key-frames"}
    assert expected <= set(projector_svgs)


def test_no_text_in_any_projector_figure_is_under_12_pt(projector_svgs):
    small = {}
    for name, path in projector_svgs.items():
        sizes = text_sizes(path)
        assert len(sizes) >= 5, f"{name} has almost no text: was it written as text?"
        under = [(t, s) for t, s in sizes if s < 12]
        if under:
            small[name] = under[:5]
    assert small == {}


def test_the_size_reader_sees_a_small_superscript_in_a_paper_log_axis(tmp_path):
    """The measurement itself can fail: the paper look's log tick labels have 7 pt exponents."""
    argv = ["--out", str(tmp_path), "--format", "svg", "--only", "3.5-block-size-tradeoff"]
    assert figures.main(argv) == 0
    sizes = text_sizes(tmp_path / "3.5-block-size-tradeoff.svg")
    assert min(s for _, s in sizes) < 8
