"""The chapter-3 notebooks: one per section, generated from the lessons so they never drift.

    python -m course.notebooks [3.x ...]   (re)write course/ch03_kv_block/notebooks/3.x.ipynb,
                                           executed: every cell run in order, its outputs stored
    python -m course.notebooks --no-execute   the same cells without outputs
    python -m course.notebooks --check     exit 1 if a notebook's cells differ from the lessons' own

A notebook (nbformat 4, stored with its outputs so that GitHub shows its figures) holds the
lesson's text in English and Chinese, then code cells that call the helpers below: the demo, the
figures, a stepper over a trace and the check of the student's workspace file. With
PAGEDSIM_NOTEBOOK_FAST=1 (tests/course/test_notebooks.py) figures are drawn at a low resolution,
the labs' sweeps named instead of drawn, and 3.8's engine runs on NumPy."""

from __future__ import annotations

import argparse
import base64
import contextlib
import importlib
import inspect
import io
import json
import os
import sys
import tempfile
from pathlib import Path
from unittest import mock

from . import curriculum
from .lessons_text import lesson_text, read

SECTIONS = tuple(curriculum.sections())  # one notebook per lesson
FOLDER = Path(__file__).resolve().parent / "ch03_kv_block" / "notebooks"
FAST = os.environ.get("PAGEDSIM_NOTEBOOK_FAST") == "1"


def _lesson(section: str):
    return importlib.import_module(curriculum.lesson_module(section))


_RECORD: list | None = None  # while `--execute` runs a notebook: the cell's rich outputs go here


def _display(mime: dict, fallback: str) -> None:
    """Show a MIME bundle in Jupyter, record it while `--execute` runs, or print `fallback`."""
    if _RECORD is not None:
        data = {**mime, "text/plain": [fallback]}
        _RECORD.append({"output_type": "display_data", "data": data, "metadata": {}})
        return
    try:
        from IPython import get_ipython
        from IPython.display import display

        if get_ipython() is not None:
            display(mime, raw=True)
            return
    except ImportError:
        pass
    print(fallback)


# ---- helpers the notebooks call ---------------------------------------------
def out_dir(section: str) -> Path:
    """Where this notebook writes (printed): ./pagedsim-notebook-<section>/ in the current dir."""
    path = Path.cwd() / f"pagedsim-notebook-{section}"
    path.mkdir(parents=True, exist_ok=True)
    print(f"files from this notebook go to {path}")
    return path


def demo(section: str, out: Path) -> None:
    """Run the lesson's demo, as `pagedsim lesson SECTION` does."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from pagedsim.draw import style

    from .ch03_kv_block.lessons import NeedsExercise

    lesson = _lesson(section)
    numpy = FAST and "backend" in inspect.signature(lesson.demo).parameters  # 3.8's engine
    fast = {"backend": "numpy"} if numpy else {}
    try:
        with style.output("png", dpi=30 if FAST else None):
            lesson.demo(out, **fast)
    except NeedsExercise as e:
        print(f"({e})")


def figures(section: str, out: Path) -> list[Path]:
    """Draw the lesson's figures into `out` and show them (the 3.4 tour as its key-frame strip)."""
    from pagedsim.draw import figures as registry
    from pagedsim.draw import style

    makers, paths = registry.collect(), []
    with style.output("png", dpi=30 if FAST else None):
        for name, _ in read(section)["en"].figures:
            if FAST and not name.startswith("3."):  # the labs' figures run whole sweeps: named only
                command = f"pagedsim figures --only {name} --out DIR"
                print(f"figure {name}: {command} (not drawn in the fast run)")
            elif name == "3.4-tour":  # the GIF is the stepper below; keep the strip
                from pagedsim.draw import scenario
                from pagedsim.draw.figures_ch3 import tour_snapshots

                strip = out / "3.4-tour-key-frames.png"
                paths.append(scenario.write_strip(tour_snapshots(), strip))
            else:
                paths += [p for p in makers[name](out) if p.suffix == ".png"]
    for path in paths:
        shown = path.relative_to(out.parent) if path.is_relative_to(out.parent) else path
        png = base64.b64encode(path.read_bytes()).decode("ascii")
        _display({"image/png": png}, f"figure: {shown}")
    return paths


