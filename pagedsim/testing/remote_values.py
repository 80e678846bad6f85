"""What a proxy may ask of the other side's objects, and what comes back into the caller's own.

Part of pagedsim/testing/remote.py (see its docstring for the protocol; what crosses by
copy is remote_codec.py's table). Invariants: a proxy forwards only the `SPECIAL`
methods, which the serving side runs through `OPERATORS`; lists, dicts, sets and arrays
(`MUTABLE`) passed to a call are copied back into the caller's own objects afterwards.
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

MUTABLE = (list, dict, set, bytearray, np.ndarray)  # copied back after a call
# The special methods a proxy forwards, and how the serving side runs each one.
OPERATORS: dict[str, Callable[..., object]] = {
    **{
        f"__{name}__": getattr(builtins, name)
        for name in "len iter next bool repr str hash int float".split()
    },
    "__contains__": lambda o, x: x in o,
    **{
        f"__{name}__": getattr(operator, name)
        for name in "getitem setitem delitem eq ne lt le gt ge index add sub mul neg".split()
    },
}
SPECIAL = frozenset(OPERATORS)


class ChildDied(Exception):
    """The submission's process ended (or was stopped) while the grader waited for it."""


class RemoteError(Exception):
    """A message from the submission's process that the grader refused to read."""


def _collect_back(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[int | str, Any]:
    back: dict[int | str, Any] = {i: a for i, a in enumerate(args) if isinstance(a, MUTABLE)}
    back.update({k: v for k, v in kwargs.items() if isinstance(v, MUTABLE)})
    return back


def _write_back(args: tuple[Any, ...], kwargs: dict[str, Any], back: dict[Any, Any] | None) -> None:
    """Apply the callee's changes to the caller's own lists, dicts, sets and arrays."""
    for key, new in (back or {}).items():
        old: Any = args[key] if isinstance(key, int) and key < len(args) else kwargs.get(key)
        if old is new or type(old) is not type(new):
            continue
        if isinstance(old, np.ndarray):
            if old.shape == new.shape:
                old[...] = new
        elif isinstance(old, (list, bytearray)):
            old[:] = new
        elif isinstance(old, (dict, set)):
            old.clear()
            old.update(new)
