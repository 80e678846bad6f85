"""A tiny decoder-only transformer with seeded NumPy weights (Llama-shaped, float32).

    tokens -> embed -> [RMSNorm -> q,k,v (rotary on q,k) -> attention -> o_proj -> +
                        RMSNorm -> SiLU-gated MLP -> +] x layers -> RMSNorm -> logits

Attention is *not* in here: `qkv` gives a layer's projections and `finish` takes the
attention output back, so the paged engine (kernels through block tables) and the
dense engine (NumPy over contiguous arrays) run the very same weights around their
own attention. Shapes: T tokens, H query heads, H_kv KV heads, D head_dim.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ModelConfig:
    vocab: int = 96  # token ids 0 .. vocab-1
    layers: int = 2
    heads: int = 4  # query heads H
    kv_heads: int = 2  # KV heads H_kv (GQA group = H / H_kv)
    head_dim: int = 16  # D
    hidden: int = 64  # residual width
    mlp: int = 128  # MLP inner width
    rope_base: float = 10000.0
    seed: int = 0  # the weights are a pure function of the config

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads


class TinyModel:
    def __init__(self, config: ModelConfig = ModelConfig()):
        if config.heads % config.kv_heads or config.head_dim % 2:
            raise ValueError("heads must be a multiple of kv_heads, and head_dim even (rotary pairs)")
        self.config = c = config
        rng = np.random.default_rng(c.seed)

        def w(*shape, gain=1.0):
            return (rng.standard_normal(shape) * gain / np.sqrt(shape[0])).astype(np.float32)

        self.embed = (rng.standard_normal((c.vocab, c.hidden))).astype(np.float32)  # [V, hidden]
        self.layer_weights = [dict(
            norm1=(1 + 0.1 * rng.standard_normal(c.hidden)).astype(np.float32),
            wq=w(c.hidden, c.heads * c.head_dim), wk=w(c.hidden, c.kv_heads * c.head_dim),
            wv=w(c.hidden, c.kv_heads * c.head_dim), wo=w(c.heads * c.head_dim, c.hidden),
            norm2=(1 + 0.1 * rng.standard_normal(c.hidden)).astype(np.float32),
            w_gate=w(c.hidden, c.mlp), w_up=w(c.hidden, c.mlp), w_down=w(c.mlp, c.hidden),
        ) for _ in range(c.layers)]
        self.final_norm = np.ones(c.hidden, np.float32)
        self.lm_head = w(c.hidden, c.vocab, gain=4.0)  # [hidden, V]: well-spread logits
        half = c.head_dim // 2
        self.inv_freq = (1.0 / c.rope_base ** (np.arange(half) / half)).astype(np.float32)

    def check_tokens(self, tokens) -> None:
        """Token ids must be ints in [0, vocab)."""
        ids = np.asarray(tokens)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"token ids must be integers, got {ids.dtype}")
        if len(ids) and (ids.min() < 0 or ids.max() >= self.config.vocab):
            raise ValueError(f"token ids must lie in [0, {self.config.vocab}), got "
                             f"{int(ids.min())} .. {int(ids.max())}")

    def embed_tokens(self, tokens) -> np.ndarray:
        return self.embed[np.asarray(tokens, np.int64)]  # [T, hidden]

    def qkv(self, layer: int, h: np.ndarray, positions) -> tuple:
        """q [T, H, D], k [T, H_kv, D], v [T, H_kv, D] for tokens at `positions`."""
        c, lw = self.config, self.layer_weights[layer]
        x = rms_norm(h, lw["norm1"])
        q = (x @ lw["wq"]).reshape(-1, c.heads, c.head_dim)
        k = (x @ lw["wk"]).reshape(-1, c.kv_heads, c.head_dim)
        v = (x @ lw["wv"]).reshape(-1, c.kv_heads, c.head_dim)
        angles = np.asarray(positions, np.float32)[:, None] * self.inv_freq[None, :]  # [T, D/2]
        return rotary(q, angles), rotary(k, angles), np.ascontiguousarray(v)

    def finish(self, layer: int, h: np.ndarray, attn: np.ndarray) -> np.ndarray:
        """The rest of the layer: h + o_proj(attn), then h + MLP(RMSNorm(h))."""
        lw = self.layer_weights[layer]
        h = h + attn.reshape(len(h), -1).astype(np.float32) @ lw["wo"]
        x = rms_norm(h, lw["norm2"])
        gate = x @ lw["w_gate"]
        return h + ((gate / (1 + np.exp(-gate))) * (x @ lw["w_up"])) @ lw["w_down"]

    def logits(self, h: np.ndarray) -> np.ndarray:
        return rms_norm(h, self.final_norm) @ self.lm_head  # [T, V] float32


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    return (x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight).astype(np.float32)


def rotary(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """Rotate pairs (x[..., :D/2], x[..., D/2:]) by each token's angles (GPT-NeoX style)."""
    half = x.shape[-1] // 2
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]  # [T, 1, D/2]
    a, b = x[..., :half], x[..., half:]
    return np.ascontiguousarray(np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1),
                                dtype=np.float32)
