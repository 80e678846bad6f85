"""Tables kept as data: the TOML file beside a module (family defaults, tensor names,
presets, the tour's script, Chinese phrasebooks), read with the standard library's
tomllib (tomli on Python 3.10)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, a dependency on Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]


def beside(module_file: str) -> dict[str, Any]:
    """The TOML file named as `module_file` (a module's __file__) with .toml for .py."""
    text = Path(module_file).with_suffix(".toml").read_text(encoding="utf-8")
    table: dict[str, Any] = tomllib.loads(text)
    return table
