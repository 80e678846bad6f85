"""Deprecated module aliases: `pagedsim.tour` and friends moved to `pagedsim.app` (and
`pagedsim.interleavings` to `pagedsim.labs`). Each shim calls `alias(__name__)`."""

from __future__ import annotations

import importlib
import sys
import warnings


def alias(old: str) -> None:
    """Make `old` the module it moved to, with a DeprecationWarning naming the new place."""
    from .app import MOVED

    new = MOVED[old]
    warnings.warn(f"{old} moved to {new}; the old name goes away in the next release",
                  DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)
