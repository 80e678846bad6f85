"""Tiny Hugging Face checkpoints written without torch, and an independent NumPy forward.

`write_checkpoint` lays out what `save_pretrained` writes for LlamaForCausalLM,
Qwen2ForCausalLM and MistralForCausalLM: config.json, model.safetensors (or shards and
model.safetensors.index.json), and a character-level tokenizer.json. `reference_logits`
reads those files itself and runs Hugging Face's equations (modeling_llama.py,
modeling_qwen2.py) in float64, written in their own shape -- cos/sin over the full
head_dim, `rotate_half`, `repeat_kv` -- not through pagedsim.engine.model.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import ml_dtypes
import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

ARCH = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM"}
CHARS = " abcdefghijklmnopqrstuvwxyz.,;:!?'\nABCDEFGHIJKLMNOPQRSTUVWXYZ"


def write_checkpoint(
    directory,
    family="llama",
    *,
    vocab=64,
    hidden=32,
    layers=2,
    heads=4,
    kv_heads=2,
    head_dim=None,
    mlp=48,
    tie=False,
    dtype="float32",
    shards=1,
    seed=0,
    rope_theta=10000.0,
    eps=1e-6,
    extra=None,
) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    d = head_dim or hidden // heads
    q, kv = heads * d, kv_heads * d

    def w(*shape):
        return rng.standard_normal(shape) / math.sqrt(shape[-1])

    t = {
        "model.embed_tokens.weight": rng.standard_normal((vocab, hidden)),
        "model.norm.weight": 1 + 0.1 * rng.standard_normal(hidden),
    }
    if not tie:
        t["lm_head.weight"] = 3 * w(vocab, hidden)
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(hidden)
        t[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(hidden)
        for name, shape in (
            ("q", (q, hidden)),
            ("k", (kv, hidden)),
            ("v", (kv, hidden)),
            ("o", (hidden, q)),
        ):
            t[f"{p}self_attn.{name}_proj.weight"] = 2 * w(*shape)
            if family == "qwen2" and name != "o":
                t[f"{p}self_attn.{name}_proj.bias"] = 0.5 * rng.standard_normal(shape[0])
        for name, shape in (
            ("gate", (mlp, hidden)),
            ("up", (mlp, hidden)),
            ("down", (hidden, mlp)),
        ):
            t[f"{p}mlp.{name}_proj.weight"] = w(*shape)
    np_dtype = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype]
    t = {k: np.ascontiguousarray(v.astype(np.float32).astype(np_dtype)) for k, v in t.items()}
    names = sorted(t)
    if shards == 1:
        save_file(t, str(directory / "model.safetensors"))
    else:
        weight_map = {}
        for s in range(shards):
            part = names[s::shards]
            file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            save_file({k: t[k] for k in part}, str(directory / file))
            weight_map.update(dict.fromkeys(part, file))
        (directory / "model.safetensors.index.json").write_text(
            json.dumps(
                {
                    "metadata": {"total_size": sum(a.nbytes for a in t.values())},
                    "weight_map": weight_map,
                }
            )
        )
    config = {
        "architectures": [ARCH[family]],
        "model_type": family,
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": mlp,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "hidden_act": "silu",
        "rms_norm_eps": eps,
        "rope_theta": rope_theta,
        "tie_word_embeddings": tie,
        "max_position_embeddings": 256,
        "torch_dtype": dtype,
    }
    if head_dim:
        config["head_dim"] = head_dim
    if family == "mistral":
        config["sliding_window"] = 4096
    config.update(extra or {})
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    write_char_tokenizer(directory, vocab)
    return directory


def write_char_tokenizer(directory: Path, vocab: int) -> None:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    chars = {"<unk>": 0} | {c: i + 1 for i, c in enumerate(CHARS[: vocab - 1])}
    tok = Tokenizer(models.WordLevel(chars, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.save(str(Path(directory) / "tokenizer.json"))


def read_tensors(directory: Path) -> dict:
    files = sorted(Path(directory).glob("*.safetensors"))
    out = {}
    for f in files:
        with safe_open(str(f), framework="np") as g:
            out.update({k: g.get_tensor(k).astype(np.float64) for k in g.keys()})
    return out


def reference_logits(directory, ids) -> np.ndarray:
    """[T, V] float64 logits of one sequence, from the checkpoint files alone."""
    cfg = json.loads((Path(directory) / "config.json").read_text())
    t = read_tensors(directory)
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim") or cfg["hidden_size"] // heads
    eps, n = cfg["rms_norm_eps"], len(ids)

    def rms(x, weight):
        return weight * (x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps))

    def proj(x, name):
        y = x @ t[name + ".weight"].T
        return y + t[name + ".bias"] if name + ".bias" in t else y

    def rotate_half(x):
        return np.concatenate([-x[..., d // 2 :], x[..., : d // 2]], -1)

    inv_freq = 1.0 / cfg["rope_theta"] ** (np.arange(0, d, 2) / d)
    freqs = np.arange(n)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], -1)  # [T, D]
    cos, sin = np.cos(emb)[None], np.sin(emb)[None]  # [1, T, D]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    x = t["model.embed_tokens.weight"][np.asarray(ids)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, t[p + "input_layernorm.weight"])
        q = proj(h, p + "self_attn.q_proj").reshape(n, heads, d).transpose(1, 0, 2)  # [H, T, D]
        k = proj(h, p + "self_attn.k_proj").reshape(n, kv_heads, d).transpose(1, 0, 2)
        v = proj(h, p + "self_attn.v_proj").reshape(n, kv_heads, d).transpose(1, 0, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = np.repeat(k, heads // kv_heads, 0), np.repeat(v, heads // kv_heads, 0)  # repeat_kv
        s = q @ k.transpose(0, 2, 1) * d**-0.5 + mask
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        attn = (a @ v).transpose(1, 0, 2).reshape(n, heads * d)
        x = x + proj(attn, p + "self_attn.o_proj")
        h = rms(x, t[p + "post_attention_layernorm.weight"])
        g = proj(h, p + "mlp.gate_proj")
        x = x + proj(g / (1 + np.exp(-g)) * proj(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    head = t.get("lm_head.weight", t["model.embed_tokens.weight"])
    return rms(x, t["model.norm.weight"]) @ head.T


def reference_greedy(directory, prompt, max_tokens: int) -> list:
    ids = list(prompt)
    for _ in range(max_tokens):
        ids.append(int(np.argmax(reference_logits(directory, ids)[-1])))
    return ids[len(prompt) :]
