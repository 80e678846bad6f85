"""Shared look for every picture: a colourblind-safe palette, fonts, and a byte-stable save.

Colours come from `pagedsim/palette.py`; sequences get them in admission order. `save`
writes without timestamps or version metadata, so the same seed gives the same bytes, in
the format, dpi, look ("paper" or "projector"), language and slide shape that
`with output(...)` holds (what `pagedsim figures` chose).
"""

from __future__ import annotations

import contextlib
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg", force=False)  # headless unless a GUI backend was chosen before us

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import to_hex, to_rgb, to_rgba  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from matplotlib.ticker import LogFormatter, LogFormatterSciNotation  # noqa: E402
from matplotlib.typing import RcKeyType  # noqa: E402

from ..palette import FREE, FREE_EDGE, INK, SEQ_COLOURS  # noqa: E402
from ..text.lang import t as _t  # noqa: E402
from .labels_zh import ZH as _ZH  # noqa: E402

DPI = 100

RC: dict[RcKeyType, object] = {
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "axes.titlesize": 12,
    "axes.labelsize": 10,
    "svg.hashsalt": "pagedsim",
}


# Tol bright/vibrant, the darker half: nothing washes out on a projector
PROJECTOR_COLOURS = tuple(
    "#0077BB #CC3311 #009988 #AA3377 #332288 #997700 #117733 #882255 #555555".split()
)
FORMATS = ("png", "svg", "pdf")


@dataclass(frozen=True)
class Look:
    name: str
    seq_colours: tuple  # sequence colours in admission order
    free: str  # fill of a free block
    free_edge: str
    grey: str | None  # secondary text colour (None: keep each caller's grey)
    min_pt: float  # no text smaller than this
    scale: float  # figure size factor, so geometry grows with the text


LOOKS = {
    "paper": Look("paper", SEQ_COLOURS, FREE, FREE_EDGE, None, 0.0, 1.0),
    "projector": Look("projector", PROJECTOR_COLOURS, "#B0B0B0", "#333333", "#222222", 12.0, 1.4),
    # `--slides`: the projector's sizes and dark grey text, in the page's colours (one palette
    # for the deck and the browser page it is taught beside; text_on keeps labels readable)
    "slides": Look("slides", SEQ_COLOURS, FREE, FREE_EDGE, "#222222", 12.0, 1.4),
}


# what `output(...)` chose: every figure saved meanwhile follows it; "noted": the
# missing-CJK-font note was printed (once per process)
_out: dict[str, Any] = dict(fmt="png", dpi=None, look=LOOKS["paper"], lang="en", slides=False)
CJK_FONTS = (
    "Noto Sans CJK SC, Noto Sans CJK JP, Noto Sans SC, Source Han Sans SC, WenQuanYi Zen Hei, "
    "WenQuanYi Micro Hei, Droid Sans Fallback, AR PL UMing CN, SimHei, Microsoft YaHei, PingFang SC"
).split(", ")
NO_CJK_NOTE = (
    "pagedsim: no CJK font found (e.g. `apt-get install fonts-noto-cjk`); figure text stays English"
)


def cjk_font() -> str | None:
    """The first installed font with Chinese glyphs (registering ones found by file name)."""
    from matplotlib import font_manager

    installed = {f.name for f in font_manager.fontManager.ttflist}
    if not installed & set(CJK_FONTS):
        for path in font_manager.findSystemFonts():
            keys = ("cjk", "wqy", "sourcehansans", "droidsansfallback")
            if any(key in Path(path).name.lower() for key in keys):
                try:
                    font_manager.fontManager.addfont(path)
                except (OSError, RuntimeError, ValueError):
                    continue
        installed = {f.name for f in font_manager.fontManager.ttflist}
    return next((name for name in CJK_FONTS if name in installed), None)


def look() -> Look:
    return _out["look"]


