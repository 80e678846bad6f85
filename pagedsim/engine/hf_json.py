"""A checkpoint's JSON files, read with a size limit, and their fields checked one by one.

`read_json` refuses a file over MAX_JSON_BYTES from its size alone, and one nested too
deeply (or holding an integer too long) to parse; `field` reads one number or switch as
transformers' config classes do (absent or null: the default). Every failure is a
`CheckpointError` naming file and field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, TypeVar

MAX_JSON_BYTES = 16 << 20  # a config, generation config or shard index larger is refused
Json = dict[str, Any]  # a JSON object: its values are whatever the file holds
Kind = TypeVar("Kind", bool, int, float)
WHAT = {bool: "true or false", int: "a positive integer", float: "a positive number"}


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be served; the message names file and field."""


def check_size(path: Path, limit: int, what: str) -> None:
    """Refuse a missing file, or `what` over `limit` bytes from its size alone."""
    if not path.is_file():
        raise CheckpointError(f"{path}: missing file")
    size = path.stat().st_size
    if size > limit:
        raise CheckpointError(f"{path}: {size:,} bytes; {what} over {limit:,} bytes is refused")


def read_json(path: Path) -> Json:
    check_size(path, MAX_JSON_BYTES, "a JSON file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:  # not UTF-8, not JSON, or an integer of over 4,300 digits
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise CheckpointError(f"{path}: JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def field(
    raw: Json,
    path: Path,
    name: str,
    kind: type[Kind],
    default: object = None,
    positive: bool = True,
) -> Kind:
    """raw[name] as `kind` (a finite number, integral for int; true or false for bool),
    positive unless told otherwise; absent or null: `default`, else it is missing."""
    value: Any = raw.get(name)  # any JSON value until checked below
    if value is None:  # absent or null: the default, as transformers' configs do
        if default is None:
            raise CheckpointError(f"{path}: field {name} is missing")
        value = default
    ok = (
        (type(value) is bool)
        if kind is bool
        else (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
            and (kind is float or float(value).is_integer())
        )
    )
    if not ok or (positive and kind is not bool and not value > 0):
        raise CheckpointError(f"{path}: field {name} must be {WHAT[kind]}, got {short(value)}")
    return kind(value)


def optional(raw: Json, path: Path, name: str, default: float | None = None) -> float | None:
    """A positive number, or None when absent or null (a soft-cap that is off)."""
    if raw.get(name, default) is None:
        return None
    return field(raw, path, name, float, default)


def short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
