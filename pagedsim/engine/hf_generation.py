"""generation_config.json, and the token ids that stop a sequence.

The fields the engine applies are read and checked: eos_token_id, repetition_penalty,
max_new_tokens, do_sample, temperature, top_p, top_k. A field that would change greedy
tokens and is not implemented is refused in one line naming it. config.json's own
eos_token_id counts only where generation_config.json gives none, as in transformers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .hf_json import CheckpointError, Json, field, read_json, short
from .model import ModelConfig

# generation_config.json fields that would change greedy tokens and are not implemented
UNSUPPORTED_GENERATION = {
    "no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "min_length": 0,
    "min_new_tokens": None,
    "sequence_bias": None,
    "encoder_repetition_penalty": 1.0,
    "num_beams": 1,
}
FLOATS = ("repetition_penalty", "temperature", "top_p")
# the generation_config.json fields the engine applies (eos_token_id, do_sample,
# repetition_penalty, temperature, top_p, max_new_tokens, top_k), each only if given
Generation = dict[str, Any]


def generation_config(path: Path, config: ModelConfig) -> Generation:
    """generation_config.json's fields, checked; one that is not implemented is refused."""
    raw = read_json(path)
    out: Generation = {}
    eos = eos_token_ids(raw, path, config)
    if eos is not None:
        out["eos_token_id"] = eos
    for name, default in UNSUPPORTED_GENERATION.items():
        value = raw.get(name, default)
        if value not in (default, None, [], 0) or (default == 1.0 and value != 1.0):
            raise CheckpointError(
                f"{path}: field {name} is {short(value)}; it is not "
                f"implemented (ignore the file with --generation-config "
                f"none)"
            )
    if raw.get("do_sample") is not None:
        out["do_sample"] = field(raw, path, "do_sample", bool)
    for name in FLOATS:
        if raw.get(name) is not None:
            out[name] = field(raw, path, name, float, positive=name != "temperature")
    if raw.get("max_new_tokens") is not None:
        out["max_new_tokens"] = field(raw, path, "max_new_tokens", int)
    if out.get("temperature", 0) < 0:
        raise CheckpointError(f"{path}: field temperature must be >= 0")
    if out.get("top_p", 1) > 1:
        raise CheckpointError(f"{path}: field top_p must be in (0, 1], got {out['top_p']}")
    if raw.get("top_k") is not None:
        out["top_k"] = field(raw, path, "top_k", int, positive=False)
        if out["top_k"] < 0:
            raise CheckpointError(f"{path}: field top_k must be >= 0")
    return out


def eos_token_ids(raw: Json, path: Path, config: ModelConfig) -> tuple[int, ...] | None:
    """raw's eos_token_id (one id or a list) as a tuple, every id below vocab_size; None
    when absent."""
    eos = raw.get("eos_token_id")
    if eos is None:
        return None
    ids = [eos] if isinstance(eos, int) and not isinstance(eos, bool) else eos
    if not (isinstance(ids, list) and all(type(t) is int and 0 <= t < config.vocab for t in ids)):
        raise CheckpointError(
            f"{path}: field eos_token_id must be token ids below vocab_size, got {short(eos)}"
        )
    return tuple(ids)


def config_eos(
    raw: Json, path: Path, config: ModelConfig, generation: Generation
) -> tuple[int, ...]:
    """config.json's eos_token_id, checked unless generation_config.json overrides it
    (transformers then uses the file's): an id outside the vocabulary can never be
    generated, so dropping it changes nothing."""
    if "eos_token_id" not in generation:
        return eos_token_ids(raw, path, config) or ()
    given = raw.get("eos_token_id")
    ids = given if isinstance(given, list) else [given]
    return tuple(t for t in ids if type(t) is int and 0 <= t < config.vocab)
