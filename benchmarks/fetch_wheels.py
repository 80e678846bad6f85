"""Download, here, the wheels the GPU run installs when the GPU image's numba-cuda is too old.

    python benchmarks/fetch_wheels.py [--python 3.10 --cuda 12] [--dest DIR]

benchmarks/README.md, "The wheels", says what a set holds and which Pythons the default
takes. Not numba nor llvmlite: every GPU image has numba >= 0.60, and llvmlite alone is 57 MiB.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEST = ROOT / "benchmarks" / "wheels"
PYTHONS = ("3.12", "3.10", "3.11", "3.13")  # in the order they are taken
BUDGET_MIB = 40.0  # the default fetch stops before the total would pass this
BINDINGS = {12: "cuda-bindings==12.9.*", 13: "cuda-bindings==13.*"}
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")


def wanted(python: str, cuda_major: int) -> list[str]:
    """The set's requirement lines: numba-cuda pinned to the tested version, its dependencies
    by range (the newest the Python supports)."""
    lines = [
        f"numba-cuda=={metadata.version('numba-cuda')}",
        BINDINGS[cuda_major],
        "cuda-core>=0.5.1,<2",
        "cuda-pathfinder>=1.4.2,<2",
    ]
    return lines + (["backports.strenum"] if python == "3.10" else [])


def download_command(lines: list[str], dest: Path, python: str) -> list[str]:
    cmd = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps"]
    cmd += ["--python-version", python, "--implementation", "cp", "--dest", str(dest)]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    return cmd + lines


def pins(dest: Path) -> list[str]:
    """name==version of every wheel in dest (what requirements.txt pins)."""
    out = []
    for wheel in sorted(dest.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        out.append(f"{name.replace('_', '-')}=={version}")
    return out


def mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*.whl")) / 2**20


def fetch(python: str, cuda_major: int, dest: Path) -> Path | None:
    """The set for one Python into dest/pyX.Y (replacing what was there); None when pip
    failed (it printed why)."""
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(download_command(wanted(python, cuda_major), Path(tmp), python))
        if done.returncode:
            print(f"fetch_wheels: pip download for Python {python} failed", file=sys.stderr)
            return None
        target = dest / f"py{python}"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for wheel in Path(tmp).glob("*.whl"):
            shutil.move(str(wheel), target / wheel.name)
    (target / "requirements.txt").write_text("\n".join(pins(target)) + "\n")
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python", action="append", help="X.Y, repeatable (default: PYTHONS)")
    parser.add_argument("--cuda", type=int, choices=(12, 13), default=12)
    parser.add_argument("--dest", type=Path, default=DEST)
    parser.add_argument("--budget-mib", type=float, default=BUDGET_MIB)
    args = parser.parse_args(argv)
    took, left = [], []
    for python in args.python or PYTHONS:
        if left:  # once one set does not fit, the later ones are not tried
            left.append(python)
            continue
        before = mib(args.dest) if args.dest.exists() else 0.0
        target = fetch(python, args.cuda, args.dest)
        if target is None:
            return 1
        if not args.python and mib(args.dest) > args.budget_mib:
            size = mib(target)
            shutil.rmtree(target)
            left.append(python)
            print(
                f"fetch_wheels: Python {python} left out: {before:.1f} + {size:.1f} MiB "
                f"would pass {args.budget_mib:.0f} MiB",
                file=sys.stderr,
            )
            continue
        took.append(python)
    print(
        f"fetch_wheels: took Python {', '.join(took)} for CUDA {args.cuda}, "
        f"{mib(args.dest):.1f} MiB in {args.dest}"
        + (f"; left out {', '.join(left)}" if left else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
