"""`pagedsim figures`: regenerate the chapter's figures.

Figure makers come from the modules in REGISTRIES, each with a dict `FIGURES: name ->
maker(out_dir: Path) -> list[Path]`. Every maker uses fixed seeds: two runs write the same
files. A plain regeneration without `--out` writes into `figures/` (run it from the
repository root); any other run without `--out` writes into a new temporary folder.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
from pathlib import Path

import matplotlib

from ..io.args import writable_dir

matplotlib.use("Agg")  # figures are files: never open a window

from . import style  # noqa: E402

REGISTRIES = (
    "pagedsim.draw.figures_ch3",
    "pagedsim.labs.sweep",
    "pagedsim.draw.figures_labs",
    "pagedsim.draw.hybrid",
)


def collect() -> dict:
    """Every registered maker, in registry order; a name may be registered only once."""
    makers: dict = {}
    for module in REGISTRIES:
        registry = getattr(importlib.import_module(module), "FIGURES", {}) or {}
        for name, maker in registry.items():
            if name in makers:
                raise ValueError(f"figure {name!r} is registered twice (again in {module})")
            makers[name] = maker
    return makers


PLAIN = ("png", None, "paper", False, "en")  # --format, --dpi, --style, --slides, --lang


def default_out(args) -> str:
    """figures/ for a plain regeneration; a new temporary folder (named on stderr) otherwise."""
    if (args.format, args.dpi, args.style or "paper", bool(args.slides), args.lang) == PLAIN:
        return "figures"
    folder = tempfile.mkdtemp(prefix="pagedsim-figures-")
    print(
        f"pagedsim figures: writing to {folder} (figures/ holds only the default PNGs; "
        "--out DIR chooses the folder)",
        file=sys.stderr,
    )
    return folder


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pagedsim figures", description=__doc__.split("\n\n")[0])
    where = "default: figures/ for a plain regeneration, else a new temporary folder"
    p.add_argument("--out", metavar="DIR", help=f"output folder ({where}, named on stderr)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="make only these figures")
    p.add_argument("--list", action="store_true", help="list the figure names and exit")
    formats = "png (default), svg (text stays text) or pdf; GIFs stay GIFs"
    p.add_argument("--format", choices=style.FORMATS, default="png", help=formats)
    p.add_argument("--dpi", type=int, default=None, help=f"resolution (default {style.DPI})")
    looks = "paper (default: the committed figures) or projector (big text, strong colours)"
    p.add_argument("--style", choices=("paper", "projector"), help=looks)
    deck = "for a slide deck: 16:9 slides in the page's colours, big text, one frame per file"
    p.add_argument("--slides", action="store_true", help=deck)
    langs = "label language (zh needs a CJK font; the committed figures are en)"
    p.add_argument("--lang", choices=("en", "zh"), default="en", help=langs)
    args = p.parse_args(argv)
    if args.dpi is not None and not 10 <= args.dpi <= 2400:
        p.error("--dpi must be in 10..2400")
    makers = collect()
    if args.list:
        for name, maker in makers.items():
            doc = (maker.__doc__ or "").strip().splitlines()
            print(f"{name:<24} {doc[0] if doc else ''}")
        return 0
    if args.only:
        unknown = [n for n in args.only if n not in makers]
        if unknown:
            names = ", ".join(unknown)
            print(
                f"pagedsim figures: error: unknown figure(s) {names}; `--list` shows the names",
                file=sys.stderr,
            )
            return 2
        makers = {n: makers[n] for n in args.only}
    out = writable_dir(args.out or default_out(args))  # unwritable: fails before any figure
    for name, maker in makers.items():
        start = time.perf_counter()
        look = args.style or ("slides" if args.slides else "paper")
        with style.output(
            fmt=args.format, dpi=args.dpi, look=look, lang=args.lang, slides=args.slides
        ):
            paths = maker(out)
        took = time.perf_counter() - start
        for path in paths:
            print(f"{name}: wrote {path} ({Path(path).stat().st_size:,} bytes, {took:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
