"""The CLI, table-driven: every bad invocation exits non-zero with ONE line on stderr,
never a traceback, and in bounded time; a byte-order mark is accepted."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TIME_LIMIT = 60  # seconds; every row finishes in a few


def run(args, cwd):
    env = {**os.environ, "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"}
    return subprocess.run(
        [sys.executable, "-m", "pagedsim.app.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT,
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    (d / "a_file").write_text("not a folder")
    (d / "empty.csv").write_text("")
    (d / "header.csv").write_text("prompt_len,output_len\n")
    (d / "huge.csv").write_text("prompt_len,output_len\n3000000000,5\n")
    (d / "binary.csv").write_bytes(b"\x00\xff\xfe\x80 junk")
    (d / "bom.csv").write_bytes(b"\xef\xbb\xbfprompt_len,output_len\r\n7,3\r\n")
    return d


ROWS = {  # name: (arguments, a word the message must contain)
    "sweep figure under a file": (
        ["sweep", "--trace", "bom.csv", "--figure", "a_file/x"],
        "a_file",
    ),
    "tour frames under a file": (["tour", "--draw", "a_file/x"], "a_file"),
    "figures under a file": (["figures", "--out", "a_file/x", "--only", "race_timeline"], "a_file"),
    "a billion requests": (["waste", "--num-requests", "1000000000"], "--num-requests"),
    "three billion tokens": (["waste", "--trace", "huge.csv"], "prompt_len"),
    "max-len nan": (["waste", "--max-len", "nan"], "--max-len"),
    "memory inf": (["waste", "--memory-tokens", "inf"], "--memory-tokens"),
    "block size 0": (["waste", "--block-size", "0"], "--block-size"),
    "empty trace": (["waste", "--trace", "empty.csv"], "empty file"),
    "header-only trace, waste": (["waste", "--trace", "header.csv"], "no requests"),
    "header-only trace, sweep": (["sweep", "--trace", "header.csv", "--figure", ""], "no requests"),
    "binary trace": (["waste", "--trace", "binary.csv"], "binary.csv"),
    "missing trace": (["waste", "--trace", "missing.csv"], "missing.csv"),
    "no command": ([], "usage"),
    "unknown command": (["frobnicate"], "frobnicate"),
}


@pytest.mark.parametrize("name", ROWS)
def test_a_bad_invocation_is_one_line_on_stderr_and_a_non_zero_exit(files, name):
    args, word = ROWS[name]
    got = run(args, files)
    assert got.returncode != 0
    assert "Traceback" not in got.stderr + got.stdout
    lines = got.stderr.strip().splitlines()
    assert (len(lines) == 1 or name == "no command") and word in got.stderr, got.stderr
    assert got.stdout == "", "nothing is printed before the refusal"


def test_a_trace_with_a_byte_order_mark_is_read_and_version_is_printed(files):
    got = run(["waste", "--trace", "bom.csv", "--json"], files)
    assert got.returncode == 0 and got.stderr == ""
    assert '"paged"' in got.stdout
    version = run(["--version"], files)
    assert version.returncode == 0 and version.stdout.startswith("pagedsim ")
