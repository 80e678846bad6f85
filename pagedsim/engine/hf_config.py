"""config.json -> ModelConfig, read as each family's transformers config class reads it:
its defaults (hf_families.py), its rope fields (hf_rope.py), its layer pattern
(layer_types, Gemma 2's alternation, Gemma 3's sliding_window_pattern, Qwen's
max_window_layers) and model.py's switches, with one reader for the Llama-like families
(and their mixtures of experts) and one for the classic ones. A field that cannot be
served (mlp_bias, an unknown activation, bidirectional attention...) is refused in one
line naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .hf_families import (
    ACTIVATIONS,
    CLASSIC,
    CLASSIC_REFUSED,
    DEFAULTS,
    FAMILIES,
    GEMMA,
    MOE,
    MOE_BASE,
    REFUSED,
    SWITCHES,
)
from .hf_generation import config_eos, generation_config
from .hf_json import CheckpointError, Json, field, optional, read_json, short
from .hf_rope import Rope, read_rope, rope_source
from .model import MAX_LAYERS, ModelConfig

LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}
DEFAULT_ROPE: Rope = (10000.0, ())  # a classic family's learned positions: no rope read


# ModelConfig keyword arguments, as each helper below reads them from config.json
Switches = dict[str, Any]


def _layer_types(
    raw: Json, path: Path, family: str, layers: int, sliding_window: int | None
) -> tuple[str, ...]:
    """("full" | "sliding") per layer, as the family's transformers config derives them."""
    given = raw.get("layer_types")
    if sliding_window is None:
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
        pattern = field(
            raw, path, "sliding_window_pattern", int, DEFAULTS[family]["sliding_window_pattern"]
        )
        return tuple("sliding" if (i + 1) % pattern else "full" for i in range(layers))
    if family == "smollm3":  # the layers without rope slide
        no_rope = set(_no_rope(raw, path, layers))
        return tuple("sliding" if i in no_rope else "full" for i in range(layers))
    if family in ("qwen2", "qwen3"):
        first = field(raw, path, "max_window_layers", int, layers, positive=False)
        return tuple("sliding" if i >= first else "full" for i in range(layers))
    return ("sliding",) * layers  # Mistral, Phi-3: every layer


def _sliding_window(raw: Json, path: Path, family: str) -> int | None:
    """sliding_window, or None where the family ignores it."""
    if family in ("llama", "gemma", "olmo2", "granite", "olmoe", "granitemoe"):
        return None
    if family in ("qwen2", "qwen3", "smollm3", "qwen2_moe") and not raw.get(
        "use_sliding_window", False
    ):
        return None
    if raw.get("sliding_window", DEFAULTS[family].get("sliding_window")) is None:
        return None
    return field(raw, path, "sliding_window", int, DEFAULTS[family].get("sliding_window"))


def _activation(raw: Json, path: Path, family: str) -> str:
    """The MLP activation: Gemma 2/3 read hidden_activation; Gemma reads hidden_act, and
    its legacy "gelu" means the tanh approximation (transformers' GemmaConfig rewrites it)."""
    d = DEFAULTS[family]
    name = "hidden_activation" if family in ("gemma2", "gemma3") else "hidden_act"
    act = raw.get(name)
    if act is None:
        act = d.get("hidden_activation", d.get("hidden_act"))
    if family == "gemma" and act == "gelu":
        act = "gelu_pytorch_tanh"
    return _served(act, name, path)


def _served(act: object, name: str, path: Path) -> str:
    """The engine's name of the activation `act`, read from field `name`."""
    if not isinstance(act, str) or act not in ACTIVATIONS:
        raise CheckpointError(
            f"{path}: field {name} is {short(act)}; served: {', '.join(ACTIVATIONS)}"
        )
    return ACTIVATIONS[act]


def _at_most_max_layers(layers: int, name: str, path: Path) -> None:
    """A layer count past MAX_LAYERS is refused before any table is built."""
    if layers > MAX_LAYERS:
        raise CheckpointError(
            f"{path}: field {name} is {layers}; at most {MAX_LAYERS} layers are served"
        )


