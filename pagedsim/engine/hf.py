"""Load a local Hugging Face checkpoint (the layout `save_pretrained` writes), offline.

    config.json                    Llama (2, 3.x), Qwen2, Mistral, Qwen3, Gemma, Gemma 2,
                                   Gemma 3 (text), Phi-3, OLMo-2, SmolLM3, Granite; the
                                   classic GPT-2, GPT-NeoX (Pythia), Phi-2, Falcon (not its
                                   new_decoder_architecture or alibi), StableLM, Starcoder2,
                                   Cohere (tensor names: layouts.py); the mixtures of
                                   experts Mixtral, Qwen2-MoE, OLMoE, Granite-MoE (moe.py)
    model.safetensors              or model.safetensors.index.json + its shards, or (with
                                   torch installed) pytorch_model*.bin, read through
                                   torch.load(weights_only=True)
    tokenizer.json                 read by Hugging Face's `tokenizers` library
    generation_config.json         optional: eos_token_id, repetition_penalty,
                                   max_new_tokens, do_sample, temperature, top_p, top_k

config.json is read as each family's transformers config class reads it: its defaults
for absent fields, rope_theta + rope_scaling (transformers 4) or rope_parameters
(transformers 5, per layer type for Gemma 3) -- a non-empty rope_scaling beside
rope_parameters replaces it, as transformers 5 does -- the family's layer pattern
(layer_types, or Gemma 2's alternation, Gemma 3's sliding_window_pattern, Qwen's
max_window_layers), and the family's switches in model.py. Every rope_type of rope.py is
served (default, linear, llama3, yarn, dynamic, longrope). A field that cannot be served
(another rope_type, mlp_bias, an unknown activation, a generation setting that would
change greedy tokens and is not implemented) is refused in one line naming it.

Weights are read with the `safetensors` NumPy API and converted to float32, the
engine's NumPy dtype (bf16 through `ml_dtypes`). Every header is checked first --
dtypes (floats only), the layer count against the layers the files hold (before any
table of names is built), names and shapes -- then each tensor is read through its own
short-lived `safe_open`, so neither the source tensors nor the file's mapped pages pile
up: peak memory is the float32 model plus about one layer (model.py re-lays each layer's
projections, fusing q, k, v and gate, up, releasing the loaded ones as it goes);
tests/engine/test_hf_checkpoints.py holds a bf16 load under 2.5x its file size. JSON
files over MAX_JSON_BYTES (tokenizer.json: MAX_TOKENIZER_BYTES), or nested too deeply to
parse, are refused, the size checked before a byte is read.
Nothing is fetched from a network: only files in DIR are opened.

Every failure is a `CheckpointError` (a ValueError) whose one-line message names the
file and the field or tensor.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from .layouts import convert, layer_prefix, tensor_map
from .model import MAX_LAYERS, ModelConfig, Transformer

# architecture -> family; each family's defaults are its transformers config class's
FAMILIES = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "MistralForCausalLM": "mistral",
    "Qwen3ForCausalLM": "qwen3",
    "GemmaForCausalLM": "gemma",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3",
    "Phi3ForCausalLM": "phi3",
    "Olmo2ForCausalLM": "olmo2",
    "SmolLM3ForCausalLM": "smollm3",
    "GraniteForCausalLM": "granite",
    "GPT2LMHeadModel": "gpt2",
    "GPTNeoXForCausalLM": "gpt_neox",
    "PhiForCausalLM": "phi",
    "FalconForCausalLM": "falcon",
    "StableLmForCausalLM": "stablelm",
    "Starcoder2ForCausalLM": "starcoder2",
    "CohereForCausalLM": "cohere",
    "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "OlmoeForCausalLM": "olmoe",
    "GraniteMoeForCausalLM": "granitemoe",
}
# architectures refused with the reason (a family out of reach is never served approximately)
REFUSED = {
    "DeepseekV2ForCausalLM": "multi-head latent attention (MLA) is not served: its cache "
    "holds one latent of kv_lora_rank + qk_rope_head_dim values per token and layer (vLLM's "
    "MLA page: block_size x 576 values), which the engine's K/V blocks and kernels do not "
    "model, and an approximation would not be DeepSeek's output",
    "DeepseekV3ForCausalLM": "multi-head latent attention (MLA) is not served",
    "Llama4ForCausalLM": "Llama 4's chunked attention and no-rope layers are not served",
}
# a mixture-of-experts family reads its attention as its dense relative does
MOE_BASE = {"mixtral": "mistral", "qwen2_moe": "qwen2", "olmoe": "olmo2", "granitemoe": "granite"}
ARCHITECTURES = tuple(FAMILIES)
GEMMA = ("gemma", "gemma2", "gemma3")
DEFAULTS = {  # config fields transformers fills in when config.json leaves them out
    "llama": dict(
        rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, hidden_act="silu"
    ),
    "qwen2": dict(
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        hidden_act="silu",
        sliding_window=4096,
    ),
    "mistral": dict(
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        hidden_act="silu",
        sliding_window=4096,
    ),
    "qwen3": dict(
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        hidden_act="silu",
        head_dim=128,
        sliding_window=4096,
    ),
    "gemma": dict(
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        hidden_act="gelu_pytorch_tanh",
        head_dim=256,
    ),  # hidden_activation unread
    "gemma2": dict(
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        hidden_activation="gelu_pytorch_tanh",
        head_dim=256,
        query_pre_attn_scalar=256,
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
        sliding_window=4096,
    ),
    "gemma3": dict(
        rms_norm_eps=1e-6,
        rope_theta=1_000_000.0,
        tie_word_embeddings=True,
        hidden_activation="gelu_pytorch_tanh",
        head_dim=256,
        query_pre_attn_scalar=256,
        sliding_window=4096,
        sliding_window_pattern=6,
        rope_local_base_freq=10000.0,
    ),
    "phi3": dict(
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, hidden_act="silu"
    ),
    "olmo2": dict(
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, hidden_act="silu"
    ),
    "smollm3": dict(
        rms_norm_eps=1e-6,
        rope_theta=2_000_000.0,
        tie_word_embeddings=True,
        hidden_act="silu",
        no_rope_layer_interval=4,
    ),
    "granite": dict(
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        hidden_act="silu",
        embedding_multiplier=1.0,
        attention_multiplier=1.0,
        residual_multiplier=1.0,
        logits_scaling=1.0,
    ),
}
MAX_POSITIONS = {  # max_position_embeddings when config.json leaves it out
    "llama": 2048,
    "qwen2": 32768,
    "mistral": 131072,
    "qwen3": 32768,
    "gemma": 8192,
    "gemma2": 8192,
    "gemma3": 131072,
    "phi3": 4096,
    "olmo2": 2048,
    "smollm3": 32768,
    "granite": 2048,
    "gpt_neox": 2048,
    "phi": 2048,
    "falcon": 2048,
    "stablelm": 4096,
    "starcoder2": 4096,
    "cohere": 8192,
    "mixtral": 131072,
    "qwen2_moe": 32768,
    "olmoe": 4096,
    "granitemoe": 2048,
}
DEFAULTS.update(
    mixtral={**DEFAULTS["mistral"], "sliding_window": None},
    qwen2_moe=DEFAULTS["qwen2"],
    olmoe=DEFAULTS["olmo2"],
    granitemoe=DEFAULTS["granite"],
)
DEFAULTS.update(
    {
        family: dict(rope_theta=theta)
        for family, theta in (
            ("gpt_neox", 10000.0),
            ("phi", 10000.0),
            ("falcon", 10000.0),
            ("stablelm", 10000.0),
            ("starcoder2", 10000.0),
            ("cohere", 500000.0),
        )
    }
)
ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu": "gelu",
}
MAX_JSON_BYTES = 16 << 20  # a config, generation config or shard index larger is refused
MAX_TOKENIZER_BYTES = 64 << 20  # the largest released tokenizer.json (Gemma 3) is 33 MB
LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}
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


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be served; the message names file and field."""


