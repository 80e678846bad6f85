"""A reader that leaves early (`pagedsim tour | head`) is not an error.

The pipe is real: a subprocess writes into one whose reader has closed it, so every
print after the first block fails with EPIPE, on the top-level usage text as well as
inside a command and inside a command's argparse help.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("args", [["--help"], ["tour"], ["check", "--help"], ["lesson", "3.1"]])
def test_a_closed_pipe_exits_quietly(args: list[str]) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte
    env = dict(os.environ, PYTHONPATH=ROOT, MPLBACKEND="Agg")
    done = subprocess.run(
        [sys.executable, "-m", "pagedsim", *args],
        stdout=write,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
        timeout=600,
        check=False,
    )
    os.close(write)
    assert done.returncode == 0, done.stderr.decode()
    assert b"Traceback" not in done.stderr and b"error" not in done.stderr, done.stderr.decode()
