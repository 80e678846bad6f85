"""Paged KV caches for testing attention: `paged_case(CaseSpec(...))`, `paged_caches()` and
the float64 reference (NumPy only; PagedAttention, Kwon et al. 2023, 4.1).

A case holds `cuda_kernels.paged_attention`'s arguments (shapes on `PagedCase`'s fields),
with a plain scale for its `ScoreMask`. Every slot that holds no live token is POISONED,
so reading one token too many or the wrong block is visibly wrong; a case is deterministic
in its `CaseSpec`, so a failure prints as the one expression that rebuilds it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from hypothesis import strategies as st

POISON = 1000.0  # finite in float16 too; any softmax that includes it is far off
TOLERANCE = {"float32": 1e-4, "float16": 1e-2}  # atol = rtol, per input dtype


@dataclass(frozen=True)
class CaseSpec:
    """What rebuilds one case: `paged_case(CaseSpec(...))`, deterministic in these fields."""

    context_lens: tuple[int, ...] = (5,)
    block_size: int = 4
    num_kv_heads: int = 1
    group: int = 1
    head_dim: int = 8
    dtype: str = "float32"
    spare_blocks: int = 1
    scale: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        # any iterable of ints (a list, a NumPy array) is kept as a tuple of ints, so the
        # spec is hashable and its repr is the one expression that rebuilds it
        object.__setattr__(self, "context_lens", tuple(map(int, self.context_lens)))
        if self.dtype not in TOLERANCE or min(self.context_lens, default=0) < 1:
            raise ValueError(f"need dtype in {sorted(TOLERANCE)} and context lengths >= 1: {self}")


@dataclass(eq=False)
class PagedCase:
    query: np.ndarray  # [S, H, D]
    kv_cache: np.ndarray  # [N, 2, H_kv, B, D]
    block_tables: np.ndarray  # int32 [S, max_blocks]
    context_lens: np.ndarray  # int32 [S]
    scale: float
    spec: CaseSpec = field(repr=False)  # paged_case(spec) rebuilds it

    @property
    def args(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
        """(query, kv_cache, block_tables, context_lens, scale): call fn(*case.args)."""
        return self.query, self.kv_cache, self.block_tables, self.context_lens, self.scale

    def reference(self) -> np.ndarray:
        return reference_attention(*self.args)

    @property
    def tolerance(self) -> float:
        return TOLERANCE[self.spec.dtype]

    def __repr__(self) -> str:
        return f"paged_case({self.spec!r})"


def paged_case(spec: CaseSpec) -> PagedCase:
    """One scattered cache, rebuilt exactly from `spec` (random data from `spec.seed`)."""
    rng = np.random.default_rng(spec.seed)
    lens, bs, heads, dim = spec.context_lens, spec.block_size, spec.num_kv_heads, spec.head_dim
    need = [-(-n // bs) for n in lens]
    num_blocks = 1 + sum(need) + spec.spare_blocks  # + one padding block
    # cuda_kernels.reference.scattered_block_tables plus a padding block (no Numba import)
    ids = rng.permutation(num_blocks)
    pad = int(ids[0])  # short rows point at this (poisoned) block
    tables = np.full((len(lens), max(need)), pad, np.int32)  # [S, max_blocks]
    kv = np.full((num_blocks, 2, heads, bs, dim), POISON)  # [N, 2, H_kv, B, D]
    at = 1
    for s, (n, k) in enumerate(zip(lens, need, strict=True)):
        tables[s, :k] = ids[at : at + k]
        at += k
        pos = np.arange(n)
        kv[tables[s, pos // bs], :, :, pos % bs, :] = rng.standard_normal((n, 2, heads, dim))
    query = rng.standard_normal((len(lens), heads * spec.group, dim))  # [S, H, D]
    return PagedCase(
        query.astype(spec.dtype),
        kv.astype(spec.dtype),
        tables,
        np.asarray(lens, np.int32),
        float(1.0 / math.sqrt(dim) if spec.scale is None else spec.scale),
        spec,
    )


def paged_caches(
    *,
    max_seqs: int = 3,
    max_context: int = 20,
    block_sizes: Sequence[int] = (1, 2, 4, 8),
    max_kv_heads: int = 2,
    max_group: int = 4,
    head_dims: Sequence[int] = (1, 3, 4, 5, 8, 16),
    dtypes: Sequence[str] = ("float32", "float16"),
    scales: Sequence[float | None] = (None, 0.3),
) -> st.SearchStrategy[PagedCase]:
    """PagedCases: scattered blocks, poisoned unused slots, GQA groups, odd head dims."""
    return st.builds(
        CaseSpec,
        context_lens=st.lists(st.integers(1, max_context), min_size=1, max_size=max_seqs),
        block_size=st.sampled_from(block_sizes),
        num_kv_heads=st.integers(1, max_kv_heads),
        group=st.integers(1, max_group),
        head_dim=st.sampled_from(head_dims),
        dtype=st.sampled_from(dtypes),
        spare_blocks=st.integers(0, 2),
        scale=st.sampled_from(scales),
        seed=st.integers(0, 2**16),
    ).map(paged_case)


def reference_attention(
    query: npt.ArrayLike,
    kv_cache: npt.ArrayLike,
    block_tables: Sequence[npt.ArrayLike] | np.ndarray,
    context_lens: npt.ArrayLike,
    scale: float | None = None,
) -> np.ndarray:
    """[S, H, D] float64: softmax(q K^T * scale) V over each sequence's blocks (GQA:
    query head h reads KV head h // group). Gathers through the table, like the kernel.

    The same maths as `cuda_kernels.reference.paged_attention`, kept here because
    importing `cuda_kernels` loads Numba; test_kit_attention.py checks the two agree."""
    q = np.asarray(query, np.float64)  # [S, H, D]
    kv = np.asarray(kv_cache, np.float64)  # [N, 2, H_kv, B, D]
    num_heads, head_dim = q.shape[1:]
    group, bs = num_heads // kv.shape[2], kv.shape[3]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    out = np.empty(q.shape)
    for s, n in enumerate(np.asarray(context_lens)):
        pos = np.arange(int(n))
        blocks = np.asarray(block_tables[s])[pos // bs]
        k = np.repeat(kv[blocks, 0, :, pos % bs, :], group, axis=1)  # [L, H, D]
        v = np.repeat(kv[blocks, 1, :, pos % bs, :], group, axis=1)
        scores = np.einsum("hd,lhd->hl", q[s], k) * scale  # [H, L]
        p = np.exp(scores - scores.max(axis=1, keepdims=True))
        out[s] = np.einsum("hl,lhd->hd", p / p.sum(axis=1, keepdims=True), v)
    return out
