"""The families pagedsim serves, and what each family's transformers config class fills in.

FAMILIES maps config.json's `architectures` to a family; REFUSED names the families out
of reach and why. DEFAULTS and MAX_POSITIONS are the Llama-like families' config
defaults (a mixture of experts reads its attention as its dense relative, MOE_BASE),
CLASSIC the classic families' field names and defaults (GPT-2, GPT-NeoX, Phi-2, Falcon,
StableLM, Starcoder2, Cohere). hf_config.py reads config.json through these tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# config.json fields transformers fills in when the file leaves them out (Gemma 2 and 3
# read hidden_activation, not hidden_act)
Defaults = dict[str, Any]


@dataclass(frozen=True)
class Classic:
    """A classic family's config fields: (field name, transformers' default) per quantity."""

    eps: tuple[str, float]  # the LayerNorms' epsilon
    act: tuple[str, str]  # the MLP's activation
    tie: bool  # tie_word_embeddings when absent
    share: float = 1.0  # the rotary share of a head when config.json gives none
    # sizes under their own field names: (quantity, (field, default)); None: 4 x hidden
    sizes: tuple[tuple[str, tuple[str, int | None]], ...] = ()


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
GEMMA = ("gemma", "gemma2", "gemma3")
LLAMA: Defaults = dict(
    rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, hidden_act="silu"
)
GEMMA_2_3: Defaults = dict(
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    hidden_activation="gelu_pytorch_tanh",
    head_dim=256,
    query_pre_attn_scalar=256,
    sliding_window=4096,
)
# each Llama-like family's config defaults, as far as they differ from Llama's
DEFAULTS: dict[str, Defaults] = {
    "llama": LLAMA,
    "qwen2": {**LLAMA, "sliding_window": 4096},
    "mistral": {**LLAMA, "sliding_window": 4096},
    "qwen3": {**LLAMA, "head_dim": 128, "sliding_window": 4096},
    # Gemma reads hidden_act (its hidden_activation is unread)
    "gemma": {
        **LLAMA,
        "tie_word_embeddings": True,
        "hidden_act": "gelu_pytorch_tanh",
        "head_dim": 256,
    },
    "gemma2": {
        **GEMMA_2_3,
        "rope_theta": 10000.0,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
    },
    "gemma3": {
        **GEMMA_2_3,
        "rope_theta": 1_000_000.0,
        "sliding_window_pattern": 6,
        "rope_local_base_freq": 10000.0,
    },
    "phi3": {**LLAMA, "rms_norm_eps": 1e-5},
    "olmo2": {**LLAMA, "rms_norm_eps": 1e-5},
    "smollm3": {
        **LLAMA,
        "rope_theta": 2_000_000.0,
        "tie_word_embeddings": True,
        "no_rope_layer_interval": 4,
    },
    "granite": {
        **LLAMA,
        "embedding_multiplier": 1.0,
        "attention_multiplier": 1.0,
        "residual_multiplier": 1.0,
        "logits_scaling": 1.0,
    },
}
MAX_POSITIONS: dict[str, int] = {  # max_position_embeddings when config.json leaves it out
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
# the classic families: the fields of each quantity model.py reads, and their defaults
CLASSIC = {
    "gpt2": Classic(
        eps=("layer_norm_epsilon", 1e-5),
        act=("activation_function", "gelu_new"),
        tie=True,
        sizes=(
            ("vocab", ("vocab_size", 50257)),
            ("hidden", ("n_embd", 768)),
            ("layers", ("n_layer", 12)),
            ("heads", ("n_head", 12)),
            ("mlp", ("n_inner", None)),
        ),
    ),
    "gpt_neox": Classic(
        eps=("layer_norm_eps", 1e-5), act=("hidden_act", "gelu"), tie=False, share=0.25
    ),
    "phi": Classic(
        eps=("layer_norm_eps", 1e-5), act=("hidden_act", "gelu_new"), tie=False, share=0.5
    ),
    "falcon": Classic(
        eps=("layer_norm_epsilon", 1e-5),
        act=("activation", "gelu"),
        tie=True,
        sizes=(("mlp", ("ffn_hidden_size", None)),),
    ),
    "stablelm": Classic(
        eps=("layer_norm_eps", 1e-5), act=("hidden_act", "silu"), tie=False, share=0.25
    ),
    "starcoder2": Classic(
        eps=("norm_epsilon", 1e-5), act=("hidden_act", "gelu_pytorch_tanh"), tie=True
    ),
    "cohere": Classic(eps=("layer_norm_eps", 1e-5), act=("hidden_act", "silu"), tie=True),
}
# switches a classic checkpoint may set that change the forward pass and are not served
CLASSIC_REFUSED = {
    "gpt2": {"scale_attn_by_inverse_layer_idx": False, "add_cross_attention": False},
    "phi": {"qk_layernorm": False},
    "falcon": {"alibi": False, "new_decoder_architecture": False},
    "stablelm": {"qk_layernorm": False},
    "cohere": {"use_qk_norm": False},
}
