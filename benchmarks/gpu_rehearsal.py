"""Rehearse the GPU run here, without a GPU, under the lent machine's limits.

    python benchmarks/gpu_rehearsal.py [--fake numba-cuda=0.20.1,python=3.10] [--keep DIR]

Runs COMMAND with --dry-run in a scratch copy of what the GPU machine receives and checks
it (benchmarks/README.md, "The rehearsal"): one line per check; exit 0 when all hold.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CARRY = ("benchmarks/wheels",)
CARRY_LIMIT_MIB = 64.0
COMMAND = "python benchmarks/gpu_attention.py --first-run"  # benchmarks/README.md's
FAKE = "numba-cuda=0.20.1,python=3.10"


def tracked() -> list[str]:
    done = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [p for p in done.stdout.decode().split("\0") if p and (ROOT / p).is_file()]


def copy_carried(dest: Path) -> float:
    """The tracked files and the carried paths into dest; their MiB."""
    size = 0
    for rel in tracked():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)
        size += (ROOT / rel).stat().st_size
    for rel in CARRY:
        if (ROOT / rel).exists():
            shutil.copytree(ROOT / rel, dest / rel)
            size += sum(p.stat().st_size for p in (ROOT / rel).rglob("*") if p.is_file())
    return size / 2**20


def snapshot(root: Path, skip: Path) -> dict:
    """{relative path: sha256} of every file under root but `skip` and __pycache__."""
    out = {}
    for path in root.rglob("*"):
        if path.is_file() and skip not in path.parents and "__pycache__" not in path.parts:
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def rehearse(work: Path, fake: str) -> list[tuple[str, bool]]:
    """(check, held) after the dry run of COMMAND in `work`."""
    mib = copy_carried(work)
    out = work / "out-rehearsal"
    before = snapshot(work, out)
    env = dict(os.environ, OUT=str(out), PAGEDSIM_FAKE_VERSIONS=fake, PYTHONPATH=str(work))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *COMMAND.split()[1:], "--dry-run"], cwd=work, env=env, text=True
    )
    seconds = time.perf_counter() - began
    changed = sorted(k for k, v in snapshot(work, out).items() if before.get(k) != v)
    log = (out / "log.txt").read_text() if (out / "log.txt").exists() else ""
    carried = f"carried {mib:.1f} MiB (tracked files + {', '.join(CARRY)})"
    ran = f"`{COMMAND} --dry-run` exited {done.returncode} after {seconds:.0f} s"
    outputs = all((out / n).exists() for n in ("r.json", "r.md", "log.txt"))
    return [
        (f"{carried} < {CARRY_LIMIT_MIB:.0f}", mib < CARRY_LIMIT_MIB),
        (ran, done.returncode == 0),
        (f"nothing written outside $OUT ({changed[:5] or 'none'})", not changed),
        ("$OUT holds r.json, r.md, log.txt", outputs),
        (f"the preflight rehearsed the install for {fake}", "rehearsing: " in log),
        ("the log ends with the summary table", "| target |" in log[-20000:]),
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fake", default=FAKE, help=f"PAGEDSIM_FAKE_VERSIONS (default {FAKE})")
    parser.add_argument("--keep", type=Path, help="rehearse in this (empty) folder and keep it")
    args = parser.parse_args(argv)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=False)
        checks = rehearse(args.keep, args.fake)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            checks = rehearse(Path(tmp), args.fake)
    for what, held in checks:
        print(f"{'ok  ' if held else 'FAIL'} {what}")
    return 0 if all(held for _, held in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
