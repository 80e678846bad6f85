"""Load a local Hugging Face checkpoint (the layout `save_pretrained` writes), offline.

    config.json                    Llama (2, 3.x), Qwen2, Mistral, Qwen3, Gemma, Gemma 2,
                                   Gemma 3 (text), Phi-3, OLMo-2, SmolLM3, Granite; the
                                   classic GPT-2, GPT-NeoX (Pythia), Phi-2, Falcon (not its
                                   new_decoder_architecture or alibi), StableLM, Starcoder2,
                                   Cohere (tensor names: layouts.py); the mixtures of
                                   experts Mixtral, Qwen2-MoE, OLMoE, Granite-MoE (moe.py)
                                   -> hf_config.py, hf_families.py, hf_rope.py
    model.safetensors              or model.safetensors.index.json + its shards, or (with
                                   torch installed) pytorch_model*.bin, read through
                                   torch.load(weights_only=True) -> hf_weights.py
    tokenizer.json                 read by Hugging Face's `tokenizers` library
    generation_config.json         optional: eos_token_id, repetition_penalty,
                                   max_new_tokens, do_sample, temperature, top_p, top_k
                                   -> hf_generation.py

Every rope_type of rope.py is served (default, linear, llama3, yarn, dynamic, longrope).
A field that cannot be served (another rope_type, mlp_bias, an unknown activation, a
generation setting that would change greedy tokens and is not implemented) is refused in
one line naming it. JSON files over hf_json.MAX_JSON_BYTES (tokenizer.json:
MAX_TOKENIZER_BYTES), or nested too deeply to parse, are refused, the size checked before
a byte is read. Nothing is fetched from a network: only files in DIR are opened.

Every failure is a `hf_json.CheckpointError` (a ValueError) whose one-line message names
the file and the field or tensor.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .hf_config import load_config
from .hf_json import CheckpointError, check_size
from .hf_weights import load_weights
from .model import Transformer

if TYPE_CHECKING:
    from tokenizers import Tokenizer

MAX_TOKENIZER_BYTES = 64 << 20  # the largest released tokenizer.json (Gemma 3) is 33 MB


def load_model(directory: str | Path) -> Transformer:
    """The checkpoint in DIR as the engine's Transformer (float32 NumPy weights)."""
    config, info = load_config(directory)
    weights = load_weights(directory, config, info["family"])
    model = Transformer(config, weights, name=str(directory))
    model.info = info
    return model


def load_tokenizer(directory: str | Path) -> Tokenizer:
    """DIR/tokenizer.json through Hugging Face's `tokenizers` library; a file over
    MAX_TOKENIZER_BYTES is refused from its size alone, before it is read."""
    from tokenizers import Tokenizer

    path = Path(directory) / "tokenizer.json"
    check_size(path, MAX_TOKENIZER_BYTES, "a tokenizer.json")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:  # the library raises its own Exception subclass
        raise CheckpointError(f"{path}: not a tokenizers file ({str(e).splitlines()[0]})") from None
