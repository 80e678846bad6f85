"""Every figure `pagedsim figures` writes, rendered once per test session and style, and shared.

Four test files read the whole figure set: test_label_collisions (the texts of every saved
figure), test_figures (the chapter's PNGs), test_projector_svg and test_slide_sizes (the
SVGs). Each pass below is one real `pagedsim figures` run (`figures.main`), made by whichever
process asks first; the others wait for it and read its files. With pytest-xdist the workers
are separate processes whose base temps (popen-gw0, popen-gw1) share a parent: the passes
live there, and an fcntl lock per pass lets one worker render while the other waits. Without
xdist they live in the session's own base temp. Nothing depends on which worker asks first
or on the order of the tests.

    plain       the defaults (PNG, paper look): the committed figures/
    slides      `--slides --format svg`: one frame per file, 18 pt once fitted to a slide
    projector   `--style projector --format svg`

`plain` and `slides` also run `text_problems` on every figure as it is saved (a wrapper on
`Figure.savefig`, GIF frames included), so one pass serves the label-collision test too.
A figure is built the same whatever the format (`style.save` picks the format only when it
calls `savefig`), so the slide texts are checked on the SVG pass.

The block-size sweep's rows (about 20 s of simulation, the same for every style) are computed
once per session and kept as JSON beside the passes, keyed by a digest of the sweep's inputs;
JSON gives floats back exactly, so every pass draws the figure from the sweep's own numbers.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from pagedsim.draw import figures
from pagedsim.labs import sweep as sweep_lab
from tests.draw.text_problems import text_problems

PASSES = {  # name -> `pagedsim figures` arguments (besides --out)
    "plain": [],
    "slides": ["--slides", "--format", "svg"],
    "projector": ["--style", "projector", "--format", "svg"],
}
CHECKED = ("plain", "slides")  # passes whose saved figures' texts are checked
WROTE = re.compile(r"^(\S+): wrote (.+) \([\d,]+ bytes, [\d.]+ s\)$")


@dataclass(frozen=True)
class Rendered:
    out: Path  # the folder `pagedsim figures --out` wrote, and nothing else
    written: dict  # figure name -> names of the files its maker wrote, as printed
    problems: dict  # file name -> text problems (checked passes; {} when every text is clean)
    checked: list  # names of the files whose figures had their texts checked (checked passes)


def shared_root(tmp_path_factory) -> Path:
    """The folder every process of this test session sees: the parent of an xdist worker's
    base temp, or the base temp itself without xdist."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "draw-passes"
    root.mkdir(exist_ok=True)
    return root


@contextlib.contextmanager
def locked(path: Path):
    """Hold an exclusive lock on `path` (created if missing) for the block."""
    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def write_atomically(path: Path, text: str) -> None:
    part = path.with_name(path.name + ".part")
    part.write_text(text, encoding="utf-8")
    part.replace(path)


def shared_sweep(root: Path):
    """`sweep_lab.sweep`, computed once per set of inputs for all processes of the session."""
    real = sweep_lab.sweep

    def sweep(requests, *args, **kwargs):
        requests = list(requests)
        key = repr((requests, args, sorted(kwargs.items()))).encode()
        path = root / f"sweep-{hashlib.sha256(key).hexdigest()[:20]}.json"
        with locked(root / "sweep.lock"):
            if not path.exists():
                write_atomically(path, json.dumps(real(requests, *args, **kwargs)))
            return json.loads(path.read_text(encoding="utf-8"))

    return sweep


def run_pass(name: str, root: Path) -> dict:
    """`pagedsim figures --out <root>/<name> ...`; what it printed and found, as JSON-able."""
    from matplotlib.figure import Figure

    out = root / name
    out.mkdir()
    problems: dict = {}
    seen: list = []
    save = Figure.savefig

    def checked(fig, fname, *args, **kwargs):
        found = text_problems(fig)
        # a file by its name; a GIF's frame (saved into a buffer) by its place among them
        is_file = isinstance(fname, (str, os.PathLike))
        seen.append(Path(fname).name if is_file else f"frame {len(seen) + 1} in a buffer")
        if found:
            problems[seen[-1]] = found
        return save(fig, fname, *args, **kwargs)

    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(printed):
        mp.setattr(sweep_lab, "sweep", shared_sweep(root))
        if name in CHECKED:
            mp.setattr(Figure, "savefig", checked)
        assert figures.main(["--out", str(out), *PASSES[name]]) == 0
    written: dict = {}
    for line in printed.getvalue().splitlines():
        m = WROTE.match(line)
        assert m, f"unexpected output from `pagedsim figures`: {line!r}"
        assert Path(m[2]).parent == out, line
        written.setdefault(m[1], []).append(Path(m[2]).name)
    every = sorted(n for names in written.values() for n in names)
    assert every == sorted(p.name for p in out.iterdir()), "a file was written unreported"
    made_by = os.environ.get("PYTEST_XDIST_WORKER", "the only process")
    return {
        "written": written,
        "problems": problems,
        "checked": sorted(set(seen)),
        "made_by": f"{made_by} (pid {os.getpid()})",  # for a reader checking that it ran once
    }


def rendered(name: str, tmp_path_factory) -> Rendered:
    """The pass `name`, made now by this process or read from the one that made it."""
    root = shared_root(tmp_path_factory)
    done = root / f"{name}.json"
    with locked(root / f"{name}.lock"):
        if not done.exists():
            if (root / name).exists():  # a process died mid-pass: start it again
                shutil.rmtree(root / name)
            write_atomically(done, json.dumps(run_pass(name, root)))
    record = json.loads(done.read_text(encoding="utf-8"))
    return Rendered(root / name, record["written"], record["problems"], record["checked"])