@contextlib.contextmanager
def output(
    fmt: str = "png",
    dpi: int | None = None,
    look: str = "paper",
    lang: str = "en",
    slides: bool = False,
):
    """Within the block, `save` writes `fmt` at `dpi` in the named look, labels in `lang`
    (Chinese needs a CJK font: without one, a note on stderr and English labels)."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    if look not in LOOKS:
        raise ValueError(f"style must be one of {tuple(LOOKS)}, got {look!r}")
    if dpi is not None and not (isinstance(dpi, int) and 10 <= dpi <= 2400):
        raise ValueError(f"dpi must be an int in 10..2400, got {dpi!r}")
    rc: dict[RcKeyType, object] = {}
    if lang == "zh":
        font = cjk_font()
        if font is None:
            if not _out.get("noted"):  # once per process, not once per figure
                print(NO_CJK_NOTE, file=sys.stderr)
                _out["noted"] = True
            lang = "en"
        else:
            rc = {"font.family": ["sans-serif"], "font.sans-serif": [font, "DejaVu Sans"]}
    elif lang != "en":
        raise ValueError(f"lang must be en or zh, got {lang!r}")
    saved = _out.copy()
    _out.update({"fmt": fmt, "dpi": dpi, "look": LOOKS[look], "lang": lang, "slides": bool(slides)})
    try:
        with plt.rc_context(rc):
            yield
    finally:
        _out.update(saved)


def slides() -> bool:
    """True under `pagedsim figures --slides`: one frame per file."""
    return _out["slides"]


def lang() -> str:
    """The language figures are labelled in now ("zh" only with a CJK font)."""
    return _out["lang"]


def tr(text: str, **fields) -> str:
    """`text` in the current language (see labels_zh.py), with `fields` filled in."""
    return _t(text, _out["lang"], _ZH, **fields)


def pt(size: float) -> float:
    """A font size in the current look (never under its minimum)."""
    return max(size, look().min_pt)


def grey(colour: str) -> str:
    """A secondary-text grey in the current look (darker on a projector)."""
    return look().grey or colour


def seq_colours(snapshots) -> dict:
    """seq_id -> colour, in order of first appearance across `snapshots`."""
    palette, out = look().seq_colours, dict[object, str]()
    for snap in snapshots:
        for s in snap.sequences:
            if s.seq_id not in out:
                out[s.seq_id] = palette[len(out) % len(palette)]
    return out


def colour_of(seq_id, colours: dict) -> str:
    """The colour of `seq_id`; sequences missing from `colours` get one by position."""
    if seq_id in colours:
        return colours[seq_id]
    palette = look().seq_colours
    return palette[len(colours) % len(palette)]


def text_on(colour) -> str:
    """Black or white, whichever reads better on `colour` (relative luminance test)."""
    r, g, b = to_rgb(colour)
    return INK if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "white"


def whole_pixels(width: float, height: float, dpi: int = DPI) -> tuple[float, float]:
    """Inches that come out as round(inches * dpi) pixels whether matplotlib rounds or
    truncates (versions differ): a quarter pixel above the whole number."""
    return (round(width * dpi) + 0.25) / dpi, (round(height * dpi) + 0.25) / dpi


def new_figure(width: float, height: float):
    """A figure of `width` x `height` inches with the house fonts."""
    with plt.rc_context(RC):
        return plt.figure(figsize=(width, height), dpi=DPI)


METADATA = {
    "png": {"Software": None},
    "svg": {"Date": None, "Creator": None},
    "pdf": {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None},
}
SAVE_RC: dict[RcKeyType, object] = {
    "svg.fonttype": "none",
    "svg.hashsalt": "pagedsim",
    "pdf.fonttype": 42,
}


SLIDE_IN = (960 / 72, 540 / 72)  # a whole 16:9 slide: 960 x 540 pt, no white bands
# a slide body for a figure drawn in the projector look, which scales by 1.4 (inches)
SLIDE_BODY_IN = (13.33 / 1.4, 6.67 / 1.4)
SLIDE_DPI = 144  # `--slides` PNGs without --dpi: 1920 x 1080 pixels, a full-HD screen
SLIDE_MIN_PT = 18.0  # no text smaller than this on a slide, as projected


def fit_slide(fig) -> None:
    """`--slides`: make the figure exactly one 16:9 slide (axes and texts keep their fractional
    places), then raise every text to at least 18 pt."""
    if getattr(fig, "_pagedsim_slide", False):
        return
    fig.set_size_inches(*SLIDE_IN)
    _raise_text(fig, SLIDE_MIN_PT)
    _wrap_to_figure(fig)
    fig._pagedsim_slide = True


def canvas(size: tuple[float, float], xlim: tuple[float, float], ylim: tuple[float, float]):
    """(figure, axes) for a diagram: one frameless axes filling the figure, limits in units."""
    fig = new_figure(*size)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_axis_off()
    return fig, ax


def text_slide(text: str, gid: str):
    """`--slides`: a slide of words only, `text` wrapped to the slide body at 22 pt."""
    fig = new_figure(*SLIDE_BODY_IN)
    wrapped = textwrap.fill(text, 66)
    fig.text(0.02, 0.96, wrapped, va="top", ha="left", fontsize=22, gid=gid, linespacing=1.25)
    return fig


def _wrap_to_figure(fig) -> None:
    """Break a horizontal text that runs off the figure into lines at spaces, to fit."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    margin = 4.0  # pixels kept free at the edge
    for text in fig.findobj(Text):
        words = text.get_text()
        if not (text.get_visible() and words.strip()) or text.get_rotation() % 360 or "$" in words:
            continue
        box = text.get_window_extent(renderer)
        if box.width <= 0 or (box.x0 >= page.x0 and box.x1 <= page.x1):
            continue
        ha = text.get_horizontalalignment()
        if ha == "left":
            room = page.x1 - margin - box.x0
        elif ha == "right":
            room = box.x1 - page.x0 - margin
        else:
            centre = (box.x0 + box.x1) / 2
            room = 2 * min(centre - page.x0, page.x1 - centre) - 2 * margin
        lines = words.split("\n")
        longest = max(len(line) for line in lines)
        chars = int(longest * room / box.width)
        if room <= 0 or chars < 8:
            continue
        text.set_text("\n".join(textwrap.fill(line, chars) if line else line for line in lines))


