"""Where each family's checkpoint keeps its tensors, and how they become the model's.

model.py names every tensor as Llama does (`model.layers.{i}.self_attn.q_proj.weight`,
[out, in]). Most families save exactly those names; the classic ones (GPT-2, GPT-NeoX,
Phi-2, Falcon, Starcoder2) rename them, GPT-2 as transposed Conv1D weights, and GPT-NeoX
and Falcon fuse q, k and v into one query_key_value (rows per head for GPT-NeoX, [q heads
| k | v] for Falcon). The names are data, in layouts.toml. `tensor_map(family, config)`
lists, per checkpoint tensor, its shape and the model tensors it becomes: (model name,
transposed?, the rows taken -- None for all).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..io import tables
from .model import ModelConfig, tensor_shapes

LAYOUTS: dict[str, dict[str, Any]] = tables.beside(__file__)
MIXTRAL_EXPERT = {"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}
FUSED_QKV = {f: t["fused_qkv"] for f, t in LAYOUTS.items() if "fused_qkv" in t}
CONV1D = ("gpt2",)  # weights saved [in, out]


def layer_prefix(family: str) -> str:
    prefix: str = LAYOUTS.get(family, {}).get("prefix", "model.layers.{}.")
    return prefix


def _qkv_rows(family: str, c: ModelConfig) -> tuple[np.ndarray, ...]:
    """(q rows, k rows, v rows) of the fused projection, in the model's head order."""
    d, h, kv = c.head_dim, c.heads, c.kv_heads
    if family == "gpt_neox":  # per head: q_h, k_h, v_h
        base = np.arange(h)[:, None] * 3 * d + np.arange(d)[None, :]
        return tuple((base + part * d).reshape(-1) for part in range(3))
    q = np.arange(h * d)  # GPT-2 columns, Falcon rows: all q, then k, then v
    return q, h * d + np.arange(kv * d), h * d + kv * d + np.arange(kv * d)


def tensor_map(family: str, c: ModelConfig) -> dict[str, tuple[Any, list[Any]]]:
    """checkpoint name -> (shape, [(model name, transposed, rows or None)])."""
    shapes = tensor_shapes(c)
    prefix = layer_prefix(family)
    globals_, renamed = (LAYOUTS.get(family, {}).get(k, {}) for k in ("globals", "renamed"))
    conv = family in CONV1D
    out: dict[str, tuple[Any, list[Any]]] = {}
    for name, shape in shapes.items():
        if not name.startswith("model.layers."):
            source = globals_.get(name, name)
            out[source] = (shape, [(name, False, None)])
            continue
        index, short = name[len("model.layers.") :].split(".", 1)
        stem, kind = short.rsplit(".", 1)
        if family in FUSED_QKV and stem in (
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
        ):
            continue
        if stem.startswith("mlp.experts.") and family in ("mixtral", "granitemoe"):
            if family == "granitemoe":
                continue  # below: three tensors per layer hold every expert
            _, _, e, proj = stem.split(".")
            stem = f"block_sparse_moe.experts.{e}.{MIXTRAL_EXPERT[proj]}"
        source = prefix.format(index) + renamed.get(stem, stem) + "." + kind
        flip = conv and kind == "weight" and len(shape) == 2
        out[source] = (shape[::-1] if flip else shape, [(name, flip, None)])
    if family == "granitemoe":
        out.update(_granite_experts(c, prefix))
    if family in FUSED_QKV:
        rows = _qkv_rows(family, c)
        total = (c.heads + 2 * c.kv_heads) * c.head_dim
        for i in range(c.layers):
            source = prefix.format(i) + FUSED_QKV[family]
            parts = [f"model.layers.{i}.self_attn.{x}_proj" for x in "qkv"]
            out[source + ".weight"] = (
                (c.hidden, total) if conv else (total, c.hidden),
                [(p + ".weight", conv, r) for p, r in zip(parts, rows, strict=True)],
            )
            if c.qkv_bias:
                out[source + ".bias"] = (
                    (total,),
                    [(p + ".bias", False, r) for p, r in zip(parts, rows, strict=True)],
                )
    return out


def _granite_experts(c: ModelConfig, prefix: str) -> dict[str, tuple[Any, list[Any]]]:
    """Granite-MoE's experts: input_linear [E, 2 x inner, hidden] (gate rows, then up) and
    output_linear [E, hidden, inner] per layer."""
    out: dict[str, tuple[Any, list[Any]]] = {}
    n, inner = c.experts, c.expert_mlp
    for i in range(c.layers):
        q, to = prefix.format(i) + "block_sparse_moe.", f"model.layers.{i}.mlp.experts."
        out[q + "input_linear.weight"] = (
            (n, 2 * inner, c.hidden),
            [(f"{to}{e}.gate_proj.weight", False, (e, slice(0, inner))) for e in range(n)]
            + [(f"{to}{e}.up_proj.weight", False, (e, slice(inner, None))) for e in range(n)],
        )
        out[q + "output_linear.weight"] = (
            (n, c.hidden, inner),
            [(f"{to}{e}.down_proj.weight", False, (e,)) for e in range(n)],
        )
    return out


def convert(array: np.ndarray, transposed: bool, rows: Any) -> np.ndarray:
    """One model tensor from a checkpoint tensor."""
    a = array.T if transposed else array
    return np.ascontiguousarray(a if rows is None else a[rows], dtype=np.float32)
