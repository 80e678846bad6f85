"""Shared pieces for the kernel tests: importing cuda_kernels first (it picks the
simulator here), random caches, and block tables padded with garbage.

Every test in this folder gets the `kernels` marker (PTX tests add `ptx`).
"""

import numpy as np
import pytest
from helpers import random_cache  # noqa: F401  (shared; this folder imports it from here)

import cuda_kernels  # noqa: F401  (selects the backend before numba.cuda is imported)

GARBAGE = 10**6  # table entries past a sequence's blocks: never read, never validated


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/kernels/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.kernels)


def padded_tables(tables, max_blocks=None, fill=GARBAGE) -> np.ndarray:
    """Stack block tables (lists) into int32 [S, max_blocks], padding with `fill`."""
    width = max_blocks or max(len(t) for t in tables)
    out = np.full((len(tables), width), fill, np.int32)
    for i, t in enumerate(tables):
        out[i, : len(t)] = list(t)
    return out


def random_query(rng, num_seqs, num_heads, head_dim, dtype=np.float32):
    return rng.standard_normal((num_seqs, num_heads, head_dim)).astype(dtype)  # [S, H, D]


def prefill_batch(rng, prefixes, q_lens, kv_heads, group, head_dim, block_size, qdtype=np.float16):
    """(query, cache, tables, lens, starts) for paged_prefill, fp16 cache: sequence s has
    prefixes[s] cached tokens and q_lens[s] new ones, its blocks scattered in a pool with
    spare blocks and table entries past them set to GARBAGE."""
    from cuda_kernels.reference import scattered_block_tables

    lens = np.array([p + n for p, n in zip(prefixes, q_lens, strict=True)], np.int32)
    tables, num_blocks = scattered_block_tables(rng, lens, block_size, spare=2, fill=GARBAGE)
    cache = rng.standard_normal((num_blocks, 2, kv_heads, block_size, head_dim))
    starts = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    query = rng.standard_normal((int(starts[-1]), kv_heads * group, head_dim))
    return query.astype(qdtype), cache.astype(np.float16), tables, lens, starts


def rel_err(got, want) -> float:
    got = np.asarray(got, np.float64)
    assert np.isfinite(got).all(), "kernel output has NaN/inf (an element was not written?)"
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
