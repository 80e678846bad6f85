"""Load a local Hugging Face checkpoint (the layout `save_pretrained` writes), offline:
config.json (hf_config.py), the weights (hf_weights.py), tokenizer.json (Hugging Face's
`tokenizers`), generation_config.json (hf_generation.py). Every failure is one line, a
`hf_json.CheckpointError` (a ValueError) naming the file and the field.
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
