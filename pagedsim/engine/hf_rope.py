"""A checkpoint's rope fields, read as transformers 5 reads them: rope_theta and rope_scaling
(transformers 4) or rope_parameters (transformers 5, per layer type for Gemma 3). Each
rope_type rope.py computes has a reader (ROPE_READERS); any other is refused in one line.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .hf_families import DEFAULTS, MAX_POSITIONS
from .hf_json import CheckpointError, Json, Kind, field, short

RopeValue = float | bool | str | tuple[float, ...]
Scaling = dict[str, RopeValue]  # one rope_type's fields, as rope.py reads them
Rope = tuple[float, tuple[tuple[str, RopeValue], ...]]  # rope_theta, the scaling's pairs


def rope_source(raw: Json, path: Path) -> tuple[object, str]:
    """(the rope dict, its field name): a truthy rope_scaling replaces rope_parameters whole,
    as in transformers 5."""
    scaling = raw.get("rope_scaling")
    if scaling:
        if not isinstance(scaling, dict):
            raise CheckpointError(
                f"{path}: field rope_scaling must be an object, got {short(scaling)}"
            )
        return scaling, "rope_scaling"
    return raw.get("rope_parameters"), "rope_parameters"


def read_rope(raw: Json, path: Path, family: str, layer_kind: str) -> Rope:
    """(rope_theta, the scaling as sorted pairs): what ModelConfig takes, for `layer_kind`."""
    params, name = rope_source(raw, path)
    if isinstance(params, dict) and f"{layer_kind}_attention" in params:
        params, name = params[f"{layer_kind}_attention"], f"{name}.{layer_kind}_attention"
    elif isinstance(params, dict) and any(k.endswith("_attention") for k in params):
        params, name = params.get("full_attention"), f"{name}.full_attention"
    elif family == "gemma3" and layer_kind == "sliding":
        params = None  # a flat dict: the local rope is plain, at rope_local_base_freq
    if params is not None and not isinstance(params, dict):
        raise CheckpointError(f"{path}: field {name} must be an object, got {short(params)}")
    params = dict(params or {})  # a copy: Gemma 3's local rope_theta goes in
    if family == "gemma3" and layer_kind == "sliding" and "rope_theta" not in params:
        params["rope_theta"] = field(
            raw, path, "rope_local_base_freq", float, DEFAULTS[family]["rope_local_base_freq"]
        )
    theta = (
        field(params, path, "rope_theta", float)
        if "rope_theta" in params
        else field(raw, path, "rope_theta", float, DEFAULTS[family]["rope_theta"])
    )
    kind = params.get("rope_type", params.get("type", "default"))
    if family == "phi3" and kind in ("su", "yarn"):
        kind = "longrope"  # Phi3Config's reading of its early names
    reader = ROPE_READERS.get(kind) if isinstance(kind, str) else None
    if reader is None:
        raise CheckpointError(
            f"{path}: field {name}.rope_type is {short(kind)}; served: {', '.join(ROPE_READERS)}"
        )
    scaling = reader(_RopeFields(raw, params, path, name, family))
    if scaling:
        scaling["rope_type"] = kind
    return theta, tuple(sorted(scaling.items()))


@dataclass(frozen=True)
class _RopeFields:
    """The fields of one rope dict, each checked and named `{name}.{key}` when wrong."""

    raw: Json  # the whole config.json
    params: Json  # the rope dict
    path: Path
    name: str  # the rope dict's field name: rope_scaling, rope_parameters(.full_attention)
    family: str

    def number(self, key: str, kind: type[Kind], default: Kind | None = None) -> Kind:
        where = f"{self.name}.{key}"
        return field({where: self.params.get(key)}, self.path, where, kind, default)

    def max_positions(self) -> int:
        return field(
            self.raw, self.path, "max_position_embeddings", int, MAX_POSITIONS[self.family]
        )

    def original(self) -> int:
        """original_max_position_embeddings: Phi-3's top-level field (default 4096), else
        the dict's, else max_position_embeddings."""
        if self.family == "phi3":
            return field(self.raw, self.path, "original_max_position_embeddings", int, 4096)
        return self.number("original_max_position_embeddings", int, self.max_positions())

    def factors(self, key: str, count: int) -> tuple[float, ...]:
        f = self.params.get(key)
        if not (
            isinstance(f, list)
            and len(f) == count
            and all(
                isinstance(x, (int, float))
                and not isinstance(x, bool)
                and math.isfinite(x)
                and x > 0
                for x in f
            )
        ):
            raise CheckpointError(
                f"{self.path}: field {self.name}.{key} must be a list of {count} positive numbers"
            )
        return tuple(float(x) for x in f)


def _plain(f: _RopeFields) -> Scaling:
    return {}


def _linear(f: _RopeFields) -> Scaling:
    return dict(factor=f.number("factor", float))


def _llama3(f: _RopeFields) -> Scaling:
    keys = ("factor", "low_freq_factor", "high_freq_factor")
    out: Scaling = {k: f.number(k, float) for k in keys}
    out["original_max_position_embeddings"] = float(f.original())
    if out["low_freq_factor"] == out["high_freq_factor"]:
        raise CheckpointError(
            f"{f.path}: field {f.name}.low_freq_factor equals {f.name}.high_freq_factor"
        )
    return out


def _yarn(f: _RopeFields) -> Scaling:
    """YaRN: factor, original_max_position_embeddings, and the optional attention_factor,
    beta_fast (32), beta_slow (1), mscale, mscale_all_dim, truncate (true)."""
    out: Scaling = dict(
        factor=f.number("factor", float),
        original_max_position_embeddings=f.original(),
        beta_fast=f.number("beta_fast", float, 32.0) if f.params.get("beta_fast") else 32.0,
        beta_slow=f.number("beta_slow", float, 1.0) if f.params.get("beta_slow") else 1.0,
        truncate=f.params.get("truncate", True) is not False,
    )
    if f.params.get("attention_factor") is not None:
        out["attention_factor"] = f.number("attention_factor", float)
    for key in ("mscale", "mscale_all_dim"):
        if f.params.get(key):
            out[key] = f.number(key, float)
    return out


def _dynamic(f: _RopeFields) -> Scaling:
    """Dynamic NTK: factor, against max_position_embeddings (rope.py recomputes the base
    from the sequence length past it)."""
    return dict(factor=f.number("factor", float), max_position_embeddings=f.max_positions())


def _longrope(f: _RopeFields) -> Scaling:
    """Phi-3's longrope: short factors within original_max_position_embeddings, long
    factors past it, and the attention factor sqrt(1 + ln(factor) / ln(original))."""
    original = f.original()
    half = f.params.get("short_factor")
    count = len(half) if isinstance(half, list) else 0
    out: Scaling = dict(
        short_factor=f.factors("short_factor", count),
        long_factor=f.factors("long_factor", count),
        original_max_position_embeddings=original,
    )
    if count == 0:
        raise CheckpointError(f"{f.path}: field {f.name}.short_factor must be a non-empty list")
    factor = f.params.get("factor")
    if factor is None:  # the ratio of the two lengths (transformers 5's order)
        factor = f.max_positions() / original
    attention = f.params.get("attention_factor")
    if attention is None:
        factor = float(factor)
        attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    out["attention_factor"] = float(attention)
    return out


ROPE_READERS: dict[str, Callable[[_RopeFields], Scaling]] = {
    "default": _plain,
    "linear": _linear,
    "llama3": _llama3,
    "yarn": _yarn,
    "dynamic": _dynamic,
    "longrope": _longrope,
}
