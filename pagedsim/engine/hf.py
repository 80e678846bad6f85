"""Load a local Hugging Face checkpoint (the layout `save_pretrained` writes), offline.

    config.json              Llama, Qwen2/3, Mistral, Gemma 1-3, Phi-3, OLMo-2, SmolLM3,
                             Granite; GPT-2, GPT-NeoX, Phi-2, Falcon, StableLM, Starcoder2,
                             Cohere (tensor names: layouts.py); the mixtures of experts
                             Mixtral, Qwen2-MoE, OLMoE, Granite-MoE (moe.py)
                             -> hf_config.py, hf_families.py, hf_rope.py
    model.safetensors        or its index and shards, or (with torch) pytorch_model*.bin
                             through torch.load(weights_only=True) -> hf_weights.py
    tokenizer.json           read by Hugging Face's `tokenizers` library
    generation_config.json   optional -> hf_generation.py

Nothing is fetched from a network; every failure is one line, a `hf_json.CheckpointError`
(a ValueError) naming the file and the field.
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
    """DIR/tokenizer.json through Hugging Face's `tokenizers` (refused unread when too big)."""
    from tokenizers import Tokenizer

    path = Path(directory) / "tokenizer.json"
    check_size(path, MAX_TOKENIZER_BYTES, "a tokenizer.json")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:  # the library raises its own Exception subclass
        raise CheckpointError(f"{path}: not a tokenizers file ({str(e).splitlines()[0]})") from None