def _rotary_dim(share: object, path: Path, head_dim: int) -> int | None:
    """R for a partial_rotary_factor `share` (None: the whole head rotates)."""
    factor = field({"partial_rotary_factor": share}, path, "partial_rotary_factor", float)
    if factor > 1:
        raise CheckpointError(f"{path}: field partial_rotary_factor must be <= 1, got {factor}")
    return int(head_dim * factor) if factor < 1 else None


def _no_rope(raw: Json, path: Path, layers: int) -> tuple[int, ...]:
    """SmolLM3: the layers whose no_rope_layers flag is 0 skip RoPE."""
    flags = raw.get("no_rope_layers")
    if flags is None:
        every = field(
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


def _table_switches(raw: Json, path: Path, fixed: Json, read: Json) -> Switches:
    """The switches a family's table sets: `fixed` ones, and ones `read` from config.json
    (switch -> (field, transformers' default), the default's type the field's)."""
    out: Switches = dict(fixed)
    out.update({k: field(raw, path, f, type(d), d) for k, (f, d) in read.items()})
    return out


def _classic_switches(raw: Json, path: Path, family: str) -> Switches:
    """The ModelConfig switches of GPT-2, GPT-NeoX, Phi-2, Falcon, StableLM, Starcoder2 and
    Cohere, read from their config fields with their transformers defaults."""
    for name, default in CLASSIC_REFUSED.get(family, {}).items():
        if raw.get(name, default) not in (default, None):
            raise CheckpointError(
                f"{path}: field {name} is {short(raw[name])}; only {default} is served"
            )
    spec = CLASSIC[family]
    out = {"norm": "layer", "mlp_gated": False, **_table_switches(raw, path, spec.fixed, spec.read)}
    if spec.parallel is not None and field(raw, path, spec.parallel[1], bool, spec.parallel[2]):
        out["parallel"] = spec.parallel[0]
    return out


def _classic_config(raw: Json, path: Path, family: str) -> ModelConfig:
    """A classic family's ModelConfig: LayerNorms, parallel blocks, learned or partial rope."""
    spec = CLASSIC[family]
    names: dict[str, tuple[str, int | None]] = dict(
        vocab=("vocab_size", None),
        hidden=("hidden_size", None),
        layers=("num_hidden_layers", None),
        heads=("num_attention_heads", None),
        mlp=("intermediate_size", None),
    )
    names.update(spec.sizes)
    vocab, hidden, layers, heads = (
        field(raw, path, f, int, d)
        for f, d in (names[k] for k in ("vocab", "hidden", "layers", "heads"))
    )
    f, d = names["mlp"]
    mlp = 4 * hidden if raw.get(f) is None and d is None else field(raw, path, f, int, d)
    _at_most_max_layers(layers, names["layers"][0], path)
    act = _served(raw.get(spec.act[0]) or spec.act[1], spec.act[0], path)
    kv = heads
    if family == "falcon":
        kv = 1 if field(raw, path, "multi_query", bool, True) else heads
    elif family in ("phi", "stablelm", "starcoder2", "cohere"):
        kv = field(raw, path, "num_key_value_heads", int, heads)
    head_dim = hidden // heads
    sliding_window = None
    if family == "starcoder2" and raw.get("sliding_window") is not None:
        sliding_window = field(raw, path, "sliding_window", int)
    learned = field(raw, path, "n_positions", int, 1024) if family == "gpt2" else 0
    rotary, rope = None, DEFAULT_ROPE
    if not learned:
        params, _ = rope_source(raw, path)
        params = params if isinstance(params, dict) else {}
        share = raw.get("partial_rotary_factor", params.get("partial_rotary_factor"))
        share = raw.get("rotary_pct", spec.share) if share is None else share
        rotary = _rotary_dim(share, path, head_dim)
        raw = (
            raw
            if "rope_theta" in raw or "rotary_emb_base" not in raw
            else {**raw, "rope_theta": raw["rotary_emb_base"]}
        )
        rope = read_rope(raw, path, family, "full")
    unscaled = family == "gpt2" and not field(raw, path, "scale_attn_weights", bool, True)
    return ModelConfig(
        vocab=vocab,
        layers=layers,
        heads=heads,
        hidden=hidden,
        mlp=mlp,
        kv_heads=kv,
        head_dim=head_dim,
        rope_base=rope[0],
        rope_scaling=rope[1],
        rms_eps=field(raw, path, spec.eps[0], float, spec.eps[1]),
        tie_embeddings=field(raw, path, "tie_word_embeddings", bool, spec.tie),
        sliding_window=sliding_window,
        act=act,
        rotary_dim=rotary,
        learned_positions=learned,
        attn_scale=1.0 if unscaled else None,  # GPT-2's scale_attn_weights false
        **_classic_switches(raw, path, family),
    )


def _moe_fields(raw: Json, path: Path, family: str, layers: int) -> Switches:
    """The mixture-of-experts switches (moe.py) of Mixtral, Qwen2-MoE, OLMoE, Granite-MoE."""
    if family not in MOE:
        return {}
    out: Switches = dict(expert_mlp=field(raw, path, "intermediate_size", int))
    out.update(_table_switches(raw, path, MOE[family].get("fixed", {}), MOE[family]["read"]))
    if family == "qwen2_moe":
        step = field(raw, path, "decoder_sparse_step", int, 1)
        dense = raw.get("mlp_only_layers") or []
        if not (isinstance(dense, list) and all(type(i) is int and 0 <= i < layers for i in dense)):
            raise CheckpointError(f"{path}: field mlp_only_layers must list layer indices")
        out["dense_layers"] = tuple(i for i in range(layers) if i in dense or (i + 1) % step != 0)
    if family == "olmoe" and raw.get("clip_qkv") is not None:
        raise CheckpointError(
            f"{path}: field clip_qkv is {short(raw['clip_qkv'])}; only null is served"
        )
    return out


def _modern_refusals(raw: Json, path: Path, family: str) -> object:
    """Refuse what the Llama-like families may declare but pagedsim does not serve; the
    raw partial_rotary_factor (None when absent), which only Phi-3 may set."""
    if raw.get("use_bidirectional_attention"):
        raise CheckpointError(
            f"{path}: field use_bidirectional_attention is true; only causal attention is served"
        )
    if raw.get("mlp_bias", False):
        raise CheckpointError(f"{path}: field mlp_bias is true; MLP biases are not supported")
    rope_params: Json = (
        raw["rope_parameters"] if isinstance(raw.get("rope_parameters"), dict) else {}
    )
    share_raw = raw.get("partial_rotary_factor", rope_params.get("partial_rotary_factor"))
    if share_raw not in (None, 1, 1.0) and family != "phi3":
        raise CheckpointError(
            f"{path}: field partial_rotary_factor is {short(share_raw)}; "
            f"only Phi-3 rotates part of a head"
        )
    return share_raw


def _modern_scales(raw: Json, path: Path, family: str, hidden: int) -> Switches:
    """The multipliers and soft-caps: Gemma's embedding scale, query_pre_attn_scalar and
    soft-caps, Granite's embedding, attention, residual and logit multipliers."""
    d, granite = DEFAULTS[family], MOE_BASE.get(family, family) == "granite"
    scale = None
    if family in ("gemma2", "gemma3"):
        scale = field(raw, path, "query_pre_attn_scalar", float, d["query_pre_attn_scalar"]) ** -0.5
    elif granite:
        scale = field(raw, path, "attention_multiplier", float, d["attention_multiplier"])
    embed = field(raw, path, "embedding_multiplier", float, 1.0) if granite else 1.0
    return dict(
        embed_scale=float(np.float32(hidden**0.5)) if family in GEMMA else embed,
        attn_scale=scale,
        attn_softcap=optional(raw, path, "attn_logit_softcapping", d.get("attn_logit_softcapping")),
        final_softcap=optional(
            raw, path, "final_logit_softcapping", d.get("final_logit_softcapping")
        ),
        residual_scale=field(raw, path, "residual_multiplier", float, 1.0) if granite else 1.0,
        logit_scale=field(raw, path, "logits_scaling", float, 1.0) if granite else 1.0,
    )


def _modern_config(raw: Json, path: Path, family: str) -> ModelConfig:
    """The Llama-like families' ModelConfig (RMSNorm, gated MLP, rope)."""
    d = DEFAULTS[family]
    act = _activation(raw, path, family)
    base = MOE_BASE.get(family, family)
    share_raw = _modern_refusals(raw, path, family)
    layers = field(raw, path, "num_hidden_layers", int)
    _at_most_max_layers(layers, "num_hidden_layers", path)
    heads = field(raw, path, "num_attention_heads", int)
    hidden = field(raw, path, "hidden_size", int)
    head_dim = raw.get("head_dim", d.get("head_dim"))
    head_dim = (
        hidden // heads
        if head_dim is None
        else field(raw, path, "head_dim", int, d.get("head_dim"))
    )
    rotary = None if share_raw is None else _rotary_dim(share_raw, path, head_dim)
    sliding_window = _sliding_window(raw, path, family)
    types = _layer_types(raw, path, base, layers, sliding_window)
    if types and "sliding" not in types:
        sliding_window, types = None, ()
    bias = (
        field(raw, path, "qkv_bias", bool, True)
        if family == "qwen2_moe"
        else family == "qwen2"
        or (family != "phi3" and field(raw, path, "attention_bias", bool, False))
    )
    theta, scaling = read_rope(raw, path, family, "full")
    local = None
    if family == "gemma3":
        local, local_scaling = read_rope(raw, path, family, "sliding")
        if local_scaling:
            raise CheckpointError(
                f"{path}: field rope_parameters.sliding_attention scales "
                f"the local rope; only a plain local rope is served"
            )
    no_rope = _no_rope(raw, path, layers) if family == "smollm3" else ()
    scales = _modern_scales(raw, path, family, hidden)
    return ModelConfig(
        vocab=field(raw, path, "vocab_size", int),
        layers=layers,
        heads=heads,
        kv_heads=field(raw, path, "num_key_value_heads", int, heads),
        head_dim=head_dim,
        hidden=hidden,
        mlp=field(raw, path, "intermediate_size", int),
        rope_base=theta,
        rope_scaling=scaling,
        local_rope_base=local,
        rms_eps=field(raw, path, "rms_norm_eps", float, d["rms_norm_eps"]),
        tie_embeddings=field(raw, path, "tie_word_embeddings", bool, d["tie_word_embeddings"]),
        qkv_bias=bias,
        o_bias=bias and base != "qwen2",
        sliding_window=sliding_window,
        layer_types=types,
        act=act,
        no_rope_layers=no_rope,
        rotary_dim=rotary,
        **_moe_fields(raw, path, family, layers),
        **SWITCHES.get(family, {}),
        **scales,
    )


def load_config(directory: str | Path) -> tuple[ModelConfig, dict[str, Any]]:
    """(ModelConfig, info): info holds architecture, family, the generation config, the
    stop token ids, dtype and max length (model.Transformer.info)."""
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
            f"{path}: field architectures is {short(archs)}; supported: {', '.join(FAMILIES)}"
        )
    family = FAMILIES[archs[0]]
    reader = _classic_config if family in CLASSIC else _modern_config
    try:
        config = reader(raw, path, family)
    except CheckpointError:
        raise
    except (TypeError, ValueError) as e:  # ModelConfig's own checks, named by file
        raise CheckpointError(f"{path}: {e}") from None
    gen = directory / "generation_config.json"
    generation = generation_config(gen, config) if gen.is_file() else {}
    eos = config_eos(raw, path, config, generation)
    info: dict[str, Any] = dict(
        architecture=archs[0],
        family=family,
        config_eos_token_ids=eos,
        stop_token_ids=generation.get("eos_token_id", eos),
        generation=generation,
        dtype=raw.get("dtype", raw.get("torch_dtype")),
        max_position_embeddings=raw.get("max_position_embeddings"),
    )
    return config, info