def snapshots(section: str) -> list:
    """The trace the section's stepper plays."""
    from pagedsim import KVCacheManager

    if section == "3.6":
        return _lesson("3.6").manager_snapshots()
    if section == "3.8":  # the capstone's run, on the NumPy path (same tables as the kernels')
        from pagedsim.engine.generate import serve, step_frames

        llm, _ = serve(backend="numpy")
        return step_frames(llm.llm_engine, llm.steps)
    if section == "3.3":
        m = KVCacheManager(10, 4)
        m.add_sequence("A", 5)
        m.add_sequence("B", 6)
        m.append_tokens("A", 4)
        return m.trace.snapshots
    from pagedsim.draw.figures_ch3 import tour_snapshots

    return tour_snapshots()


def stepper(section: str):
    """The section's trace as pagedsim's offline page (`pagedsim.view`)."""
    from pagedsim.view import PageOptions, View

    snaps = snapshots(section)
    view = View(snaps, PageOptions(title=f"pagedsim {section}"), height=560)
    note = f"stepper: {len(snaps)} steps (open the notebook in Jupyter to step through them)"
    if _RECORD is not None:  # a stored notebook keeps the line: GitHub runs no script
        print(note)
    else:
        _display({"text/html": view._repr_html_()}, note)


def check(exercise_id: str) -> None:
    """`pagedsim check ID` on your workspace file (or the untouched stub), printed the same way."""
    from . import curriculum, workspace
    from .runner import print_report, run_checks

    ex = curriculum.find(exercise_id)
    mine = workspace.find_upwards(ex)  # $PAGEDSIM_WORKSPACE, here, or any folder above
    print(
        f"checking {mine}"
        if mine
        else f"no workspace file for {ex.id} here ({Path.cwd()}), in any folder above it or in "
        f"$PAGEDSIM_WORKSPACE: checking the untouched stub {ex.stub} (run `pagedsim "
        f"workspace` at the repository root, then edit {workspace.DEFAULT}/{Path(ex.stub).name})"
    )
    outcome = run_checks(ex, mine or ex.path("stub"))
    print_report(outcome, verbose=False, hint=True)


# ---- the generator ----------------------------------------------------------
def _cell(kind: str, text: str) -> dict:
    lines = text.strip("\n").splitlines(keepends=True)
    cell = {"cell_type": kind, "metadata": {}, "source": lines}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


SETUP = (
    "Setup: `pip install -e .` (or `pip install pagedsim`) as in the README, plus Jupyter. "
    "The cells below write only into the folder the first one prints."
)
STEPPER = (
    "## Step through a trace\n\nPlay, pause and step: one frame per step of the block manager."
)
EDIT = (
    "- {id}: {title}. Edit `pagedsim-work/{name}` (made by `pagedsim workspace` at the "
    "repository root, or in any folder above this notebook, or the folder $PAGEDSIM_WORKSPACE "
    "names), then run the cell: it prints which file it checked."
)


