"""The decoder-only transformers the engines serve, in NumPy float32.

    tokens -> embed (x embed_scale) -> [norm -> q,k,v (+bias) (-> q/k norm) -> RoPE on q,k
        -> attention (scale, soft-cap, window) -> o_proj (-> post-norm) -> + (x residual_scale)
        norm -> act(gate) * up -> down (-> post-norm) -> + (x residual_scale)] x layers
        -> norm -> lm_head (/ logit_scale, soft-cap)

One set of equations covers the Hugging Face families hf.py loads; each differs from
Llama (modeling_llama.py) in a few switches of `ModelConfig` (hf_config.py sets them per
family; each field's comment names the families that use it).

Weights keep Hugging Face's names and shapes ([out, in] per linear layer), float32.
Attention is not in here: `qkv` gives a layer's projections, `finish` takes the attention
output back and `attention[layer]` says how the layer reads K/V, so the paged and the dense
engine share the weights. Shapes: T tokens, H query heads, H_kv KV heads, D head_dim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..errors import bool_arg, count_arg
from .moe import moe_mlp
from .ops import activation, gated, linear
from .rope import ROPE_TYPES, RotaryEmbedding

# a layer's weights by short name ("q_proj.weight"); an absent bias is None
Weights = dict[str, Any]
MAX_LAYERS = 4096  # no released model has a tenth of this; more is refused before any table
MAX_PARAMETERS = 1 << 32  # 16 GiB of float32: any larger model is refused before allocating
NORM_LAYOUTS = ("pre", "sandwich", "post")
ACTS = ("silu", "gelu_tanh", "gelu")


@dataclass(frozen=True)
class Attention:
    """How one layer's attention reads K/V; its fields keep the names of vLLM v1's
    attention impls (FlashAttentionImpl's `scale`, `logits_soft_cap`, `sliding_window`)."""

    scale: float  # scores = q . k * scale
    logits_soft_cap: float | None = None  # scores -> cap * tanh(scores / cap) (Gemma 2)
    sliding_window: int | None = None  # attend to the last W positions, itself included


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
    sliding_window: int | None = None  # W of the sliding layers
    layer_types: tuple[str, ...] = ()  # per layer "full"/"sliding"; () = all "sliding" if W
    norm_offset: float = 0.0  # RMSNorm scales by (norm_offset + w): 1 for Gemma
    norm_layout: str = "pre"  # "pre" (Llama), "sandwich" (Gemma 2/3), "post" (OLMo-2)
    qk_norm: str | None = None  # None, "head" (Qwen3, Gemma 3) or "all" (OLMo-2)
    act: str = "silu"  # the MLP's gate activation: silu, gelu_tanh, gelu
    embed_scale: float = 1.0  # embeddings are multiplied by this (Gemma sqrt(hidden), Granite)
    attn_scale: float | None = None  # None: 1 / sqrt(D)
    attn_softcap: float | None = None  # Gemma 2 attn_logit_softcapping
    final_softcap: float | None = None  # Gemma 2 final_logit_softcapping
    residual_scale: float = 1.0  # Granite residual_multiplier
    logit_scale: float = 1.0  # logits are divided by this (Granite logits_scaling)
    rope_scaling: tuple[tuple[str, Any], ...] = ()  # rope_scaling's sorted (key, value)s
    local_rope_base: float | None = None  # sliding layers' rope_theta (Gemma 3)
    no_rope_layers: tuple[int, ...] = ()  # layer indices that skip RoPE (SmolLM3)
    rotary_dim: int | None = None  # R: RoPE on R dims of a head (GPT-NeoX, Phi-2; None: D)
    fused: bool = False  # qkv_proj and gate_up_proj are single tensors (Phi-3)
    rope_switch_recomputes: bool = False  # longrope's switch re-embeds the cache (Phi-3)
    norm: str = "rms"  # "rms", "layer" (LayerNorm + bias: GPT-2...), "layer_nobias" (Cohere)
    mlp_gated: bool = True  # act(gate) * up -> down; False: act(up + b) -> down + b (GPT-2)
    mlp_bias: bool = False  # the MLP's up/down (and gate) projections have biases
    parallel: str | None = None  # attention and MLP read one input: "shared" norm or "two"
    # ("shared": Phi-2, Falcon, Cohere; "two", a norm each: GPT-NeoX)
    learned_positions: int = 0  # > 0: a learned position table of this many rows, no rope (GPT-2)
    lm_head_bias: bool = False  # lm_head has a bias (Phi-2)
    logit_multiplier: float = 1.0  # logits are multiplied by this (Cohere logit_scale)
    rope_interleaved: bool = False  # rope pairs (x[2i], x[2i+1]) (Cohere)
    experts: int = 0  # > 0: the MLP is a mixture of this many gated experts (moe.py)
    experts_per_token: int = 0  # the router's top-k
    router: str = "softmax_topk"  # softmax then top-k, or "topk_softmax" (Granite-MoE)
    norm_topk: bool = False  # renormalise the top-k weights to sum to 1 (Mixtral)
    expert_mlp: int = 0  # an expert's inner width
    shared_mlp: int = 0  # > 0: a shared expert of this width behind a sigmoid gate (Qwen2-MoE)
    dense_layers: tuple[int, ...] = ()  # layers whose MLP stays dense (Qwen2-MoE mlp_only_layers)

    def __post_init__(self) -> None:
        for f in fields(self):
            _check_field(f.name, getattr(self, f.name), f.default)
        if self.heads % self.kv_heads:
            raise ValueError(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        if self.rotary % 2:
            which = "head_dim" if self.rotary_dim is None else "rotary_dim"
            raise ValueError(f"{which} must be even (rotary pairs), got {self.rotary}")
        if self.rotary > self.head_dim:
            raise ValueError(f"rotary_dim {self.rotary} exceeds head_dim {self.head_dim}")
        if self.layer_types and (
            len(self.layer_types) != self.layers
            or any(t not in ("full", "sliding") for t in self.layer_types)
        ):
            raise ValueError(
                f"layer_types must hold 'full' or 'sliding' for each of the "
                f"{self.layers} layers, got {self.layer_types!r}"
            )
        if "sliding" in self.layer_types and self.sliding_window is None:
            raise ValueError("layer_types has sliding layers but sliding_window is None")
        if self.experts and not 0 < self.experts_per_token <= self.experts:
            raise ValueError(
                f"experts_per_token must lie in 1..experts ({self.experts}), "
                f"got {self.experts_per_token}"
            )
        if any(type(i) is not int or not 0 <= i < self.layers for i in self.no_rope_layers):
            raise ValueError(f"no_rope_layers must be layer indices below {self.layers}")
        kind = dict(self.rope_scaling).get("rope_type", "default")
        if kind not in ROPE_TYPES:
            raise ValueError(f"rope_type must be one of {ROPE_TYPES}, got {kind!r}")
        short = dict(self.rope_scaling).get("short_factor")
        if short is not None and len(short) != self.rotary // 2:
            raise ValueError(
                f"longrope short_factor has {len(short)} values; the rotary dims need "
                f"{self.rotary // 2}"
            )
        if self.num_parameters > MAX_PARAMETERS:
            raise ValueError(
                f"the config describes {self.num_parameters:.3g} parameters; at "
                f"most {MAX_PARAMETERS:.3g} ({MAX_PARAMETERS * 4 >> 30} GiB of "
                f"float32) are served"
            )

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    @property
    def rotary(self) -> int:
        return self.head_dim if self.rotary_dim is None else self.rotary_dim

    @property
    def num_parameters(self) -> int:
        """Parameters the config implies, by arithmetic (no table is built)."""
        q, kv, h = self.heads * self.head_dim, self.kv_heads * self.head_dim, self.hidden
        norms = 4 if self.norm_layout == "sandwich" else 2
        qk = {None: 0, "head": 2 * self.head_dim, "all": q + kv}[self.qk_norm]
        per_layer = (q + 2 * kv) * h + q * h + 3 * h * self.mlp + norms * h + qk
        per_layer += (q + 2 * kv) * self.qkv_bias + h * self.o_bias
        per_layer += (self.mlp + h) * self.mlp_bias + norms * h * (self.norm == "layer")
        if self.experts:  # the dense MLP's 3 h mlp become E experts, a router, a shared one
            per_layer += 3 * h * (self.experts * self.expert_mlp + self.shared_mlp - self.mlp)
            per_layer += h * (self.experts + bool(self.shared_mlp))
        table = (2 - self.tie_embeddings) * self.vocab * h + self.learned_positions * h
        return self.layers * per_layer + table + h

    def layer_type(self, layer: int) -> str:
        if self.layer_types:
            return str(self.layer_types[layer])
        return "full" if self.sliding_window is None else "sliding"

    @property
    def windowed(self) -> set[str]:
        """The kinds of layer the model has: {"full"}, {"sliding"} or both (hybrid)."""
        return {self.layer_type(i) for i in range(self.layers)}


POSITIVE = (
    "rope_base rms_eps embed_scale residual_scale logit_scale attn_scale attn_softcap "
    "final_softcap local_rope_base logit_multiplier"
).split()
CHOICES = {
    "norm_layout": NORM_LAYOUTS,
    "act": ACTS,
    "qk_norm": (None, "head", "all"),
    "norm_offset": (0, 1),
    "norm": ("rms", "layer", "layer_nobias"),
    "parallel": (None, "shared", "two"),
    "router": ("softmax_topk", "topk_softmax"),
}


# None or an int >= 1 (the first two), an int >= 0 (the rest)
COUNTS = (
    "sliding_window rotary_dim learned_positions experts experts_per_token expert_mlp shared_mlp"
).split()


def _check_field(name: str, value: Any, default: Any) -> None:
    """One ModelConfig field's type and range."""
    if name == "layers":
        count_arg(name, value, 1, MAX_LAYERS)
    elif name in ("vocab", "heads", "kv_heads", "head_dim", "hidden", "mlp"):
        count_arg(name, value, 1, 1 << 40)
    elif name in POSITIVE:
        if value is None and default is None:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, got {type(value).__name__}")
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value}")
    elif name == "seed":
        count_arg("seed", value, 0, 2**63 - 1)
    elif name in COUNTS:
        if value is not None:
            count_arg(name, value, int(name == "rotary_dim" or name == "sliding_window"))
    elif name in CHOICES:
        if isinstance(value, bool) or value not in CHOICES[name]:
            raise ValueError(f"{name} must be one of {CHOICES[name]}, got {value!r}")
    elif name in ("layer_types", "no_rope_layers", "rope_scaling", "dense_layers"):
        if type(value) is not tuple:
            raise TypeError(f"{name} must be a tuple, got {type(value).__name__}")
    else:
        bool_arg(name, value)


def moe_shapes(c: ModelConfig, p: str) -> dict[str, tuple[int, ...]]:
    """A mixture-of-experts layer's tensors, in place of the dense MLP's (prefix `p`)."""
    shapes: dict[str, tuple[int, ...]] = {p + "mlp.gate.weight": (c.experts, c.hidden)}
    mlps = [(f"{p}mlp.experts.{e}.", c.expert_mlp) for e in range(c.experts)]
    mlps += [(p + "mlp.shared_expert.", c.shared_mlp)] if c.shared_mlp else []
    for q, inner in mlps:
        shapes[q + "gate_proj.weight"] = shapes[q + "up_proj.weight"] = (inner, c.hidden)
        shapes[q + "down_proj.weight"] = (c.hidden, inner)
    if c.shared_mlp:
        shapes[p + "mlp.shared_expert_gate.weight"] = (1, c.hidden)
    return shapes


def _global_shapes(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The tensors outside the layers: embeddings, final norm, head."""
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (c.vocab, c.hidden)}
    shapes["model.norm.weight"] = (c.hidden,)
    if not c.tie_embeddings:
        shapes["lm_head.weight"] = (c.vocab, c.hidden)
    if c.lm_head_bias:
        shapes["lm_head.bias"] = (c.vocab,)
    if c.learned_positions:
        shapes["model.embed_positions.weight"] = (c.learned_positions, c.hidden)
    if c.norm == "layer":
        shapes["model.norm.bias"] = (c.hidden,)
    return shapes


def tensor_shapes(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the model needs: Hugging Face name -> shape."""
    q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
    shapes = _global_shapes(c)
    norms = {
        "pre": ("input_layernorm", "post_attention_layernorm"),
        "sandwich": (
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ),
        "post": ("post_attention_layernorm", "post_feedforward_layernorm"),
    }[c.norm_layout]
    if c.parallel == "shared":
        norms = ("input_layernorm",)
    for i in range(c.layers):
        p = f"model.layers.{i}."
        shapes.update({f"{p}{n}.weight": (c.hidden,) for n in norms})
        if c.norm == "layer":
            shapes.update({f"{p}{n}.bias": (c.hidden,) for n in norms})
        if c.fused:
            shapes[p + "self_attn.qkv_proj.weight"] = (q + 2 * kv, c.hidden)
            shapes[p + "mlp.gate_up_proj.weight"] = (2 * c.mlp, c.hidden)
        else:
            for name, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
                shapes[f"{p}self_attn.{name}.weight"] = (rows, c.hidden)
            shapes[p + "mlp.up_proj.weight"] = (c.mlp, c.hidden)
            if c.mlp_gated:
                shapes[p + "mlp.gate_proj.weight"] = (c.mlp, c.hidden)
        if c.mlp_bias:
            shapes.update({p + "mlp.up_proj.bias": (c.mlp,), p + "mlp.down_proj.bias": (c.hidden,)})
            if c.mlp_gated:
                shapes[p + "mlp.gate_proj.bias"] = (c.mlp,)
        shapes[p + "self_attn.o_proj.weight"] = (c.hidden, q)
        shapes[p + "mlp.down_proj.weight"] = (c.hidden, c.mlp)
        if c.qk_norm:
            per = c.head_dim if c.qk_norm == "head" else None
            shapes[p + "self_attn.q_norm.weight"] = (per or q,)
            shapes[p + "self_attn.k_norm.weight"] = (per or kv,)
        if c.qkv_bias:
            for name, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
                shapes[f"{p}self_attn.{name}.bias"] = (rows,)
        if c.o_bias:
            shapes[p + "self_attn.o_proj.bias"] = (c.hidden,)
        if c.experts and i not in c.dense_layers:
            for n in ("gate_proj", "up_proj", "down_proj"):
                del shapes[f"{p}mlp.{n}.weight"]
            shapes.update(moe_shapes(c, p))
    return shapes


class Transformer:
    info: dict[str, Any]  # what a checkpoint's files said (set by hf.load_model; absent otherwise)

    def __init__(self, config: ModelConfig, weights: dict[str, Any], name: str = "model"):
        """`weights`: name -> array as `tensor_shapes(config)` lists; the layers' entries
        are consumed as their fused copies are made, so loading never holds a layer twice."""
        self.config = c = config
        self.name = name  # what to call it in reports
        want = tensor_shapes(c)
        for key, shape in want.items():
            if key not in weights:
                raise ValueError(f"{name}: missing tensor {key}")
            if tuple(weights[key].shape) != shape:
                raise ValueError(
                    f"{name}: tensor {key} has shape {tuple(weights[key].shape)}, "
                    f"the config implies {shape}"
                )
        w = {k: np.asarray(weights[k], np.float32) for k in want}
        self.embed = w["model.embed_tokens.weight"]  # [V, hidden]
        # [V, hidden] in C order like every projection (ops.linear); a tied head is the
        # embedding itself
        self.lm_head = np.ascontiguousarray(
            self.embed if c.tie_embeddings else w.pop("lm_head.weight")
        )
        weights.pop("lm_head.weight", None)
        self.final_norm = w["model.norm.weight"]
        self.final_norm_bias = w.get("model.norm.bias")
        self.lm_head_bias = w.get("lm_head.bias")
        self.positions = w.get("model.embed_positions.weight")  # [P, hidden] or None
        # per layer: short name ("q_proj.weight") -> array or None
        self.layer_weights = [_layer_weights(c, w, weights, i) for i in range(c.layers)]
        scaling = dict(c.rope_scaling)
        full = RotaryEmbedding(c.rotary, c.rope_base, scaling, c.rope_interleaved)
        local = (
            full
            if c.local_rope_base is None
            else RotaryEmbedding(c.rotary, c.local_rope_base, {}, c.rope_interleaved)
        )
        self.ropes = [  # each layer's RotaryEmbedding, or None (no rope)
            None
            if i in c.no_rope_layers or c.learned_positions
            else local
            if c.layer_type(i) == "sliding"
            else full
            for i in range(c.layers)
        ]
        scale = c.head_dim**-0.5 if c.attn_scale is None else c.attn_scale
        self.attention = [
            Attention(
                scale, c.attn_softcap, c.sliding_window if c.layer_type(i) == "sliding" else None
            )
            for i in range(c.layers)
        ]  # what each layer's attention does

    def check_length(self, prompt: int, max_tokens: int) -> None:
        """Raise if `prompt` + `max_tokens` tokens cannot be served exactly: Phi-3 re-embeds
        its whole KV cache when a sequence passes original_max_position_embeddings, which a
        paged cache (keeping, maybe sharing, the keys it wrote) cannot."""
        rope = next((r for r in self.ropes if r is not None), None)
        if not (self.config.rope_switch_recomputes and rope is not None and rope.threshold):
            return
        if prompt <= rope.threshold < prompt + max_tokens:
            raise ValueError(
                f"prompt {prompt} + max_tokens {max_tokens} crosses "
                f"original_max_position_embeddings {rope.threshold}, where Phi-3 re-embeds "
                f"its whole KV cache with longrope's long factors; served: requests that "
                f"stay within it, or prompts already past it"
            )

    @property
    def num_parameters(self) -> int:
        tensors = [self.embed, self.final_norm] + (
            [] if self.config.tie_embeddings else [self.lm_head]
        )
        tensors += [
            a
            for lw in self.layer_weights
            for k, a in lw.items()
            if a is not None and k not in ("qkv.weight", "gate_up.weight")  # views' owners
        ]
        return sum(a.size for a in tensors)

    def check_tokens(self, tokens: ArrayLike) -> None:
        """Token ids must be ints in [0, vocab)."""
        ids = np.asarray(tokens)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"token ids must be integers, got {ids.dtype}")
        if len(ids) and (ids.min() < 0 or ids.max() >= self.config.vocab):
            raise ValueError(
                f"token ids must lie in [0, {self.config.vocab}), got "
                f"{int(ids.min())} .. {int(ids.max())}"
            )

    def norm(self, x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        c = self.config
        if c.norm != "rms":
            return layer_norm(x, weight, bias, c.rms_eps)
        offset = np.float32(c.norm_offset)
        return rms_norm(x, weight + offset if offset else weight, c.rms_eps)

    def layer_norm_of(self, lw: Weights, name: str, x: np.ndarray) -> np.ndarray:
        return self.norm(x, lw[name + ".weight"], lw.get(name + ".bias"))

    def embed_tokens(self, tokens: ArrayLike, positions: ArrayLike | None = None) -> np.ndarray:
        """[T, hidden]: token embeddings (x embed_scale), plus the learned position
        embeddings (GPT-2) at `positions`."""
        h = self.embed[np.asarray(tokens, np.int64)]  # [T, hidden]
        s = self.config.embed_scale
        h = h if s == 1 else h * np.float32(s)
        if self.positions is not None:
            where = np.asarray(positions, np.int64)
            if len(where) and where.max() >= len(self.positions):
                raise ValueError(
                    f"position {int(where.max())} is past the model's "
                    f"{len(self.positions)} learned positions"
                )
            h = h + self.positions[where]
        return h

    def qkv(
        self, layer: int, h: np.ndarray, positions: ArrayLike, ends: ArrayLike | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """q [T, H, D], k [T, H_kv, D], v [T, H_kv, D] in C order (write_kv takes no strides);
        `ends`: each token's sequence length after this pass (rope.py; None: position + 1)."""
        c, lw = self.config, self.layer_weights[layer]
        x = h if c.norm_layout == "post" else self.layer_norm_of(lw, "input_layernorm", h)
        # [T, (H + 2 H_kv) D] in C order (one copy of the transposed product): the
        # elementwise work below reads rows, and q and k rotate in one call
        y = np.ascontiguousarray(linear(x, lw["qkv.weight"], None))
        nq, nk = c.heads * c.head_dim, (c.heads + c.kv_heads) * c.head_dim
        parts = {"q": slice(0, nq), "k": slice(nq, nk), "v": slice(nk, None)}
        for name, cols in parts.items():
            if lw[f"{name}_proj.bias"] is not None:
                y[:, cols] += lw[f"{name}_proj.bias"]
        if c.qk_norm == "all":  # OLMo-2: over the whole projection
            for name in "qk":
                y[:, parts[name]] = self.norm(y[:, parts[name]], lw[f"{name}_norm.weight"])
        v = y[:, nk:].reshape(-1, c.kv_heads, c.head_dim)
        qk = y[:, :nk].reshape(-1, c.heads + c.kv_heads, c.head_dim)
        if c.qk_norm == "head":  # Qwen3, Gemma 3: over each head's D
            qk[:, : c.heads] = self.norm(qk[:, : c.heads], lw["q_norm.weight"])
            qk[:, c.heads :] = self.norm(qk[:, c.heads :], lw["k_norm.weight"])
        rope = self.ropes[layer]
        if rope is not None:
            qk = rope.apply(qk, rope.angles(positions, ends))  # [T, R/2] angles
        q, k = np.ascontiguousarray(qk[:, : c.heads]), np.ascontiguousarray(qk[:, c.heads :])
        return q, k, np.ascontiguousarray(v)

    def finish(self, layer: int, h: np.ndarray, attn: np.ndarray) -> np.ndarray:
        """The rest of the layer: o_proj and the residual, then the MLP and the residual."""
        c, lw = self.config, self.layer_weights[layer]
        r = np.float32(c.residual_scale)
        o = linear(
            attn.reshape(len(h), -1).astype(np.float32, copy=False),
            lw["o_proj.weight"],
            lw["o_proj.bias"],
        )
        if c.parallel:  # GPT-NeoX, Phi-2, Falcon, Cohere: the MLP reads the layer's input
            second = "input_layernorm" if c.parallel == "shared" else "post_attention_layernorm"
            out: np.ndarray = (o + self.mlp(lw, self.layer_norm_of(lw, second, h))) + h
            return out
        if c.norm_layout != "pre":
            o = self.norm(o, lw["post_attention_layernorm.weight"])
        h = h + (o if r == 1 else o * r)
        x = {
            "pre": lambda: self.layer_norm_of(lw, "post_attention_layernorm", h),
            "sandwich": lambda: self.norm(h, lw["pre_feedforward_layernorm.weight"]),
            "post": lambda: h,
        }[c.norm_layout]()
        m = self.mlp(lw, x)
        if c.norm_layout != "pre":
            m = self.norm(m, lw["post_feedforward_layernorm.weight"])
        done: np.ndarray = h + (m if r == 1 else m * r)
        return done

    def mlp(self, lw: Weights, x: np.ndarray) -> np.ndarray:
        """act(gate) * up -> down, or (not gated) act(up) -> down, biases where present; a
        mixture of experts where the layer has a router (moe.py)."""
        c = self.config
        if "gate.weight" in lw:
            return moe_mlp(c, lw, x)
        if "gate_up.weight" in lw:  # one GEMM: gate | up
            gate_up = linear(x, lw["gate_up.weight"], None)  # fresh: changed in place
            split = len(lw["gate_proj.weight"])
            gate, up = gate_up[:, :split], gate_up[:, split:]
            for part, n in ((gate, "gate_proj.bias"), (up, "up_proj.bias")):
                if lw[n] is not None:
                    part += lw[n]
            inner = gated(c.act, gate, up)
        else:
            up = linear(x, lw["up_proj.weight"], lw["up_proj.bias"])
            inner = (
                activation(c.act, linear(x, lw["gate_proj.weight"], lw["gate_proj.bias"])) * up
                if c.mlp_gated
                else activation(c.act, up)
            )
        return linear(inner, lw["down_proj.weight"], lw["down_proj.bias"])

    def logits(self, h: np.ndarray) -> np.ndarray:
        c = self.config
        x = self.norm(h, self.final_norm, self.final_norm_bias)
        out = linear(x, self.lm_head, self.lm_head_bias)  # [T, V]
        if c.logit_multiplier != 1:
            out = out * np.float32(c.logit_multiplier)
        if c.logit_scale != 1:
            out = out / np.float32(c.logit_scale)
        if c.final_softcap is not None:
            cap = np.float32(c.final_softcap)
            out = np.tanh(out / cap) * cap
        return np.ascontiguousarray(out, dtype=np.float32)  # rows are the sequences'


class TinyModel(Transformer):
    """Seeded random weights for a ModelConfig (the engine's tests and the old default)."""

    def __init__(self, config: ModelConfig = ModelConfig()):
        c = config
        if not isinstance(c, ModelConfig):
            raise TypeError(f"config must be a ModelConfig, got {type(c).__name__}")
        rng = np.random.default_rng(c.seed)

        def w(*shape: int, gain: float = 1.0) -> np.ndarray:  # drawn [in, out], kept [out, in]
            return np.ascontiguousarray(
                (rng.standard_normal(shape) * gain / np.sqrt(shape[0])).astype(np.float32).T
            )

        weights = {"model.embed_tokens.weight": rng.standard_normal((c.vocab, c.hidden))}
        q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
        for i in range(c.layers):
            p = f"model.layers.{i}."
            weights[p + "input_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(c.hidden)
            for name, shape in (
                ("q_proj", (c.hidden, q)),
                ("k_proj", (c.hidden, kv)),
                ("v_proj", (c.hidden, kv)),
                ("o_proj", (q, c.hidden)),
            ):
                weights[f"{p}self_attn.{name}.weight"] = w(*shape)
            weights[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(c.hidden)
            for name, shape in (
                ("gate_proj", (c.hidden, c.mlp)),
                ("up_proj", (c.hidden, c.mlp)),
                ("down_proj", (c.mlp, c.hidden)),
            ):
                weights[f"{p}mlp.{name}.weight"] = w(*shape)
            if c.fused:
                weights[p + "self_attn.qkv_proj.weight"] = np.concatenate(
                    [weights.pop(f"{p}self_attn.{x}_proj.weight") for x in "qkv"]
                )
                weights[p + "mlp.gate_up_proj.weight"] = np.concatenate(
                    [weights.pop(f"{p}mlp.{x}_proj.weight") for x in ("gate", "up")]
                )
        weights["model.norm.weight"] = np.ones(c.hidden, np.float32)
        weights["lm_head.weight"] = w(c.hidden, c.vocab, gain=4.0)  # well-spread logits
        for key, dims in tensor_shapes(c).items():  # norms and biases the config asks for
            weights.setdefault(
                key,
                (key.endswith("norm.weight") and not c.norm_offset)
                + 0.1 * rng.standard_normal(dims),
            )
        super().__init__(c, weights, name="TinyModel")


def _layer_weights(c: ModelConfig, w: Weights, weights: dict[str, Any], i: int) -> Weights:
    """Layer i's weights under short names, fused for one GEMM each (q, k, v and gate, up),
    every projection [out, in] in C order, experts stacked; the layer's entries leave `w`
    and the caller's `weights` as they are taken."""
    q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
    p = f"model.layers.{i}."
    lw = {
        k[len(p) :].split(".", 1)[-1]
        if k[len(p) :].startswith(("self_attn", "mlp"))
        else k[len(p) :]: v
        for k, v in w.items()
        if k.startswith(p)
    }
    for k in [k for k in w if k.startswith(p)]:  # lw holds them now; the fused
        del w[k]  # copies below replace them one by one
        weights.pop(k, None)
    if c.fused:  # Phi-3 saves rows [q | k | v] and [gate | up]: split here, fused below
        qkv, gate_up = lw.pop("qkv_proj.weight"), lw.pop("gate_up_proj.weight")
        lw["q_proj.weight"], lw["k_proj.weight"], lw["v_proj.weight"] = np.split(qkv, [q, q + kv])
        lw["gate_proj.weight"], lw["up_proj.weight"] = np.split(gate_up, [c.mlp])
    # one GEMM for q, k, v (and gate, up): the separate names become row views
    _fuse(lw, ("q_proj", "k_proj", "v_proj"), "qkv")
    if c.mlp_gated and "gate_proj.weight" in lw:
        _fuse(lw, ("gate_proj", "up_proj"), "gate_up")
    for n in ("up_proj.weight", "o_proj.weight", "down_proj.weight"):
        if n in lw:  # [out, in] in C order (ops.linear); fused rows already are
            lw[n] = np.ascontiguousarray(lw[n])
    for n in BIASES:
        lw.setdefault(n, None)
    if "gate.weight" in lw:  # a mixture of experts: each projection stacked [E, ...]
        for n in ("gate_proj", "up_proj", "down_proj"):
            lw[f"experts.{n}"] = np.stack(
                [lw.pop(f"experts.{e}.{n}.weight") for e in range(c.experts)]
            )
    return lw


def _fuse(lw: Weights, names: tuple[str, ...], fused: str) -> None:
    """lw[fused.weight] = the rows of `names` stacked, [sum of outs, in] in C order (one GEMM
    for all of them); each name becomes a row view of it."""
    parts = [lw[n + ".weight"] for n in names]
    whole = np.concatenate(parts, axis=0)
    lw[fused + ".weight"] = whole
    start = 0
    for n, part in zip(names, parts, strict=True):
        lw[n + ".weight"] = whole[start : start + len(part)]
        start += len(part)


BIASES = tuple(
    f"{n}.bias"
    for n in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
)


def layer_norm(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, eps: float
) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) * w (+ b), float32 (torch's LayerNorm; Cohere's has no b)."""
    x = x.astype(np.float32, copy=False)
    centred = x - x.mean(axis=-1, keepdims=True)
    out = centred / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + np.float32(eps))
    out = out * weight
    done: np.ndarray = (out if bias is None else out + bias).astype(np.float32, copy=False)
    return done


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * w in float32, operation for operation as
    `(x * x).mean(-1)` rounds (a float32 sum divided by the count in float64), without
    the temporaries: a norm runs twice a layer, on a few rows in decode."""
    x = x.astype(np.float32, copy=False)
    square = x * x
    scale = np.add.reduce(square, axis=-1, keepdims=True)
    np.true_divide(scale, np.intp(x.shape[-1]), out=scale, casting="unsafe")
    scale += np.float32(eps)
    np.sqrt(scale, out=scale)
    done: np.ndarray = np.divide(x, scale, out=square)
    done *= weight
    return done
