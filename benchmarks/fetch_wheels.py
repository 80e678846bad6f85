"""Download, here, the wheels the GPU run needs, for the GPU image's Python (3.12, x86-64).

    python benchmarks/fetch_wheels.py [--cuda 12|13] [--only numba-cuda,...] [--dest DIR]

The GPU machine has no network. When `gpu_preflight.py` finds its numba-cuda (or numba,
llvmlite) older than this checkout needs, the run installs these instead, offline:

    pip install --no-index --find-links benchmarks/wheels -r benchmarks/wheels/requirements.txt

What is downloaded: the exact versions this checkout is tested with, read from this
machine's environment (numba, numba-cuda, llvmlite, cuda-core, cuda-pathfinder,
packaging), and cuda-bindings of the CUDA major the GPU's driver serves (--cuda: 13 needs
a driver of CUDA 13, i.e. >= 580; 12 works with any CUDA 12 driver; default: the major
installed here). `pip download --only-binary=:all: --no-deps --python-version 3.12
--platform manylinux2014_x86_64` fetches each wheel for that interpreter whatever runs
this script. The folder is git-ignored (never commit wheels); requirements.txt in it pins
what was fetched. --only fetches a subset (all seven are 77 MiB, llvmlite alone 57 MiB:
when only numba-cuda is too old, `--only numba-cuda,cuda-bindings,cuda-core,cuda-pathfinder`
is 17 MiB).
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEST = ROOT / "benchmarks" / "wheels"
PINNED = ("numba", "numba-cuda", "llvmlite", "cuda-core", "cuda-pathfinder", "packaging")
BINDINGS_12 = "12.9.*"  # the last CUDA 12 series of cuda-bindings
PYTHON = "3.12"
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")


def requirements(cuda_major: int | None, only=None) -> list[str]:
    """Pinned requirement lines: this environment's versions, cuda-bindings of the CUDA
    major asked for; `only` (names) keeps a subset."""
    lines = [f"{name}=={metadata.version(name)}" for name in PINNED]
    here = metadata.version("cuda-bindings")
    major = cuda_major or int(here.split(".")[0])
    lines.append(
        f"cuda-bindings=={here}"
        if major == int(here.split(".")[0])
        else f"cuda-bindings=={BINDINGS_12}"
        if major == 12
        else f"cuda-bindings=={major}.*"
    )
    if only:
        unknown = set(only) - {line.split("==")[0] for line in lines}
        if unknown:
            raise SystemExit(f"fetch_wheels: --only names unknown packages {sorted(unknown)}")
        lines = [line for line in lines if line.split("==")[0] in only]
    return lines


def download_command(lines: list[str], dest: Path) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--only-binary=:all:",
        "--no-deps",
        "--python-version",
        PYTHON,
        "--implementation",
        "cp",
        "--dest",
        str(dest),
    ]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    return cmd + lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--cuda",
        type=int,
        choices=(12, 13),
        help="CUDA major of the GPU's driver (default: this machine's)",
    )
    parser.add_argument(
        "--only", help="comma-separated subset of: " + ", ".join((*PINNED, "cuda-bindings"))
    )
    parser.add_argument("--dest", type=Path, default=DEST)
    args = parser.parse_args(argv)
    lines = requirements(args.cuda, args.only.split(",") if args.only else None)
    args.dest.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(download_command(lines, args.dest))
    if done.returncode:
        print(f"fetch_wheels: pip download failed (exit {done.returncode})", file=sys.stderr)
        return done.returncode
    (args.dest / "requirements.txt").write_text("\n".join(lines) + "\n")
    wheels = sorted(p.name for p in args.dest.glob("*.whl"))
    size = sum(p.stat().st_size for p in args.dest.glob("*.whl")) / 2**20
    print(f"{len(wheels)} wheels, {size:.0f} MiB in {args.dest}:\n  " + "\n  ".join(wheels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
