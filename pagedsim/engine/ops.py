"""The numeric building blocks a layer's attention and MLP share: a linear map and the MLP
gate's activations, computed as transformers' modules compute them (ACT2FN)."""

from __future__ import annotations

import math

import numpy as np


def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """x [T, in] -> [T, out] for a weight [out, in] in C order, as Hugging Face stores it.
    Computed as (weight @ x.T).T, a transposed view of the [out, T] product: the BLAS call
    NumPy's OpenBLAS runs fastest for decode's few rows (an LM head's 8 rows in about 20%
    less time than x @ weight.T on a transposed copy; benchmarks/bench_engine.py), and no
    slower for a prefill's hundreds."""
    y: np.ndarray = (weight @ x.T).T
    return y if bias is None else y + bias


def activation(name: str, x: np.ndarray) -> np.ndarray:
    """The MLP gate's activation, as transformers' ACT2FN computes it."""
    out: np.ndarray
    if name == "silu":
        out = x / (1 + np.exp(-x))
    elif name == "gelu_tanh":  # gelu_pytorch_tanh
        inner = np.float32(math.sqrt(2 / math.pi)) * (x + np.float32(0.044715) * x**3)
        out = (0.5 * x * (1 + np.tanh(inner))).astype(np.float32)
    else:  # exact GELU
        erf = np.vectorize(math.erf, otypes=[np.float64])
        out = (0.5 * x * (1 + erf(x / math.sqrt(2)))).astype(np.float32)
    return out


def gated(name: str, gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """act(gate) * up, the gated MLP's inner product; `gate` is overwritten with it (a
    fresh projection the caller owns: no [T, mlp] temporaries, which for a prefill chunk
    cost more in page faults than the arithmetic). SiLU as `activation` computes it,
    operation for operation, so the result is the same to the bit."""
    if name != "silu" or gate.dtype != np.float32:
        out: np.ndarray = activation(name, gate) * up
        return out
    denominator = np.negative(gate)
    np.exp(denominator, out=denominator)
    denominator += 1
    np.divide(gate, denominator, out=gate)
    gate *= up
    return gate
