"""Rotary position embeddings, every rope_type hf_rope.py reads, as transformers computes them.

    angle[t, i] = position[t] * inv_freq[i]          i < R/2, R = rotary dims of a head
    q' = q * cos(angle) * a + rotate(q) * sin(angle) * a     a = the attention factor

`inv_freq` per rope_type (transformers' modeling_rope_utils.py, float32 like torch):

    default    1 / base^(2i/R)
    linear     default / factor
    llama3     Llama 3.1's smooth blend of default and default / factor by wavelength
    yarn       default blended with default / factor over the dims between the correction
               range [low, high] found from beta_fast / beta_slow; a = attention_factor, or
               mscale's 0.1 * m * ln(factor) + 1 (a ratio of two when mscale_all_dim is set)
    longrope   1 / (ext * base^(2i/R)): ext = short_factor while the sequence is within
               original_max_position_embeddings, long_factor past it
    dynamic    NTK: base' = base * (factor * L / M - (factor - 1))^(R / (R - 2)), L the
               sequence length, M max_position_embeddings; default while L <= M

longrope and dynamic read the sequence's length as transformers does: a forward pass whose
last position is p uses L = p + 1 for all its tokens, and cached keys keep the rope they
were written with (vLLM's dynamic rope is static, its longrope picks factors per batch).
`rotate` is `rotate_half` (pairs x[i], x[i + R/2]) or interleaved (x[2i], x[2i + 1]; Cohere).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

ROPE_TYPES = ("default", "linear", "llama3", "yarn", "longrope", "dynamic")


def _exponents(dim: int) -> np.ndarray:
    out: np.ndarray = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    return out


def _default(dim: int, base: float) -> np.ndarray:
    out: np.ndarray = np.float32(1.0) / np.float32(base) ** _exponents(dim)
    return out.astype(np.float32)


def _llama3(inv: np.ndarray, s: dict[str, Any]) -> np.ndarray:
    factor, low, high = (
        np.float32(s[k]) for k in ("factor", "low_freq_factor", "high_freq_factor")
    )
    old = np.float32(s["original_max_position_embeddings"])
    wavelen = np.float32(2 * math.pi) / inv
    scaled = np.where(wavelen > old / low, inv / factor, inv).astype(np.float32)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature 0.1 * mscale * ln(factor) + 1 (1 for factor <= 1)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _yarn(dim: int, base: float, s: dict[str, Any]) -> tuple[np.ndarray, float]:
    """(inv_freq, attention factor) of YaRN: extrapolated (default) frequencies for the
    fast-rotating dims, interpolated (/ factor) for the slow ones, a linear ramp between."""
    factor = s["factor"]
    attention = s.get("attention_factor")
    if attention is None:
        m, m_all = s.get("mscale"), s.get("mscale_all_dim")
        attention = (
            yarn_mscale(factor, m) / yarn_mscale(factor, m_all)
            if m and m_all
            else yarn_mscale(factor)
        )
    original = s["original_max_position_embeddings"]

    def correction(rotations: float) -> float:  # the dim that turns `rotations` times
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction(s["beta_fast"]), correction(s["beta_slow"])
    if s["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as transformers: no zero-width ramp
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
    keep = (1 - ramp.astype(np.float32)).astype(np.float32)  # weight of the extrapolated freqs
    powers = np.float32(base) ** _exponents(dim)
    extrapolated = (np.float32(1.0) / powers).astype(np.float32)
    interpolated = (np.float32(1.0) / (np.float32(factor) * powers)).astype(np.float32)
    inv = interpolated * (1 - keep) + extrapolated * keep
    return inv.astype(np.float32), float(attention)


class RotaryEmbedding:
    """One layer kind's rope: `angles(positions, ends)` and the attention `factor`."""

    def __init__(self, dim: int, base: float, scaling: dict[str, Any], interleaved: bool = False):
        self.dim, self.base, self.interleaved = dim, float(base), interleaved
        self.kind = kind = scaling.get("rope_type", "default")
        if kind not in ROPE_TYPES:
            raise ValueError(f"rope_type must be one of {ROPE_TYPES}, got {kind!r}")
        self.scaling = scaling
        self.factor = 1.0
        self.long_inv_freq = np.zeros(0, np.float32)  # longrope's long frequencies
        self.threshold = None  # longrope and dynamic: the length past which they change
        inv = _default(dim, base)
        if kind == "linear":
            inv = (inv / np.float32(scaling["factor"])).astype(np.float32)
        elif kind == "llama3":
            inv = _llama3(inv, scaling)
        elif kind == "yarn":
            inv, self.factor = _yarn(dim, base, scaling)
        elif kind == "longrope":
            ext = np.asarray(scaling["short_factor"], np.float32)
            inv = (np.float32(1.0) / (ext * np.float32(base) ** _exponents(dim))).astype(np.float32)
            long = np.asarray(scaling["long_factor"], np.float32)
            self.long_inv_freq = (
                np.float32(1.0) / (long * np.float32(base) ** _exponents(dim))
            ).astype(np.float32)
            self.factor = float(scaling["attention_factor"])
            self.threshold = int(scaling["original_max_position_embeddings"])
        elif kind == "dynamic":
            self.threshold = int(scaling["max_position_embeddings"])
        self.inv_freq = inv  # float32 [R/2]: the frequencies of a short sequence

    def inv_freq_at(self, length: int) -> np.ndarray:
        """The frequencies a forward pass over a sequence of `length` tokens uses."""
        if self.threshold is None or length <= self.threshold:
            return self.inv_freq
        if self.kind == "longrope":
            return self.long_inv_freq
        factor, m, dim = self.scaling["factor"], self.threshold, self.dim
        f32 = np.float32
        stretch = (f32(factor) * f32(length) / f32(m) - f32(factor - 1)) ** f32(dim / (dim - 2))
        base = f32(self.base) * stretch
        out: np.ndarray = f32(1.0) / base ** _exponents(dim)
        return out.astype(np.float32)

    def angles(self, positions: ArrayLike, ends: ArrayLike | None = None) -> np.ndarray:
        """float32 [T, R/2]; `ends[t]`: the length of token t's sequence at the end of the
        forward pass that embeds it (None: position + 1, one decode step per token)."""
        pos = np.asarray(positions, np.float32)
        if self.threshold is None:
            plain: np.ndarray = pos[:, None] * self.inv_freq[None, :]
            return plain
        lengths = (
            np.asarray(positions, np.int64) + 1 if ends is None else np.asarray(ends, np.int64)
        )
        out = np.empty((len(pos), len(self.inv_freq)), np.float32)
        for length in np.unique(lengths):
            rows = lengths == length
            out[rows] = pos[rows, None] * self.inv_freq_at(int(length))[None, :]
        return out

    def apply(self, x: np.ndarray, angles: np.ndarray) -> np.ndarray:
        """x [T, heads, D] rotated on its first R dims."""
        return rotary(x, angles, self.factor, self.interleaved)


