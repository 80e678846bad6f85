"""Load a local Hugging Face checkpoint (the layout `save_pretrained` writes), offline.

    config.json                    LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM
    model.safetensors              or model.safetensors.index.json + its shards
    tokenizer.json                 read by Hugging Face's `tokenizers` library
    generation_config.json         optional: eos_token_id (stop tokens), as generate() does

Weights are read with the `safetensors` NumPy API and converted to float32, the
engine's NumPy dtype (bf16 through `ml_dtypes`). Every header is checked first; then
each tensor is read through its own short-lived `safe_open`, so neither the source
tensors nor the file's mapped pages pile up: peak memory is the float32 model plus one
tensor, measured at 1.06x a 51 MB fp32 checkpoint and 2.15x a 25 MB bf16 one
(tests/engine/test_hf_checkpoints.py holds it under 2.5x).
Nothing is fetched from a network: only files in DIR are opened.

Every failure is a `CheckpointError` (a ValueError) whose one-line message names the
file and the field or tensor: a missing file, a missing tensor, a shape mismatch, a
config that disagrees with the weights, an unsupported architecture or rope_scaling.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .model import ModelConfig, Transformer, tensor_shapes

ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                 "MistralForCausalLM": "mistral"}


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be served; the message names file and field."""


def _json(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f"{path}: missing file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _field(raw: dict, path: Path, name: str, kind, default=None, positive=True):
    value = raw.get(name)
    if value is None:  # absent or null: the default, as transformers' configs do
        if default is None:
            raise CheckpointError(f"{path}: field {name} is missing")
        value = default
    ok = (type(value) is bool) if kind is bool else (
        isinstance(value, (int, float)) and not isinstance(value, bool)
        and (kind is float or float(value).is_integer()))
    if not ok or (positive and kind is not bool and not value > 0):
        what = {bool: "true or false", int: "a positive integer", float: "a positive number"}
        raise CheckpointError(f"{path}: field {name} must be {what[kind]}, got {value!r}")
    return kind(value)


def _rope_theta(raw: dict, path: Path) -> float:
    """rope_theta, refusing any rope scaling (transformers 4: rope_scaling; 5: rope_parameters)."""
    scaling = raw.get("rope_scaling")
    params = raw.get("rope_parameters")
    for name, value in (("rope_scaling", scaling), ("rope_parameters", params)):
        if value is None:
            continue
        if not isinstance(value, dict):
            raise CheckpointError(f"{path}: field {name} must be an object, got {value!r}")
        kind = value.get("rope_type", value.get("type", "default"))
        if kind != "default":
            raise CheckpointError(f"{path}: field {name} has rope_type {kind!r}; only 'default' "
                                  f"rotary embeddings are supported")
    if params is not None and "rope_theta" in params:
        return _field(params, path, "rope_theta", float)
    return _field(raw, path, "rope_theta", float, 10000.0)


def load_config(directory) -> tuple[ModelConfig, dict]:
    """(ModelConfig, info): info holds architecture, stop token ids, dtype and max length."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: no such checkpoint directory")
    path = directory / "config.json"
    raw = _json(path)
    archs = raw.get("architectures")
    if not (isinstance(archs, list) and len(archs) == 1 and archs[0] in ARCHITECTURES):
        raise CheckpointError(f"{path}: field architectures is {archs!r}; supported: "
                              f"{', '.join(ARCHITECTURES)}")
    family = ARCHITECTURES[archs[0]]
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise CheckpointError(f"{path}: field hidden_act is {act!r}; only 'silu' is supported")
    if raw.get("mlp_bias", False):
        raise CheckpointError(f"{path}: field mlp_bias is true; MLP biases are not supported")
    heads = _field(raw, path, "num_attention_heads", int)
    hidden = _field(raw, path, "hidden_size", int)
    head_dim = raw.get("head_dim")
    head_dim = hidden // heads if head_dim is None else _field(raw, path, "head_dim", int)
    window = None
    if family == "mistral" or raw.get("use_sliding_window", False):
        window = raw.get("sliding_window")
        window = None if window is None else _field(raw, path, "sliding_window", int)
    bias = family == "qwen2" or _field(raw, path, "attention_bias", bool, False)
    try:
        config = ModelConfig(
            vocab=_field(raw, path, "vocab_size", int),
            layers=_field(raw, path, "num_hidden_layers", int),
            heads=heads, kv_heads=_field(raw, path, "num_key_value_heads", int, heads),
            head_dim=head_dim, hidden=hidden, mlp=_field(raw, path, "intermediate_size", int),
            rope_base=_rope_theta(raw, path),
            rms_eps=_field(raw, path, "rms_norm_eps", float, 1e-6),
            tie_embeddings=_field(raw, path, "tie_word_embeddings", bool, False),
            qkv_bias=bias, o_bias=bias and family != "qwen2", sliding_window=window)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: {e}") from None
    gen = directory / "generation_config.json"
    source = _json(gen) if gen.is_file() else raw
    eos = source.get("eos_token_id")
    eos = [] if eos is None else [eos] if isinstance(eos, int) else eos
    if not (isinstance(eos, list) and all(type(t) is int and 0 <= t < config.vocab for t in eos)):
        raise CheckpointError(f"{gen if gen.is_file() else path}: field eos_token_id must be "
                              f"token ids below vocab_size, got {source.get('eos_token_id')!r}")
    info = dict(architecture=archs[0], stop_token_ids=tuple(eos),
                dtype=raw.get("dtype", raw.get("torch_dtype")),
                max_position_embeddings=raw.get("max_position_embeddings"))
    return config, info


def weight_files(directory: Path) -> dict:
    """tensor name -> the safetensors file holding it (one file, or the shard index)."""
    single, index = directory / "model.safetensors", directory / "model.safetensors.index.json"
    if single.is_file():
        return {None: single}
    if not index.is_file():
        raise CheckpointError(f"{directory}: missing file model.safetensors "
                              f"(or model.safetensors.index.json)")
    weight_map = _json(index).get("weight_map")
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{index}: field weight_map must be an object")
    for shard in set(weight_map.values()):
        if not isinstance(shard, str) or Path(shard).name != shard:
            raise CheckpointError(f"{index}: weight_map names {shard!r}, not a file in {directory}")
        if not (directory / shard).is_file():
            raise CheckpointError(f"{directory / shard}: missing file (listed in {index.name})")
    return {name: directory / shard for name, shard in weight_map.items()}


def load_weights(directory, config: ModelConfig) -> dict:
    """Every tensor `tensor_shapes(config)` lists, float32, checked against the config."""
    import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy for safetensors)
    from safetensors import SafetensorError, safe_open
    directory = Path(directory)
    files = weight_files(directory)
    want = tensor_shapes(config)
    by_file: dict = {}
    for name in want:
        path = files.get(name, files.get(None))
        if path is None:
            raise CheckpointError(f"{directory / 'model.safetensors.index.json'}: missing tensor "
                                  f"{name}")
        by_file.setdefault(path, []).append(name)
    try:
        for path in dict.fromkeys(files.values()):  # headers only: check before loading
            with safe_open(str(path), framework="np") as f:
                _check_file(path, f, by_file.get(path, []), want, config)
        weights = {}
        for path, names in by_file.items():
            for name in names:  # one open per tensor: the file's mapped pages go each time
                with safe_open(str(path), framework="np") as f:
                    weights[name] = f.get_tensor(name).astype(np.float32, copy=False)
    except (SafetensorError, OSError, TypeError) as e:
        raise CheckpointError(f"{path}: cannot read safetensors ({e})") from None
    return weights


def _check_file(path: Path, f, names: list, want: dict, config: ModelConfig) -> None:
    present = set(f.keys())
    extra = sorted(k for k in present - set(want) if not k.endswith("inv_freq")
                   and not (k == "lm_head.weight" and config.tie_embeddings))
    if extra:
        raise CheckpointError(f"{path}: tensor {extra[0]} is not used by the model config.json "
                              f"describes ({len(extra)} such tensors)")
    for name in names:
        if name not in present:
            raise CheckpointError(f"{path}: missing tensor {name}")
        shape = tuple(f.get_slice(name).get_shape())
        if shape != want[name]:
            raise CheckpointError(f"{path}: tensor {name} has shape {shape} but config.json "
                                  f"implies {want[name]}")


def load_model(directory) -> Transformer:
    """The checkpoint in DIR as the engine's Transformer (float32 NumPy weights)."""
    config, info = load_config(directory)
    model = Transformer(config, load_weights(directory, config), name=str(directory))
    model.info = info
    return model


def load_tokenizer(directory):
    """DIR/tokenizer.json through Hugging Face's `tokenizers` library."""
    from tokenizers import Tokenizer
    path = Path(directory) / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError(f"{path}: missing file")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:  # the library raises its own Exception subclass
        raise CheckpointError(f"{path}: not a tokenizers file ({str(e).splitlines()[0]})") from None
