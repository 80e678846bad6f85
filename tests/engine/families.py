"""Real config.json / generation_config.json of each family, with the sizes shrunk.

Every field a family's config.json ships with that changes the forward pass is kept as
the released model states it (rope scaling, norms, soft-caps, windows, multipliers,
layer patterns); only the sizes (vocab, widths, layer count) and the token ids that
must fit the small vocab are shrunk. Windows are shrunk too, so that a short text runs
past them. `SIZES` are the shrunk sizes every family shares.
"""

from __future__ import annotations

SIZES = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)

FAMILIES = {
    "llama-3.2": ({  # Llama-3.2-1B-Instruct: llama3 rope, tied embeddings
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
        "bos_token_id": 1, "eos_token_id": [2, 3, 4], "head_dim": 16, "hidden_act": "silu",
        "mlp_bias": False, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 64, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16"},
        {"bos_token_id": 1, "do_sample": True, "eos_token_id": [2, 3, 4], "temperature": 0.6,
         "top_p": 0.9}),
    "llama-3.1": ({  # Llama-3.1-8B-Instruct: llama3 rope, untied
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
        "bos_token_id": 1, "eos_token_id": [2, 3, 4], "hidden_act": "silu", "mlp_bias": False,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
        {"bos_token_id": 1, "do_sample": True, "eos_token_id": [2, 3, 4], "temperature": 0.6,
         "top_p": 0.9}),
    "qwen2.5": ({  # Qwen2.5-0.5B-Instruct: q/k/v biases, repetition_penalty in the file
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "bos_token_id": 1,
        "eos_token_id": 2, "hidden_act": "silu", "max_window_layers": 21, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True,
        "use_sliding_window": False, "torch_dtype": "bfloat16"},
        {"bos_token_id": 1, "pad_token_id": 2, "do_sample": True, "eos_token_id": [2, 3],
         "repetition_penalty": 1.1, "temperature": 0.7, "top_p": 0.8, "top_k": 20}),
    "qwen3": ({  # Qwen3-0.6B: q_norm / k_norm per head, head_dim != hidden / heads
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
        "bos_token_id": 1, "eos_token_id": 2, "head_dim": 32, "hidden_act": "silu",
        "max_window_layers": 28, "rms_norm_eps": 1e-06, "rope_scaling": None,
        "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": True,
        "use_sliding_window": False, "torch_dtype": "bfloat16"},
        {"bos_token_id": 1, "do_sample": True, "eos_token_id": [2, 3], "pad_token_id": 2,
         "temperature": 0.6, "top_k": 20, "top_p": 0.95}),
    "gemma": ({  # gemma-2b: (1 + w) norms, sqrt(hidden) embeddings, GeGLU, head_dim 256 style
        "architectures": ["GemmaForCausalLM"], "model_type": "gemma", "attention_bias": False,
        "bos_token_id": 1, "eos_token_id": 2, "head_dim": 32, "hidden_act": "gelu",
        "hidden_activation": "gelu_pytorch_tanh", "num_key_value_heads": 1, "pad_token_id": 0,
        "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "torch_dtype": "bfloat16"},
        {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}),
    "gemma2": ({  # gemma-2-2b-it: sandwich norms, soft-caps, alternate sliding layers
        "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "attention_bias": False,
        "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid",
        "eos_token_id": [1, 107 % 128], "final_logit_softcapping": 30.0, "head_dim": 32,
        "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
        "pad_token_id": 0, "query_pre_attn_scalar": 32, "rms_norm_eps": 1e-06,
        "rope_theta": 10000.0, "sliding_window": 8, "torch_dtype": "float32"},
        {"bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": [1, 107 % 128],
         "pad_token_id": 0}),
    "gemma3": ({  # gemma-3-1b-it: q/k norms, a local rope base, 5 sliding : 1 full
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "attention_bias": False, "attn_logit_softcapping": None, "bos_token_id": 2,
        "eos_token_id": [1, 106 % 128], "final_logit_softcapping": None, "head_dim": 32,
        "hidden_activation": "gelu_pytorch_tanh", "num_hidden_layers": 7, "pad_token_id": 0,
        "query_pre_attn_scalar": 32, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
        "rope_scaling": None, "rope_theta": 1000000, "sliding_window": 8,
        "sliding_window_pattern": 6, "torch_dtype": "bfloat16"},
        {"bos_token_id": 2, "cache_implementation": "hybrid", "do_sample": True,
         "eos_token_id": [1, 106 % 128], "pad_token_id": 0, "top_k": 64, "top_p": 0.95}),
    "phi3": ({  # Phi-3-mini-4k-instruct: fused qkv_proj / gate_up_proj, a sliding window
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "attention_dropout": 0.0,
        "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000 % 128, "hidden_act": "silu",
        "num_key_value_heads": 4, "original_max_position_embeddings": 2048, "pad_token_id": 0,
        "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0,
        "sliding_window": 2047, "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
        {"bos_token_id": 1, "eos_token_id": [32000 % 128, 32001 % 128, 32007 % 128],
         "pad_token_id": 0}),
    "phi3-longrope": ({  # Phi-3-mini-128k-instruct: longrope (short factors in range)
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "bos_token_id": 1,
        "eos_token_id": 32000 % 128, "hidden_act": "silu", "num_key_value_heads": 4,
        "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
        "pad_token_id": 0, "rms_norm_eps": 1e-05,
        "rope_scaling": {"long_factor": [1.08, 1.11, 1.14, 1.34, 1.59, 1.6, 1.62, 2.62],
                         "short_factor": [1.05, 1.05, 1.05, 1.1, 1.1, 1.15, 1.2, 1.25],
                         "type": "longrope"},
        "rope_theta": 10000.0, "sliding_window": 262144, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16"},
        {"bos_token_id": 1, "eos_token_id": [32000 % 128, 32001 % 128, 32007 % 128],
         "pad_token_id": 0}),
    "phi3.5": ({  # Phi-3.5-mini-instruct: longrope from the ratio of the two lengths
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "bos_token_id": 1,
        "eos_token_id": 32000 % 128, "hidden_act": "silu", "num_key_value_heads": 4,
        "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
        "pad_token_id": 32000 % 128, "rms_norm_eps": 1e-05,
        "rope_scaling": {"long_factor": [1.0, 1.02, 1.04, 1.2, 1.5, 2.0, 3.0, 5.0],
                         "short_factor": [1.0, 1.01, 1.02, 1.05, 1.08, 1.1, 1.2, 1.3],
                         "type": "longrope"},
        "rope_theta": 10000.0, "sliding_window": 262144, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16"},
        {"bos_token_id": 1, "eos_token_id": [32007 % 128, 32001 % 128, 32000 % 128],
         "pad_token_id": 32000 % 128}),
    "phi4-mini": ({  # Phi-4-mini-instruct: a quarter of each head unrotated, tied, longrope
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "bos_token_id": 1,
        "eos_token_id": 2, "full_attn_mod": 1, "hidden_act": "silu",
        "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
        "pad_token_id": 2, "partial_rotary_factor": 0.75, "rms_norm_eps": 1e-05,
        "rope_scaling": {"long_factor": [1, 1.1, 1.25, 1.5, 2.0, 3.0],
                         "short_factor": [1, 1.05, 1.1, 1.15, 1.2, 1.3], "type": "longrope"},
        "rope_theta": 10000.0, "sliding_window": 262144, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16"},
        {"bos_token_id": 1, "eos_token_id": [2, 3], "pad_token_id": 2}),
    "gemma3-4b-text": ({  # gemma-3-4b's text config: linear rope x8 on the global layers
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "attn_logit_softcapping": None, "bos_token_id": 2, "eos_token_id": [1, 106 % 128],
        "final_logit_softcapping": None, "head_dim": 32,
        "hidden_activation": "gelu_pytorch_tanh", "num_hidden_layers": 6, "pad_token_id": 0,
        "query_pre_attn_scalar": 32, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000.0,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "rope_theta": 1000000.0,
        "sliding_window": 8, "sliding_window_pattern": 6, "torch_dtype": "bfloat16"},
        {"bos_token_id": 2, "eos_token_id": [1, 106 % 128], "pad_token_id": 0}),
    "qwen3-untied": ({  # Qwen3-8B: untied, GQA 4:1 here
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
        "bos_token_id": 1, "eos_token_id": 2, "head_dim": 24, "hidden_act": "silu",
        "max_window_layers": 36, "num_key_value_heads": 1, "rms_norm_eps": 1e-06,
        "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
        "tie_word_embeddings": False, "use_sliding_window": False, "torch_dtype": "bfloat16"},
        {"bos_token_id": 1, "do_sample": True, "eos_token_id": [2, 3], "pad_token_id": 2,
         "temperature": 0.6, "top_k": 20, "top_p": 0.95}),
    "qwen2-sliding": ({  # Qwen2 with use_sliding_window: layers from max_window_layers on slide
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "bos_token_id": 1,
        "eos_token_id": 2, "hidden_act": "silu", "max_window_layers": 2, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 8, "tie_word_embeddings": False,
        "use_sliding_window": True, "torch_dtype": "bfloat16"},
        {"bos_token_id": 1, "eos_token_id": [2, 3], "repetition_penalty": 1.05}),
    "olmo2": ({  # OLMo-2-1124-7B: norms after attention and MLP, q/k norms over H*D
        "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "attention_bias": False,
        "bos_token_id": None, "eos_token_id": 100257 % 128, "hidden_act": "silu",
        "num_key_value_heads": 4, "pad_token_id": 100277 % 128, "rms_norm_eps": 1e-06,
        "rope_scaling": None, "rope_theta": 500000, "tie_word_embeddings": False,
        "torch_dtype": "float32"},
        {"eos_token_id": 100257 % 128, "pad_token_id": 100277 % 128}),
    "smollm3": ({  # SmolLM3-3B: every fourth layer without rope
        "architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3",
        "attention_bias": False, "bos_token_id": None, "eos_token_id": 128012 % 128,
        "hidden_act": "silu", "max_window_layers": 28, "mlp_bias": False,
        "no_rope_layer_interval": 4, "no_rope_layers": [1, 1, 1, 0], "pad_token_id": 5,
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 5000000.0,
        "sliding_window": None, "tie_word_embeddings": True, "use_sliding_window": False,
        "torch_dtype": "bfloat16"},
        {"bos_token_id": 6, "eos_token_id": 128012 % 128, "pad_token_id": 5,
         "temperature": 0.6, "top_p": 0.95}),
    "granite": ({  # granite-3.1-2b-instruct: the four multipliers
        "architectures": ["GraniteForCausalLM"], "model_type": "granite",
        "attention_bias": False, "attention_multiplier": 0.015625, "bos_token_id": 0,
        "embedding_multiplier": 12.0, "eos_token_id": 0, "hidden_act": "silu",
        "logits_scaling": 8.0, "mlp_bias": False, "pad_token_id": 0,
        "residual_multiplier": 0.22, "rms_norm_eps": 1e-05, "rope_scaling": None,
        "rope_theta": 5000000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16"},
        {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}),
    "mistral-windowed": ({  # Mistral-7B-v0.1: every layer slides (window shrunk to 8)
        "architectures": ["MistralForCausalLM"], "model_type": "mistral", "bos_token_id": 1,
        "eos_token_id": 2, "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
        "sliding_window": 8, "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
        {"bos_token_id": 1, "eos_token_id": 2}),
}


def config_json(name: str) -> dict:
    """The family's config.json: the real fields over the shrunk sizes."""
    config, _ = FAMILIES[name]
    return {**SIZES, **config}


def generation_json(name: str) -> dict:
    return dict(FAMILIES[name][1])