def notebook(section: str) -> dict:
    exercises = [e for e in curriculum.load() if e.section == section]
    en = lesson_text(section, "en").replace("== ", "", 1).replace(" ==", "", 1)
    zh = lesson_text(section, "zh").split("\n", 1)[1].strip()
    cells = [
        ("markdown", "# " + en),
        ("markdown", "## 中文\n\n" + zh),
        ("markdown", SETUP),
        ("code", f'from course import notebooks as nb\n\nOUT = nb.out_dir("{section}")'),
        ("markdown", f"## The demo\n\nThe same demonstration as `pagedsim lesson {section}`."),
        ("code", f'nb.demo("{section}", OUT)'),
        ("markdown", "## The figures"),
        ("code", f'paths = nb.figures("{section}", OUT)'),
        ("markdown", STEPPER),
        ("code", f'nb.stepper("{section}")'),
    ]
    if exercises:
        edit = (EDIT.format(id=e.id, title=e.title, name=Path(e.stub).name) for e in exercises)
        cells.append(("markdown", "## Your exercise\n\n" + "\n".join(edit)))
        cells.append(("code", "\n".join(f'nb.check("{e.id}")' for e in exercises)))
    else:
        cells.append(("markdown", "## No exercise\n\nThis section has no exercise to check."))
    return {
        "cells": [_cell(kind, text) for kind, text in cells],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def render(section: str, executed: dict | None = None) -> str:
    """The notebook's JSON text: as generated, or `executed` (the same cells with their outputs)."""
    nb = executed or notebook(section)
    for i, cell in enumerate(nb["cells"]):
        cell["id"] = f"s{section.replace('.', '-')}-{i:02d}"
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def without_outputs(nb: dict) -> dict:
    """A copy of a notebook with every code cell's outputs and count cleared."""
    nb = json.loads(json.dumps(nb))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell.update(outputs=[], execution_count=None)
    return nb


def execute(section: str) -> dict:
    """Run the code cells in order in one namespace, in a temporary folder (shown as `.`), in
    English; the notebook with their outputs (stdout as a stream, figures as PNG)."""
    global _RECORD
    nb, count, saved_cwd = notebook(section), 0, Path.cwd()
    try:
        with (
            mock.patch.dict(os.environ, PAGEDSIM_LANG="en", MPLBACKEND="Agg"),
            tempfile.TemporaryDirectory(prefix="pagedsim-notebook-run-") as tmp,
        ):
            os.environ.pop("PAGEDSIM_WORKSPACE", None)
            os.chdir(tmp)
            namespace = {"__name__": "__main__"}
            for cell in (c for c in nb["cells"] if c["cell_type"] == "code"):
                _RECORD, printed, count = [], io.StringIO(), count + 1
                with contextlib.redirect_stdout(printed):
                    exec(compile("".join(cell["source"]), f"{section}.ipynb", "exec"), namespace)  # noqa: S102
                text = printed.getvalue().replace(str(Path(tmp).resolve()), ".").replace(tmp, ".")
                lines = text.splitlines(keepends=True)
                stream = (
                    [{"output_type": "stream", "name": "stdout", "text": lines}] if text else []
                )
                cell.update(outputs=stream + _RECORD, execution_count=count)
    finally:
        _RECORD = None
        os.chdir(saved_cwd)
    return nb


def main(argv: list[str] | None = None) -> int:
    doc = __doc__.split("\n\n")[0]
    p = argparse.ArgumentParser(prog="python -m course.notebooks", description=doc)
    which = f"which notebooks (default: {', '.join(SECTIONS)})"
    p.add_argument("sections", nargs="*", metavar="SECTION", help=which)
    stale = "fail if a notebook's cells differ from the lessons"
    p.add_argument("--check", action="store_true", help=stale)
    p.add_argument("--no-execute", action="store_true", help="write the cells without running them")
    args = p.parse_args(argv)
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown:
        p.error(f"no notebook {unknown[0]!r}; choose from {', '.join(SECTIONS)}")
    stale = []
    for section in args.sections or SECTIONS:
        path = FOLDER / f"{section}.ipynb"
        if args.check:
            stored = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
            if stored is None or render(section, without_outputs(stored)) != render(section):
                stale.append(path.name)
            continue
        text = render(section) if args.no_execute else render(section, execute(section))
        FOLDER.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}" + ("" if args.no_execute else " (executed, with its outputs)"))
    if stale:
        print(f"out of date: {', '.join(stale)}; run python -m course.notebooks", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":  # run the imported module's main: the cells record into its _RECORD
    from course.notebooks import main as _main

    raise SystemExit(_main())
