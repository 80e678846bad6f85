"""Where the GPU run writes: one folder (--out DIR, else $OUT, else ./out), because the lent
GPU machine returns only $OUT; `tee` copies everything printed to its log.txt. Imports no
numba: the log starts before the preflight.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

JSON, SUMMARY, LOG = "r.json", "r.md", "log.txt"


def out_dir(argv: list[str]) -> Path:
    """--out DIR (or --out=DIR) from argv, else $OUT, else ./out; created."""
    folder = os.environ.get("OUT") or "out"
    for i, arg in enumerate(argv):
        if arg == "--out" and i + 1 < len(argv):
            folder = argv[i + 1]
        elif arg.startswith("--out="):
            folder = arg.split("=", 1)[1]
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    return path


class _Tee:
    def __init__(self, stream, log):
        self.stream, self.log = stream, log

    def write(self, text):
        self.log.write(text)
        self.log.flush()
        return self.stream.write(text)

    def flush(self):
        self.log.flush()
        self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def tee(folder: Path) -> None:
    """Copy everything printed from now on to folder/log.txt (appended: a run that starts
    itself again after installing wheels keeps one log)."""
    log = open(folder / LOG, "a", buffering=1)  # noqa: SIM115  (open for the process's life)
    sys.stdout = _Tee(sys.stdout, log)
    sys.stderr = _Tee(sys.stderr, log)
