"""Tiny checkpoints of every family written with safetensors (no torch), and an
independent NumPy float64 forward that reads them.

`write_family(DIR, name)` writes tests/engine/families.py's config.json and
generation_config.json and random weights under the tensor names each family's
save_pretrained uses. `reference_greedy` decodes with its own float64 forward written
from the transformers modeling files' equations in their own shape (per-family code
paths, not pagedsim.engine.model's switches), applying the generation config's
repetition_penalty and EOS ids as transformers' generate(do_sample=False) does.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from .families import config_json, generation_json


def _layout(cfg: dict) -> dict:
    """What the family's modeling file builds, read from config.json by this test alone."""
    arch = cfg["architectures"][0]
    fam = arch.replace("ForCausalLM", "").lower()
    heads, hidden = cfg["num_attention_heads"], cfg["hidden_size"]
    d = cfg.get("head_dim") or hidden // heads
    return dict(
        fam=fam,
        heads=heads,
        kv=cfg.get("num_key_value_heads", heads),
        d=d,
        hidden=hidden,
        layers=cfg["num_hidden_layers"],
        mlp=cfg["intermediate_size"],
        vocab=cfg["vocab_size"],
        gemma=fam.startswith("gemma"),
        tied=cfg.get("tie_word_embeddings", fam.startswith("gemma")),
    )


def write_family(directory, name: str, seed: int = 0) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cfg = config_json(name)
    lay = _layout(cfg)
    rng = np.random.default_rng(seed)
    h, q, kv, mlp, fam = (
        lay["hidden"],
        lay["heads"] * lay["d"],
        lay["kv"] * lay["d"],
        lay["mlp"],
        lay["fam"],
    )

    def w(*shape, gain=1.0):
        return gain * rng.standard_normal(shape) / math.sqrt(shape[-1])

    def norm(n):
        return (0.0 if lay["gemma"] else 1.0) + 0.1 * rng.standard_normal(n)

    embed_std = 0.5 / (
        math.sqrt(h) if lay["gemma"] else math.sqrt(cfg.get("embedding_multiplier", 1.0))
    )
    out_gain = 2.0 / cfg.get("residual_multiplier", 1.0)
    t = {
        "model.embed_tokens.weight": embed_std * rng.standard_normal((lay["vocab"], h)),
        "model.norm.weight": norm(h),
    }
    if not lay["tied"]:
        t["lm_head.weight"] = w(lay["vocab"], h, gain=3.0)
    for i in range(lay["layers"]):
        p = f"model.layers.{i}."
        norms = {
            "olmo2": ["post_attention_layernorm", "post_feedforward_layernorm"],
            "gemma2": [
                "input_layernorm",
                "post_attention_layernorm",
                "pre_feedforward_layernorm",
                "post_feedforward_layernorm",
            ],
        }
        norms["gemma3"] = norms["gemma2"]
        for n in norms.get(fam, ["input_layernorm", "post_attention_layernorm"]):
            t[p + n + ".weight"] = norm(h)
        if fam == "phi3":
            t[p + "self_attn.qkv_proj.weight"] = w(q + 2 * kv, h)
            t[p + "mlp.gate_up_proj.weight"] = w(2 * mlp, h)
        else:
            for n, rows in (("q", q), ("k", kv), ("v", kv)):
                t[f"{p}self_attn.{n}_proj.weight"] = w(rows, h)
                if fam == "qwen2":
                    t[f"{p}self_attn.{n}_proj.bias"] = 0.5 * rng.standard_normal(rows)
            t[p + "mlp.gate_proj.weight"] = w(mlp, h)
            t[p + "mlp.up_proj.weight"] = w(mlp, h)
        t[p + "self_attn.o_proj.weight"] = w(h, q, gain=out_gain)
        t[p + "mlp.down_proj.weight"] = w(h, mlp, gain=out_gain)
        if fam in ("qwen3", "gemma3"):
            t[p + "self_attn.q_norm.weight"] = norm(lay["d"])
            t[p + "self_attn.k_norm.weight"] = norm(lay["d"])
        if fam == "olmo2":
            t[p + "self_attn.q_norm.weight"] = norm(q)
            t[p + "self_attn.k_norm.weight"] = norm(kv)
    save_file(
        {k: np.ascontiguousarray(v, np.float32) for k, v in t.items()},
        str(directory / "model.safetensors"),
    )
    (directory / "config.json").write_text(json.dumps(cfg, indent=1))
    (directory / "generation_config.json").write_text(json.dumps(generation_json(name)))
    return directory