def read_json(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f"{path}: missing file")
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise CheckpointError(
            f"{path}: {size:,} bytes; a JSON file over {MAX_JSON_BYTES:,} bytes is refused"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise CheckpointError(f"{path}: JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _field(raw: dict, path: Path, name: str, kind, default=None, positive=True):
    value = raw.get(name)
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
        what = {bool: "true or false", int: "a positive integer", float: "a positive number"}
        raise CheckpointError(f"{path}: field {name} must be {what[kind]}, got {_short(value)}")
    return kind(value)


def _optional(raw: dict, path: Path, name: str, default=None):
    """A positive number, or None when absent or null (a soft-cap that is off)."""
    if raw.get(name, default) is None:
        return None
    return _field(raw, path, name, float, default)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _rope_source(raw: dict, path: Path) -> tuple:
    """(the rope dict, its field name), by transformers 5's rule: a truthy rope_scaling
    replaces rope_parameters whole (`rope_scaling or rope_parameters`); anything but an
    object there is refused, as transformers refuses it."""
    scaling = raw.get("rope_scaling")
    if scaling:
        if not isinstance(scaling, dict):
            raise CheckpointError(
                f"{path}: field rope_scaling must be an object, got {_short(scaling)}"
            )
        return scaling, "rope_scaling"
    return raw.get("rope_parameters"), "rope_parameters"


def _rope(raw: dict, path: Path, family: str, layer_kind: str) -> tuple:
    """(rope_theta, rope scaling as sorted pairs) for layers of `layer_kind`, read as
    transformers 5 reads rope_theta, rope_scaling and rope_parameters (per layer type for
    Gemma 3). Every rope_type rope.py lists is served; any other is refused."""
    params, name = _rope_source(raw, path)
    if isinstance(params, dict) and f"{layer_kind}_attention" in params:
        params, name = params[f"{layer_kind}_attention"], f"{name}.{layer_kind}_attention"
    elif isinstance(params, dict) and any(k.endswith("_attention") for k in params):
        params, name = params.get("full_attention"), f"{name}.full_attention"
    elif family == "gemma3" and layer_kind == "sliding":
        params = None  # a flat dict: the local rope is plain, at rope_local_base_freq
    if params is not None and not isinstance(params, dict):
        raise CheckpointError(f"{path}: field {name} must be an object, got {_short(params)}")
    params = dict(params or {})
    if family == "gemma3" and layer_kind == "sliding" and "rope_theta" not in params:
        params["rope_theta"] = _field(
            raw, path, "rope_local_base_freq", float, DEFAULTS[family]["rope_local_base_freq"]
        )
    theta = (
        _field(params, path, "rope_theta", float)
        if "rope_theta" in params
        else _field(raw, path, "rope_theta", float, DEFAULTS[family]["rope_theta"])
    )
    kind = params.get("rope_type", params.get("type", "default"))
    if family == "phi3" and kind in ("su", "yarn"):
        kind = "longrope"  # Phi3Config's reading of its early names
    reader = ROPE_READERS.get(kind) if isinstance(kind, str) else None
    if reader is None:
        raise CheckpointError(
            f"{path}: field {name}.rope_type is {_short(kind)}; served: {', '.join(ROPE_READERS)}"
        )
    scaling = reader(_RopeFields(raw, params, path, name, family))
    if scaling:
        scaling["rope_type"] = kind
    return theta, tuple(sorted(scaling.items()))


class _RopeFields:
    """The fields of one rope dict, each checked and named `{name}.{key}` when wrong."""

    def __init__(self, raw: dict, params: dict, path: Path, name: str, family: str):
        self.raw, self.params, self.path, self.name, self.family = raw, params, path, name, family

    def number(self, key: str, kind=float, default=None, positive=True):
        value = self.params.get(key)
        if value is None and default is None:
            raise CheckpointError(f"{self.path}: field {self.name}.{key} is missing")
        return _field(
            {f"{self.name}.{key}": value},
            self.path,
            f"{self.name}.{key}",
            kind,
            default,
            positive=positive,
        )

    def max_positions(self) -> int:
        return _field(
            self.raw, self.path, "max_position_embeddings", int, MAX_POSITIONS[self.family]
        )

    def original(self) -> int:
        """original_max_position_embeddings: Phi-3's top-level field (its config class
        default 4096) overrides the dict's, as Phi3Config does; other families read the
        dict, else max_position_embeddings."""
        if self.family == "phi3":
            return _field(self.raw, self.path, "original_max_position_embeddings", int, 4096)
        return self.number("original_max_position_embeddings", int, self.max_positions())

    def factors(self, key: str, count: int) -> tuple:
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


def _plain(f: _RopeFields) -> dict:
    return {}


def _linear(f: _RopeFields) -> dict:
    return dict(factor=f.number("factor"))


def _llama3(f: _RopeFields) -> dict:
    keys = ("factor", "low_freq_factor", "high_freq_factor")
    out = {k: f.number(k) for k in keys}
    out["original_max_position_embeddings"] = float(f.original())
    if out["low_freq_factor"] == out["high_freq_factor"]:
        raise CheckpointError(
            f"{f.path}: field {f.name}.low_freq_factor equals {f.name}.high_freq_factor"
        )
    return out


def _yarn(f: _RopeFields) -> dict:
    """YaRN: factor, original_max_position_embeddings, and the optional attention_factor,
    beta_fast (32), beta_slow (1), mscale, mscale_all_dim, truncate (true)."""
    out = dict(
        factor=f.number("factor"),
        original_max_position_embeddings=f.original(),
        beta_fast=f.number("beta_fast", float, 32.0) if f.params.get("beta_fast") else 32.0,
        beta_slow=f.number("beta_slow", float, 1.0) if f.params.get("beta_slow") else 1.0,
        truncate=f.params.get("truncate", True) is not False,
    )
    if f.params.get("attention_factor") is not None:
        out["attention_factor"] = f.number("attention_factor")
    for key in ("mscale", "mscale_all_dim"):
        if f.params.get(key):
            out[key] = f.number(key)
    return out


def _dynamic(f: _RopeFields) -> dict:
    """Dynamic NTK: factor, against max_position_embeddings (rope.py recomputes the base
    from the sequence length past it)."""
    return dict(factor=f.number("factor"), max_position_embeddings=f.max_positions())


def _longrope(f: _RopeFields) -> dict:
    """Phi-3's longrope: short factors within original_max_position_embeddings, long
    factors past it, and the attention factor sqrt(1 + ln(factor) / ln(original))."""
    original = f.original()
    half = f.params.get("short_factor")
    count = len(half) if isinstance(half, list) else 0
    out = dict(
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


ROPE_READERS = {
    "default": _plain,
    "linear": _linear,
    "llama3": _llama3,
    "yarn": _yarn,
    "dynamic": _dynamic,
    "longrope": _longrope,
}


def _layer_types(raw: dict, path: Path, family: str, layers: int, window) -> tuple:
    """("full" | "sliding") per layer, as the family's transformers config derives them."""
    given = raw.get("layer_types")
    if window is None:
        return ()
    if given is not None:
        if not (
            isinstance(given, list)
            and len(given) == layers
            and all(t in LAYER_TYPES for t in given)
        ):
            raise CheckpointError(
                f"{path}: field layer_types must list full_attention or "
                f"sliding_attention for each of the {layers} layers"
            )
        return tuple(LAYER_TYPES[t] for t in given)
    if family == "gemma2":
        return tuple("sliding" if (i + 1) % 2 else "full" for i in range(layers))
    if family == "gemma3":
        pattern = _field(
            raw, path, "sliding_window_pattern", int, DEFAULTS[family]["sliding_window_pattern"]
        )
        return tuple("sliding" if (i + 1) % pattern else "full" for i in range(layers))
    if family == "smollm3":  # the layers without rope slide
        no_rope = set(_no_rope(raw, path, layers))
        return tuple("sliding" if i in no_rope else "full" for i in range(layers))
    if family in ("qwen2", "qwen3"):
        first = _field(raw, path, "max_window_layers", int, layers, positive=False)
        return tuple("sliding" if i >= first else "full" for i in range(layers))
    return ("sliding",) * layers  # Mistral, Phi-3: every layer


def _window(raw: dict, path: Path, family: str):
    """sliding_window, or None where the family ignores it."""
    if family in ("llama", "gemma", "olmo2", "granite", "olmoe", "granitemoe"):
        return None
    if family in ("qwen2", "qwen3", "smollm3", "qwen2_moe") and not raw.get(
        "use_sliding_window", False
    ):
        return None
    if raw.get("sliding_window", DEFAULTS[family].get("sliding_window")) is None:
        return None
    return _field(raw, path, "sliding_window", int, DEFAULTS[family].get("sliding_window"))


def _activation(raw: dict, path: Path, family: str) -> str:
    """The MLP activation: Gemma 2/3 read hidden_activation; Gemma reads hidden_act, and
    its legacy "gelu" means the tanh approximation (transformers' GemmaConfig rewrites it)."""
    d = DEFAULTS[family]
    name = "hidden_activation" if family in ("gemma2", "gemma3") else "hidden_act"
    act = raw.get(name)
    if act is None:
        act = d.get(name, d.get("hidden_act"))
    if family == "gemma" and act == "gelu":
        act = "gelu_pytorch_tanh"
    if act not in ACTIVATIONS:
        raise CheckpointError(
            f"{path}: field {name} is {_short(act)}; served: {', '.join(ACTIVATIONS)}"
        )
    return act


def _no_rope(raw: dict, path: Path, layers: int) -> tuple:
    """SmolLM3: the layers whose no_rope_layers flag is 0 skip RoPE."""
    flags = raw.get("no_rope_layers")
    if flags is None:
        every = _field(
            raw, path, "no_rope_layer_interval", int, DEFAULTS["smollm3"]["no_rope_layer_interval"]
        )
        flags = [int((i + 1) % every != 0) for i in range(layers)]
    if not (
        isinstance(flags, list)
        and len(flags) == layers
        and all(f in (0, 1) and type(f) in (int, bool) for f in flags)
    ):
        raise CheckpointError(
            f"{path}: field no_rope_layers must hold 0 or 1 for each of the {layers} layers"
        )
    return tuple(i for i, f in enumerate(flags) if not f)


# the classic families: (config field, transformers' default) for each quantity model.py reads
CLASSIC: dict[str, dict] = {
    "gpt2": dict(
        vocab=("vocab_size", 50257),
        hidden=("n_embd", 768),
        layers=("n_layer", 12),
        heads=("n_head", 12),
        mlp=("n_inner", None),  # None: 4 x hidden
        eps=("layer_norm_epsilon", 1e-5),
        act=("activation_function", "gelu_new"),
        tie=True,
    ),
    "gpt_neox": dict(
        eps=("layer_norm_eps", 1e-5), act=("hidden_act", "gelu"), tie=False, share=0.25
    ),
    "phi": dict(eps=("layer_norm_eps", 1e-5), act=("hidden_act", "gelu_new"), tie=False, share=0.5),
    "falcon": dict(
        mlp=("ffn_hidden_size", None),
        eps=("layer_norm_epsilon", 1e-5),
        act=("activation", "gelu"),
        tie=True,
    ),
    "stablelm": dict(
        eps=("layer_norm_eps", 1e-5), act=("hidden_act", "silu"), tie=False, share=0.25
    ),
    "starcoder2": dict(
        eps=("norm_epsilon", 1e-5), act=("hidden_act", "gelu_pytorch_tanh"), tie=True
    ),
    "cohere": dict(eps=("layer_norm_eps", 1e-5), act=("hidden_act", "silu"), tie=True),
}
# switches a classic checkpoint may set that change the forward pass and are not served
CLASSIC_REFUSED = {
    "gpt2": {"scale_attn_by_inverse_layer_idx": False, "add_cross_attention": False},
    "phi": {"qk_layernorm": False},
    "falcon": {"alibi": False, "new_decoder_architecture": False},
    "stablelm": {"qk_layernorm": False},
    "cohere": {"use_qk_norm": False},
}


def _classic_switches(raw: dict, path: Path, family: str) -> dict:
    """The ModelConfig switches of GPT-2, GPT-NeoX, Phi-2, Falcon, StableLM, Starcoder2 and
    Cohere, read from their config fields with their transformers defaults."""
    for name, default in CLASSIC_REFUSED.get(family, {}).items():
        if raw.get(name, default) not in (default, None):
            raise CheckpointError(
                f"{path}: field {name} is {_short(raw[name])}; only {default} is served"
            )
    flag = {  # field, default
        "gpt_neox": ("use_parallel_residual", True),
        "falcon": ("parallel_attn", True),
        "stablelm": ("use_parallel_residual", False),
    }.get(family)
    parallel = {"phi": "shared", "cohere": "shared"}.get(family)
    if flag is not None and _field(raw, path, flag[0], bool, flag[1]):
        parallel = "two" if family == "gpt_neox" else "shared"
    bias = {
        "gpt2": True,
        "phi": True,
        "gpt_neox": _field(raw, path, "attention_bias", bool, True),
        "falcon": _field(raw, path, "bias", bool, False),
        "starcoder2": _field(raw, path, "use_bias", bool, True),
        "stablelm": False,
        "cohere": _field(raw, path, "attention_bias", bool, False),
    }[family]
    qkv_bias = bias or (family == "stablelm" and _field(raw, path, "use_qkv_bias", bool, False))
    return dict(
        norm="layer_nobias" if family == "cohere" else "layer",
        parallel=parallel,
        qkv_bias=qkv_bias,
        o_bias=bias,
        mlp_bias=bias and family not in ("cohere",),
        mlp_gated=family in ("stablelm", "cohere"),
        lm_head_bias=family == "phi",
        rope_interleaved=family == "cohere",
        logit_multiplier=_field(raw, path, "logit_scale", float, 0.0625)
        if family == "cohere"
        else 1.0,
    )


def _classic_config(raw: dict, path: Path, family: str) -> ModelConfig:
    """A classic family's ModelConfig: LayerNorms, parallel blocks, learned or partial rope."""
    spec = CLASSIC[family]
    names = dict(
        vocab=("vocab_size", None),
        hidden=("hidden_size", None),
        layers=("num_hidden_layers", None),
        heads=("num_attention_heads", None),
        mlp=("intermediate_size", None),
    )
    names.update({k: v for k, v in spec.items() if k in names})
    sizes = {k: _field(raw, path, f, int, d) for k, (f, d) in names.items() if k != "mlp"}
    f, d = names["mlp"]
    sizes["mlp"] = (
        4 * sizes["hidden"] if raw.get(f) is None and d is None else _field(raw, path, f, int, d)
    )
    if sizes["layers"] > MAX_LAYERS:
        raise CheckpointError(
            f"{path}: field num_hidden_layers is {sizes['layers']}; at most {MAX_LAYERS} are served"
        )
    act_field, act_default = spec["act"]
    act = raw.get(act_field) or act_default
    if act not in ACTIVATIONS:
        raise CheckpointError(
            f"{path}: field {act_field} is {_short(act)}; served: {', '.join(ACTIVATIONS)}"
        )
    heads, hidden = sizes["heads"], sizes["hidden"]
    kv = heads
    if family == "falcon":
        kv = 1 if _field(raw, path, "multi_query", bool, True) else heads
    elif family in ("phi", "stablelm", "starcoder2", "cohere"):
        kv = _field(raw, path, "num_key_value_heads", int, heads)
    head_dim = hidden // heads
    window = None
    if family == "starcoder2" and raw.get("sliding_window") is not None:
        window = _field(raw, path, "sliding_window", int)
    learned = _field(raw, path, "n_positions", int, 1024) if family == "gpt2" else 0
    rotary, theta, scaling = None, 10000.0, ()
    if not learned:
        params, _ = _rope_source(raw, path)
        params = params if isinstance(params, dict) else {}
        share = raw.get("partial_rotary_factor", params.get("partial_rotary_factor"))
        share = raw.get("rotary_pct", spec.get("share", 1.0)) if share is None else share
        share = _field({"partial_rotary_factor": share}, path, "partial_rotary_factor", float)
        if share > 1:
            raise CheckpointError(f"{path}: field partial_rotary_factor must be <= 1, got {share}")
        rotary = int(head_dim * share) if share < 1 else None
        raw = (
            raw
            if "rope_theta" in raw or "rotary_emb_base" not in raw
            else {**raw, "rope_theta": raw["rotary_emb_base"]}
        )
        theta, scaling = _rope(raw, path, family, "full")
    unscaled = family == "gpt2" and not _field(raw, path, "scale_attn_weights", bool, True)
    try:
        return ModelConfig(
            **sizes,
            kv_heads=kv,
            head_dim=head_dim,
            rope_base=theta,
            rope_scaling=scaling,
            rms_eps=_field(raw, path, spec["eps"][0], float, spec["eps"][1]),
            tie_embeddings=_field(raw, path, "tie_word_embeddings", bool, spec["tie"]),
            sliding_window=window,
            act=ACTIVATIONS[act],
            rotary_dim=rotary,
            learned_positions=learned,
            attn_scale=1.0 if unscaled else None,  # GPT-2's scale_attn_weights false
            **_classic_switches(raw, path, family),
        )
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: {e}") from None


def _moe_fields(raw: dict, path: Path, family: str, layers: int) -> dict:
    """The mixture-of-experts switches (moe.py) of Mixtral, Qwen2-MoE, OLMoE, Granite-MoE."""
    if family not in MOE_BASE:
        return {}
    count = "num_local_experts" if family in ("mixtral", "granitemoe") else "num_experts"
    out = dict(
        experts=_field(
            raw, path, count, int, {"mixtral": 8, "qwen2_moe": 60, "olmoe": 64}.get(family, 8)
        ),
        experts_per_token=_field(
            raw, path, "num_experts_per_tok", int, {"qwen2_moe": 4, "olmoe": 8}.get(family, 2)
        ),
        router="topk_softmax" if family == "granitemoe" else "softmax_topk",
        norm_topk=family == "mixtral"
        or (family in ("qwen2_moe", "olmoe") and _field(raw, path, "norm_topk_prob", bool, False)),
        expert_mlp=_field(raw, path, "intermediate_size", int),
    )
    if family == "qwen2_moe":
        out["expert_mlp"] = _field(raw, path, "moe_intermediate_size", int, 1408)
        out["shared_mlp"] = _field(raw, path, "shared_expert_intermediate_size", int, 5632)
        step = _field(raw, path, "decoder_sparse_step", int, 1)
        dense = raw.get("mlp_only_layers") or []
        if not (isinstance(dense, list) and all(type(i) is int and 0 <= i < layers for i in dense)):
            raise CheckpointError(f"{path}: field mlp_only_layers must list layer indices")
        out["dense_layers"] = tuple(i for i in range(layers) if i in dense or (i + 1) % step != 0)
    if family == "olmoe" and raw.get("clip_qkv") is not None:
        raise CheckpointError(
            f"{path}: field clip_qkv is {_short(raw['clip_qkv'])}; only null is served"
        )
    return out


def _modern_refusals(raw: dict, path: Path, family: str):
    """Refuse what the Llama-like families may declare but pagedsim does not serve; the
    raw partial_rotary_factor (None when absent), which only Phi-3 may set."""
    if raw.get("use_bidirectional_attention"):
        raise CheckpointError(
            f"{path}: field use_bidirectional_attention is true; only causal attention is served"
        )
    if raw.get("mlp_bias", False):
        raise CheckpointError(f"{path}: field mlp_bias is true; MLP biases are not supported")
    rope_params: dict = (
        raw["rope_parameters"] if isinstance(raw.get("rope_parameters"), dict) else {}
    )
    share_raw = raw.get("partial_rotary_factor", rope_params.get("partial_rotary_factor"))
    if share_raw not in (None, 1, 1.0) and family != "phi3":
        raise CheckpointError(
            f"{path}: field partial_rotary_factor is {_short(share_raw)}; "
            f"only Phi-3 rotates part of a head"
        )
    return share_raw


def _modern_scales(raw: dict, path: Path, family: str, hidden: int) -> dict:
    """The multipliers and soft-caps: Gemma's embedding scale, query_pre_attn_scalar and
    soft-caps, Granite's embedding, attention, residual and logit multipliers."""
    d, granite = DEFAULTS[family], MOE_BASE.get(family, family) == "granite"
    scale = None
    if family in ("gemma2", "gemma3"):
        scale = (
            _field(raw, path, "query_pre_attn_scalar", float, d["query_pre_attn_scalar"]) ** -0.5
        )
    elif granite:
        scale = _field(raw, path, "attention_multiplier", float, d["attention_multiplier"])
    embed = _field(raw, path, "embedding_multiplier", float, 1.0) if granite else 1.0
    return dict(
        embed_scale=float(np.float32(hidden**0.5)) if family in GEMMA else embed,
        attn_scale=scale,
        attn_softcap=_optional(
            raw, path, "attn_logit_softcapping", d.get("attn_logit_softcapping")
        ),
        final_softcap=_optional(
            raw, path, "final_logit_softcapping", d.get("final_logit_softcapping")
        ),
        residual_scale=_field(raw, path, "residual_multiplier", float, 1.0) if granite else 1.0,
        logit_scale=_field(raw, path, "logits_scaling", float, 1.0) if granite else 1.0,
    )


def _modern_config(raw: dict, path: Path, family: str) -> ModelConfig:
    """The Llama-like families' ModelConfig (RMSNorm, gated MLP, rope)."""
    d = DEFAULTS[family]
    act = _activation(raw, path, family)
    base = MOE_BASE.get(family, family)
    share_raw = _modern_refusals(raw, path, family)
    layers = _field(raw, path, "num_hidden_layers", int)
    if layers > MAX_LAYERS:
        raise CheckpointError(
            f"{path}: field num_hidden_layers is {layers}; at most {MAX_LAYERS} layers are served"
        )
    heads = _field(raw, path, "num_attention_heads", int)
    hidden = _field(raw, path, "hidden_size", int)
    head_dim = raw.get("head_dim", d.get("head_dim"))
    head_dim = (
        hidden // heads
        if head_dim is None
        else _field(raw, path, "head_dim", int, d.get("head_dim"))
    )
    rotary = None
    if share_raw is not None:
        share = _field({"partial_rotary_factor": share_raw}, path, "partial_rotary_factor", float)
        if share > 1:
            raise CheckpointError(f"{path}: field partial_rotary_factor must be <= 1, got {share}")
        rotary = int(head_dim * share) if share < 1 else None
    window = _window(raw, path, family)
    types = _layer_types(raw, path, base, layers, window)
    if types and "sliding" not in types:
        window, types = None, ()
    bias = (
        _field(raw, path, "qkv_bias", bool, True)
        if family == "qwen2_moe"
        else family == "qwen2"
        or (family != "phi3" and _field(raw, path, "attention_bias", bool, False))
    )
    theta, scaling = _rope(raw, path, family, "full")
    local = None
    if family == "gemma3":
        local, local_scaling = _rope(raw, path, family, "sliding")
        if local_scaling:
            raise CheckpointError(
                f"{path}: field rope_parameters.sliding_attention scales "
                f"the local rope; only a plain local rope is served"
            )
    no_rope = _no_rope(raw, path, layers) if family == "smollm3" else ()
    scales = _modern_scales(raw, path, family, hidden)
    try:
        config = ModelConfig(
            vocab=_field(raw, path, "vocab_size", int),
            layers=layers,
            heads=heads,
            kv_heads=_field(raw, path, "num_key_value_heads", int, heads),
            head_dim=head_dim,
            hidden=hidden,
            mlp=_field(raw, path, "intermediate_size", int),
            rope_base=theta,
            rope_scaling=scaling,
            local_rope_base=local,
            rms_eps=_field(raw, path, "rms_norm_eps", float, d["rms_norm_eps"]),
            tie_embeddings=_field(raw, path, "tie_word_embeddings", bool, d["tie_word_embeddings"]),
            qkv_bias=bias,
            o_bias=bias and base != "qwen2",
            sliding_window=window,
            layer_types=types,
            act=ACTIVATIONS[act],
            no_rope_layers=no_rope,
            rotary_dim=rotary,
            fused=family == "phi3",
            rope_switch_recomputes=family == "phi3",
            **_moe_fields(raw, path, family, layers),
            norm_offset=1 if family in GEMMA else 0,
            norm_layout={"gemma2": "sandwich", "gemma3": "sandwich", "olmo2": "post"}.get(
                family, "pre"
            ),
            qk_norm={"qwen3": "head", "gemma3": "head", "olmo2": "all", "olmoe": "all"}.get(family),
            **scales,
        )
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: {e}") from None
    return config


def load_config(directory) -> tuple[ModelConfig, dict]:
    """(ModelConfig, info): info holds architecture, the generation config, dtype and max length."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: no such checkpoint directory")
    path = directory / "config.json"
    raw = read_json(path)
    archs = raw.get("architectures")
    if isinstance(archs, list) and len(archs) == 1 and archs[0] in REFUSED:
        raise CheckpointError(f"{path}: field architectures is {archs[0]}: {REFUSED[archs[0]]}")
    if not (isinstance(archs, list) and len(archs) == 1 and archs[0] in FAMILIES):
        raise CheckpointError(
            f"{path}: field architectures is {_short(archs)}; supported: {', '.join(FAMILIES)}"
        )
    family = FAMILIES[archs[0]]
    reader = _classic_config if family in CLASSIC else _modern_config
    config = reader(raw, path, family)
    gen = directory / "generation_config.json"
    generation = generation_config(gen, config) if gen.is_file() else {}
    eos = _config_eos(raw, path, config, generation)
    info = dict(
        architecture=archs[0],
        family=family,
        config_eos_token_ids=eos,
        stop_token_ids=generation.get("eos_token_id", eos),
        generation=generation,
        dtype=raw.get("dtype", raw.get("torch_dtype")),
        max_position_embeddings=raw.get("max_position_embeddings"),
    )
    return config, info


def _config_eos(raw: dict, path: Path, config: ModelConfig, generation: dict) -> tuple:
    """config.json's eos_token_id, checked unless generation_config.json overrides it
    (transformers then uses the file's): an id outside the vocabulary can never be
    generated, so dropping it changes nothing."""
    if "eos_token_id" not in generation:
        return generation_config(path, config, only=("eos_token_id",)).get("eos_token_id", ())
    given = raw.get("eos_token_id")
    ids = given if isinstance(given, list) else [given]
    return tuple(t for t in ids if type(t) is int and 0 <= t < config.vocab)


def generation_config(path: Path, config: ModelConfig, only=None) -> dict:
    """The generation_config.json fields the engine applies, checked: eos_token_id (a
    tuple), repetition_penalty, max_new_tokens, do_sample, temperature, top_p, top_k.
    A field that would change greedy tokens and is not implemented is refused."""
    raw = read_json(path)
    out: dict = {}
    eos = raw.get("eos_token_id")
    if eos is not None:
        ids = [eos] if isinstance(eos, int) and not isinstance(eos, bool) else eos
        if not (
            isinstance(ids, list) and all(type(t) is int and 0 <= t < config.vocab for t in ids)
        ):
            raise CheckpointError(
                f"{path}: field eos_token_id must be token ids below vocab_size, got {_short(eos)}"
            )
        out["eos_token_id"] = tuple(ids)
    if only is not None:
        return out
    for name, default in UNSUPPORTED_GENERATION.items():
        value = raw.get(name, default)
        if value not in (default, None, [], 0) or (default == 1.0 and value != 1.0):
            raise CheckpointError(
                f"{path}: field {name} is {_short(value)}; it is not "
                f"implemented (ignore the file with --generation-config "
                f"none)"
            )
    if raw.get("do_sample") is not None:
        out["do_sample"] = _field(raw, path, "do_sample", bool)
    for name, kind in (
        ("repetition_penalty", float),
        ("temperature", float),
        ("top_p", float),
        ("max_new_tokens", int),
    ):
        if raw.get(name) is not None:
            out[name] = _field(raw, path, name, kind, positive=name != "temperature")
    if raw.get("temperature") is not None and out["temperature"] < 0:
        raise CheckpointError(f"{path}: field temperature must be >= 0")
    if "top_p" in out and out["top_p"] > 1:
        raise CheckpointError(f"{path}: field top_p must be in (0, 1], got {out['top_p']}")
    if raw.get("top_k") is not None:
        out["top_k"] = _field(raw, path, "top_k", int, positive=False)
        if out["top_k"] < 0:
            raise CheckpointError(f"{path}: field top_k must be >= 0")
    return out


def weight_files(directory: Path) -> dict:
    """tensor name -> the safetensors file holding it (one file, or the shard index)."""
    single, index = directory / "model.safetensors", directory / "model.safetensors.index.json"
    if single.is_file():
        return {None: single}
    if not index.is_file():
        bins = sorted(directory.glob("pytorch_model*.bin"))
        if bins:
            return {None: bins}
        raise CheckpointError(
            f"{directory}: missing file model.safetensors (or model.safetensors.index.json)"
        )
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{index}: field weight_map must be an object")
    for shard in set(weight_map.values()):
        if not isinstance(shard, str) or Path(shard).name != shard:
            raise CheckpointError(
                f"{index}: weight_map names {_short(shard)}, not a file in {directory}"
            )
        if not (directory / shard).is_file():
            raise CheckpointError(f"{directory / shard}: missing file (listed in {index.name})")
    return {name: directory / shard for name, shard in weight_map.items()}


FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
# buffers some checkpoints save that the model recomputes (rope tables, GPT-2's causal mask)
IGNORED = ("inv_freq", "attn.bias", "attn.masked_bias")


def read_headers(files: dict) -> dict:
    """name -> (shape, dtype, file) from the safetensors headers alone (no tensor is read);
    every tensor must be a float."""
    from safetensors import SafetensorError, safe_open

    out: dict = {}
    for path in dict.fromkeys(files.values()):
        try:
            with safe_open(str(path), framework="np") as f:
                for name in f.keys():
                    piece = f.get_slice(name)
                    out[name] = (tuple(piece.get_shape()), piece.get_dtype(), path)
        except (SafetensorError, OSError, TypeError) as e:
            raise CheckpointError(f"{path}: cannot read safetensors ({e})") from None
    for name, (_, dtype, path) in out.items():
        if dtype not in FLOAT_DTYPES:
            raise CheckpointError(
                f"{path}: tensor {name} has dtype {dtype}; weights must be "
                f"floating point ({', '.join(FLOAT_DTYPES)})"
            )
    return out


def check_sizes(config: ModelConfig, headers: dict, where, family: str = "llama") -> None:
    """The config's layer count against the layers the files hold, before any table of
    tensor names is built (a 1 KB config.json may declare 10^8 layers)."""
    held = set()
    prefix = layer_prefix(family).split("{}")[0]
    for name in headers:
        if name.startswith(prefix):
            index = name[len(prefix) :].split(".")[0]
            if index.isdigit():
                held.add(int(index))
    if config.layers > len(held):
        raise CheckpointError(
            f"{where}: config.json declares num_hidden_layers "
            f"{config.layers} but the weight files hold {len(held)} layers"
        )


def load_weights(directory, config: ModelConfig, family: str = "llama") -> dict:
    """Every tensor `tensor_shapes(config)` lists, float32, checked against the config:
    the headers first (dtypes, sizes, names, shapes), then one tensor at a time. A
    safetensors checkpoint and a `.bin` one go through the same family name map
    (layouts.tensor_map: renamed, fused and Conv1D tensors alike)."""
    directory = Path(directory)
    files = weight_files(directory)
    if isinstance(files.get(None), list):
        state = read_bin(files[None])
        headers = {k: (tuple(t.shape), "F32", files[None][0]) for k, t in state.items()}

        def read(name: str, path: Path) -> np.ndarray:  # each torch tensor goes once read
            return state.pop(name).float().numpy()

    else:
        headers, read = read_headers(files), read_safetensor
    check_sizes(config, headers, directory, family)
    wanted = tensor_map(family, config)
    _check_names(config, headers, wanted, files, directory)
    weights = {}
    for name in wanted:  # one tensor at a time: each source goes once it is converted
        array = read(name, headers[name][2])
        for target, transposed, rows in wanted[name][1]:
            weights[target] = convert(array, transposed, rows)
        del array
    return weights


def _check_names(config: ModelConfig, headers: dict, wanted: dict, files: dict, directory):
    """Every tensor the model needs is there with its shape, and none is left unused."""
    for name, (shape, _) in wanted.items():
        if name not in headers:
            listed = files.get(name, files.get(None))
            where = listed if listed is not None else directory / "model.safetensors.index.json"
            raise CheckpointError(
                f"{where[0] if isinstance(where, list) else where}: missing tensor {name}"
            )
        if headers[name][0] != shape:
            raise CheckpointError(
                f"{headers[name][2]}: tensor {name} has shape "
                f"{headers[name][0]} but config.json implies {shape}"
            )
    extra = sorted(
        k
        for k in set(headers) - set(wanted)
        if not k.endswith(IGNORED) and not (k == "lm_head.weight" and config.tie_embeddings)
    )
    if extra:
        raise CheckpointError(
            f"{headers[extra[0]][2]}: tensor {extra[0]} is not used by the "
            f"model config.json describes ({len(extra)} such tensors)"
        )


def read_safetensor(name: str, path: Path) -> np.ndarray:
    """One tensor, through its own short-lived safe_open (the mapped pages go with it)."""
    import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy for safetensors)
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="np") as f:
            return f.get_tensor(name)
    except (SafetensorError, OSError, TypeError) as e:
        raise CheckpointError(f"{path}: cannot read safetensors ({e})") from None


def read_bin(paths: list) -> dict:
    """A `.bin`-only checkpoint's tensors, read with torch.load(weights_only=True) (torch's
    restricted unpickler: tensors and plain containers only) when torch is installed."""
    try:
        import torch
    except ImportError:
        raise CheckpointError(
            f"{paths[0]}: a pytorch_model.bin checkpoint needs torch to read "
            f"(pip install 'pagedsim[oracle]'), or convert it to "
            f"model.safetensors"
        ) from None
    weights: dict = {}
    for path in paths:
        try:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises many kinds on a bad file
            raise CheckpointError(
                f"{path}: cannot read with torch.load(weights_only=True) "
                f"({str(e).splitlines()[0][:120]})"
            ) from None
        if not isinstance(state, dict):
            raise CheckpointError(f"{path}: expected a dict of tensors")
        for name, t in state.items():
            if not (isinstance(t, torch.Tensor) and t.is_floating_point()):
                raise CheckpointError(f"{path}: tensor {name} is not a floating-point tensor")
            weights[name] = t
    return weights


def load_model(directory) -> Transformer:
    """The checkpoint in DIR as the engine's Transformer (float32 NumPy weights)."""
    config, info = load_config(directory)
    weights = load_weights(directory, config, info["family"])
    model = Transformer(config, weights, name=str(directory))
    model.info = info
    return model


def load_tokenizer(directory: str | Path) -> Any:
    """DIR/tokenizer.json through Hugging Face's `tokenizers` library; a file over
    MAX_TOKENIZER_BYTES is refused from its size alone, before it is read."""
    from tokenizers import Tokenizer

    path = Path(directory) / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError(f"{path}: missing file")
    size = path.stat().st_size
    if size > MAX_TOKENIZER_BYTES:
        raise CheckpointError(
            f"{path}: {size:,} bytes; a tokenizer.json over "
            f"{MAX_TOKENIZER_BYTES:,} bytes is refused"
        )
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:  # the library raises its own Exception subclass
        raise CheckpointError(f"{path}: not a tokenizers file ({str(e).splitlines()[0]})") from None
