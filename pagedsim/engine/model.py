"""The decoder-only transformer the engines serve: Llama / Qwen2 / Mistral, in NumPy float32.

    tokens -> embed -> [RMSNorm -> q,k,v (+bias) -> RoPE on q,k -> attention -> o_proj -> +
                        RMSNorm -> SiLU(gate) * up -> down -> +] x layers -> RMSNorm -> lm_head

The equations are those of Hugging Face's modeling_llama.py / modeling_qwen2.py:
RMSNorm x / sqrt(mean(x^2) + eps) * w; RoPE with inv_freq = rope_theta^(-2i/D), applied
with `rotate_half` (pairs (x[i], x[i + D/2]), not interleaved); GQA (H / H_kv query
heads per KV head); attention scale 1/sqrt(D); lm_head tied to embed_tokens or not.
Weights are held under Hugging Face's tensor names and shapes ([out, in] for a linear
layer), always float32 -- the engine's NumPy dtype, whatever the checkpoint's.

Attention is *not* in here: `qkv` gives a layer's projections and `finish` takes the
attention output back, so the paged engine (blocks, tables, kernels) and the dense
engine (contiguous arrays) run the same weights around their own attention.
Shapes: T tokens, H query heads, H_kv KV heads, D head_dim.
`TinyModel(ModelConfig())` is a seeded random model; `hf.load_model(DIR)` a checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from ..errors import count_arg


@dataclass(frozen=True)
class ModelConfig:
    vocab: int = 96  # token ids 0 .. vocab-1
    layers: int = 2
    heads: int = 4  # query heads H
    kv_heads: int = 2  # KV heads H_kv (GQA group = H / H_kv)
    head_dim: int = 16  # D
    hidden: int = 64  # residual width
    mlp: int = 128  # MLP inner width
    rope_base: float = 10000.0  # rope_theta
    seed: int = 0  # TinyModel's weights are a pure function of the config
    rms_eps: float = 1e-6  # rms_norm_eps
    tie_embeddings: bool = False  # lm_head.weight is embed_tokens.weight
    qkv_bias: bool = False  # q/k/v projections have biases (Qwen2; Llama attention_bias)
    o_bias: bool = False  # o_proj has a bias (Llama attention_bias)
    sliding_window: int | None = None  # Mistral / Qwen2: longer sequences are refused

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("vocab", "layers", "heads", "kv_heads", "head_dim", "hidden", "mlp"):
                count_arg(f.name, value, 1)
            elif f.name in ("rope_base", "rms_eps"):
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise TypeError(f"{f.name} must be a number, got {type(value).__name__}")
                if not (math.isfinite(value) and value > 0):
                    raise ValueError(f"{f.name} must be a finite number > 0, got {value}")
            elif f.name == "seed":
                count_arg("seed", value, 0, 2**63 - 1)
            elif f.name == "sliding_window":
                if value is not None:
                    count_arg("sliding_window", value, 1)
            elif type(value) is not bool:
                raise TypeError(f"{f.name} must be a bool, got {type(value).__name__}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads "
                             f"({self.kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even (rotary pairs), got {self.head_dim}")

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads


def tensor_shapes(c: ModelConfig) -> dict:
    """Every tensor the model needs: Hugging Face name -> shape."""
    q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
    shapes = {"model.embed_tokens.weight": (c.vocab, c.hidden), "model.norm.weight": (c.hidden,)}
    if not c.tie_embeddings:
        shapes["lm_head.weight"] = (c.vocab, c.hidden)
    for i in range(c.layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (c.hidden,),
            p + "self_attn.q_proj.weight": (q, c.hidden),
            p + "self_attn.k_proj.weight": (kv, c.hidden),
            p + "self_attn.v_proj.weight": (kv, c.hidden),
            p + "self_attn.o_proj.weight": (c.hidden, q),
            p + "post_attention_layernorm.weight": (c.hidden,),
            p + "mlp.gate_proj.weight": (c.mlp, c.hidden),
            p + "mlp.up_proj.weight": (c.mlp, c.hidden),
            p + "mlp.down_proj.weight": (c.hidden, c.mlp)})
        if c.qkv_bias:
            shapes.update({p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,),
                           p + "self_attn.v_proj.bias": (kv,)})
        if c.o_bias:
            shapes[p + "self_attn.o_proj.bias"] = (c.hidden,)
    return shapes


class Transformer:
    def __init__(self, config: ModelConfig, weights: dict, name: str = "model"):
        """`weights`: name -> array as `tensor_shapes(config)` lists (stored as float32)."""
        self.config = c = config
        self.name = name  # what to call it in reports
        want = tensor_shapes(c)
        for key, shape in want.items():
            if key not in weights:
                raise ValueError(f"{name}: missing tensor {key}")
            if tuple(weights[key].shape) != shape:
                raise ValueError(f"{name}: tensor {key} has shape {tuple(weights[key].shape)}, "
                                 f"the config implies {shape}")
        w = {k: np.asarray(weights[k], np.float32) for k in want}
        self.embed = w["model.embed_tokens.weight"]  # [V, hidden]
        self.lm_head = self.embed if c.tie_embeddings else w["lm_head.weight"]  # [V, hidden]
        self.final_norm = w["model.norm.weight"]
        names = ("input_layernorm.weight", "post_attention_layernorm.weight")
        names += tuple(f"self_attn.{x}_proj.{y}" for y in ("weight", "bias") for x in "qkvo")
        names += tuple(f"mlp.{x}_proj.weight" for x in ("gate", "up", "down"))
        self.layer_weights = [{n.split(".", 1)[-1] if n.startswith(("self_attn", "mlp")) else n:
                               w.get(f"model.layers.{i}.{n}") for n in names}
                              for i in range(c.layers)]  # "q_proj.weight" -> array (or None)
        half = c.head_dim // 2
        self.inv_freq = (1.0 / c.rope_base ** (np.arange(0, half, dtype=np.float64) / half)
                         ).astype(np.float32)  # [D/2]

    @property
    def num_parameters(self) -> int:
        tensors = [self.embed, self.final_norm] + ([] if self.lm_head is self.embed
                                                   else [self.lm_head])
        tensors += [a for lw in self.layer_weights for a in lw.values() if a is not None]
        return sum(a.size for a in tensors)

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
        x = rms_norm(h, lw["input_layernorm.weight"], c.rms_eps)
        q = linear(x, lw["q_proj.weight"], lw["q_proj.bias"]).reshape(-1, c.heads, c.head_dim)
        k = linear(x, lw["k_proj.weight"], lw["k_proj.bias"]).reshape(-1, c.kv_heads, c.head_dim)
        v = linear(x, lw["v_proj.weight"], lw["v_proj.bias"]).reshape(-1, c.kv_heads, c.head_dim)
        angles = np.asarray(positions, np.float32)[:, None] * self.inv_freq[None, :]  # [T, D/2]
        return rotary(q, angles), rotary(k, angles), np.ascontiguousarray(v)

    def finish(self, layer: int, h: np.ndarray, attn: np.ndarray) -> np.ndarray:
        """The rest of the layer: h + o_proj(attn), then h + MLP(RMSNorm(h))."""
        lw = self.layer_weights[layer]
        h = h + linear(attn.reshape(len(h), -1).astype(np.float32), lw["o_proj.weight"],
                       lw["o_proj.bias"])
        x = rms_norm(h, lw["post_attention_layernorm.weight"], self.config.rms_eps)
        gate = x @ lw["gate_proj.weight"].T
        return h + ((gate / (1 + np.exp(-gate))) * (x @ lw["up_proj.weight"].T)) \
            @ lw["down_proj.weight"].T

    def logits(self, h: np.ndarray) -> np.ndarray:
        return rms_norm(h, self.final_norm, self.config.rms_eps) @ self.lm_head.T  # [T, V]


class TinyModel(Transformer):
    """Seeded random weights for a ModelConfig (the engine's tests and the old default)."""

    def __init__(self, config: ModelConfig = ModelConfig()):
        c = config
        rng = np.random.default_rng(c.seed)

        def w(*shape, gain=1.0):  # drawn [in, out], stored [out, in] as Hugging Face does
            return np.ascontiguousarray(
                (rng.standard_normal(shape) * gain / np.sqrt(shape[0])).astype(np.float32).T)

        weights = {"model.embed_tokens.weight": rng.standard_normal((c.vocab, c.hidden))}
        q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
        for i in range(c.layers):
            p = f"model.layers.{i}."
            weights[p + "input_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(c.hidden)
            for name, shape in (("q_proj", (c.hidden, q)), ("k_proj", (c.hidden, kv)),
                                ("v_proj", (c.hidden, kv)), ("o_proj", (q, c.hidden))):
                weights[f"{p}self_attn.{name}.weight"] = w(*shape)
            weights[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(c.hidden)
            for name, shape in (("gate_proj", (c.hidden, c.mlp)), ("up_proj", (c.hidden, c.mlp)),
                                ("down_proj", (c.mlp, c.hidden))):
                weights[f"{p}mlp.{name}.weight"] = w(*shape)
        weights["model.norm.weight"] = np.ones(c.hidden, np.float32)
        weights["lm_head.weight"] = w(c.hidden, c.vocab, gain=4.0)  # well-spread logits
        for key, shape in tensor_shapes(c).items():  # biases, if the config asks for them
            weights.setdefault(key, 0.1 * rng.standard_normal(shape))
        super().__init__(c, weights, name="TinyModel")


def linear(x: np.ndarray, weight: np.ndarray, bias) -> np.ndarray:
    y = x @ weight.T  # weight [out, in]
    return y if bias is None else y + bias


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    x = x.astype(np.float32)
    return (x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + np.float32(eps)) * weight
            ).astype(np.float32)


def rotary(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """x * cos + rotate_half(x) * sin, rotate_half(x) = (-x[D/2:], x[:D/2]) (Hugging Face)."""
    half = x.shape[-1] // 2
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]  # [T, 1, D/2]
    a, b = x[..., :half], x[..., half:]
    return np.ascontiguousarray(np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1),
                                dtype=np.float32)