def rotary(
    x: np.ndarray, angles: np.ndarray, factor: float = 1.0, interleaved: bool = False
) -> np.ndarray:
    """x * cos + rotate(x) * sin on the first R dims; cos and sin scaled by the rope's
    attention factor (longrope, yarn). rotate_half: pairs (x[i], x[i + R/2]) (Hugging Face);
    interleaved: pairs (x[2i], x[2i + 1]) (Cohere)."""
    half = angles.shape[-1]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]  # [T, 1, R/2]
    if factor != 1:
        cos, sin = cos * np.float32(factor), sin * np.float32(factor)
    if interleaved:
        a, b, rest = x[..., 0 : 2 * half : 2], x[..., 1 : 2 * half : 2], x[..., 2 * half :]
        turned = np.stack([a * cos - b * sin, b * cos + a * sin], axis=-1)
        turned = turned.reshape(*x.shape[:-1], 2 * half)
        return np.ascontiguousarray(np.concatenate([turned, rest], axis=-1), dtype=np.float32)
    a, b = x[..., :half], x[..., half : 2 * half]
    out = np.empty(x.shape, np.float32)  # written in place: a * cos - b * sin, b * cos + a * sin
    first, second = out[..., :half], out[..., half : 2 * half]
    np.multiply(a, cos, out=first)
    first -= b * sin
    np.multiply(b, cos, out=second)
    second += a * sin
    out[..., 2 * half :] = x[..., 2 * half :]
    return out
