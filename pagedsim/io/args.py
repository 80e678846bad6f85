"""What every `pagedsim` sub-command builds its parser from: `ArgParser` (usage errors in one
line on stderr, exit status 2), the argparse `type`s that check a value at parse time
(`int_in`, `float_in`, `writable_dir`), and `distinct_files`: no output overwrites an input.

A leaf: it imports only the standard library, so any command (the apps, the labs, the
engine, the testing kit, the course) can use it without importing the `pagedsim` command.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import sys
import tempfile
from collections.abc import Callable
from typing import NoReturn


class ArgParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, self._line(message))

    def refuse(self, message: str) -> int:
        """The same line for an error found after parsing, returned as status 2 (no exit), so
        that a command called as a function returns its status."""
        print(self._line(message), end="", file=sys.stderr)
        return 2

    def _line(self, message: str) -> str:
        return f"{self.prog}: error: {message} (see --help)\n"


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An argparse `type`: an integer in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in [{low:,}, {high:,}], got {value:,}")
        return value

    parse.__name__ = "integer"
    return parse


def float_in(low: float, high: float, *, open_low: bool = False) -> Callable[[str], float]:
    """An argparse `type`: a finite number in [low, high] (or (low, high] with open_low)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value > high or value < low or (open_low and value == low):
            raise argparse.ArgumentTypeError(
                f"must be a finite number in {'(' if open_low else '['}{low:g}, {high:g}], "
                f"got {text}"
            )
        return value

    parse.__name__ = "number"
    return parse


def writable_dir(path: str) -> pathlib.Path:
    """Make the folder if needed and prove a file can be written in it (before any work)."""
    folder = pathlib.Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=folder):  # OSError if the folder cannot take a new file
        pass
    return folder


def distinct_files(
    p: argparse.ArgumentParser,
    reads: dict[str, str | os.PathLike[str] | None],
    writes: dict[str, str | os.PathLike[str] | None],
) -> None:
    """p.error when a file the command would write ({flag: path}) is one it reads, or two of
    its outputs are one file: the input (or the other output) would be overwritten unsaid.
    A link or another spelling of the same file counts as that file."""
    outputs = [(flag, pathlib.Path(path)) for flag, path in writes.items() if path]
    inputs = [(flag, pathlib.Path(path)) for flag, path in reads.items() if path]
    for i, (flag, out) in enumerate(outputs):
        for other, path in inputs + outputs[:i]:
            if _same_file(out, path):
                p.error(f"{flag} {str(out)!r} is the file {other} names: choose another file")


def _same_file(a: pathlib.Path, b: pathlib.Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet: compare where they would be
        return a.resolve() == b.resolve()