def _inv_freq(cfg: dict, d: int, theta: float, scaling) -> tuple:
    """(inv_freq, cos/sin factor): modeling_rope_utils' default, llama3 and longrope."""
    inv = 1.0 / theta ** (np.arange(0, d, 2) / d)
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind == "llama3":
        f, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        out = []
        for x in inv:
            wavelen = 2 * math.pi / x
            if wavelen < old / hi:
                out.append(x)
            elif wavelen > old / lo:
                out.append(x / f)
            else:
                s = (old / wavelen - lo) / (hi - lo)
                out.append((1 - s) * x / f + s * x)
        return np.array(out), 1.0
    if kind == "linear":
        return inv / scaling["factor"], 1.0
    if kind == "longrope":
        original = cfg["original_max_position_embeddings"]
        factor = scaling.get("factor") or cfg["max_position_embeddings"] / original
        att = math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1 else 1.0
        return 1.0 / (np.array(scaling["short_factor"]) * theta ** (np.arange(0, d, 2) / d)), att
    return inv, 1.0


def _plan(cfg: dict, lay: dict) -> tuple:
    """(window, sliding per layer, no-rope per layer, attention scale) of the family."""
    fam = lay["fam"]
    window = cfg.get("sliding_window")
    if fam in ("qwen2", "qwen3", "smollm3") and not cfg.get("use_sliding_window"):
        window = None
    if fam in ("llama", "gemma", "olmo2", "granite"):
        window = None
    pattern = {"gemma2": 2, "gemma3": cfg.get("sliding_window_pattern", 6)}.get(fam)
    first = cfg.get("max_window_layers", 0) if fam in ("qwen2", "qwen3") else 0
    sliding = [
        window is not None and i >= first and (pattern is None or (i + 1) % pattern != 0)
        for i in range(lay["layers"])
    ]
    no_rope = [f == 0 for f in cfg.get("no_rope_layers", [1] * lay["layers"])]
    scale = lay["d"] ** -0.5
    if fam in ("gemma2", "gemma3"):
        scale = cfg["query_pre_attn_scalar"] ** -0.5
    if fam == "granite":
        scale = cfg["attention_multiplier"]
    return window, sliding, no_rope, scale


