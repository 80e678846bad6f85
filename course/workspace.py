"""`pagedsim workspace [DIR]`: copy the exercise stubs to a folder of your own.

Students never edit the stubs inside the package (a `git pull` or reinstall would collide with
their work). A workspace is a folder with one file per exercise, named like the stubs, and a
marker file; existing files are never overwritten. `pagedsim check 3.4a` checks, in order:

    --impl FILE                                  that file
    $PAGEDSIM_WORKSPACE/ex3_4a_free_list.py      a workspace named by the environment
                                                 (`pagedsim workspace` with no DIR makes it)
    ./ex3_4a_free_list.py                        the current folder, if it is a workspace
    ./pagedsim-work/ex3_4a_free_list.py          the default workspace under the current folder"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from pagedsim.io.args import ArgParser

from . import curriculum

DEFAULT = "pagedsim-work"
MARKER = ".pagedsim-workspace"


def _places(folder: Path, name: str) -> list[Path]:
    """Where a workspace in `folder` keeps `name`: the folder itself if it is one, then
    ./DEFAULT."""
    return ([folder / name] if (folder / MARKER).is_file() else []) + [folder / DEFAULT / name]


def candidates(ex: curriculum.Exercise) -> list[Path]:
    name = Path(ex.stub).name
    named = os.environ.get("PAGEDSIM_WORKSPACE")
    return ([Path(named) / name] if named else []) + _places(Path.cwd(), name)


def find(ex: curriculum.Exercise) -> Path | None:
    """The student's file for `ex`, or None when no workspace holds it."""
    return next((p for p in candidates(ex) if p.is_file()), None)


def find_upwards(ex: curriculum.Exercise, start: Path | None = None) -> Path | None:
    """`find`, then the same places in every folder above: a notebook runs in its own folder, the
    workspace is at the repository root."""
    name, above = Path(ex.stub).name, Path(start or Path.cwd()).resolve().parents
    places = (p for folder in above for p in _places(folder, name))
    return find(ex) or next((p for p in places if p.is_file()), None)


def create(folder: Path, exercises=None) -> tuple[list[Path], list[Path]]:
    """Copy every stub into `folder`; returns (copied, already there and kept)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).write_text(
        "pagedsim course workspace: `pagedsim check ID` finds your files here\n"
    )
    copied, kept = [], []
    for ex in exercises or curriculum.load():
        dst = folder / Path(ex.stub).name
        if dst.exists():
            kept.append(dst)
        else:
            shutil.copyfile(ex.path("stub"), dst)
            copied.append(dst)
    return copied, kept


def main(argv: list[str]) -> int:
    what = "copy the exercise stubs to a folder of yours"
    p = ArgParser(prog="pagedsim workspace", description=what)
    where = f"where the files go (default: $PAGEDSIM_WORKSPACE if set, else ./{DEFAULT})"
    p.add_argument("folder", nargs="?", help=where)
    args = p.parse_args(argv)
    named = os.environ.get("PAGEDSIM_WORKSPACE")
    if args.folder is None:  # where `pagedsim check` will look first
        args.folder = named or DEFAULT
    if not args.folder.strip():
        p.error("the folder name is empty: name a folder (or leave it out for ./pagedsim-work)")
    args.folder = Path(args.folder)
    if args.folder.exists() and not args.folder.is_dir():
        p.error(f"{args.folder} is a file, not a folder")
    copied, kept = create(args.folder)
    where = args.folder.resolve()
    print(f"workspace: {where}")
    for path in copied:
        print(f"  new   {path.name}")
    for path in kept:
        print(f"  kept  {path.name} (already there; never overwritten)")
    hint = f"  (from another folder: PAGEDSIM_WORKSPACE={where})"
    found = args.folder == Path(DEFAULT) or (named and where == Path(named).resolve())
    hint = "" if found else hint
    print(f"\nedit the files there, then run `pagedsim check 3.1` from {where.parent}{hint}")
    return 0
