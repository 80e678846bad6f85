"""`pagedsim export-course DIR`: a copy of the project for students, without the answers.

It copies the tracked files (`git ls-files`; outside git, the project's folders without caches)
into DIR (new or empty), less LEAVE_OUT: the solutions, the mutant catalogue, the instructor's
tools and pages, and tests/. The checks stay, so `pip install .` then `pagedsim check 3.4a` work
in the copy (exported from a wheel, it gets a pyproject.toml written from the installed
metadata). Then it proves that no solution's bytes appear anywhere in DIR, and a Markdown link to
a page left out becomes plain text (course/export_links.py)."""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from pagedsim.io.args import ArgParser

from . import curriculum
from .export_links import drop_repo_only, unlink_missing

# what a student copy leaves out (fnmatch patterns): the answers, the instructor's tools and pages
LEAVE_OUT = (
    "course/ch03_kv_block/solutions/* course/ch03_kv_block/mutants.toml course/grade.py "
    "course/export.py course/export_gradescope.py course/mutation.py tests/* *instructor* "
    "*INSTRUCTOR* *mutant* COORD.md"
).split()
PROJECT_TOPS = "pagedsim course cuda_kernels benchmarks figures README.md pyproject.toml".split()
PACKAGES = ("pagedsim/", "course/", "cuda_kernels/")  # what code needs to run (grade's build)
SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", ".pytest_cache", ".hypothesis", "node_modules"}


def left_out(rel: str) -> bool:
    return any(fnmatch.fnmatch(rel, pattern) for pattern in LEAVE_OUT)


def project_files(root: Path) -> list[str]:
    """Repository-relative paths of the files a checkout holds (tracked ones under git)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True)
        files = [f for f in out.stdout.decode().split("\0") if f]
        if files:
            return sorted(f for f in files if (root / f).is_file())
    except (OSError, subprocess.CalledProcessError):
        pass
    # An installed copy (no git): only the project's own folders, never all of site-packages.
    tops = [root / name for name in PROJECT_TOPS if (root / name).exists()]
    return sorted(
        str(p.relative_to(root))
        for top in tops
        for p in ([top] if top.is_file() else top.rglob("*"))
        if p.is_file() and not SKIP_DIRS & set(p.relative_to(root).parts)
    )


def export(dest, root: Path = curriculum.REPO_ROOT, prefixes=None) -> list[str]:
    """Copy the student build into `dest` (only paths starting with one of `prefixes`, if given);
    returns the relative paths written."""
    dest = check_destination(dest, root)
    written = [
        rel
        for rel in project_files(root)
        if not left_out(rel) and (prefixes is None or rel.startswith(tuple(prefixes)))
    ]
    for rel in written:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
    if prefixes is None and "pyproject.toml" not in written:  # exported from an installed wheel
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "pyproject.toml").write_text(installed_pyproject(), encoding="utf-8")
        written.append("pyproject.toml")
    if prefixes is None:  # the README must not send a student to a page or test left out
        drop_repo_only(dest)
        unlink_missing(dest)
    leaks = answer_leaks(dest, root)
    if leaks:
        raise AssertionError(f"the export still holds solution text: {', '.join(leaks)}")
    return written


def check_destination(dest, root: Path = curriculum.REPO_ROOT) -> Path:
    """`dest` as a Path, or ValueError: an empty name, a folder inside (or holding) the project,
    or one that is not empty."""
    if not str(dest).strip():
        raise ValueError("the destination folder is empty: name a new folder")
    dest, here = Path(dest), Path(root).resolve()
    where = dest.resolve()
    if where == here or here in where.parents or where in here.parents:
        raise ValueError(
            f"{dest} is inside (or holds) the project being exported ({here}): "
            "choose a folder outside it"
        )
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"{dest} is a file: choose a new folder")
    if dest.exists() and any(dest.iterdir()):
        raise ValueError(f"{dest} is not empty: choose a new folder")
    return dest


def installed_pyproject(dist=None) -> str:
    """A pyproject.toml for a copy exported from an installed pagedsim (a wheel carries none):
    its name, version, dependencies (no extras) and commands."""
    if dist is None:
        dist = metadata.distribution("pagedsim")
    q = json.dumps  # a TOML basic string is written like a JSON string
    deps = [r.split(";")[0].strip() for r in dist.requires or () if "extra ==" not in r]
    groups = {"console_scripts": "[project.scripts]", "pytest11": "[project.entry-points.pytest11]"}
    entries = []
    for group, head in groups.items():
        eps = [f"{q(ep.name)} = {q(ep.value)}" for ep in dist.entry_points if ep.group == group]
        entries += [head, *eps, ""]
    return PYPROJECT.format(
        name=q(dist.metadata["Name"]),
        version=q(dist.version),
        python=q(dist.metadata.get("Requires-Python") or ">=3.10"),
        deps=", ".join(map(q, deps)),
        entries="\n".join(entries),
    )


PYPROJECT = """\
# Written by `pagedsim export-course` from the installed package (it carries no pyproject.toml).
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = {name}
version = {version}
requires-python = {python}
dependencies = [{deps}]

{entries}
[tool.setuptools.packages.find]
include = ["pagedsim*", "cuda_kernels*", "course*"]

[tool.setuptools.package-data]
course = ["**/*.md", "*.toml", "*.ini", "**/*.ipynb"]
"""


def answer_leaks(dest: Path, root: Path = curriculum.REPO_ROOT) -> list[str]:
    """Files under `dest` whose bytes equal a reference solution's (or the mutant catalogue's)."""
    answers = {p.read_bytes() for ex in curriculum.load() if (p := ex.path("solution")).is_file()}
    catalogue = root / "course/ch03_kv_block/mutants.toml"
    if catalogue.is_file():
        answers.add(catalogue.read_bytes())
    return sorted(
        str(p.relative_to(dest))
        for p in dest.rglob("*")
        if p.is_file() and p.read_bytes() in answers
    )


def main(argv: list[str]) -> int:
    p = ArgParser(prog="pagedsim export-course", description=__doc__.split("\n\n")[0])
    where = "where the student copy goes (a new or empty folder, outside the project)"
    p.add_argument("dir", help=where)
    dest = p.parse_args(argv).dir
    try:
        written = export(dest)
    except ValueError as e:
        p.error(str(e))
    print(f"wrote {len(written)} files to {dest} (no solutions, no mutant catalogue, no tests)")
    print(f"students: cd {dest} && pip install . && pagedsim check 3.1")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