def _rope(z, rd: int, cos, sin):
    """rotate_half RoPE on the first rd dims of each head (the rest pass through)."""
    r, rest = z[..., :rd], z[..., rd:]
    turned = np.concatenate([-r[..., rd // 2 :], r[..., : rd // 2]], -1)
    return np.concatenate([r * cos + turned * sin, rest], -1)


def _act(gemma: bool, x):
    """Gemma's gelu_pytorch_tanh, or SiLU."""
    if gemma:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return x / (1 + np.exp(-x))


def _softmax_attend(s, vv, allowed):
    s = np.where(allowed, s, -np.inf)
    a = np.exp(s - s.max(-1, keepdims=True))
    return (a / a.sum(-1, keepdims=True)) @ vv


def reference_logits(directory, ids) -> np.ndarray:
    """[T, V] float64 logits of one sequence from the files alone."""
    from .checkpoints import read_tensors

    cfg = json.loads((Path(directory) / "config.json").read_text())
    lay = _layout(cfg)
    t = read_tensors(directory)
    fam, H, KV, d, n = lay["fam"], lay["heads"], lay["kv"], lay["d"], len(ids)
    eps = cfg.get("rms_norm_eps", 1e-6)
    gemma = lay["gemma"]

    def rms(x, weight):
        y = x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)
        return y * (1 + weight) if gemma else y * weight

    def proj(x, name):
        y = x @ t[name + ".weight"].T
        return y + t[name + ".bias"] if name + ".bias" in t else y

    window, sliding, no_rope, scale = _plan(cfg, lay)
    residual = cfg.get("residual_multiplier", 1.0)
    x = t["model.embed_tokens.weight"][np.asarray(ids)]
    x = x * (math.sqrt(lay["hidden"]) if gemma else cfg.get("embedding_multiplier", 1.0))
    pos = np.arange(n)
    for i in range(lay["layers"]):
        p = f"model.layers.{i}."
        theta = cfg.get("rope_theta", 10000.0)
        scaling = cfg.get("rope_scaling")
        if fam == "gemma3" and sliding[i]:
            theta, scaling = cfg["rope_local_base_freq"], None
        rd = int(d * cfg.get("partial_rotary_factor", 1.0))  # Phi-4-mini rotates 3/4
        inv, att = _inv_freq(cfg, rd, theta, scaling)
        emb = np.concatenate([pos[:, None] * inv] * 2, -1)
        cos, sin = att * np.cos(emb)[None], att * np.sin(emb)[None]  # [1, T, D]
        hin = x if fam == "olmo2" else rms(x, t[p + "input_layernorm.weight"])
        qq, kk, vv = (
            np.split(hin @ t[p + "self_attn.qkv_proj.weight"].T, [H * d, H * d + KV * d], -1)
            if fam == "phi3"
            else (proj(hin, f"{p}self_attn.{c}_proj") for c in "qkv")
        )
        if fam == "olmo2":
            qq = rms(qq, t[p + "self_attn.q_norm.weight"])
            kk = rms(kk, t[p + "self_attn.k_norm.weight"])
        qq = qq.reshape(n, H, d).transpose(1, 0, 2)
        kk = kk.reshape(n, KV, d).transpose(1, 0, 2)
        vv = vv.reshape(n, KV, d).transpose(1, 0, 2)
        if fam in ("qwen3", "gemma3"):
            qq = rms(qq, t[p + "self_attn.q_norm.weight"])
            kk = rms(kk, t[p + "self_attn.k_norm.weight"])
        if not no_rope[i]:
            qq, kk = _rope(qq, rd, cos, sin), _rope(kk, rd, cos, sin)
        kk, vv = np.repeat(kk, H // KV, 0), np.repeat(vv, H // KV, 0)
        s = qq @ kk.transpose(0, 2, 1) * scale
        if cfg.get("attn_logit_softcapping") and fam == "gemma2":
            c = cfg["attn_logit_softcapping"]
            s = c * np.tanh(s / c)
        allowed = pos[None, :] <= pos[:, None]
        if sliding[i]:
            allowed &= pos[None, :] > pos[:, None] - window
        attn = _softmax_attend(s, vv, allowed)
        o = proj(attn.transpose(1, 0, 2).reshape(n, H * d), p + "self_attn.o_proj")
        if fam in ("gemma2", "gemma3", "olmo2"):
            o = rms(o, t[p + "post_attention_layernorm.weight"])
        x = x + o * residual
        hm = (
            x
            if fam == "olmo2"
            else rms(
                x,
                t[
                    p
                    + (
                        "pre_feedforward_layernorm.weight"
                        if fam in ("gemma2", "gemma3")
                        else "post_attention_layernorm.weight"
                    )
                ],
            )
        )
        gate, up = (
            np.split(hm @ t[p + "mlp.gate_up_proj.weight"].T, 2, -1)
            if fam == "phi3"
            else (proj(hm, p + "mlp.gate_proj"), proj(hm, p + "mlp.up_proj"))
        )
        m = proj(_act(gemma, gate) * up, p + "mlp.down_proj")
        if fam in ("gemma2", "gemma3", "olmo2"):
            m = rms(m, t[p + "post_feedforward_layernorm.weight"])
        x = x + m * residual
    head = t.get("lm_head.weight", t["model.embed_tokens.weight"])
    logits = rms(x, t["model.norm.weight"]) @ head.T / cfg.get("logits_scaling", 1.0)
    if fam == "gemma2" and cfg.get("final_logit_softcapping"):
        c = cfg["final_logit_softcapping"]
        logits = c * np.tanh(logits / c)
    return logits


def reference_greedy(directory, prompt, max_tokens: int) -> list:
    """generate(do_sample=False) with the file's repetition_penalty and EOS ids."""
    gen = json.loads((Path(directory) / "generation_config.json").read_text())
    penalty = gen.get("repetition_penalty", 1.0)
    eos = gen.get("eos_token_id", [])
    eos = [eos] if isinstance(eos, int) else eos
    ids = list(prompt)
    for _ in range(max_tokens):
        row = reference_logits(directory, ids)[-1]
        seen = np.unique(ids)
        row[seen] = np.where(row[seen] < 0, row[seen] * penalty, row[seen] / penalty)
        ids.append(int(np.argmax(row)))
        if ids[-1] in eos:
            break
    return ids[len(prompt) :]
