"""A mixture-of-experts MLP (Mixtral, Qwen2-MoE, OLMoE, Granite-MoE), as transformers routes.

    router logits = x @ gate.T                         [T, E], float32
    softmax_topk  (Mixtral, Qwen2-MoE, OLMoE): p = softmax(logits); the top-k p's, divided
                  by their sum when norm_topk (Mixtral always; the others' norm_topk_prob)
    topk_softmax  (Granite-MoE): the top-k logits, then a softmax over those k
    out[t] = sum over t's k experts e, in expert order: w[t, e] * down_e(act(gate_e x) * up_e x)
           (+ sigmoid(x @ shared_expert_gate.T) * shared_expert(x), Qwen2-MoE)

Only the MLP changes: attention, and so the KV cache and its blocks, are a dense model's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .ops import activation, linear

if TYPE_CHECKING:  # model.py imports this module: the config type is for the checker only
    from .model import ModelConfig


def route(c: ModelConfig, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(experts [T, k] ordered by weight, weights [T, k]) as transformers' routers give them."""
    k = c.experts_per_token
    if c.router == "topk_softmax":
        chosen = np.argsort(-logits, axis=-1, kind="stable")[:, :k]
        top = np.take_along_axis(logits, chosen, axis=-1)
        w = np.exp(top - top.max(axis=-1, keepdims=True))
        return chosen, (w / w.sum(axis=-1, keepdims=True)).astype(np.float32)
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p = (p / p.sum(axis=-1, keepdims=True)).astype(np.float32)
    chosen = np.argsort(-p, axis=-1, kind="stable")[:, :k]
    w = np.take_along_axis(p, chosen, axis=-1)
    if c.norm_topk:
        w = w / w.sum(axis=-1, keepdims=True)
    return chosen, w.astype(np.float32)


def moe_mlp(c: ModelConfig, lw: dict[str, Any], x: np.ndarray) -> np.ndarray:
    """The layer's mixture of experts over x [T, hidden]."""
    chosen, weights = route(c, (x @ lw["gate.weight"].T).astype(np.float32))
    out = np.zeros_like(x, dtype=np.float32)
    gate, up, down = lw["experts.gate_proj"], lw["experts.up_proj"], lw["experts.down_proj"]
    for e in np.unique(chosen):  # ascending, as transformers adds them
        rows, slot = np.nonzero(chosen == e)
        xe = x[rows]
        y = (activation(c.act, xe @ gate[e].T) * (xe @ up[e].T)) @ down[e].T
        np.add.at(out, rows, y * weights[rows, slot][:, None])
    if "shared_expert_gate.weight" in lw:
        inner = activation(c.act, x @ lw["shared_expert.gate_proj.weight"].T)
        shared = (inner * (x @ lw["shared_expert.up_proj.weight"].T)) @ lw[
            "shared_expert.down_proj.weight"
        ].T
        g = linear(x, lw["shared_expert_gate.weight"], None)
        out = out + shared * (1 / (1 + np.exp(-g)))
    return out
