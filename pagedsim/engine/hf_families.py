"""The families pagedsim serves, and what each family's transformers config class fills in:
the tables of hf_families.toml, read once.

FAMILIES maps config.json's `architectures` to a family, REFUSED says why a family is out
of reach; DEFAULTS, MAX_POSITIONS and CLASSIC (the classic families' field names) are the
config classes' defaults; CLASSIC, SWITCHES and MOE hold the ModelConfig switches each
family sets. hf_config.py reads config.json through these tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..io import tables

Defaults = dict[str, Any]  # config.json fields transformers fills in when the file leaves them out


@dataclass(frozen=True)
class Classic:
    """A classic family's config fields: (field name, transformers' default) per quantity."""

    eps: tuple[str, float]  # the LayerNorms' epsilon
    act: tuple[str, str]  # the MLP's activation
    tie: bool  # tie_word_embeddings when absent
    share: float = 1.0  # the rotary share of a head when config.json gives none
    # sizes under their own field names: quantity -> (field, default); None: 4 x hidden
    sizes: tuple[tuple[str, tuple[str, int | None]], ...] = ()
    fixed: Defaults = field(default_factory=dict)  # ModelConfig switches the family always sets
    read: dict[str, tuple[str, Any]] = field(default_factory=dict)  # switch -> (field, default)
    parallel: tuple[str, str, bool] | None = None  # (block, the field that turns it on, default)


_TABLES = tables.beside(__file__)
FAMILIES: dict[str, str] = _TABLES["families"]
REFUSED: dict[str, str] = _TABLES["refused"]
MOE_BASE: dict[str, str] = _TABLES["moe_base"]
GEMMA = tuple(_TABLES["gemma"])
MAX_POSITIONS: dict[str, int] = _TABLES["max_positions"]
ACTIVATIONS: dict[str, str] = _TABLES["activations"]
CLASSIC_REFUSED: dict[str, Defaults] = _TABLES["classic_refused"]
SWITCHES: dict[str, Defaults] = _TABLES["switches"]  # a Llama-like family's fixed switches
MOE: dict[str, Defaults] = _TABLES["moe"]  # a mixture of experts' switches: fixed and read


def _defaults(family: str) -> Defaults:
    """A family's defaults, over those of the family (or base) it `inherit`s."""
    own = dict({**_TABLES["bases"], **_TABLES["defaults"]}[family])
    base = own.pop("inherit", None)
    return own if base is None else {**_defaults(base), **own}


DEFAULTS = {family: _defaults(family) for family in _TABLES["defaults"]}
CLASSIC = {
    family: Classic(
        eps=tuple(c["eps"]),
        act=tuple(c["act"]),
        tie=c["tie"],
        share=c.get("share", 1.0),
        sizes=tuple(
            (k, (f[0], f[1] if len(f) > 1 else None)) for k, f in c.get("sizes", {}).items()
        ),
        fixed=c.get("fixed", {}),
        read={k: tuple(f) for k, f in c.get("read", {}).items()},
        parallel=tuple(c["parallel"]) if "parallel" in c else None,
    )
    for family, c in _TABLES["classic"].items()
}