def fit_look(fig) -> None:
    """Apply the current look to a finished figure: scale it (once) and raise small text."""
    lk = look()
    if lk.scale != 1.0 and not getattr(fig, "_pagedsim_scaled", False):
        w, h = fig.get_size_inches()
        fig.set_size_inches(w * lk.scale, h * lk.scale)
        fig._pagedsim_scaled = True
    if lk.min_pt:
        _raise_text(fig, lk.min_pt)
    if lk.name != "paper":
        _recolour(fig, lk)


def _raise_text(fig, min_pt: float) -> None:
    """Raise every text of `fig`, tick labels included, to at least `min_pt` (log axes get plain
    numbers, so no superscript falls under it)."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for which in ("major", "minor"):
                ticks = axis.get_major_ticks() if which == "major" else axis.get_minor_ticks()
                if ticks and ticks[0].label1.get_fontsize() < min_pt:
                    axis.set_tick_params(which=which, labelsize=min_pt)
            for get, put in (
                (axis.get_major_formatter, axis.set_major_formatter),
                (axis.get_minor_formatter, axis.set_minor_formatter),
            ):
                if isinstance(get(), LogFormatterSciNotation):
                    put(LogFormatter(base=get()._base, labelOnlyBase=get().labelOnlyBase))
    for text in fig.findobj(Text):
        if text.get_text() and text.get_fontsize() < min_pt:
            text.set_fontsize(min_pt)


def _recolour(fig, lk: Look) -> None:
    """Swap the paper palette for the look's in a finished figure (alpha is kept)."""
    swap = {to_hex(a).lower(): b for a, b in zip(SEQ_COLOURS, lk.seq_colours, strict=True)}
    swap.update({FREE.lower(): lk.free, FREE_EDGE.lower(): lk.free_edge})
    if lk.grey:
        swap.update({g: lk.grey for g in ("#555555", "#666666", "#777777", "#888888", "#999999")})

    def new(colour):
        rgba = to_rgba(colour)
        key = to_hex(rgba).lower()
        return to_rgba(swap[key], rgba[3]) if key in swap and rgba[3] > 0 else None

    for artist in fig.findobj(lambda a: isinstance(a, (Patch, Line2D, Text))):
        for name in ("facecolor", "edgecolor") if isinstance(artist, Patch) else ("color",):
            c = new(getattr(artist, f"get_{name}")())
            if c is not None:
                getattr(artist, f"set_{name}")(c)


def save(fig, path, *, dpi: int = DPI, close: bool = True) -> Path:
    """Write `fig` to `path` without timestamps or version strings, as `output(...)` chose;
    returns the path written."""
    path = Path(path)
    fmt = _out["fmt"]
    if path.suffix == ".png" and fmt != "png":
        path = path.with_suffix("." + fmt)
    fmt = path.suffix.lstrip(".").lower()
    path.parent.mkdir(parents=True, exist_ok=True)
    fit_look(fig)
    if _out["slides"]:
        fit_slide(fig)
    dpi = _out["dpi"] or (SLIDE_DPI if _out["slides"] else dpi)
    with plt.rc_context(SAVE_RC):
        fig.savefig(path, dpi=dpi, metadata=METADATA.get(fmt), facecolor="white", format=fmt)
    if close:
        plt.close(fig)
    return path
