"""The model's in-place building blocks give the bits of their plain formulas: RMSNorm
(`(x * x).mean`), the gated SiLU (`x / (1 + exp(-x)) * up`) and rotate_half RoPE
(`a cos - b sin | b cos + a sin | rest`), on random float32 rows, C order or strided (the
q/k heads are row views of the fused projection)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedsim.engine.model import rms_norm
from pagedsim.engine.ops import activation, gated
from pagedsim.engine.rope import rotary


@st.composite
def rows(draw, width=None):
    """(x, rng): float32 [T, width], spread over many magnitudes, maybe a strided view."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    t, w = draw(st.integers(1, 9)), width or draw(st.integers(1, 70))
    scale = np.float32(10.0 ** draw(st.integers(-3, 3)))
    x = (rng.standard_normal((t, 2 * w)) * scale).astype(np.float32)
    return (x[:, ::2] if draw(st.booleans()) else x[:, :w]), rng


@settings(max_examples=100)
@given(case=rows(), eps=st.sampled_from([1e-6, 1e-5]))
def test_rms_norm_is_the_mean_formula_to_the_bit(case, eps):
    x, rng = case
    weight = rng.standard_normal(x.shape[-1]).astype(np.float32)
    plain = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + np.float32(eps)) * weight
    before = x.copy()
    np.testing.assert_array_equal(rms_norm(x, weight, eps), plain.astype(np.float32))
    np.testing.assert_array_equal(x, before)  # its input is left alone


@settings(max_examples=100)
@given(case=rows())
def test_gated_silu_is_the_plain_product_to_the_bit(case):
    gate, rng = case
    up = rng.standard_normal(gate.shape).astype(np.float32)
    with np.errstate(over="ignore"):  # exp(-x) of a large negative x is inf: silu 0 alike
        plain = activation("silu", gate) * up
        np.testing.assert_array_equal(gated("silu", gate.copy(), up), plain)


@settings(max_examples=100)
@given(case=rows(), heads=st.integers(1, 4), half=st.integers(1, 8), rest=st.integers(0, 6))
def test_rotate_half_rope_is_the_concatenated_formula_to_the_bit(case, heads, half, rest):
    _, rng = case
    t = 1 + int(rng.integers(0, 9))
    x = rng.standard_normal((t, heads, 2 * half + rest)).astype(np.float32)
    angles = (rng.uniform(0, 100, (t, half))).astype(np.float32)
    factor = float(rng.choice([1.0, 1.25]))
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    if factor != 1:
        cos, sin = cos * np.float32(factor), sin * np.float32(factor)
    a, b = x[..., :half], x[..., half : 2 * half]
    plain = np.concatenate([a * cos - b * sin, b * cos + a * sin, x[..., 2 * half :]], axis=-1)
    got = rotary(x, angles, factor)
    assert got.flags.c_contiguous and got.dtype == np.float32
    np.testing.assert_array_equal(got, plain)
