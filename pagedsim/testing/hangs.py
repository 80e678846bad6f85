"""Shrinking a hang: Hypothesis stops at the first call that does not return, so the kit
shrinks that script itself, greedily and within a time budget (docs/testing-kit.md).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from ..errors import OutOfBlocks
from ..manager import KVCacheManager
from .contract import Hung, hung, time_limit

# makes the manager under test: factory(num_gpu_blocks, block_size)
Factory = Callable[[int, int], object]


def valid(script: list[str]) -> bool:
    """Every call is one the model accepts (or refuses for lack of blocks)."""
    scope = {"factory": lambda nb, bs: KVCacheManager(nb, bs, trace=False)}
    for line in script:
        try:
            exec(line, scope)  # noqa: S102 -- the kit's own script of contract calls
        except OutOfBlocks:
            pass
        except Exception:  # noqa: BLE001
            return False
    return True


def hangs(factory: Factory, script: list[str], seconds: float) -> bool:
    """Does replaying `script` (lines of Python on `m`) hang in its last line, and only there?"""
    scope = {"factory": factory}
    for i, line in enumerate(script):
        try:
            with time_limit(seconds, line, []):
                exec(line, scope)  # noqa: S102 -- the kit's own script of contract calls
        except Hung:
            return i == len(script) - 1
        except BaseException:  # noqa: BLE001 -- a shortened script may misuse ids: not a hang
            return False
    return False


def shrink_hang(
    factory: Factory, script: list[str], seconds: float, budget: float = 30.0
) -> list[str]:
    """The shortest script found within `budget` seconds that still hangs in the last call."""
    deadline = time.monotonic() + budget
    lines = list(script)

    def keep(candidate: list[str]) -> bool:
        return valid(candidate) and hangs(factory, candidate, seconds)

    i = len(lines) - 2  # never drop the factory line (0) or the hanging call (last)
    while i >= 1 and time.monotonic() < deadline:
        candidate = lines[:i] + lines[i + 1 :]
        if keep(candidate):
            lines = candidate
        i -= 1
    nb, bs = map(int, re.findall(r"\d+", lines[0]))
    for small_nb, small_bs in sorted((n, b) for n in (1, 2, 4, 8, 16) for b in (1, 2, 4, 8)):
        if time.monotonic() > deadline:
            break
        if (small_nb, small_bs) < (nb, bs) and small_nb <= nb and small_bs <= bs:
            candidate = [f"m = factory({small_nb}, {small_bs})"] + lines[1:]
            if keep(candidate):
                lines = candidate
                break
    return lines


def shrunk(exc: Hung, factory: Factory, call_timeout: float) -> Hung:
    """`exc` with its script shrunk (replays use a limit of at most one second per call)."""
    lines = shrink_hang(factory, exc.script, min(call_timeout, 1.0))
    return hung(lines[-1], call_timeout, lines)
